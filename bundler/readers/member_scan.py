"""A zip member read once, where it lies in its archive: its compressed bytes found (so a zip writer can copy them
as they are), inflated and held to what extracting checks (size, end of stream, CRC), hashed, and shown piece by
piece to what reads its content on the way (an ELF parse, a name scan). Nothing is written out: extracting the
Linux GPU libraries (3 GB, cuBLASLt alone 717 MB) only to read them back made a first build write 4.8 times the
size of its zip (issue 37).
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from isal import isal_zlib

from bundler.errors import BuildError
from bundler.hashing import CHUNK
from bundler.readers.archive_reader import translated_errors, unsafe
from bundler.readers.archives import SafeArchive
from bundler.readers.elf import ElfInfo, Parser, Request, elf_parser, read_elf
from bundler.readers.zip_reader import seek_to_data

RAW_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
ENCRYPTED = 0x1
#: An ELF parse whose requests come out of file order starts the member again; each start serves at least one
#: request, and a parse makes four.
_MAX_PASSES = 8


@dataclass(frozen=True, kw_only=True)
class PackedBytes:
    """A member's compressed bytes as they lie in their archive: what a zip writer copies, and checks as it copies."""

    archive: Path
    name: str
    offset: int  # of the first compressed byte
    method: int  # zipfile.ZIP_STORED or ZIP_DEFLATED
    crc: int
    usize: int
    csize: int
    packed_sha256: str


@dataclass(frozen=True, kw_only=True)
class ScannedMember:
    packed: PackedBytes
    sha256: str  # of the member's content
    elf: ElfInfo | None  # when asked for


@dataclass(frozen=True, kw_only=True)
class ArchiveFile:
    """A file of an input archive as a build ships it: a zip's member read where it lies (`packed`), or a tar's
    extracted (`extracted`: a tar has no compressed bytes of one member to copy). A zip's member is also written
    out when its reader needs a file (`keep_files`: the PE readers); the bundle still copies its compressed bytes."""

    name: str  # in the archive
    sha256: str
    elf: ElfInfo | None
    packed: PackedBytes | None = None
    extracted: Path | None = None


def read_files(archive: SafeArchive, path: Path, names: Sequence[str], *, label: str, work: Path,
               observe: Callable[[str], Callable[[bytes], object]] | None = None,
               parse_elf: bool = False, keep_files: bool = False) -> list[ArchiveFile]:
    """The files `names` of `archive` (opened from `path`), each read once: `observe(name)` sees its pieces and,
    with `parse_elf`, its ELF facts are read on the way. A zip's files are written under `work` only with
    `keep_files`, in the same pass (so the file holds exactly the bytes whose compressed form the bundle copies)."""
    infos = [archive.zip_info(name) for name in names]
    if all(info is not None and copyable(info) for info in infos):  # else (a tar, bzip2 or LZMA members) extract
        return [_zip_file(path, name, info, label=label, on_piece=observe(name) if observe else None,
                          parse_elf=parse_elf, keep=work.joinpath(*name.split("/")) if keep_files else None)
                for name, info in zip(names, infos) if info is not None]
    archive.extract(work, members=names)
    return [_extracted_file(work.joinpath(*name.split("/")), name, label=label,
                            on_piece=observe(name) if observe else None, parse_elf=parse_elf) for name in names]


def _zip_file(path: Path, name: str, info: zipfile.ZipInfo, *, label: str,
              on_piece: Callable[[bytes], object] | None, parse_elf: bool, keep: Path | None) -> ArchiveFile:
    if keep is None:
        scanned = scan_member(path, info, label=label, on_piece=on_piece, parse_elf=parse_elf)
        return ArchiveFile(name=name, sha256=scanned.sha256, elf=scanned.elf, packed=scanned.packed)
    # `name` is one of the archive's checked names (a relative path, no '..'), under a folder this build made.
    keep.parent.mkdir(parents=True, exist_ok=True)
    with keep.open("xb") as out:
        def write(piece: bytes) -> None:
            out.write(piece)
            if on_piece is not None:
                on_piece(piece)

        scanned = scan_member(path, info, label=label, on_piece=write, parse_elf=parse_elf)
    return ArchiveFile(name=name, sha256=scanned.sha256, elf=scanned.elf, packed=scanned.packed, extracted=keep)


def _extracted_file(file: Path, name: str, *, label: str, on_piece: Callable[[bytes], object] | None,
                    parse_elf: bool) -> ArchiveFile:
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            if on_piece is not None:
                on_piece(chunk)
    elf = read_elf(file, label=f"{label}!{name}") if parse_elf else None
    return ArchiveFile(name=name, sha256=digest.hexdigest(), elf=elf, extracted=file)


def copyable(info: zipfile.ZipInfo) -> bool:
    """Stored or deflated, not encrypted: bytes any zip reader inflates, copied as they are."""
    return info.compress_type in RAW_METHODS and not info.flag_bits & ENCRYPTED


def compressed_pieces(source: BinaryIO, info: zipfile.ZipInfo, *, label: str) -> Iterator[bytes]:
    """The member's compressed bytes, after its local header (whose name and extra lengths may differ from the
    central directory's), in pieces of at most CHUNK bytes."""
    if not seek_to_data(source, info):
        raise unsafe(label, info.filename, f"has no local header at offset {info.header_offset} (a corrupt zip)")
    remaining = info.compress_size
    while remaining:
        chunk = source.read(min(CHUNK, remaining))
        if not chunk:
            raise unsafe(label, info.filename, f"ends inside its data, expected {info.compress_size} compressed bytes "
                                               "(a truncated zip)")
        remaining -= len(chunk)
        yield chunk


