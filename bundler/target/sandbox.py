"""Try a Windows bundle in Windows Sandbox: write the `.wsb` that installs, checks and removes it offline.

`try-in-sandbox.cmd` (templates/try-in-sandbox.cmd.j2) finds a Python and hands every argument to this
module, shipped in every win_amd64 bundle as payload/installer/ortengine/sandbox.py and started through
payload/installer/sandbox.py. It writes, beside the unpacked bundle folder (never inside it: the install
refuses files SHA256SUMS does not list):

    <bundle>-sandbox\\<name>.wsb              the Windows Sandbox configuration
    <bundle>-sandbox\\steps\\try-bundle.cmd    what the sandbox runs at logon (mapped read-only)
    <bundle>-sandbox\\results\\                logs, the self-check report and every exit code (writable)

and starts WindowsSandbox.exe with it (`--write-only`: not). The configuration uses only the documented
elements (docs/facts.md §9; Microsoft's "Windows Sandbox configuration" page): `vGPU` (enabled only for a bundle
with GPU providers), `Networking` (always disabled: the target is air-gapped), `MappedFolders` (every
`HostFolder` absolute and existing, or the sandbox refuses the file), `LogonCommand` and `MemoryInMB`.
Microsoft's page advises a script in a mapped folder for anything beyond one command: hence steps\\.

Exit codes: 0 written (and started), 2 a bad argument, 7 a path the sandbox cannot map (non-ASCII, too
long, a network share; nothing is written then), 9 Windows Sandbox is not available (the files are written),
11 the bundle's own records cannot be read. Standard library only, Python 3.8+: it runs on the admin's machine.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import ntpath
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple
from xml.sax.saxutils import escape

from .bundle_info import BundleInfo, BundleInfoError
from .records import INSTALL_EXIT_CODES, SUMS_FILE, RecordError, safe_relative

WRITTEN = 0
BAD_ARGUMENT = 2
REFUSED_PATH = 7
NO_SANDBOX = 9
BROKEN_BUNDLE = INSTALL_EXIT_CODES["integrity"]

#: Windows' MAX_PATH: the sandbox maps a host folder, and reads its files, through paths below it.
MAX_PATH = 260
#: Where the sandbox sees the host folders; fixed, short and plain, so the logon script needs no quoting rules.
SANDBOX_ROOT = "C:\\ort-sandbox"
SANDBOX_BUNDLE = SANDBOX_ROOT + "\\bundle"
SANDBOX_RESULTS = SANDBOX_ROOT + "\\results"
SANDBOX_STEPS = SANDBOX_ROOT + "\\steps"
STEPS_FILE = "try-bundle.cmd"
LOGON_COMMAND = "C:\\Windows\\System32\\cmd.exe /k " + SANDBOX_STEPS + "\\" + STEPS_FILE
#: Windows Sandbox starts with 4 GB unless told otherwise; the models (held about twice while a session is
#: built) and, for a GPU bundle, the CUDA libraries (about 2 GB mapped) come on top.
BASE_MEMORY_MB = 4096
GPU_MEMORY_MB = 2048
MIN_MEMORY_MB = 2048
ENABLE_COMMAND = "Enable-WindowsOptionalFeature -Online -FeatureName Containers-DisposableClientVM"
GPU_NOTE = ("vGPU shares the host's GPU through the host's own driver: whether CUDA works inside the sandbox "
            "depends on that driver, so a CUDA failure of the self-check there is not by itself a fault of the bundle.")
#: What the logon script writes into results\, so that it can clear the previous run's files (and nothing else).
RESULT_FILES = ("exit-codes.txt", "install-dir.txt", "python-install.log", "vc_redist.log", "install.log",
                "install-output.txt", "msi-install.log", "selfcheck.json", "selfcheck-stderr.txt", "entry-point.txt",
                "uninstall.log", "uninstall-output.txt", "msi-uninstall.log")
_PREREQ_NAME = re.compile(r"python-(3\.\d+)\.\d+(?:(?:a|b|rc)\d+)?-amd64\.exe\Z", re.IGNORECASE)
_MSI_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._()+-]*\.msi\Z", re.IGNORECASE)
#: Names, versions and bundle paths that reach the logon script: nothing cmd.exe would read as syntax.
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\Z")
_DRIVE_PATH = re.compile(r"[A-Za-z]:\\")
_WINDOWS_FORBIDDEN = set('<>"|?*')


class SandboxError(Exception):
    """One sentence for the user, and the exit code it ends with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class BundleFacts:
    """What the sandbox needs to know about the bundle, read from bundle.json and SHA256SUMS."""

    name: str
    version: str
    python: str  # "3.11"
    gpu: bool
    vc_redist: Optional[str]  # bundle path of VC_redist.x64.exe
    bundled_python: bool  # [python] runtime: no Python is needed on the machine
    entry_point: bool
    models_bytes: int
    longest_member: int  # characters of the longest bundle-relative path


