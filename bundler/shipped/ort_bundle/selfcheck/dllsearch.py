"""Which `onnxruntime.dll` a native program would load, and what System32 holds (Windows ML's inbox copy).

For an unpackaged program Windows searches the program's own folder, then System32, then the Windows
folder, the current folder and `PATH` last (Microsoft, "Dynamic-link library search order":
https://learn.microsoft.com/en-us/windows/win32/dlls/dynamic-link-library-search-order; docs/facts.md §8).
Windows 10 21H1+ and 11 keep an older `onnxruntime.dll` in System32, so the self-check asks, with the
program's folder as the starting point, which copy wins, and reports a System32 copy with its version even
when the bundle's wins. Pure standard library, Python 3.8+: the version is read from the file's
VS_FIXEDFILEINFO block, so it works the same on the build machine's tests and on the target.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

#: VS_FIXEDFILEINFO starts with this signature (winver.h), followed by its struct version.
_FIXED_FILE_INFO = struct.pack("<I", 0xFEEF04BD)
_READ_LIMIT = 64 * 1024 * 1024


@dataclass(frozen=True)
class DllChoice:
    """The copy the search order picks, and every copy it passed over or would reach later."""

    dll: str
    loaded: Optional[Path]  # None: no folder in the search order holds the DLL
    candidates: List[Path]  # every existing copy, in search order


def search_folders(program_dir: Path, *, system_root: Path, cwd: Path, path: str) -> List[Path]:
    """The standard search order for an unpackaged program (SafeDllSearchMode on, no SetDllDirectory)."""
    folders = [program_dir, system_root / "System32", system_root, cwd]
    folders += [Path(entry) for entry in path.split(";") if entry.strip()]  # Windows' PATH separator
    return folders


def choose(dll: str, folders: List[Path]) -> DllChoice:
    found = [folder / dll for folder in folders if (folder / dll).is_file()]
    return DllChoice(dll=dll, loaded=found[0] if found else None, candidates=found)


def file_version(path: Path) -> Optional[str]:
    """The binary FileVersion (`a.b.c.d`) of a PE file, or None when it carries no version resource."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(_READ_LIMIT)
    except OSError:
        return None
    start = data.find(_FIXED_FILE_INFO)
    if start < 0 or start + 16 > len(data):
        return None
    file_ms, file_ls = struct.unpack_from("<II", data, start + 8)
    return f"{file_ms >> 16}.{file_ms & 0xFFFF}.{file_ls >> 16}.{file_ls & 0xFFFF}"
