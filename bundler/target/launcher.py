"""The launcher of an installation: run.sh, run.cmd and run.ps1 start this module and hand it every argument.

    <interpreter> -I -B -m ort_bundle.launcher <install root> [--self-check | --verify | --tune |
                                                               --support-bundle | --profile] [ARGS...]

The scripts only find the installation's interpreter (the venv's, or the bundled one); the rest is here,
once for every platform: the cache folder (ORT_BUNDLE_CACHE_DIR, else the install's cache_dir.txt, else the
bundle's [launch] cache_dir, else the per-user cache; relative is below the install) and its subfolders,
the environment ([launch] env first, then the launcher's own variables, which win), the DLL search path
(the GPU and ONNX Runtime folders first on LD_LIBRARY_PATH or PATH) and the dispatch to the self-check, the
file audit, the Python tools or the entry point. The bundle's own values come from launch.json
(launch_config.py).

On POSIX the environment is complete before the entry point's process starts, as glibc reads
LD_LIBRARY_PATH only then, and `os.execve` replaces this process, so signals and the exit code are the
program's own. On Windows os.exec* starts a new process and returns at once, so cmd.exe would read this
process's exit code, not the program's: the child runs to its end instead, this process waits through
Ctrl+C (the console sends it to both; the child decides) and exits with the child's code.
Standard library only, Python 3.8 syntax: it ships in every bundle as `ort_bundle.launcher`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .launch_config import (
    ISOLATED,
    LAUNCH_FILE,
    PREREQUISITE_FALLBACK,
    EntryPointSpec,
    LaunchConfig,
    LaunchConfigError,
    python_command,
)

WINDOWS = os.name == "nt"
#: The switches, and the PowerShell-style names run.cmd and run.ps1 have always taken for them (Windows only).
SWITCHES = {"--self-check": "self-check", "--verify": "verify", "--tune": "tune", "--support-bundle": "support",
            "--profile": "profile"}
WINDOWS_ALIASES = {"-selfcheck": "self-check", "-verify": "verify", "-tune": "tune", "-supportbundle": "support",
                   "-profile": "profile"}
CACHE_FOLDERS = ("tmp", "cuda", "tensorrt", "profiles")
#: --self-check of an installation without the self-check script: does onnxruntime import, and from where.
IMPORT_CHECK = "import onnxruntime; print('onnxruntime', onnxruntime.__version__, 'from', onnxruntime.__file__)"


class LaunchError(Exception):
    """What stops the launcher before the entry point starts: one line on stderr, and this exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Command:
    """What to start: the file, its whole argv, and the environment it gets."""

    executable: str
    argv: Tuple[str, ...]
    env: Dict[str, str]


def installer_script() -> str:
    return "install.cmd" if WINDOWS else "install.sh"


