"""What the Windows install asks of the machine, through the standard library (winreg, ctypes, subprocess).

These are the steps install.ps1 used to do in PowerShell, where only a parser ever saw them; here they run
in the tests under Wine on python.org's CPython. Each function does one thing to the machine and returns
plain values, so windows_setup.py reads as the install's order of steps. Importing this module on another
system is harmless; calling into it there is not. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ...windows_acl import current_user_sid as current_user_sid
from ...windows_acl import security_attributes, security_descriptor
from ..engine_fs import EngineError

#: HKLM/HKCU\SOFTWARE\ort-bundler\<name>: the detection value, one key per bundle name (Intune's rule).
DETECTION_KEY = "SOFTWARE\\ort-bundler\\{name}"
ARP_KEY = "SOFTWARE\\Microsoft\\Windows\\CurrentVersion\\Uninstall\\ort-bundler-{name}"
VC_RUNTIME_KEY = "SOFTWARE\\Microsoft\\VisualStudio\\14.0\\VC\\Runtimes\\x64"
#: Where Windows records that a reboot is due (what PSAppDeployToolkit's Get-ADTPendingReboot reads).
REBOOT_KEYS = (
    ("SOFTWARE\\Microsoft\\Windows\\CurrentVersion\\Component Based Servicing\\RebootPending", None),
    ("SOFTWARE\\Microsoft\\Windows\\CurrentVersion\\WindowsUpdate\\Auto Update\\RebootRequired", None),
    ("SYSTEM\\CurrentControlSet\\Control\\Session Manager", "PendingFileRenameOperations"),
)
ERROR_SHARING_VIOLATION = 32
ERROR_LOCK_VIOLATION = 33
ERROR_ACCESS_DENIED = 5


def _winreg() -> Any:
    """The winreg module (Windows only; typed as Any so the checks of this module run on any system)."""
    return importlib.import_module("winreg")


def hive(name: str) -> int:
    """HKLM or HKCU as winreg's handle constant."""
    return int(getattr(_winreg(), {"HKLM": "HKEY_LOCAL_MACHINE", "HKCU": "HKEY_CURRENT_USER"}[name]))


def _kernel32() -> Any:
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    kernel32.CloseHandle.argtypes = [wintypes.HANDLE]
    kernel32.LocalFree.argtypes = [ctypes.c_void_p]
    kernel32.SetFileInformationByHandle.argtypes = [wintypes.HANDLE, ctypes.c_int, ctypes.c_void_p, wintypes.DWORD]
    kernel32.CreateFileW.restype = wintypes.HANDLE
    kernel32.CreateFileW.argtypes = [wintypes.LPCWSTR, wintypes.DWORD, wintypes.DWORD, ctypes.c_void_p,
                                     wintypes.DWORD, wintypes.DWORD, wintypes.HANDLE]
    return kernel32


def check_platform() -> None:
    """A 64-bit process on 64-bit Windows 10 / Server 2016 or later: a 32-bit Python would see HKLM\\SOFTWARE
    redirected to WOW6432Node and System32 to SysWOW64, and could not load the bundle's x64 DLLs."""
    if sys.maxsize <= 2 ** 32:
        raise EngineError("prerequisite", f"{sys.executable} is a 32-bit Python; this bundle needs a 64-bit one")
    version = sys.getwindowsversion()  # type: ignore[attr-defined]
    if version.major < 10:
        raise EngineError("prerequisite", f"Windows {version.major}.{version.minor} is not supported; this bundle "
                                          f"needs 64-bit Windows 10, Windows Server 2016 or later")


def is_admin() -> bool:
    """Elevated administrator or SYSTEM: a per-machine install (HKLM, Add/Remove Programs, Program Files)."""
    try:
        return bool(ctypes.windll.shell32.IsUserAnAdmin())  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return False


def lock_sddl(*, admin: bool, user_sid: Optional[str]) -> str:
    """Who may open the install lock: Administrators and SYSTEM, and for a per-user run the user; protected ("P")
    from the folder's inheritance, so a standard user cannot even open it for reading (an open without sharing
    would hold it as well as a lock does)."""
    owners = "(A;;FA;;;BA)(A;;FA;;;SY)"
    return "D:P" + owners + ("" if admin or not user_sid else f"(A;;FA;;;{user_sid})")


