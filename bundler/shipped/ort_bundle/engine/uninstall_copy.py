"""The interpreter copy that uninstall.cmd and uninstall.ps1 run the removal with (issue 34 §8).

A running python.exe cannot be removed, so the uninstall of a bundle with its own interpreter runs a copy of it.
That copy used to go to `%TEMP%\\ort-bundler-uninstall-%RANDOM%%RANDOM%`: for SYSTEM (Intune, ConfigMgr) that is
C:\\Windows\\Temp, where users may create folders and files, the name is guessable, and a folder made there first
blocked the uninstall (exit 12) or could hold a DLL the copied python.exe loads as SYSTEM. Now this module, run by
the installed interpreter before the uninstall (`python -I -B installer\\ort_bundle\\__main__.py uninstall-copy HOME`), makes the folder:

- a new name from `secrets` (`ort-bundler-uninstall-` and 16 hex digits) in the temp folder; a name that exists
  already (made by anyone) is never used: another is drawn, so a pre-created folder blocks nothing;
- for an administrator or SYSTEM, created with its final access control list in the same call (CreateDirectoryW
  with a security descriptor: no moment in which someone else may write it), the install's rule: Administrators
  and SYSTEM full control, Users read and run, nothing inherited; then `icacls` writes the same ACL, as the
  install does for its folders (windows_host.restrict_folder), and the folder must still be empty;
- the interpreter folder's files (python.exe, its DLLs, the standard library zip, its ._pth) copied in.

It prints the folder on stdout, one line; the wrapper runs `<folder>\\python.exe` and removes the folder when the
uninstall has ended. Standard library only, Python 3.8+; a program of the shipped `ort_bundle` package.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterator, List, Optional

from ..records import INSTALL_EXIT_CODES
from .engine_fs import EngineError

PREFIX = "ort-bundler-uninstall-"
#: The install's ACL (restrict_folder's icacls grants) as a protected SDDL DACL: Administrators (BA) and SYSTEM (SY)
#: full control, Users (BU) read and execute (0x1200a9), each inherited by files and folders (OICI), nothing else.
SDDL = "D:P(A;OICI;FA;;;BA)(A;OICI;FA;;;SY)(A;OICI;0x1200a9;;;BU)"
#: How many taken names are skipped before giving up (each is 64 random bits: only a planted folder collides).
ATTEMPTS = 16


def random_names() -> Iterator[str]:
    while True:
        yield PREFIX + secrets.token_hex(8)


def create_locked(folder: Path) -> None:
    """Windows: CreateDirectoryW with the SDDL's descriptor, so the folder never exists with another ACL.
    FileExistsError when the name is taken."""
    import ctypes
    from ctypes import wintypes

    advapi32 = ctypes.WinDLL("advapi32", use_last_error=True)  # type: ignore[attr-defined]
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]

    class SecurityAttributes(ctypes.Structure):
        _fields_ = [("nLength", wintypes.DWORD), ("lpSecurityDescriptor", ctypes.c_void_p),
                    ("bInheritHandle", wintypes.BOOL)]

    advapi32.ConvertStringSecurityDescriptorToSecurityDescriptorW.argtypes = [
        wintypes.LPCWSTR, wintypes.DWORD, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    kernel32.CreateDirectoryW.argtypes = [wintypes.LPCWSTR, ctypes.POINTER(SecurityAttributes)]
    kernel32.LocalFree.argtypes = [ctypes.c_void_p]
    descriptor = ctypes.c_void_p()
    if not advapi32.ConvertStringSecurityDescriptorToSecurityDescriptorW(SDDL, 1, ctypes.byref(descriptor), None):
        error = ctypes.get_last_error()  # type: ignore[attr-defined]
        raise OSError(error, "ConvertStringSecurityDescriptorToSecurityDescriptorW failed")
    try:
        attributes = SecurityAttributes(ctypes.sizeof(SecurityAttributes), descriptor, False)
        if not kernel32.CreateDirectoryW(str(folder), ctypes.byref(attributes)):
            error = ctypes.get_last_error()  # type: ignore[attr-defined]
            if error in (80, 183):  # ERROR_FILE_EXISTS, ERROR_ALREADY_EXISTS
                raise FileExistsError(error, "the name is taken", str(folder))
            raise OSError(error, ctypes.FormatError(error), str(folder))  # type: ignore[attr-defined]
    finally:
        kernel32.LocalFree(descriptor)


def create_plain(folder: Path) -> None:
    """Not elevated (a per-user install): the user's own temp folder, which only they can write."""
    os.mkdir(folder, 0o700)


def make_folder(base: Path, *, create: Callable[[Path], None], names: Optional[Iterator[str]] = None) -> Path:
    """A new folder in `base` under a name nobody had taken; a taken name (a pre-created folder) is skipped."""
    taken: List[str] = []
    for name in names or random_names():
        folder = base / name
        try:
            create(folder)
        except FileExistsError:
            taken.append(name)
            if len(taken) >= ATTEMPTS:
                break
            continue
        return folder
    raise EngineError("install", f"{len(taken)} new folder names in {base} were all taken ({', '.join(taken[:3])}, ...); "
                                 f"someone is creating folders there: nothing was removed")


def copy_interpreter(home: Path, *, base: Optional[Path] = None, admin: bool,
                     restrict: Optional[Callable[[Path], None]] = None) -> Path:
    """The folder holding a copy of the interpreter folder `home`'s files (not its subfolders), made as above."""
    folder = make_folder(base or Path(tempfile.gettempdir()), create=create_locked if admin else create_plain)
    try:
        if restrict is not None:
            restrict(folder)
        found = sorted(os.listdir(folder))
        if found:
            raise EngineError("install", f"{folder}, made just now, already holds {', '.join(found[:3])}: someone "
                                         f"else can write it; nothing was removed")
        for entry in sorted(home.iterdir()):
            if entry.is_file() and not entry.is_symlink():
                shutil.copyfile(entry, folder / entry.name)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or not os.path.isdir(args[0]):
        print(f"uninstall_copy.py: expected the interpreter's folder, got {args!r}", file=sys.stderr)
        return INSTALL_EXIT_CODES["usage"]
    admin, restrict = False, None
    if os.name == "nt":
        from .windows.windows_host import is_admin, restrict_folder

        admin = is_admin()
        restrict = restrict_folder if admin else None
    try:
        folder = copy_interpreter(Path(os.path.abspath(args[0])), admin=admin, restrict=restrict)
    except EngineError as exc:
        print(f"uninstall: {exc}", file=sys.stderr)
        return INSTALL_EXIT_CODES[exc.code]
    except OSError as exc:
        print(f"uninstall: cannot copy the interpreter for the uninstall: {exc}", file=sys.stderr)
        return INSTALL_EXIT_CODES["install"]
    print(folder)
    return 0
