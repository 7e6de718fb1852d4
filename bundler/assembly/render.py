"""Render the installer, uninstaller, launchers and startup hook that ship in a bundle.

Every value that reaches a script goes through a filter made for that script's language, so a
name, path or environment value cannot break the script or inject code into it. Line endings and
encodings are fixed here, not left to the template files: Windows PowerShell 5.1 reads a BOM-less
script in the ANSI code page, and cmd.exe reads batch files in the OEM code page.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Literal

import jinja2

from bundler.assembly import shipped_package
from bundler.errors import BuildError
from bundler.shipped.ort_bundle.cache_folder import windows_cache_dir_problem
from bundler.shipped.ort_bundle.delta_apply import EXIT_CODES as DELTA_EXIT_CODES
from bundler.shipped.ort_bundle.launch_config import LAUNCH_FILE, EntryPointSpec, LaunchConfig
from bundler.shipped.ort_bundle.records import INSTALL_EXIT_CODES
from bundler.target_platform import TargetPlatform

__all__ = ["INSTALL_EXIT_CODES", "EntryPoint", "ScriptContext", "render_scripts"]

# INSTALL_EXIT_CODES (defined with the target's records, so the engine and the scripts share them):
# 0, 3010 and 1618 are the codes Intune and ConfigMgr already understand (docs/facts.md §5).

#: A launcher warns when the cache directory's drive has less free space than this.
CACHE_MIN_FREE_MB = 512

#: The start file every install, uninstall and try-in-sandbox script runs (`python -I -B <it> PROGRAM ...`): a module of
#: the shipped package (bundler/shipped/ort_bundle/__main__.py), in the bundle and, for the uninstallers, the install.
START_FILE = shipped_package.START_FILE
INSTALLED_START_FILE = shipped_package.INSTALLED_START_FILE
#: The signed-bundle check install.sh --trust runs before the engine (bundler/shipped/ort_bundle/engine/trust.py, issue
#: 14): one file of the package, run by itself from a private copy once its hash matches the signed SHA256SUMS.
TRUST_CHECK = f"{shipped_package.BUNDLE_DIR}/engine/trust.py"

#: The launcher's data (bundler/shipped/ort_bundle/launch_config.py), installed beside run.* in the install root.
LAUNCH_CONFIG = f"payload/launchers/{LAUNCH_FILE}"

# Bundle names and versions become file names, a registry key and comment text in every script.
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
# Characters PowerShell treats as a single quote inside a single-quoted string (its tokenizer's
# IsSingleQuote): each has to be doubled, not only the ASCII one.
_PS_SINGLE_QUOTES = "'\u2018\u2019\u201a\u201b"
# Characters cmd.exe gives a meaning to outside quotes; a caret makes each one literal.
_CMD_CARET = set('^&|<>()"')


@dataclass(frozen=True, kw_only=True)
class EntryPoint:
    """What the launcher starts: `python -m <value>`, `python <install root>/<value>`, or for "program"
    the native executable `<install root>/<value>` itself (a C/C++ application built against the SDK,
    which finds the bundle's ONNX Runtime through the launcher's DLL search path)."""

    kind: Literal["module", "script", "program"]
    value: str


@dataclass(frozen=True, kw_only=True)
class ScriptContext:
    """Everything a template may use; the templates refer to nothing else (StrictUndefined)."""

    name: str
    version: str
    target: TargetPlatform
    python: str
    vc_runtime_min: str | None
    vc_redist: str | None
    gpu_dll_dirs: tuple[str, ...]
    gpu_preload: tuple[str, ...]
    dll_dirs: tuple[str, ...]
    entry_point: EntryPoint | None
    cache_dir: str | None
    env: Mapping[str, str]
    default_install_dir: str
    apply_tuning: bool = False  # [launch] apply_tuning: the launchers set ORT_BUNDLE_APPLY_TUNING=1 for the entry point
    #: [python] runtime: the bundled interpreter, install-relative (what the launchers start, with -I) and
    #: bundle-relative (what the installer runs the engine with); None: the target's own Python.
    runtime_python: str | None = None
    runtime_bundle_python: str | None = None


def ps_quote(value: object) -> str:
    """A PowerShell single-quoted literal: nothing inside it is expanded or executed."""
    text = str(value)
    for quote in _PS_SINGLE_QUOTES:
        text = text.replace(quote, quote * 2)
    return f"'{text}'"


def cmd_quote(value: object) -> str:
    """The text of a value for the unquoted right side of `set NAME=<here>` in a .cmd file.

    The rule: each of ^ & | < > ( ) " gets a caret in front, % is doubled, and ! stays literal
    because every script runs with DisableDelayedExpansion. Line breaks and other control
    characters cannot be written at all and are refused, as is non-ASCII text (the batch file is
    ASCII). Scripts only ever use the variable afterwards as "%NAME%" in a quoted context or hand
    it to a child process, so the value is never parsed by cmd.exe a second time.
    """
    text = str(value)
    bad = [c for c in text if ord(c) < 0x20 or ord(c) > 0x7E]
    if bad:
        msg = f"value {text!r} for a .cmd script contains {bad[0]!r}; only printable ASCII can be written there"
        raise BuildError(msg)
    return "".join("%%" if c == "%" else f"^{c}" if c in _CMD_CARET else c for c in text)


def sh_quote(value: object) -> str:
    """A POSIX shell word that the shell reads back as exactly `value`."""
    return shlex.quote(str(value))


def to_json(value: object) -> str:
    """JSON text; also a valid Python literal for lists and dicts of strings and numbers."""
    return json.dumps(value, sort_keys=True)


def windows_path(value: str) -> str:
    """An install-relative path with the separator Windows scripts use."""
    return value.replace("/", "\\")


class _CompiledTemplates(jinja2.FileSystemBytecodeCache):
    """Templates compiled once and kept between builds (keyed by name and source checksum; written atomically
    by Jinja): compiling them costs a fifth of a second per build. A folder that cannot take them only costs
    the compile."""

    def __init__(self, directory: Path) -> None:
        with contextlib.suppress(OSError):
            directory.mkdir(parents=True, exist_ok=True)
        super().__init__(str(directory))

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


def make_environment(compiled: Path | None = None) -> jinja2.Environment:
    """The one Jinja2 environment: templates from package data, a missing variable is an error; `compiled`
    keeps the compiled templates between builds."""
    env = jinja2.Environment(
        bytecode_cache=_CompiledTemplates(compiled) if compiled is not None else None,
        loader=jinja2.FunctionLoader(_load_template),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(ps_quote=ps_quote, cmd_quote=cmd_quote, sh_quote=sh_quote, json=to_json,
                       winpath=windows_path)
    return env


def _load_template(name: str) -> str:
    """Read a template through importlib.resources, so an installed wheel finds it too; `name` may name a
    platform's folder (windows/README-INSTALL.txt.j2)."""
    resource = resources.files("bundler.templates").joinpath(*name.split("/"))
    if not resource.is_file():
        msg = f"template {name!r} is not in the bundler.templates package; the installation is incomplete"
        raise BuildError(msg)
    return resource.read_text(encoding="utf-8")