def lock_folder(*, admin: bool) -> Path:
    """Where the install lock lives: a folder only the installing principal (and administrators) can write. Per
    machine the logs' folder below %SystemRoot% (standard users cannot create there); per user the user's own
    %LOCALAPPDATA%\\ort-bundler. Never %ProgramData% or a Global\\ object name, which any user can take first."""
    if admin:
        return default_log_folder(admin=True)
    return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / "ort-bundler"


class InstallLock:
    """One install or uninstall of a bundle name at a time per installing principal (per machine: SYSTEM and every
    administrator, across sessions; per user: that user): `ort-bundler-<name>.lock` in lock_folder(), opened without
    sharing and deleted on close, with lock_sddl()'s DACL. Per name, not per version: the detection and Add/Remove
    Programs keys are per name too. It replaces `Global\\ort-bundler-<name>`, a mutex any user could create first
    with a DACL that kept every install at 1618. A run that dies releases it with its handles."""

    def __init__(self, name: str, *, admin: bool) -> None:
        self.admin = admin
        self.path = lock_folder(admin=admin) / f"ort-bundler-{name}.lock"
        self.handle: Optional[int] = None

    def __enter__(self) -> InstallLock:
        _check_lock_folder(self.path.parent, admin=self.admin)
        handle, error = _open_exclusive(self.path, lock_sddl(admin=self.admin, user_sid=current_user_sid()))
        if handle is None:
            if error in (ERROR_SHARING_VIOLATION, ERROR_LOCK_VIOLATION):
                raise EngineError("retry", f"another installation or removal of this bundle is running (it holds "
                                           f"{self.path}); retry when it has finished")
            raise EngineError("prerequisite", f"cannot open the install lock {self.path} (Windows error {error}); "
                                              f"run as the account that installs (an administrator per machine)")
        self.handle = handle
        return self

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            _kernel32().CloseHandle(self.handle)


def _check_lock_folder(folder: Path, *, admin: bool) -> None:
    """The lock's folder must be writable only by administrators, SYSTEM and this account (folder_trust's rule, as
    for the install's parent): else another user could hold the lock's name."""
    from ...folder_trust import parse_descriptor, windows_problem

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EngineError("prerequisite", f"cannot create the install lock's folder {folder}: {exc.strerror}") from None
    problem = windows_problem(parse_descriptor(folder_security(folder)), current_user=current_user_sid())
    if problem:
        where = "%SystemRoot%\\Logs\\Software" if admin else "%LOCALAPPDATA%\\ort-bundler"
        raise EngineError("prerequisite", f"the install lock's folder {folder} ({where}) is not safe: {problem}; "
                                          f"restore its permissions (nothing was changed)")


def _open_exclusive(path: Path, sddl: str) -> Tuple[Optional[int], int]:
    """CreateFileW without sharing, deleted on close, created with `sddl`: (handle, 0) or (None, Windows error)."""
    kernel32 = _kernel32()
    generic_rw, delete, open_always, delete_on_close = 0xC0000000, 0x00010000, 4, 0x04000000
    try:
        with security_attributes(sddl) as attributes:
            handle = kernel32.CreateFileW(str(path), generic_rw | delete, 0, ctypes.byref(attributes), open_always,
                                          0x80 | delete_on_close, None)
            if handle in (None, ctypes.c_void_p(-1).value):
                return None, ctypes.get_last_error()  # type: ignore[attr-defined]
            return handle, 0
    except OSError as exc:  # the descriptor's text was refused
        return None, exc.errno or 0


def default_log_folder(*, admin: bool) -> Path:
    """PSAppDeployToolkit's convention: %SystemRoot%\\Logs\\Software, or %ProgramData%\\Logs\\Software unelevated."""
    base = os.environ.get("SystemRoot", "C:\\Windows") if admin else os.environ.get("ProgramData", "C:\\ProgramData")
    return Path(base) / "Logs" / "Software"


def _open(root: int, path: str, *, view: int = 0, write: bool = False) -> Any:
    winreg = _winreg()
    access = (winreg.KEY_ALL_ACCESS if write else winreg.KEY_READ) | (view or winreg.KEY_WOW64_64KEY)
    return winreg.OpenKey(root, path, 0, access)


def read_values(root: int, path: str, *, view: int = 0) -> Optional[Dict[str, object]]:
    """Every value of a key, None when the key does not exist."""
    winreg = _winreg()
    try:
        key = _open(root, path, view=view)
    except OSError:
        return None
    values: Dict[str, object] = {}
    with key:
        index = 0
        while True:
            try:
                name, value, _ = winreg.EnumValue(key, index)
            except OSError:
                return values
            values[name] = value
            index += 1


