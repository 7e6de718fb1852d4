"""What a Windows binary needs and claims, read once with pefile.

The build decides the DLL closure, the wheel's Python tag and the minimum VC++ runtime from these
facts, so they are read from the file itself rather than trusted from names or metadata. Parsing is
`fast_load` followed by only the import, delay-import and resource directories: a full parse of a
19 MB `.pyd` costs seconds, these three cost milliseconds.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pefile

from bundler.derived import code_digest, read_entry, write_entry
from bundler.errors import BuildError
from bundler.readers.pe_source import PackedPe, PeSource, pe_data, source_sha256
from bundler.readers.pe_sparse import NotKept, SparseImage

MACHINE_NAMES = {0x8664: "x64", 0x014C: "x86", 0xAA64: "arm64"}

_DIRECTORIES = [
    pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"],
    pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT"],
    pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_RESOURCE"],
]
_SECURITY = pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_SECURITY"]

# Searching for the ".dll" suffix first and walking back over name characters is ~50x faster on a
# 19 MB binary than one regex with a leading character class.
_NAME_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
# ".dll" ending a name in ASCII or in UTF-16-LE: one pass over the file finds both (a 400 MB DLL is read once).
_SUFFIX = re.compile(rb"\.(?:dll(?![A-Za-z0-9_])|\x00d\x00l\x00l\x00)", re.IGNORECASE)
_MAX_NAME = 100
X64_MACHINE = 0x8664  # IMAGE_FILE_MACHINE_AMD64
_PARSED_MAX = 4096
PE_FACTS = "pe-facts"
_PARSED: dict[tuple[object, ...], PeInfo] = {}  # see inspect_pe
ELF_X86_64 = 62  # e_machine of an x86-64 ELF file


def is_x86_64_elf(path: Path) -> bool:
    """A 64-bit ELF file for x86-64 (a Linux shared library or extension module)."""
    with path.open("rb") as fh:
        head = fh.read(20)
    return len(head) == 20 and head[:5] == b"\x7fELF\x02" and int.from_bytes(head[18:20], "little") == ELF_X86_64


@dataclass(frozen=True, kw_only=True)
class PeInfo:
    """The facts about one PE file that deployment decisions depend on."""

    machine: int
    is_dll: bool
    linker_version: tuple[int, int]
    file_version: str | None
    product_version: str | None
    imports: tuple[str, ...]
    delay_imports: tuple[str, ...]
    runtime_names: tuple[str, ...]
    has_signature: bool

    @property
    def machine_name(self) -> str:
        return MACHINE_NAMES.get(self.machine, f"0x{self.machine:04x}")


def is_pe(path: Path) -> bool:
    """Cheap header check, so callers can pick out binaries without a full parse."""
    try:
        with path.open("rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:2] != b"MZ":
                return False
            f.seek(int.from_bytes(head[60:64], "little"))
            return f.read(4) == b"PE\0\0"
    except OSError:
        return False


def inspect_pe(source: PeSource, *, label: str | None = None, store: Path | None = None) -> PeInfo:
    """Read one PE file, or a wheel's DLL where it lies (`PackedPe`); `label` names it in errors (e.g. its path
    inside a wheel).

    A file is memory-mapped, not read: a CUDA provider DLL is over 400 MB. Each file is parsed once per
    process: the GPU part, the DLL closure, the app-local layout and the SBOM all ask about the same DLLs,
    and parsing a large one (and scanning it for DLL names) is the expensive part. The answer is kept by
    the file's identity (device, inode, size, modification time), so a rewritten file is parsed again, or by a
    member's sha256. With a `store` (the cache's derived folder) the answer is also kept for later builds, by
    the content's sha256 and the code of this module.
    """
    name = label or str(source)
    key = _identity(source)
    parsed = _PARSED.get(key) if key is not None else None
    if parsed is None:
        parsed = _stored_or_parsed(source, name=name, store=store)
        if key is not None:
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[key] = parsed
    own = Path(name).name.lower()  # the label's own name is not a dependency either
    return replace(parsed, runtime_names=tuple(n for n in parsed.runtime_names if n.lower() != own))


def known_pe_facts(source: PeSource, store: Path) -> bool:
    """Whether the store already holds the facts of these bytes (a later `inspect_pe` then reads none of them)."""
    return _facts_entry(source, store).is_file()


def _facts_entry(source: PeSource, store: Path) -> Path:
    return store / PE_FACTS / code_digest(("bundler.readers.pe",))[:16] / f"{source_sha256(source)}.json"


def _stored_or_parsed(source: PeSource, *, name: str, store: Path | None) -> PeInfo:
    entry = _facts_entry(source, store) if store else None
    found = read_entry(entry) if entry is not None else None
    if isinstance(found, dict):
        try:
            return _from_json(found)
        except (TypeError, KeyError, ValueError):
            pass  # an entry of another shape: parse again
    with pe_data(source, name=name) as data:
        parsed = _inspect(data, name=name)
    if entry is not None:
        write_entry(entry, asdict(parsed))
    return parsed


def _from_json(data: dict[str, Any]) -> PeInfo:
    info = PeInfo(**data)
    major, minor = info.linker_version
    return replace(info, linker_version=(int(major), int(minor)), imports=tuple(info.imports),
                   delay_imports=tuple(info.delay_imports), runtime_names=tuple(info.runtime_names))


def _identity(source: PeSource) -> tuple[object, ...] | None:
    if isinstance(source, PackedPe):
        return ("sha256", source.sha256)
    try:
        stat = source.stat()
    except OSError:
        return None  # `pe_data` reports it
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def keep_streamed_facts(source: PackedPe, data: SparseImage, names: NameScan, *, label: str, store: Path) -> None:
    """Keep the facts of a DLL read as it streamed past (`pe_stream`), as `inspect_pe` would have kept them; a later
    `inspect_pe` of `source` reads none of its bytes. Raises `NotKept` when the parse needs bytes not kept."""
    parsed = _inspect(data, name=label, names=names)
    write_entry(_facts_entry(source, store), asdict(parsed))


def _inspect(data: mmap.mmap | bytes | SparseImage, *, name: str, names: NameScan | None = None) -> PeInfo:
    """`names`: the file's strings already searched as it streamed past (its bytes are not all at hand)."""
    try:
        pe = pefile.PE(data=data, fast_load=True)
        pe.parse_data_directories(directories=_DIRECTORIES, import_dllnames_only=True)  # names are all we use
    except pefile.PEFormatError as exc:
        msg = f"{name} is not a valid PE file ({exc.value}); expected a Windows DLL, PYD or EXE."
        raise BuildError(msg) from None
    imports = _dll_names(getattr(pe, "DIRECTORY_ENTRY_IMPORT", ()))
    delay_imports = _dll_names(getattr(pe, "DIRECTORY_ENTRY_DELAY_IMPORT", ()))
    strings = version_strings(pe)
    # The file's own names (cudart64_110.dll calls itself CUDART64_118_89.DLL) are not dependencies;
    # the name it is stored under is left out by `inspect_pe`, which knows the caller's label.
    own_names = (strings.get("OriginalFilename", ""), strings.get("InternalName", ""))
    security = pe.OPTIONAL_HEADER.DATA_DIRECTORY[_SECURITY]
    return PeInfo(
        machine=pe.FILE_HEADER.Machine,
        is_dll=pe.is_dll(),
        linker_version=(pe.OPTIONAL_HEADER.MajorLinkerVersion, pe.OPTIONAL_HEADER.MinorLinkerVersion),
        file_version=strings.get("FileVersion"),
        product_version=strings.get("ProductVersion"),
        imports=imports,
        delay_imports=delay_imports,
        runtime_names=(names or _whole_scan(data)).names(exclude={n.lower() for n in (*imports, *delay_imports,
                                                                                      *own_names)}),
        has_signature=security.VirtualAddress > 0 and security.Size > 0,
    )