@dataclass(frozen=True)
class FolderMap:
    host: str
    sandbox: str
    read_only: bool


@dataclass(frozen=True)
class Request:
    """The command line, checked: host paths are absolute Windows paths."""

    bundle: str
    msi: Optional[str] = None
    prereq: Optional[str] = None
    memory_mb: Optional[int] = None
    write_only: bool = False


@dataclass(frozen=True)
class SandboxFiles:
    """Everything to write: the folders, and each file's host path and text."""

    folder: str
    wsb: str
    folders: Tuple[str, ...]
    files: Tuple[Tuple[str, str], ...]


def read_facts(bundle: Path) -> BundleFacts:
    try:
        info = BundleInfo.read(bundle / "bundle.json")
        sums = (bundle / SUMS_FILE).read_text(encoding="utf-8")
        members = [safe_relative(line.partition("  ")[2], what=SUMS_FILE) for line in sums.splitlines()]
    except (BundleInfoError, RecordError) as exc:
        raise SandboxError(BROKEN_BUNDLE, f"{exc}; extract the bundle again from its zip") from None
    except OSError as exc:
        raise SandboxError(BROKEN_BUNDLE, f"{bundle / SUMS_FILE} cannot be read ({exc.strerror}); extract the bundle "
                                          f"again from its zip") from None
    vc_redist = (info.vc_redist or {}).get("file")
    parts = [info.name, info.version, *(vc_redist.split("/") if isinstance(vc_redist, str) else [vc_redist or "x"])]
    plain = all(isinstance(part, str) and _PLAIN.match(part) for part in parts)
    if not plain or info.platform != "win_amd64" or not re.fullmatch(r"3\.\d+", info.python):
        raise SandboxError(BROKEN_BUNDLE, f"{bundle / 'bundle.json'} describes {info.name!r} {info.version!r} for "
                                          f"{info.platform!r}, Python {info.python!r}, VC_redist {vc_redist!r}; expected "
                                          f"a win_amd64 bundle with plain names; extract the bundle again from its zip")
    models = [m for m in members if m.startswith("payload/models/")]
    return BundleFacts(name=info.name, version=info.version, python=info.python, gpu=info.gpu is not None,
                       vc_redist=vc_redist, bundled_python=info.python_runtime is not None,
                       entry_point=info.entry_point is not None,
                       models_bytes=sum(_size(bundle.joinpath(*m.split("/"))) for m in models),
                       longest_member=max((len(m) for m in members), default=0))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # SHA256SUMS names it and it is gone: the install in the sandbox reports that


def host_path_problem(path: str, *, deepest: int = 0) -> Optional[str]:
    """Why Windows Sandbox cannot map `path` (a host folder, or a file inside a mapped one), or None.

    `deepest` is the longest path below it that the sandbox will read through the mapping."""
    bad = [c for c in path if ord(c) < 0x20 or ord(c) > 0x7E]
    if bad:
        return f"contains the non-ASCII or control character {bad[0]!r}; Windows Sandbox and the install need plain ASCII paths"
    if path.startswith(("\\\\", "//")):
        return "is a UNC path (a network share or \\\\?\\ form); Windows Sandbox maps only folders on this machine's drives"
    if not _DRIVE_PATH.match(path):
        return "is not an absolute path on a drive letter (like D:\\deploy)"
    if any(c in _WINDOWS_FORBIDDEN for c in path[2:]):
        return "contains a character Windows does not allow in a path"
    length = len(path) + (1 + deepest if deepest else 0)
    if length >= MAX_PATH:
        return (f"is too long: {length} characters with the deepest file below it, and Windows' limit (MAX_PATH) is "
                f"{MAX_PATH - 1}; move it to a shorter folder")
    return None