# bundle-relative output path -> template, for every target; each target's own scripts are its identity's
# (`TargetPlatform.scripts`).
_COMMON = {
    "payload/launchers/ort_bundle_hook.py": "ort_bundle_hook.py.j2",
    "payload/launchers/ort_bundle_hook.pth": "ort_bundle_hook.pth.j2",
}


#: The folder of each platform's own templates. A text that differs by platform is one shared template
#: (README-INSTALL.txt.j2, onnxruntimeConfig.cmake.j2) that the platform's template of the same name
#: extends, filling its blocks: no template asks which platform it is. The one place a template is
#: chosen by platform.
def platform_template(target: TargetPlatform, name: str) -> str:
    """The template that renders `name` for `target`: the target's own, which extends the shared one."""
    return f"{target.name}/{name}"


def render_scripts(ctx: ScriptContext, *, compiled: Path | None = None) -> dict[str, bytes]:
    """Bundle-relative path -> exact bytes of every generated script for `ctx.target`."""
    _validate(ctx)
    env = make_environment(compiled)
    values = _template_values(ctx)
    readme = {"README-INSTALL.txt": platform_template(ctx.target, "README-INSTALL.txt.j2")}
    own = {path: f"{PurePosixPath(path).name}.j2" for path in ctx.target.scripts}
    outputs = {**own, **_COMMON, **readme}
    rendered = {path: encode_script(path, env.get_template(template).render(values), target=ctx.target)
                for path, template in outputs.items()}
    rendered[LAUNCH_CONFIG] = launch_config(ctx).dumps().encode("utf-8")
    return dict(sorted(rendered.items()))