def runtime_dll_names(data: bytes | mmap.mmap, *, exclude: set[str]) -> tuple[str, ...]:
    """DLL names in the file's strings: what it may LoadLibrary by name, invisible in imports.

    cuDNN 8 loads its sub-libraries and zlibwapi.dll this way (docs/facts.md §3). `exclude` holds
    lower-case names to leave out. Order: first occurrence, ASCII before UTF-16, one spelling each.
    The file is searched a window at a time, each let go of behind the search (`released`).
    """
    return _whole_scan(data).names(exclude=exclude)


def _whole_scan(data: bytes | mmap.mmap | SparseImage) -> NameScan:
    if isinstance(data, SparseImage):
        raise NotKept("the whole file, to search its strings")
    scan = NameScan()
    for start, end in released(data, 0, len(data)):
        scan.feed(data[start:end])
    return scan


class NameScan:
    """The search `runtime_dll_names` makes, fed the file's bytes in order, a piece at a time: a DLL streaming
    past in its wheel is searched without being written out or held whole (issue 37). A suffix is decided once
    the bytes after it (its lookahead) have arrived; the name before it is read back from a kept tail."""

    _TAIL = _MAX_NAME * 2 + 16  # a name read back (two bytes a character in UTF-16) and a suffix's own bytes
    _AHEAD = 9  # the longest suffix (UTF-16 ".dll", 8 bytes) and the byte its lookahead reads

    def __init__(self) -> None:
        self._tail = b""
        self._base = 0  # the file offset of the tail's first byte
        self._next = 0  # where the search goes on: the end of the last match, or the first undecided byte
        self._found: dict[int, list[str]] = {1: [], 2: []}  # by character width

    def feed(self, piece: bytes) -> None:
        buffer = self._tail + piece
        self._search(buffer, len(buffer) - self._AHEAD)
        keep = max(0, min(len(buffer), self._next - self._base - self._TAIL))
        self._tail, self._base = buffer[keep:], self._base + keep

    def names(self, *, exclude: set[str]) -> tuple[str, ...]:
        """The names found, once the last piece is fed (the file's end decides the suffixes left undecided)."""
        self._search(self._tail, len(self._tail))
        self._tail = b""
        found: dict[str, str] = {}
        for candidate in [*self._found[1], *self._found[2]]:
            key = candidate.lower()
            if key not in exclude and key not in found:
                found[key] = candidate
        return tuple(found.values())

    def _search(self, buffer: bytes, stop: int) -> None:
        """Read the suffixes that start before `stop` (in `buffer`); the rest wait for more bytes."""
        for match in _SUFFIX.finditer(buffer, max(0, self._next - self._base)):
            if match.start() >= stop:
                break
            width = 2 if match.group()[1] == 0 else 1
            if name := _name_before(buffer, match, width=width):
                self._found[width].append(name)
            self._next = self._base + match.end()
        self._next = max(self._next, self._base + stop)