def check_path(what: str, path: str, *, deepest: int = 0) -> None:
    problem = host_path_problem(path, deepest=deepest)
    if problem:
        raise SandboxError(REFUSED_PATH, f"{what} '{path}' {problem}.")


def memory_mb(facts: BundleFacts) -> int:
    """Enough for the models: the sandbox's own 4 GB, twice the models, the CUDA libraries; whole GB."""
    wanted = BASE_MEMORY_MB + 2 * facts.models_bytes / (1 << 20) + (GPU_MEMORY_MB if facts.gpu else 0)
    return int(math.ceil(wanted / 1024) * 1024)


def input_mappings(request: Request) -> Dict[str, str]:
    """Host folder of each --msi / --prereq file -> its read-only folder in the sandbox (one per folder)."""
    folders: Dict[str, str] = {}
    for path in (request.prereq, request.msi):
        if path is not None:
            folder = ntpath.dirname(path)
            folders.setdefault(folder.lower(), f"{SANDBOX_ROOT}\\input-{len(folders) + 1}")
    return folders


def sandbox_input(request: Request, path: str) -> str:
    """Where the sandbox sees a --msi / --prereq file."""
    return input_mappings(request)[ntpath.dirname(path).lower()] + "\\" + ntpath.basename(path)


def mappings(request: Request, folder: str) -> List[FolderMap]:
    found = [FolderMap(host=request.bundle, sandbox=SANDBOX_BUNDLE, read_only=True),
             FolderMap(host=folder + "\\steps", sandbox=SANDBOX_STEPS, read_only=True),
             FolderMap(host=folder + "\\results", sandbox=SANDBOX_RESULTS, read_only=False)]
    hosts = {ntpath.dirname(p).lower(): ntpath.dirname(p) for p in (request.prereq, request.msi) if p is not None}
    found += [FolderMap(host=hosts[key], sandbox=inside, read_only=True) for key, inside in input_mappings(request).items()]
    return found


def render_wsb(request: Request, facts: BundleFacts, folder: str) -> str:
    """The configuration, every host path XML-escaped; only documented elements."""
    gpu = "Enable" if facts.gpu else "Disable"
    lines = ["<!-- Written by try-in-sandbox.cmd (ort-bundler). The bundle is mapped read-only; the results",
             "     folder beside this file is the only one the sandbox can write. Networking is off. -->"]
    if facts.gpu:
        lines.append(f"<!-- {GPU_NOTE} -->")
    lines += ["<Configuration>", f"  <vGPU>{gpu}</vGPU>", "  <Networking>Disable</Networking>", "  <MappedFolders>"]
    for mapping in mappings(request, folder):
        lines += ["    <MappedFolder>", f"      <HostFolder>{escape(mapping.host)}</HostFolder>",
                  f"      <SandboxFolder>{escape(mapping.sandbox)}</SandboxFolder>",
                  f"      <ReadOnly>{'true' if mapping.read_only else 'false'}</ReadOnly>", "    </MappedFolder>"]
    memory = request.memory_mb if request.memory_mb is not None else memory_mb(facts)
    lines += ["  </MappedFolders>", "  <LogonCommand>", f"    <Command>{escape(LOGON_COMMAND)}</Command>",
              "  </LogonCommand>", f"  <MemoryInMB>{memory}</MemoryInMB>", "</Configuration>"]
    return "\r\n".join(lines) + "\r\n"


def _step(label: str, command: str, record: str) -> List[str]:
    """One step of the logon script: say it, run it, write its exit code to exit-codes.txt.

    Scripts run through `cmd /d /c` (no AutoRun), not `call`: its exit code is the script's on Windows and
    under Wine, whose `call` reports 1 whatever the script returned. The sandbox's own paths (%B%, %R%) hold
    no spaces; the install folder may, so `cmd /c ""<folder>\\run.cmd" args"` (cmd drops the outer quotes)."""
    return [f"echo {label}", command, 'set "CODE=%ERRORLEVEL%"', f'>> "%CODES%" echo {record} %CODE%']