def write_values(root: int, path: str, values: Iterable[Tuple[str, object]]) -> None:
    """Strings as REG_SZ, integers as REG_DWORD, in the 64-bit view."""
    winreg = _winreg()
    with winreg.CreateKeyEx(root, path, 0, winreg.KEY_ALL_ACCESS | winreg.KEY_WOW64_64KEY) as key:
        for name, value in values:
            kind = winreg.REG_DWORD if isinstance(value, int) else winreg.REG_SZ
            winreg.SetValueEx(key, name, 0, kind, value)


def delete_values(root: int, path: str, names: Iterable[str]) -> None:
    """Remove values of a key where present; a missing key or value is no error."""
    winreg = _winreg()
    try:
        key = _open(root, path, write=True)
    except OSError:
        return
    with key:
        for name in names:
            try:
                winreg.DeleteValue(key, name)
            except FileNotFoundError:
                continue


def delete_key_if_empty(root: int, path: str) -> None:
    """Remove a key that holds no value and no subkey (what is left once Windows Installer removed its values)."""
    winreg = _winreg()
    try:
        key = _open(root, path)
    except OSError:
        return
    with key:
        subkeys, values, _ = winreg.QueryInfoKey(key)
    if not subkeys and not values:
        delete_key(root, path)


def delete_key(root: int, path: str) -> bool:
    """Remove a key with no subkeys; False when it was not there."""
    winreg = _winreg()
    try:
        winreg.DeleteKeyEx(root, path, winreg.KEY_WOW64_64KEY, 0)
    except FileNotFoundError:
        return False
    return True


def vc_runtime_version() -> Optional[Tuple[int, int, int]]:
    """The newest installed VC++ 2015-2022 x64 runtime (Major.Minor.Bld), from both registry views."""
    winreg = _winreg()
    found: List[Tuple[int, int, int]] = []
    for view in (winreg.KEY_WOW64_64KEY, winreg.KEY_WOW64_32KEY):
        values = read_values(winreg.HKEY_LOCAL_MACHINE, VC_RUNTIME_KEY, view=view)
        if values and values.get("Installed") == 1:
            major, minor, build = (int(str(values.get(part) or 0)) for part in ("Major", "Minor", "Bld"))
            found.append((major, minor, build))
    return max(found) if found else None


def run_vc_redist(exe: Path, log_file: Path) -> int:
    """VC_redist.x64.exe /install /quiet /norestart; its exit code (the caller maps it)."""
    try:
        proc = subprocess.run([str(exe), "/install", "/quiet", "/norestart", "/log", str(log_file)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=1800, check=False)
    except subprocess.TimeoutExpired:
        raise EngineError("install", f"{exe} did not finish within 30 minutes; see {log_file}") from None
    except OSError as exc:
        raise EngineError("install", f"{exe} could not be started: {exc}") from None
    return proc.returncode


def pending_reboot() -> List[str]:
    """Which of Windows' own markers say a reboot is already due (from another installer or an update)."""
    winreg = _winreg()
    reasons = []
    for path, value in REBOOT_KEYS:
        values = read_values(winreg.HKEY_LOCAL_MACHINE, path)
        if values is not None and (value is None or values.get(value)):
            reasons.append(f"HKLM\\{path}" + (f" {value}" if value else ""))
    return reasons


def remove_mark_of_the_web(files: Iterable[Path]) -> int:
    """Delete each file's `Zone.Identifier` stream (what Unblock-File does); how many carried one."""
    removed = 0
    for path in files:
        try:
            os.remove(f"{path}:Zone.Identifier")
        except OSError:
            continue
        removed += 1
    return removed


def files_in_use(paths: Iterable[Path]) -> List[Path]:
    """The files another process holds: opened by a handle (opening for DELETE without sharing fails with a
    sharing violation), or mapped as a running exe or loaded DLL (no handle stays open, but marking the file
    for deletion is refused; the mark is taken back at once, so nothing is deleted)."""
    kernel32 = _kernel32()
    delete, open_existing, backup_semantics, file_disposition_info = 0x00010000, 3, 0x02000000, 4
    invalid = ctypes.c_void_p(-1).value
    busy = []
    for path in paths:
        handle = kernel32.CreateFileW(str(path), delete, 0, None, open_existing, backup_semantics, None)
        if handle in (None, invalid):
            if ctypes.get_last_error() in (ERROR_SHARING_VIOLATION, ERROR_LOCK_VIOLATION):  # type: ignore[attr-defined]
                busy.append(path)
            continue
        try:
            mark = ctypes.c_ubyte(1)
            if kernel32.SetFileInformationByHandle(handle, file_disposition_info, ctypes.byref(mark), 1):
                mark.value = 0
                kernel32.SetFileInformationByHandle(handle, file_disposition_info, ctypes.byref(mark), 1)
            elif ctypes.get_last_error() == ERROR_ACCESS_DENIED:  # type: ignore[attr-defined]
                busy.append(path)
        finally:
            kernel32.CloseHandle(handle)
    return busy


class _UniqueProcess(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint32), ("start_low", ctypes.c_uint32), ("start_high", ctypes.c_uint32)]


