"""The text of the two files try-in-sandbox writes: the Windows Sandbox configuration (`.wsb`) and the logon
script that installs, checks and removes the bundle inside the sandbox.

Everything here is what the sandbox sees: its fixed folders, the host folders mapped onto them, the
memory it gets and the steps it runs; sandbox.py checks the paths and the command line first, then writes
these files and starts Windows Sandbox. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import math
import ntpath
from dataclasses import dataclass
from typing import Dict, List, Optional
from xml.sax.saxutils import escape

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
GPU_NOTE = ("vGPU shares the host's GPU through the host's own driver: whether CUDA works inside the sandbox "
            "depends on that driver, so a CUDA failure of the self-check there is not by itself a fault of the bundle.")
#: What the logon script writes into results\, so that it can clear the previous run's files (and nothing else).
RESULT_FILES = ("exit-codes.txt", "install-dir.txt", "python-install.log", "vc_redist.log", "install.log",
                "install-output.txt", "msi-install.log", "selfcheck.json", "selfcheck-stderr.txt", "entry-point.txt",
                "uninstall.log", "uninstall-output.txt", "msi-uninstall.log")


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
