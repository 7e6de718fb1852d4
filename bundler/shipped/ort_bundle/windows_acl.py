"""Who a Windows process runs as, and who may write a folder: the two reads folder_trust judges.

The install engine asks them of an install's parent and INSTALLDIR, the launcher of its cache folder; both read
the same Windows calls (the process token's user, GetFileSecurityW's owner and DACL), so they live here once.
Importing this module on another system is harmless; calling into it there is not. Standard library only,
Python 3.8+.
"""

from __future__ import annotations

import contextlib
import ctypes
from typing import Any, Iterator, Optional

ERROR_ALREADY_EXISTS = 183


def current_user_sid() -> Optional[str]:
    """The SID of the account this process runs as, from its token (None when it cannot be read)."""
    from ctypes import wintypes

    advapi32 = ctypes.WinDLL("advapi32", use_last_error=True)  # type: ignore[attr-defined]
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    kernel32.GetCurrentProcess.restype = wintypes.HANDLE
    advapi32.OpenProcessToken.argtypes = [wintypes.HANDLE, wintypes.DWORD, ctypes.POINTER(wintypes.HANDLE)]
    advapi32.GetTokenInformation.argtypes = [wintypes.HANDLE, ctypes.c_int, ctypes.c_void_p, wintypes.DWORD,
                                             ctypes.POINTER(wintypes.DWORD)]
    advapi32.ConvertSidToStringSidW.argtypes = [ctypes.c_void_p, ctypes.POINTER(wintypes.LPWSTR)]
    token = wintypes.HANDLE()
    if not advapi32.OpenProcessToken(kernel32.GetCurrentProcess(), 0x0008, ctypes.byref(token)):  # TOKEN_QUERY
        return None
    try:
        needed = wintypes.DWORD(0)
        advapi32.GetTokenInformation(token, 1, None, 0, ctypes.byref(needed))  # TokenUser
        buffer = ctypes.create_string_buffer(needed.value or 1)
        if not advapi32.GetTokenInformation(token, 1, buffer, needed, ctypes.byref(needed)):
            return None
        sid = ctypes.cast(buffer, ctypes.POINTER(ctypes.c_void_p))[0]  # TOKEN_USER.User.Sid
        text = wintypes.LPWSTR()
        if not advapi32.ConvertSidToStringSidW(sid, ctypes.byref(text)):
            return None
        value = text.value
        kernel32.LocalFree(text)
        return value
    finally:
        kernel32.CloseHandle(token)


def security_descriptor(path: str) -> bytes:
    """The self-relative security descriptor (owner and DACL) of a file or folder; OSError when it cannot be read."""
    from ctypes import wintypes

    advapi32 = ctypes.WinDLL("advapi32", use_last_error=True)  # type: ignore[attr-defined]
    info = 0x1 | 0x4  # OWNER_SECURITY_INFORMATION | DACL_SECURITY_INFORMATION
    needed = wintypes.DWORD(0)
    advapi32.GetFileSecurityW(path, info, None, 0, ctypes.byref(needed))
    buffer = ctypes.create_string_buffer(needed.value or 1)
    if not advapi32.GetFileSecurityW(path, info, buffer, needed, ctypes.byref(needed)):
        error = ctypes.get_last_error()  # type: ignore[attr-defined]
        raise OSError(f"Windows error {error}")
    return buffer.raw


@contextlib.contextmanager
def security_attributes(sddl: str) -> Iterator[Any]:
    """A SECURITY_ATTRIBUTES holding the descriptor `sddl` describes, for a CreateDirectoryW or CreateFileW
    that makes its object with that DACL from the start (no moment with the folder's inherited one); OSError
    (errno: the Windows error) when the text is not a descriptor."""
    from ctypes import wintypes

    class SecurityAttributes(ctypes.Structure):
        _fields_ = [("nLength", wintypes.DWORD), ("lpSecurityDescriptor", ctypes.c_void_p),
                    ("bInheritHandle", wintypes.BOOL)]

    advapi32 = ctypes.WinDLL("advapi32", use_last_error=True)  # type: ignore[attr-defined]
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    advapi32.ConvertStringSecurityDescriptorToSecurityDescriptorW.argtypes = [
        wintypes.LPCWSTR, wintypes.DWORD, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    kernel32.LocalFree.argtypes = [ctypes.c_void_p]
    descriptor = ctypes.c_void_p()
    if not advapi32.ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl, 1, ctypes.byref(descriptor), None):
        error = ctypes.get_last_error()  # type: ignore[attr-defined]
        raise OSError(error, f"Windows error {error} building the security descriptor {sddl}")
    try:
        yield SecurityAttributes(ctypes.sizeof(SecurityAttributes), descriptor, False)
    finally:
        kernel32.LocalFree(descriptor)


def make_private_folder(path: str, user: str) -> None:
    """Create `path` for `user` alone (with SYSTEM and Administrators), its DACL protected from what the folder
    above it grants: in a folder other users may write, this one is still theirs to read only if granted, and
    theirs to delete or rename only through rights on the folder above that Windows' defaults do not give
    (FILE_DELETE_CHILD is in Full Control, not in Modify). OSError when it cannot be created."""
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    kernel32.CreateDirectoryW.argtypes = [wintypes.LPCWSTR, ctypes.c_void_p]
    with security_attributes(f"O:{user}D:P(A;OICI;FA;;;{user})(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)") as attributes:
        if not kernel32.CreateDirectoryW(path, ctypes.byref(attributes)):
            error = ctypes.get_last_error()  # type: ignore[attr-defined]
            if error == ERROR_ALREADY_EXISTS:
                raise FileExistsError(path)
            raise OSError(f"Windows error {error} creating {path}")
