"""The one definition of `launch.json`: what the launcher (`ort_bundle.launcher`) needs to know of its bundle.

run.sh, run.cmd and run.ps1 only find the installation's interpreter and hand it every argument; the values
that used to be rendered into each of them (the DLL folders, the [launch] env, the entry point, the cache
folder, whether tuned options apply, the exit code of a missing prerequisite) are data in this file, written
by the build (bundler/assembly/render.py, through `to_json`) beside the launchers in the install root and
read here. A file rather than arguments: the scripts stay free of per-bundle values, and the receipt covers
it, so `run --verify` notices when it was changed. Standard library only, Python 3.8 syntax: it ships in
every bundle (as `ort_bundle.launch_config`) and runs on the target's interpreter.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

LAUNCH_FILE = "launch.json"
LAUNCH_FORMAT = 1
#: The install exit code of a missing prerequisite (records.INSTALL_EXIT_CODES["prerequisite"]; a test holds
#: them equal): what the launcher exits with when it cannot read launch.json, before it knows the bundle's.
PREREQUISITE_FALLBACK = 12
ENTRY_KINDS = ("module", "script", "program")
#: Every Python the launcher starts, the entry point included (issue 34 §3): -I keeps the caller's current folder,
#: PYTHONPATH, PYTHONHOME and the user site off sys.path (an `ort_bundle/` or a module of the entry point's name
#: that another user planted in the folder the caller stands in must not run as the caller); -B writes no bytecode.
ISOLATED = ("-I", "-B")
#: `python -I -B -c RUN_SCRIPT <script> ARGS...` runs the script as `python <script> ARGS...` would (argv, the
#: `__main__` name, its own folder first on sys.path, so the modules shipped beside it in app/ import), which -I
#: alone would leave off sys.path. Standard library modules only, found before anything of the caller's.
RUN_SCRIPT = ("import os, runpy, sys; del sys.argv[0]; "
              "sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0]))); "
              "runpy.run_path(sys.argv[0], run_name='__main__')")


class LaunchConfigError(ValueError):
    """A launch.json that this code cannot read: the message names the key."""


@dataclass(frozen=True)
class EntryPointSpec:
    """What the launcher starts: `python -m <value>`, `python <root>/<value>`, or the program `<root>/<value>`."""

    kind: str
    value: str


@dataclass(frozen=True)
class LaunchConfig:
    name: str  # the bundle's name: the per-user cache folder is named after it
    dll_dirs: Tuple[str, ...]  # install-relative, '/' separators, GPU folders first
    env: Dict[str, str]  # [launch] env: set first, so every variable the launcher sets wins
    entry_point: Optional[EntryPointSpec]  # None: the interpreter itself, with the arguments
    cache_dir: Optional[str]  # [launch] cache_dir: the bundle's default; relative is below the install
    cache_min_free_mb: int  # the start-up hook warns below this much free space in the cache folder
    apply_tuning: bool  # [launch] apply_tuning: ORT_BUNDLE_APPLY_TUNING=1 for the entry point and --profile
    exit_prerequisite: int = PREREQUISITE_FALLBACK
    format: int = field(default=LAUNCH_FORMAT)

    def to_json(self) -> Dict[str, Any]:
        data = asdict(self)
        data["dll_dirs"] = list(self.dll_dirs)
        return data

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n"

    @classmethod
    def loads(cls, text: str) -> LaunchConfig:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise LaunchConfigError(f"{LAUNCH_FILE} is not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise LaunchConfigError(f"{LAUNCH_FILE} holds {type(data).__name__}, expected a JSON object")
        if "format" not in data:
            raise LaunchConfigError(f'{LAUNCH_FILE} has no "format" key; this launcher reads format {LAUNCH_FORMAT}')
        if data["format"] != LAUNCH_FORMAT:
            raise LaunchConfigError(f"{LAUNCH_FILE} has format {data['format']!r}; this launcher reads format {LAUNCH_FORMAT}")
        return cls(name=_typed(data, "name", str), dll_dirs=tuple(_strings(data, "dll_dirs")),
                   env=_env(data), entry_point=_entry_point(data.get("entry_point")),
                   cache_dir=_typed(data, "cache_dir", str, optional=True),
                   cache_min_free_mb=_typed(data, "cache_min_free_mb", int), apply_tuning=_typed(data, "apply_tuning", bool),
                   exit_prerequisite=_typed(data, "exit_prerequisite", int))


def _typed(data: Dict[str, Any], key: str, kind: type, *, optional: bool = False) -> Any:
    value = data.get(key)
    if (value is None and optional) or (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        return value
    raise LaunchConfigError(f"{LAUNCH_FILE}: {key} must be {'null or ' if optional else ''}a {kind.__name__}, not {value!r}")


def _strings(data: Dict[str, Any], key: str) -> Tuple[str, ...]:
    value = data.get(key)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise LaunchConfigError(f"{LAUNCH_FILE}: {key} must be a list of strings, not {value!r}")
    return tuple(value)


def _env(data: Dict[str, Any]) -> Dict[str, str]:
    value = data.get("env")
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise LaunchConfigError(f"{LAUNCH_FILE}: env must map names to strings, not {value!r}")
    return dict(value)


def _entry_point(value: object) -> Optional[EntryPointSpec]:
    if value is None:
        return None
    if isinstance(value, dict) and value.get("kind") in ENTRY_KINDS and isinstance(value.get("value"), str):
        return EntryPointSpec(kind=value["kind"], value=value["value"])
    raise LaunchConfigError(f"{LAUNCH_FILE}: entry_point must be null or {{\"kind\": one of {', '.join(ENTRY_KINDS)}, "
                            f"\"value\": a string}}, not {value!r}")


def python_command(python: str, kind: Optional[str], entry: Optional[str], args: Sequence[str]) -> List[str]:
    """The one way a Python entry point starts (the launcher and `run --profile` both use it): `kind` "module"
    (`-m entry`), "script" (the script at the path `entry`) or None (the interpreter with `args`), always
    isolated; a script's folder is put first on sys.path by RUN_SCRIPT, never the caller's folder."""
    if kind == "module" and entry:
        return [python, *ISOLATED, "-m", entry, *args]
    if kind == "script" and entry:
        return [python, *ISOLATED, "-c", RUN_SCRIPT, entry, *args]
    return [python, *ISOLATED, *args]