def _install_steps(request: Request, facts: BundleFacts) -> List[str]:
    if request.msi is not None:
        msi = sandbox_input(request, request.msi)
        return _step(f"Installing {ntpath.basename(request.msi)}",
                     f'start "" /wait msiexec.exe /i "{msi}" /qn /norestart /l*v "%R%\\msi-install.log"', "msi-install")
    return _step(f"Installing {facts.name} {facts.version} silently (install.cmd)",
                 'cmd /d /c %B%\\install.cmd -LogPath %R%\\install.log < nul > "%R%\\install-output.txt" 2>&1', "install")


def _uninstall_steps(request: Request) -> List[str]:
    if request.msi is not None:
        msi = sandbox_input(request, request.msi)
        return _step("Uninstalling (msiexec /x)",
                     f'start "" /wait msiexec.exe /x "{msi}" /qn /norestart /l*v "%R%\\msi-uninstall.log"', "msi-uninstall")
    return _step("Uninstalling (uninstall.cmd)", 'cmd /d /c %B%\\uninstall.cmd -InstallDir "%INSTALL%" -LogPath '
                 '%R%\\uninstall.log < nul > "%R%\\uninstall-output.txt" 2>&1', "uninstall")


def _detection(name: str) -> List[str]:
    """The install folder from the detection value the install writes (as Intune's detection rule reads it)."""
    lines = ['set "INSTALL="']
    for hive in ("HKLM", "HKCU"):
        lines.append(f'if not defined INSTALL for /f "tokens=1,2,*" %%A in (\'reg query "{hive}\\SOFTWARE\\ort-bundler\\'
                     f'{name}" /v InstallDir /reg:64 2^>nul\') do if /i "%%A"=="InstallDir" set "INSTALL=%%C"')
    return lines + [f'if not defined INSTALL >> "%CODES%" echo detection-value missing: HKLM or HKCU\\SOFTWARE\\'
                    f'ort-bundler\\{name}', "if not defined INSTALL goto :finish",
                    '>> "%CODES%" echo detection-value found', '> "%R%\\install-dir.txt" echo %INSTALL%']


def _detection_removed(name: str) -> List[str]:
    """After the uninstall: is the detection value gone (as a detection rule must then find it)?"""
    query = f'reg query "{{}}\\SOFTWARE\\ort-bundler\\{name}" /reg:64 >nul 2>&1'
    return ['set "LEFT="', query.format("HKLM"), "if not errorlevel 1 set LEFT=1", query.format("HKCU"),
            "if not errorlevel 1 set LEFT=1", 'if defined LEFT >> "%CODES%" echo detection-value left behind',
            'if not defined LEFT >> "%CODES%" echo detection-value removed']


def render_steps(request: Request, facts: BundleFacts) -> str:
    """The logon script (CRLF, ASCII): every path in it is the sandbox's own, fixed above."""
    lines = ["@echo off", f"rem Written by try-in-sandbox.cmd (ort-bundler) for {facts.name} {facts.version}; runs",
             "rem inside Windows Sandbox at logon. Each step's exit code goes to results\\exit-codes.txt.",
             "setlocal EnableExtensions DisableDelayedExpansion", f'set "B={SANDBOX_BUNDLE}"',
             f'set "R={SANDBOX_RESULTS}"', 'set "CODES=%R%\\exit-codes.txt"']
    lines += [f'if exist "%R%\\{name}" del /f /q "%R%\\{name}"' for name in RESULT_FILES]
    lines.append(f'>> "%CODES%" echo started {facts.name} {facts.version}')
    if request.prereq is not None:
        lines += _step(f"Installing Python {facts.python} for all users ({ntpath.basename(request.prereq)})",
                       f'start "" /wait "{sandbox_input(request, request.prereq)}" /quiet InstallAllUsers=1 '
                       'PrependPath=1 Include_test=0 /log "%R%\\python-install.log"', "python-install")
    if facts.vc_redist:
        lines += _step("Installing the VC++ runtime the bundle ships",
                       f'start "" /wait "%B%\\{facts.vc_redist.replace("/", chr(92))}" /install /quiet /norestart '
                       '/log "%R%\\vc_redist.log"', "vc_redist")
    lines += _install_steps(request, facts)
    lines += ['if not "%CODE%"=="0" if not "%CODE%"=="3010" goto :finish', *_detection(facts.name)]
    lines += _step("Running the self-check", 'cmd /d /c ""%INSTALL%\\run.cmd" --self-check --json" < nul > '
                   '"%R%\\selfcheck.json" 2> "%R%\\selfcheck-stderr.txt"', "self-check")
    if facts.entry_point:
        lines += _step("Running the entry point once", 'cmd /d /c ""%INSTALL%\\run.cmd"" < nul > '
                       '"%R%\\entry-point.txt" 2>&1', "entry-point")
    lines += _uninstall_steps(request) + _detection_removed(facts.name)
    lines += [":finish", '>> "%CODES%" echo finished', "echo.", 'type "%CODES%"',
              f"echo The results are in {SANDBOX_RESULTS}, on the host in the results folder beside the .wsb file.",
              "echo Closing Windows Sandbox discards everything else."]
    return "\r\n".join(lines) + "\r\n"