def launch_config(ctx: ScriptContext) -> LaunchConfig:
    """What ort_bundle.launcher reads of this bundle (the scripts themselves carry none of it)."""
    entry = ctx.entry_point
    return LaunchConfig(
        name=ctx.name, dll_dirs=(*ctx.gpu_dll_dirs, *ctx.dll_dirs), env=dict(sorted(ctx.env.items())),
        entry_point=EntryPointSpec(kind=entry.kind, value=entry.value) if entry else None, cache_dir=ctx.cache_dir,
        cache_min_free_mb=CACHE_MIN_FREE_MB, apply_tuning=ctx.apply_tuning,
        exit_prerequisite=INSTALL_EXIT_CODES["prerequisite"])


def encode_script(path: str, text: str, *, target: TargetPlatform) -> bytes:
    """Line endings and encoding by file type: what each interpreter reads reliably."""
    lines = text.replace("\r\n", "\n")
    suffix = PurePosixPath(path).suffix
    if suffix == ".ps1":
        return b"\xef\xbb\xbf" + lines.replace("\n", "\r\n").encode("utf-8")
    if suffix == ".cmd":
        try:
            return lines.replace("\n", "\r\n").encode("ascii")
        except UnicodeEncodeError as exc:
            msg = f"{path} would contain the non-ASCII text {exc.object[exc.start:exc.end]!r}; cmd.exe cannot read it reliably"
            raise BuildError(msg) from None
    if suffix == ".txt":  # read by a person, in the target's own editor
        return lines.replace("\n", target.newline).encode("utf-8")
    return lines.encode("utf-8")


def _template_values(ctx: ScriptContext) -> dict[str, object]:
    return {
        "name": ctx.name,
        "version": ctx.version,
        "install_id": f"{ctx.name}-{ctx.version}",
        "platform": ctx.target.tag,
        "dll_path_variable": ctx.target.dll_path_variable,
        "python": ctx.python,
        "vc_runtime_min": ctx.vc_runtime_min,
        "vc_redist": ctx.vc_redist,
        "gpu_dll_dirs": list(ctx.gpu_dll_dirs),
        "gpu_preload": list(ctx.gpu_preload),
        "dll_dirs": list(ctx.dll_dirs),
        "entry_point": ctx.entry_point,
        "cache_dir": ctx.cache_dir,
        "env": dict(sorted(ctx.env.items())),
        "apply_tuning": ctx.apply_tuning,
        "default_install_dir": ctx.default_install_dir,
        "runtime_python": ctx.runtime_python,
        "runtime_bundle_python": ctx.runtime_bundle_python,
        # payload/python (assembly/runtime.py RUNTIME_BUNDLE_DIR): install.sh --trust checks it before running it
        "runtime_bundle_dir": "/".join(ctx.runtime_bundle_python.split("/")[:2]) if ctx.runtime_bundle_python else None,
        "codes": dict(INSTALL_EXIT_CODES),
        "cache_min_free_mb": CACHE_MIN_FREE_MB,
        "delta_codes": dict(DELTA_EXIT_CODES),
        "start_file": START_FILE,
        "installed_start_file": INSTALLED_START_FILE,
        "trust_check": TRUST_CHECK,
        "publisher": "ort-bundler",
    }