class _ProcessInfo(ctypes.Structure):
    """RM_PROCESS_INFO as restartmanager.h defines it (668 bytes)."""

    _fields_ = [("process", _UniqueProcess), ("app_name", ctypes.c_wchar * 256), ("service", ctypes.c_wchar * 64),
                ("app_type", ctypes.c_int), ("status", ctypes.c_uint32), ("ts_session", ctypes.c_uint32),
                ("restartable", ctypes.c_int)]


ERROR_MORE_DATA = 234


def file_holders(paths: List[Path]) -> List[Tuple[str, int]]:
    """(program name, process id) of every process Restart Manager says holds one of `paths`; empty when it
    cannot tell (under Wine its calls succeed and find nothing). The name is only for the message: the
    decision that files are in use is files_in_use's."""
    from ctypes import wintypes

    rm = ctypes.WinDLL("rstrtmgr", use_last_error=True)  # type: ignore[attr-defined]
    session, key = wintypes.DWORD(), ctypes.create_unicode_buffer(33)
    if rm.RmStartSession(ctypes.byref(session), 0, key) != 0:
        return []
    try:
        names = (wintypes.LPCWSTR * len(paths))(*(str(path) for path in paths))
        if rm.RmRegisterResources(session, len(paths), names, 0, None, 0, None) != 0:
            return []
        needed, count, reasons = ctypes.c_uint(0), ctypes.c_uint(0), wintypes.DWORD()
        infos = (_ProcessInfo * 0)()
        for _ in range(3):  # the list can grow between the two calls
            result = rm.RmGetList(session, ctypes.byref(needed), ctypes.byref(count), infos, ctypes.byref(reasons))
            if result != ERROR_MORE_DATA:
                break
            infos = (_ProcessInfo * needed.value)()
            count = ctypes.c_uint(needed.value)
        if result != 0:
            return []
        return [(info.app_name or info.service or "a program", int(info.process.pid)) for info in infos[:count.value]]
    finally:
        rm.RmEndSession(session)


def folder_security(path: Path) -> bytes:
    """The self-relative security descriptor (owner and DACL) of a folder, for folder_trust to judge."""
    try:
        return security_descriptor(str(path))
    except OSError as exc:
        raise EngineError("prerequisite", f"cannot read who may write {path} ({exc}); nothing was changed") from None


def run_logged(args: List[str], *, timeout: float = 300) -> Tuple[int, str]:
    """Run a system tool: (exit code, its output). Output goes to a file, not a pipe: a service the tool starts
    on demand (schtasks starts the Task Scheduler) inherits the handles, and a pipe would then never end."""
    with tempfile.TemporaryFile() as output:
        try:
            code = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                  timeout=timeout, check=False).returncode
        except subprocess.TimeoutExpired:
            raise EngineError("install", f"{args[0]} did not finish within {timeout:.0f} s") from None
        except OSError as exc:
            raise EngineError("install", f"{args[0]} could not be started: {exc}") from None
        output.seek(0)
        return code, output.read().decode("utf-8", "replace").strip()


def restrict_folder(folder: Path) -> None:
    """Administrators and SYSTEM write, users read and run, nothing inherited (a folder an administrator
    creates under C:\\ would inherit "Authenticated Users: Modify")."""
    code, output = run_logged(["icacls.exe", str(folder), "/inheritance:r", "/grant:r", "*S-1-5-32-544:(OI)(CI)F",
                               "*S-1-5-18:(OI)(CI)F", "*S-1-5-32-545:(OI)(CI)RX"])
    if code != 0:
        raise EngineError("install", f"icacls could not restrict write access to {folder}: {output}")


def schtasks(*args: str) -> Tuple[int, str]:
    return run_logged(["schtasks.exe", *args], timeout=120)