def plan_files(request: Request, facts: BundleFacts) -> SandboxFiles:
    """Check every path, then say what to write; raises SandboxError before anything is written."""
    check_path("The bundle folder", request.bundle, deepest=facts.longest_member)
    parent, leaf = ntpath.split(request.bundle)
    if not leaf:
        raise SandboxError(REFUSED_PATH, f"The bundle folder '{request.bundle}' is a drive's root; unpack the bundle "
                                         f"into a folder, so that its -sandbox folder can go beside it.")
    folder = ntpath.join(parent, leaf + "-sandbox")
    wsb = ntpath.join(folder, facts.name + ".wsb")
    check_path("The sandbox folder", folder, deepest=max(len("steps\\" + STEPS_FILE), len(facts.name) + 4,
                                                         max(len("results\\" + n) for n in RESULT_FILES)))
    for flag, path in (("--prereq", request.prereq), ("--msi", request.msi)):
        if path is not None:
            check_path(f"The {flag} file", path)
    return SandboxFiles(folder=folder, wsb=wsb, folders=(folder, folder + "\\steps", folder + "\\results"),
                        files=((wsb, render_wsb(request, facts, folder)),
                               (folder + "\\steps\\" + STEPS_FILE, render_steps(request, facts))))


def write_files(files: SandboxFiles) -> None:
    """Create the folders and write each file through a temporary file; on failure remove what this run made."""
    made: List[Path] = []
    written: List[Path] = []
    try:
        for folder in map(Path, files.folders):
            if not folder.is_dir():
                folder.mkdir()
                made.append(folder)
        for name, text in files.files:
            _write_atomically(Path(name), text)
            written.append(Path(name))
    except OSError as exc:
        for path in written:
            with contextlib.suppress(OSError):
                path.unlink()
        for folder in reversed(made):
            shutil.rmtree(folder, ignore_errors=True)
        raise SandboxError(REFUSED_PATH, f"'{exc.filename or files.folder}' cannot be written ({exc.strerror}); "
                                         f"unpack the bundle where you can create a folder beside it.") from None


