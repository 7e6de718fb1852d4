"""Try a Windows bundle in Windows Sandbox: write the `.wsb` that installs, checks and removes it offline.

`try-in-sandbox.cmd` (templates/try-in-sandbox.cmd.j2) finds a Python and hands every argument to this
module, shipped in every bundle as payload/ort_bundle/sandbox/sandbox.py and started through
payload/ort_bundle/__main__.py. It writes, beside the unpacked bundle folder (never inside it: the install
refuses files SHA256SUMS does not list):

    <bundle>-sandbox\\<name>.wsb              the Windows Sandbox configuration
    <bundle>-sandbox\\steps\\try-bundle.cmd    what the sandbox runs at logon (mapped read-only)
    <bundle>-sandbox\\results\\                logs, the self-check report and every exit code (writable)

and starts WindowsSandbox.exe with it (`--write-only`: not). The configuration uses only the documented
elements (docs/facts.md §9; Microsoft's "Windows Sandbox configuration" page): `vGPU` (enabled only for a bundle
with GPU providers), `Networking` (always disabled: the target is air-gapped), `MappedFolders` (every
`HostFolder` absolute and existing, or the sandbox refuses the file), `LogonCommand` and `MemoryInMB`.
Microsoft's page advises a script in a mapped folder for anything beyond one command: hence steps\\.
The two files' text comes from sandbox_render (shipped beside this module); this module reads the bundle,
checks every path and the command line, writes the files and starts the sandbox.

Exit codes: 0 written (and started), 2 a bad argument, 7 a path the sandbox cannot map (non-ASCII, too
long, a network share; nothing is written then), 9 Windows Sandbox is not available (the files are written),
11 the bundle's own records cannot be read. Standard library only, Python 3.8+: it runs on the admin's machine.
"""

from __future__ import annotations

import argparse
import contextlib
import ntpath
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from ..bundle_info import BundleInfo, BundleInfoError
from ..records import INSTALL_EXIT_CODES, SUMS_FILE, RecordError, safe_relative
from .sandbox_render import (
    GPU_NOTE,
    MIN_MEMORY_MB,
    RESULT_FILES,
    STEPS_FILE,
    BundleFacts,
    Request,
    render_steps,
    render_wsb,
)

WRITTEN = 0
BAD_ARGUMENT = 2
REFUSED_PATH = 7
NO_SANDBOX = 9
BROKEN_BUNDLE = INSTALL_EXIT_CODES["integrity"]

#: Windows' MAX_PATH: the sandbox maps a host folder, and reads its files, through paths below it.
MAX_PATH = 260
ENABLE_COMMAND = "Enable-WindowsOptionalFeature -Online -FeatureName Containers-DisposableClientVM"
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
