"""What a Linux ELF binary needs at run time: its machine, the libraries it names, where it looks for them.

A bundled interpreter is only relocatable when the loader can find `libpython3.X.so` wherever the install
folder lands: python-build-standalone links `bin/python3.X` with `RUNPATH $ORIGIN/../lib`; a locally built
CPython (pyenv, `./configure --enable-shared --prefix=…`) names its own absolute prefix instead, and on the
target would either fail or, worse, load another machine's library. So the build reads the dynamic section
itself (ELF64 little-endian, the only kind an x86-64 bundle ships) rather than trusting the file name.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path

from bundler.errors import BuildError, InputUnavailableError

ELF_MAGIC = b"\x7fELF"
ELFCLASS64 = 2
ELFDATA2LSB = 1
PT_LOAD = 1
PT_DYNAMIC = 2
DT_NULL = 0
DT_NEEDED = 1
DT_STRTAB = 5
DT_SONAME = 14
DT_RPATH = 15
DT_RUNPATH = 29
_STRING_TAGS = {DT_NEEDED: "needed", DT_SONAME: "soname", DT_RPATH: "rpath", DT_RUNPATH: "runpath"}
_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_PROGRAM = struct.Struct("<IIQQQQQQ")
_DYNAMIC = struct.Struct("<qQ")


@dataclass(frozen=True, kw_only=True)
class DynamicString:
    """One string entry of the dynamic section (`DT_NEEDED`, `DT_RUNPATH`, ...) and where its bytes are."""

    kind: str  # "needed", "soname", "rpath" or "runpath"
    value: str
    offset: int  # file offset of the string's first byte


@dataclass(frozen=True, kw_only=True)
class ElfInfo:
    machine: int
    strings: tuple[DynamicString, ...]

    def values(self, kind: str) -> tuple[str, ...]:
        return tuple(s.value for s in self.strings if s.kind == kind)

    @property
    def search_path(self) -> tuple[str, ...]:
        """RUNPATH, or RPATH when there is no RUNPATH (as ld.so reads them), split at ':'."""
        entries = self.values("runpath") or self.values("rpath")
        return tuple(part for entry in entries for part in entry.split(":") if part)


#: What the parser asks for next: (file offset, number of bytes). It gets them back clipped to the file's end.
Request = tuple[int, int]
#: The ELF reading as a series of byte-range requests, so the one parse reads a mapped file (`read_elf`) or a zip
#: member streaming past (`bundler.readers.member_scan`), which serves in one pass the requests that come in order.
Parser = Generator[Request, bytes, "ElfInfo"]

#: A dynamic string ends within this many bytes (PATH_MAX): RUNPATH is the longest kind.
MAX_STRING = 4096
#: More dynamic entries than any binary has (a real one has under 100, 16 bytes each).
MAX_DYNAMIC = 1 << 20


def read_elf(path: Path, *, label: str) -> ElfInfo:
    """The machine and dynamic strings of a 64-bit little-endian ELF file; anything else is a clear error.
    The file is mapped, not read: only the pages of its headers and string table are touched, which keeps the
    memory of a build flat next to a 700 MB CUDA library."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            if size < _HEADER.size:
                return run_parser(elf_parser(size, label=label), lambda offset, count: b"")
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return run_parser(elf_parser(size, label=label), lambda offset, count: data[offset:offset + count])
    except OSError as exc:
        msg = f"{label} cannot be read ({exc.strerror}); expected an ELF binary"
        raise InputUnavailableError(msg) from exc


def run_parser(parser: Parser, read: Callable[[int, int], bytes]) -> ElfInfo:
    """Answer every request of `parser` with `read`; its result."""
    try:
        request = next(parser)
        while True:
            request = parser.send(read(*request))
    except StopIteration as done:
        result: ElfInfo = done.value
        return result


def elf_parser(size: int, *, label: str) -> Parser:
    """Parse an ELF file of `size` bytes from the ranges it requests: the header, the program headers, the dynamic
    section and the span of the string table its strings use, each clipped to the file."""
    def ask(offset: int, count: int) -> Request:
        offset = min(offset, size)
        return offset, max(0, min(count, size - offset))

    data = yield ask(0, _HEADER.size)
    if len(data) < _HEADER.size or data[:4] != ELF_MAGIC:
        msg = f"{label} is not an ELF binary; expected a Linux x86-64 executable or shared library"
        raise BuildError(msg)
    if data[4] != ELFCLASS64 or data[5] != ELFDATA2LSB:
        msg = f"{label} is a 32-bit or big-endian ELF binary; expected a 64-bit x86-64 one"
        raise BuildError(msg)
    header = _HEADER.unpack_from(data)
    machine, phoff, phentsize, phnum = header[2], header[5], header[9], header[10]
    table = yield ask(phoff, phnum * phentsize)
    segments = [_PROGRAM.unpack_from(table, i * phentsize) for i in range(phnum)
                if phentsize >= _PROGRAM.size and (i + 1) * phentsize <= len(table)]
    dynamic = next((s for s in segments if s[0] == PT_DYNAMIC), None)
    if dynamic is None:
        return ElfInfo(machine=machine, strings=())  # a static executable names no libraries
    section = yield ask(dynamic[2], min(dynamic[5], MAX_DYNAMIC))
    entries: list[tuple[int, int]] = []
    for offset in range(0, len(section) - _DYNAMIC.size + 1, _DYNAMIC.size):
        tag, value = _DYNAMIC.unpack_from(section, offset)
        if tag == DT_NULL:
            break
        entries.append((tag, value))
    strtab = next((value for tag, value in entries if tag == DT_STRTAB), None)
    wanted = [(tag, value) for tag, value in entries if tag in _STRING_TAGS]
    if strtab is None or not wanted:
        return ElfInfo(machine=machine, strings=())
    base = _file_offset(strtab, segments, label=label)
    first, last = min(v for _, v in wanted), max(v for _, v in wanted)
    span_start = base + first
    span = yield ask(span_start, last - first + MAX_STRING)
    found = []
    for tag, value in wanted:
        start = value - first
        stop = span.find(b"\0", start)
        if stop < 0:
            reached_end = span_start + len(span) >= size
            msg = (f"{label} has a dynamic string that runs past the end of the file (a corrupt ELF binary)" if reached_end
                   else f"{label} has a dynamic string longer than {MAX_STRING} bytes (a corrupt ELF binary)")
            raise BuildError(msg)
        text = span[start:stop].decode("utf-8", "replace")
        found.append(DynamicString(kind=_STRING_TAGS[tag], value=text, offset=span_start + start))
    return ElfInfo(machine=machine, strings=tuple(found))


def _file_offset(address: int, segments: list[tuple[int, ...]], *, label: str) -> int:
    """Where a virtual address lives in the file: inside the loadable segment that maps it."""
    for kind, _flags, offset, vaddr, _paddr, filesz, _memsz, _align in segments:
        if kind == PT_LOAD and vaddr <= address < vaddr + filesz:
            return address - vaddr + offset
    msg = f"{label} has a dynamic string table outside its loadable segments (a corrupt ELF binary)"
    raise BuildError(msg)