def _validate(ctx: ScriptContext) -> None:
    """Refuse what no quoting can make safe, naming the field, before any template runs.

    Windows paths may not hold '%': run.cmd expands them inside other values, and cmd.exe
    implementations differ on whether an expanded '%' is read again (Wine's does).
    """
    problems: list[str] = []
    problems += [f"bundle {label} {value!r} must be letters, digits and . _ + - only"
                 for label, value in (("name", ctx.name), ("version", ctx.version)) if not _IDENTIFIER.match(value)]
    if not re.fullmatch(r"3\.\d+", ctx.python):
        problems.append(f"python {ctx.python!r} is not a version like '3.11'")
    problems += [f"[launch] env name {key!r} is not a valid environment variable name"
                 for key in ctx.env if not _ENV_NAME.match(key)]
    problems += [f"[launch] env value for {key} contains a line break or NUL, which no script can carry"
                 for key, value in ctx.env.items() if any(c in value for c in "\r\n\0")]
    for label, rel in _relative_paths(ctx):
        problem = _relative_path_problem(rel)
        if problem:
            problems.append(f"{label} {rel!r} {problem}")
    if ctx.entry_point and ctx.entry_point.kind == "module" and not _MODULE.match(ctx.entry_point.value):
        problems.append(f"[launch] module {ctx.entry_point.value!r} is not a dotted Python module name")
    program = ctx.entry_point if ctx.entry_point and ctx.entry_point.kind == "program" else None
    suffix = ctx.target.program_suffix
    if program and not program.value.lower().endswith(suffix):
        problems.append(f"[launch] program {program.value!r} must be a {suffix} file on {ctx.target.tag}")
    if ctx.vc_runtime_min and not re.fullmatch(r"\d+\.\d+\.\d+(\.\d+)?", ctx.vc_runtime_min):
        problems.append(f"vc_runtime_min {ctx.vc_runtime_min!r} is not a version like '14.40.33810'")
    if any(PurePosixPath(path).suffix == ".cmd" for path in ctx.target.scripts):
        problems += _cmd_problems(ctx)
    if problems:
        msg = "cannot render install scripts: " + "; ".join(problems)
        raise BuildError(msg)


def _relative_paths(ctx: ScriptContext) -> list[tuple[str, str]]:
    paths = [("DLL directory", p) for p in (*ctx.gpu_dll_dirs, *ctx.dll_dirs)]
    paths += [("GPU preload DLL", p) for p in ctx.gpu_preload]
    if ctx.vc_redist:
        paths.append(("VC_redist path", ctx.vc_redist))
    if ctx.entry_point and ctx.entry_point.kind in ("script", "program"):
        paths.append((f"[launch] {ctx.entry_point.kind}", ctx.entry_point.value))
    paths += [("bundled interpreter", p) for p in (ctx.runtime_python, ctx.runtime_bundle_python) if p]
    return paths


def _relative_path_problem(rel: str) -> str | None:
    parts = rel.split("/")
    if not rel or rel.startswith("/") or "\\" in rel or ":" in rel:
        return "must be a relative path with '/' separators"
    if any(part in ("", ".", "..") for part in parts):
        return "must not contain empty, '.' or '..' parts"
    if any(c in rel for c in '"%!^&|<>*?') or any(ord(c) < 0x20 or ord(c) > 0x7E for c in rel):
        return "must be printable ASCII without shell metacharacters"
    return None


def _cmd_problems(ctx: ScriptContext) -> list[str]:
    """What cmd.exe cannot carry in the scripts it runs: a `%` or `"` in a value is expanded or ends the quote."""
    problems = []
    problem = windows_cache_dir_problem(ctx.cache_dir) if ctx.cache_dir is not None else None
    if problem:
        problems.append(f"[launch] cache_dir {ctx.cache_dir!r} {problem} on Windows")
    # Shown in the scripts' help text: plain folder characters only (%ProgramFiles% is expanded by the engine).
    if not re.fullmatch(r"[A-Za-z0-9%:\\ ._()+-]+", ctx.default_install_dir):
        problems.append(f"default install dir {ctx.default_install_dir!r} must be letters, digits, spaces and "
                        f"% : \\ . _ ( ) + - only on Windows")
    return problems
