"""Whether a folder that the install writes into, or adopts from, could have been written by someone else.

An administrator's install runs code from what lies in its folders: a parent that a standard user can
write lets that user plant a `.NAME.previous-*` folder the engine would restore, or a module the next
SYSTEM run imports. So the parent of an install and every leftover it would adopt are checked first, the
way ssh refuses a key file others can write (sshd's StrictModes, `secure_filename` in OpenSSH's misc.c).

Windows: the decision reads the folder's self-relative security descriptor (MS-DTYP 2.4.6: owner SID,
DACL of ACCESS_ALLOWED/DENIED ACEs), so it is plain logic, tested on crafted descriptors here; the bytes
come from GetFileSecurityW (windows_acl.security_descriptor). POSIX: owner and mode from stat.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass
from typing import FrozenSet, List, Optional, Tuple

#: Who may own and write an install's parent: SYSTEM, Administrators, TrustedInstaller.
SYSTEM = "S-1-5-18"
ADMINISTRATORS = "S-1-5-32-544"
TRUSTED_INSTALLER = "S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464"
TRUSTED_SIDS: FrozenSet[str] = frozenset({SYSTEM, ADMINISTRATORS, TRUSTED_INSTALLER})

#: Rights that let a principal change what the folder holds or who may: add a file or folder, delete a
#: child, delete or rename the folder, rewrite its DACL or owner, or any generic write.
WRITE_RIGHTS = (0x0002 | 0x0004 | 0x0040 | 0x00010000 | 0x00040000 | 0x00080000 | 0x10000000 | 0x40000000
                | 0x02000000)  # ADD_FILE, ADD_SUBDIRECTORY, DELETE_CHILD, DELETE, WRITE_DAC, WRITE_OWNER,
#                                GENERIC_ALL, GENERIC_WRITE, MAXIMUM_ALLOWED
_ACCESS_ALLOWED = 0x00
_INHERIT_ONLY = 0x08


class DescriptorError(ValueError):
    """Bytes that are not a self-relative security descriptor."""


@dataclass(frozen=True)
class Ace:
    allowed: bool
    flags: int
    mask: int
    sid: str


@dataclass(frozen=True)
class Descriptor:
    owner: Optional[str]
    dacl: Optional[Tuple[Ace, ...]]  # None: no DACL at all, which grants everyone everything


def parse_sid(data: bytes, offset: int) -> str:
    """A binary SID (revision, count, 48-bit authority, sub-authorities) in its S-R-A-S… text form."""
    if offset + 8 > len(data):
        raise DescriptorError(f"SID at offset {offset} runs past the {len(data)}-byte descriptor")
    revision, count = data[offset], data[offset + 1]
    authority = int.from_bytes(data[offset + 2:offset + 8], "big")
    end = offset + 8 + 4 * count
    if end > len(data):
        raise DescriptorError(f"SID at offset {offset} with {count} sub-authorities runs past the descriptor")
    subs = struct.unpack_from(f"<{count}I", data, offset + 8)
    return "-".join(["S", str(revision), str(authority), *(str(s) for s in subs)])


def parse_descriptor(data: bytes) -> Descriptor:
    """Owner and DACL of a self-relative SECURITY_DESCRIPTOR (SE_SELF_RELATIVE, MS-DTYP 2.4.6)."""
    if len(data) < 20:
        raise DescriptorError(f"a security descriptor has at least 20 bytes, found {len(data)}")
    _, _, control, owner_at, _, _, dacl_at = struct.unpack_from("<BBHIIII", data, 0)
    if not control & 0x8000:
        raise DescriptorError("the security descriptor is not self-relative")
    owner = parse_sid(data, owner_at) if owner_at else None
    if not control & 0x0004 or not dacl_at:  # SE_DACL_PRESENT
        return Descriptor(owner=owner, dacl=None)
    if dacl_at + 8 > len(data):
        raise DescriptorError(f"the DACL at offset {dacl_at} runs past the descriptor")
    count = struct.unpack_from("<H", data, dacl_at + 4)[0]
    aces: List[Ace] = []
    position = dacl_at + 8
    for _ in range(count):
        if position + 8 > len(data):
            raise DescriptorError(f"ACE at offset {position} runs past the descriptor")
        kind, flags, size = struct.unpack_from("<BBH", data, position)
        if size < 8:
            raise DescriptorError(f"ACE at offset {position} claims {size} bytes")
        if kind in (0x00, 0x01):  # ACCESS_ALLOWED_ACE, ACCESS_DENIED_ACE
            mask = struct.unpack_from("<I", data, position + 4)[0]
            aces.append(Ace(allowed=kind == _ACCESS_ALLOWED, flags=flags, mask=mask, sid=parse_sid(data, position + 8)))
        else:
            # Object and callback ACEs never appear on plain NTFS folders; an allow ACE we cannot read could
            # grant anything, so it counts as a write grant to an unknown principal.
            aces.append(Ace(allowed=kind in (0x05, 0x09, 0x0B), flags=flags, mask=WRITE_RIGHTS, sid="unknown"))
        position += size
    return Descriptor(owner=owner, dacl=tuple(aces))


def windows_problem(descriptor: Descriptor, *, current_user: Optional[str]) -> Optional[str]:
    """Why others could write this folder, or None. Trusted: SYSTEM, Administrators, TrustedInstaller and the
    account running the install (an administrator or SYSTEM itself; Wine runs everything as one such user)."""
    trusted = TRUSTED_SIDS | ({current_user} if current_user else set())
    if descriptor.owner not in trusted:
        return f"it is owned by {descriptor.owner or 'nobody'}, not by Administrators, SYSTEM or the account running this"
    if descriptor.dacl is None:
        return "it has no access control list, which lets everyone write it"
    for ace in descriptor.dacl:
        if not ace.allowed or ace.flags & _INHERIT_ONLY or ace.sid in trusted:
            continue
        if ace.mask & WRITE_RIGHTS:
            return f"{ace.sid} may write it (access mask 0x{ace.mask:08x})"
    return None


def posix_problem(st: os.stat_result, *, euid: int) -> Optional[str]:
    """Why others could write this folder, or None: owned by root or the installing user, and writable by
    neither its group nor others (the sticky bit does not help: anyone may still create names in it)."""
    if st.st_uid not in (0, euid):
        return f"it is owned by uid {st.st_uid}, not by root or the installing user (uid {euid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"its mode {stat.filemode(st.st_mode)} lets others write it"
    return None