class Inflating:
    """A member's bytes inflated as they stream past, held to what reading the member checks
    (`readers.zip_reader`): never more than the size its entry declares, the end of the deflate stream,
    all of the declared size, and the CRC; a failure names the zip and the entry as extracting would.
    `on_piece` sees every inflated piece, in order."""

    def __init__(self, info: zipfile.ZipInfo, *, label: str, on_piece: Callable[[bytes], object] | None = None) -> None:
        self._info, self._label, self._on_piece = info, label, on_piece
        self._inflate = isal_zlib.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
        self._left, self._crc, self._digest = info.file_size, 0, hashlib.sha256()

    def feed(self, compressed: bytes) -> None:
        with translated_errors(self._label, "zip", self._info.filename):
            if self._inflate is None:
                self._take(compressed)
                return
            while compressed and not self._inflate.eof:
                self._take(self._inflate.decompress(compressed, CHUNK))  # at most CHUNK at once, whatever the ratio
                compressed = self._inflate.unconsumed_tail

    def sha256(self) -> bytes:
        with translated_errors(self._label, "zip", self._info.filename):
            if self._inflate is not None and not self._inflate.eof:
                raise EOFError(f"the deflate stream of {self._info.filename!r} ends before its end marker")
            if self._left:
                raise unsafe(self._label, self._info.filename, f"ends after {self._info.file_size - self._left} "
                             f"bytes but its header declares {self._info.file_size} (corrupt or truncated archive)")
            if self._crc != self._info.CRC:
                raise zipfile.BadZipFile(f"Bad CRC-32 for file {self._info.filename!r}")
        return self._digest.digest()

    def _take(self, piece: bytes) -> None:
        if len(piece) > self._left:
            raise unsafe(self._label, self._info.filename, f"expands beyond the {self._info.file_size} bytes its "
                                                           "header declares (zip bomb or corrupt header)")
        self._left -= len(piece)
        self._crc = isal_zlib.crc32(piece, self._crc)
        self._digest.update(piece)
        if self._on_piece is not None and piece:
            self._on_piece(piece)


def scan_member(archive: Path, info: zipfile.ZipInfo, *, label: str, on_piece: Callable[[bytes], object] | None = None,
                parse_elf: bool = False) -> ScannedMember:
    """Read the member `info` of `archive` once: where its compressed bytes lie, their sha256 and the content's, and
    (with `parse_elf`) its ELF facts, served from the pieces as they pass (`_Feeder`)."""
    member_label = f"{label}!{info.filename}"
    if not copyable(info):
        msg = (f"{member_label}: found compression method {info.compress_type}"
               f"{' with encryption' if info.flag_bits & ENCRYPTED else ''}, expected a stored or deflated member")
        raise BuildError(msg)
    feeder = _Feeder(elf_parser(info.file_size, label=member_label)) if parse_elf else None

    def take(piece: bytes) -> None:
        if feeder is not None:
            feeder.feed(piece)
        if on_piece is not None:
            on_piece(piece)

    packed = hashlib.sha256()
    check = Inflating(info, label=label, on_piece=take)
    with archive.open("rb") as source:
        for chunk in compressed_pieces(source, info, label=label):
            packed.update(chunk)
            check.feed(chunk)
        sha256 = check.sha256().hex()
        offset = source.seek(0, 1) - info.compress_size
        elf = _finish(feeder, source, info, label=label) if feeder is not None else None
    return ScannedMember(packed=PackedBytes(archive=archive, name=info.filename, offset=offset, method=info.compress_type,
                                            crc=info.CRC, usize=info.file_size, csize=info.compress_size,
                                            packed_sha256=packed.hexdigest()),
                         sha256=sha256, elf=elf)


def _finish(feeder: _Feeder, source: BinaryIO, info: zipfile.ZipInfo, *, label: str) -> ElfInfo:
    """The parse's result, reading the member again from its start while a request came after its bytes had passed
    (an ELF file's string table usually lies before its dynamic section, which names it): only as far as needed."""
    for _ in range(_MAX_PASSES):
        if feeder.result is not None:
            return feeder.result
        feeder.restart()
        inflating = Inflating(info, label=label, on_piece=feeder.feed)
        for chunk in compressed_pieces(source, info, label=label):
            inflating.feed(chunk)
            if feeder.result is not None or feeder.behind:
                break
    msg = f"{label}!{info.filename}: its ELF headers ask for bytes the member does not hold (a corrupt ELF binary)"
    raise BuildError(msg)


class _Feeder:
    """Serves an ELF parse's byte-range requests from pieces streaming past in order. A request for bytes that
    have already passed marks it `behind`: the caller streams the member again (`restart`)."""

    def __init__(self, parser: Parser) -> None:
        self.parser = parser
        self.result: ElfInfo | None = None
        self.behind = False
        self.position = 0
        self.buffer = bytearray()
        self.request: Request = (0, 0)
        self._send(None)

    def restart(self) -> None:
        self.position, self.behind = 0, False
        self.buffer.clear()

    def feed(self, piece: bytes) -> None:
        start, end = self.position, self.position + len(piece)
        self.position = end
        while self.result is None and not self.behind:
            offset, count = self.request
            have = offset + len(self.buffer)  # the next byte the request needs
            if have < start:
                self.behind = True
                return
            if have >= end:
                return
            stop = min(offset + count, end)
            self.buffer += piece[have - start:stop - start]
            if len(self.buffer) < count:
                return
            self._send(bytes(self.buffer))

    def _send(self, data: bytes | None) -> None:
        """Hand `data` to the parser; take its next request (an empty one is answered at once)."""
        self.buffer.clear()
        try:
            self.request = next(self.parser) if data is None else self.parser.send(data)
            while self.request[1] == 0:
                self.request = self.parser.send(b"")
        except StopIteration as done:
            self.result = done.value