def _write_atomically(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=str(path.parent), prefix="." + path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(text.encode("ascii"))
        os.replace(temporary, str(path))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def sandbox_executable() -> Optional[str]:
    """WindowsSandbox.exe, present once the optional feature is enabled (the 64-bit System32)."""
    root = os.environ.get("SystemRoot", "C:\\Windows")
    for folder in ("System32", "Sysnative"):
        candidate = ntpath.join(root, folder, "WindowsSandbox.exe")
        if os.path.isfile(candidate):
            return candidate
    return None


def start(wsb: str) -> int:
    executable = sandbox_executable()
    how = (f"enable it as administrator with `{ENABLE_COMMAND}` and restart (Windows 10/11 Pro, Enterprise or "
           f"Education, virtualization on), then open {wsb}")
    if executable is None:
        print(f"try-in-sandbox: wrote {wsb}, but Windows Sandbox is not enabled on this machine: {how}.", file=sys.stderr)
        return NO_SANDBOX
    try:
        subprocess.Popen([executable, wsb], stdin=subprocess.DEVNULL, close_fds=True)
    except OSError as exc:
        print(f"try-in-sandbox: wrote {wsb}, but {executable} did not start ({exc.strerror}): {how}.", file=sys.stderr)
        return NO_SANDBOX
    print(f"Started Windows Sandbox with {wsb}; the results arrive in {ntpath.join(ntpath.dirname(wsb), 'results')}.")
    return WRITTEN


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise SandboxError(BAD_ARGUMENT, f"try-in-sandbox: {message}; see try-in-sandbox.cmd --help.")


def parser() -> argparse.ArgumentParser:
    parse = _Parser(prog="try-in-sandbox.cmd", description="Write <bundle>-sandbox\\<name>.wsb beside this bundle "
                    "and start Windows Sandbox with it: an offline, disposable Windows that installs the bundle, runs "
                    "its self-check and entry point, uninstalls it and leaves every log and exit code in "
                    "<bundle>-sandbox\\results.")
    parse.add_argument("--write-only", action="store_true", help="write the files, do not start Windows Sandbox")
    parse.add_argument("--msi", metavar="FILE", help="install this MSI (msiexec /i) instead of running install.cmd")
    parse.add_argument("--prereq", metavar="FILE", help="the python.org installer python-3.X.Y-amd64.exe, for a "
                       "bundle that uses the machine's Python (installed for all users in the sandbox first)")
    parse.add_argument("--memory", metavar="MB", type=int, help="the sandbox's memory (default: enough for the models)")
    return parse


def request_from(args: argparse.Namespace, bundle: str, facts: BundleFacts) -> Request:
    """The checked command line: files exist and are what they claim; paths absolute."""
    msi = _input_file(args.msi, "--msi", _MSI_NAME, "an .msi file with a plain name") if args.msi else None
    prereq = _input_file(args.prereq, "--prereq", _PREREQ_NAME, "python.org's python-3.X.Y-amd64.exe") if args.prereq else None
    if facts.bundled_python and prereq:
        raise SandboxError(BAD_ARGUMENT, f"--prereq was given, but {facts.name} carries its own Python; leave it out.")
    if not facts.bundled_python and not prereq:
        raise SandboxError(BAD_ARGUMENT, f"{facts.name} uses the machine's Python {facts.python}, which a clean sandbox "
                                         f"does not have; pass --prereq python-{facts.python}.N-amd64.exe (python.org's installer).")
    match = _PREREQ_NAME.match(ntpath.basename(prereq)) if prereq else None
    if match and match.group(1) != facts.python:
        raise SandboxError(BAD_ARGUMENT, f"--prereq '{prereq}' is Python {match.group(1)}; {facts.name} needs Python "
                                         f"{facts.python}.")
    if args.memory is not None and not MIN_MEMORY_MB <= args.memory <= 1 << 20:
        raise SandboxError(BAD_ARGUMENT, f"--memory {args.memory} is out of range; expected megabytes from "
                                         f"{MIN_MEMORY_MB} to {1 << 20}.")
    return Request(bundle=bundle, msi=msi, prereq=prereq, memory_mb=args.memory, write_only=args.write_only)


def _input_file(value: str, flag: str, pattern: re.Pattern[str], expected: str) -> str:
    """An existing file of the expected kind, at a path the sandbox can map (refused first: exit 7)."""
    path = os.path.abspath(value)
    check_path(f"The {flag} file", path)
    if not os.path.isfile(path):
        raise SandboxError(BAD_ARGUMENT, f"{flag} '{value}' is not a file; expected {expected}.")
    if not pattern.match(ntpath.basename(path)):
        raise SandboxError(BAD_ARGUMENT, f"{flag} '{value}' is not {expected}.")
    return path


def main(argv: Optional[Sequence[str]] = None, *, bundle: Optional[Path] = None) -> int:
    """try-in-sandbox.cmd's arguments; `bundle` defaults to the bundle this module ships in."""
    folder = bundle if bundle is not None else Path(os.path.abspath(__file__)).parents[3]
    try:
        args = parser().parse_args(sys.argv[1:] if argv is None else argv)
        facts = read_facts(folder)
        request = request_from(args, os.path.abspath(str(folder)), facts)
        files = plan_files(request, facts)
        write_files(files)
    except SandboxError as exc:
        print(str(exc) if str(exc).startswith("try-in-sandbox") else f"try-in-sandbox: {exc}", file=sys.stderr)
        return exc.code
    print(f"Wrote {files.wsb} (the bundle read-only, networking off{', vGPU on' if facts.gpu else ''}).")
    if facts.gpu:
        print(f"Note: {GPU_NOTE}")
    if request.write_only:
        print(f"Start it by opening the file, or: WindowsSandbox.exe \"{files.wsb}\"")
        return WRITTEN
    return start(files.wsb)


if __name__ == "__main__":
    sys.exit(main())