def read_config(root: str) -> LaunchConfig:
    path = os.path.join(root, LAUNCH_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            return LaunchConfig.loads(handle.read())
    except OSError as exc:
        problem = f"cannot read {path} ({exc.strerror or exc})"
    except LaunchConfigError as exc:
        problem = f"{path}: {exc}"
    raise LaunchError(PREREQUISITE_FALLBACK, f"{problem}; install the bundle again with {installer_script()}")


def switch(args: Sequence[str]) -> Optional[str]:
    """The launcher's own action named by the first argument, if any (case-insensitive on Windows, as cmd.exe's)."""
    if not args:
        return None
    if WINDOWS:
        first = args[0].lower()
        return SWITCHES.get(first) or WINDOWS_ALIASES.get(first)
    return SWITCHES.get(args[0])


def cache_folder(root: str, config: LaunchConfig, environ: Mapping[str, str]) -> str:
    """ORT_BUNDLE_CACHE_DIR, else the install's cache_dir.txt (the installer's cache switch), else the bundle's
    [launch] cache_dir, else the per-user cache; a relative path is below the install."""
    chosen = environ.get("ORT_BUNDLE_CACHE_DIR") or _cache_dir_txt(root) or config.cache_dir or _per_user(config.name, environ)
    return os.path.normpath(os.path.join(root, chosen))  # join keeps an absolute path as it is


def _cache_dir_txt(root: str) -> Optional[str]:
    try:
        with open(os.path.join(root, "cache_dir.txt"), encoding="utf-8") as handle:
            return handle.readline().rstrip("\r\n") or None
    except OSError:
        return None


def _per_user(name: str, environ: Mapping[str, str]) -> str:
    if WINDOWS:
        base = environ.get("LOCALAPPDATA") or os.path.join(os.path.expanduser("~"), "AppData", "Local")
    else:
        base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ort-bundles", name)


def make_cache(cache: str, code: int) -> None:
    try:
        for sub in CACHE_FOLDERS:
            os.makedirs(os.path.join(cache, sub), exist_ok=True)
    except OSError as exc:
        raise LaunchError(code, f"cannot create the cache directory {cache} ({exc.strerror or exc}); set "
                                f"ORT_BUNDLE_CACHE_DIR to a writable folder") from None


def environment(root: str, config: LaunchConfig, caller: Mapping[str, str]) -> Dict[str, str]:
    """The caller's environment, then [launch] env, then everything the launcher sets (which no manifest value
    can replace). The cache folder is created here."""
    env = {_name(key): value for key, value in caller.items()}
    env.update({_name(key): value for key, value in config.env.items()})
    variable = "PATH" if WINDOWS else "LD_LIBRARY_PATH"
    folders = [_below(root, relative) for relative in config.dll_dirs]
    # The caller's entries after ours, without ours again (the start-up hook of this very interpreter may have
    # put them on PATH already) and without empty ones (an empty LD_LIBRARY_PATH entry is the current folder).
    theirs = [item for item in env.get(variable, "").split(os.pathsep) if item and item not in folders]
    env[variable] = os.pathsep.join(folders + theirs)
    cache = cache_folder(root, config, env)
    make_cache(cache, config.exit_prerequisite)
    temp = os.path.join(cache, "tmp")
    env.update({"ORT_BUNDLE_CACHE_DIR": cache, "ORT_BUNDLE_CACHE_MIN_FREE_MB": str(config.cache_min_free_mb),
                "TEMP": temp, "TMP": temp, "TMPDIR": temp, "CUDA_CACHE_PATH": os.path.join(cache, "cuda"),
                "ORT_TENSORRT_CACHE_PATH": os.path.join(cache, "tensorrt"),
                "ORT_BUNDLE_PROFILE_DIR": os.path.join(cache, "profiles"),
                "PIP_NO_INDEX": "1", "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    # No bytecode folder is named (issue 27 §5: a cache folder others can write held bytecode that ran): Python
    # reads only the bytecode the install compiled beside the sources (in the receipt, checked by --verify).
    env.pop("PYTHONPYCACHEPREFIX", None)
    return env


def _name(key: str) -> str:
    """Windows names are case-insensitive: one spelling each, so no variable appears twice in the child's block."""
    return key.upper() if WINDOWS else key


def command(root: str, config: LaunchConfig, args: Sequence[str], env: Dict[str, str]) -> Command:
    """The process this invocation starts."""
    action, rest = switch(args), list(args[1:])
    python = sys.executable
    own = [python, *ISOLATED]  # every Python started here runs isolated, the entry point included (issue 34 §3)
    if action == "verify":
        return Command(python, (*own, os.path.join(root, "installer", "engine.py"), "verify", "--root", root, *rest), env)
    if action == "self-check":
        script = os.path.join(root, "selfcheck", "selfcheck.py")
        check = [script] if os.path.isfile(script) else ["-c", IMPORT_CHECK]
        return Command(python, (*own, *check, *rest), env)
    if action in ("tune", "support"):
        module = "ort_bundle.tuning" if action == "tune" else "ort_bundle.support"
        return Command(python, (*own, "-m", module, "--root", root, *rest), env)
    if config.apply_tuning:  # the start-up hook gives the entry point's sessions the options --tune chose
        env = {**env, "ORT_BUNDLE_APPLY_TUNING": "1"}
    entry = config.entry_point
    if action == "profile":
        return Command(python, (*own, "-m", "ort_bundle.profile", *_profile_entry(root, entry), "--", *rest), env)
    if entry is None:
        return Command(python, tuple(python_command(python, None, None, args)), env)
    if entry.kind == "module":
        return Command(python, tuple(python_command(python, "module", entry.value, args)), env)
    path = _below(root, entry.value)
    if entry.kind == "script":
        return Command(python, tuple(python_command(python, "script", path, args)), env)
    return Command(path, (path, *args), env)


def _profile_entry(root: str, entry: Optional[EntryPointSpec]) -> List[str]:
    if entry is None:
        return ["--entry-kind", "none"]
    return ["--entry-kind", entry.kind, "--entry", entry.value if entry.kind == "module" else _below(root, entry.value)]


def _below(root: str, relative: str) -> str:
    return os.path.join(root, *relative.split("/"))


def start(cmd: Command, code_if_missing: int) -> int:
    """Replace this process (POSIX) or run the child to its end and return its exit code (Windows)."""
    if not os.path.isfile(cmd.executable):
        raise LaunchError(code_if_missing, f'"{cmd.executable}" was not found; install the bundle again with '
                                           f"{installer_script()}")
    try:
        if not WINDOWS:
            os.execve(cmd.executable, list(cmd.argv), cmd.env)
        child = subprocess.Popen(list(cmd.argv), executable=cmd.executable, env=cmd.env)
    except OSError as exc:
        raise LaunchError(code_if_missing, f'cannot start "{cmd.executable}" ({exc.strerror or exc})') from None
    with child:
        while True:
            try:
                code = child.wait()
                break
            except KeyboardInterrupt:
                continue  # Ctrl+C reached the child too: it decides whether to stop, and its code is the answer
    return code - (1 << 32) if code >= 1 << 31 else code  # an NTSTATUS such as 0xC000013A, as the signed int exit takes


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m ort_bundle.launcher INSTALL_ROOT [ARGS...] (run.sh, run.cmd and run.ps1 start it)",
              file=sys.stderr)
        return PREREQUISITE_FALLBACK
    root = os.path.abspath(args[0])
    try:
        config = read_config(root)
        env = environment(root, config, os.environ)
        return start(command(root, config, args[1:], env), config.exit_prerequisite)
    except LaunchError as exc:
        print(f"run: {exc}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