#: How much of a mapped file a scan or a hash holds at once.
MAPPED_WINDOW = 16 << 20


def released(data: bytes | mmap.mmap, start: int, end: int) -> Iterator[tuple[int, int]]:
    """[start, end) in windows, in order; each window's pages are let go of once the caller is done with it.
    A mapped page a process has touched counts in its resident memory until it is unmapped, so scanning or
    hashing a 700 MB CUDA DLL whole took a build past 700 MiB; let go of (MADV_DONTNEED, Linux), a page stays in
    the page cache and comes back on its next read."""
    for window in range(start, end, MAPPED_WINDOW):
        stop = min(end, window + MAPPED_WINDOW)
        yield window, stop
        if isinstance(data, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
            first = window - window % mmap.PAGESIZE
            data.madvise(mmap.MADV_DONTNEED, first, stop - first)


def _name_before(data: bytes | mmap.mmap, match: re.Match[bytes], *, width: int) -> str | None:
    """The name ending at a `.dll` match, read backwards one character of `width` bytes at a time."""
    start = match.start()
    limit = max(0, start - _MAX_NAME * width)
    while start - width >= limit and _is_name_char(data, start - width, width=width):
        start -= width
    while start < match.start() and data[start] in b".-":
        start += width
    if start < match.start():
        return data[start:match.end()].decode("ascii" if width == 1 else "utf-16-le")
    return None


def _is_name_char(data: bytes | mmap.mmap, offset: int, *, width: int) -> bool:
    return data[offset] in _NAME_CHARS and not any(data[offset + 1:offset + width])


def _dll_names(entries: Iterable[Any]) -> tuple[str, ...]:
    return tuple(entry.dll.decode("ascii", "replace") for entry in entries)


def version_strings(pe: pefile.PE) -> dict[str, str]:
    strings: dict[str, str] = {}
    for file_info in getattr(pe, "FileInfo", ()):
        for entry in file_info:
            for table in getattr(entry, "StringTable", ()):
                for key, value in table.entries.items():
                    strings.setdefault(key.decode("utf-8", "replace"), value.decode("utf-8", "replace"))
    return strings
