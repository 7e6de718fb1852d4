"""The zip a `capi` tree was read from, as the wheel builder copies from it.

A member of an official wheel goes into the rebuilt wheel as it is compressed there (`RawMember.copy_to`):
deflating 35 MB of ORT binaries again costs seconds and gives nothing. A member that was not extracted is
inflated once on its way through, for its RECORD hash, and held to what reading it checks (`_Inflating`).
"""

from __future__ import annotations

import contextlib
import hashlib
import stat
import struct
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from isal import isal_zlib

from bundler.errors import BuildError
from bundler.hashing import CHUNK
from bundler.readers.archive_reader import translated_errors, unsafe
from bundler.readers.archives import SafeArchive
from bundler.readers.capi import CapiTree

LOCAL_HEADER_SIZE = 30
RAW_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
ENCRYPTED = 0x1


@dataclass(frozen=True, kw_only=True)
class RawMember:
    """One member of the source zip, by its entry and the file the tree holds it as."""

    info: zipfile.ZipInfo
    source: BinaryIO
    label: str  # the source zip, as errors name it

    def copy_to(self, out: BinaryIO, *, inflate: bool = False) -> bytes | None:
        """Copy the compressed bytes after the member's local header (whose name and extra lengths may differ
        from the central directory's). With `inflate`, also inflate them on their way through and return the
        sha256 of what came out: the member is read once, for the copy and for RECORD."""
        self.source.seek(self.info.header_offset)
        header = self.source.read(LOCAL_HEADER_SIZE)
        name_length, extra_length = struct.unpack("<HH", header[26:30])
        self.source.seek(self.info.header_offset + LOCAL_HEADER_SIZE + name_length + extra_length)
        check = _Inflating(self.info, label=self.label) if inflate else None
        remaining = self.info.compress_size
        while remaining:
            chunk = self.source.read(min(CHUNK, remaining))
            if not chunk:
                msg = f"{self.info.filename}: the source zip ends inside this member, expected {self.info.compress_size} bytes"
                raise BuildError(msg)
            out.write(chunk)
            if check is not None:
                check.feed(chunk)
            remaining -= len(chunk)
        return check.sha256() if check is not None else None


class _Inflating:
    """A member's bytes inflated as they stream past, held to what reading the member checks
    (`readers.zip_reader`): never more than the size its entry declares, the end of the deflate stream,
    all of the declared size, and the CRC; a failure names the zip and the entry as extracting would."""

    def __init__(self, info: zipfile.ZipInfo, *, label: str) -> None:
        self._info, self._label = info, label
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


class RawSource:
    """The zip a capi tree was extracted from, if any: which of its members hold which extracted file."""

    def __init__(self, tree: CapiTree) -> None:
        self._prefix = f"{tree.archive_root}/" if tree.archive_root else ""
        # What reads a member's bytes: counted, CRC-checked, and a corrupt member named as extracting names it.
        self._label = str(tree.archive)
        self._safe = SafeArchive.open(tree.archive, label=self._label) if tree.archive is not None else None
        self._file = tree.archive.open("rb") if tree.archive is not None else None
        self._zip = zipfile.ZipFile(self._file) if self._file is not None else None

    def __enter__(self) -> RawSource:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._zip is not None and self._file is not None:
            self._zip.close()
            self._file.close()
        if self._safe is not None:
            self._safe.close()

    def mode(self, name: str) -> int | None:
        """The permission bits the source zip gives the tree's file `name`, when it records those of a plain
        file (an official wheel does, made on Linux or Windows alike); None for a folder source."""
        info = self._zip.NameToInfo.get(self._prefix + name) if self._zip is not None else None
        unix = info.external_attr >> 16 if info is not None else 0
        return stat.S_IMODE(unix) or None if stat.S_ISREG(unix) else None

    def member(self, name: str, path: Path | None) -> RawMember | None:
        """The entry of the tree's file `name`, when it can be copied as it is (stored or deflated, not
        encrypted, and the size of `path` when it was extracted)."""
        if self._zip is None or self._file is None:
            return None
        info = self._zip.NameToInfo.get(self._prefix + name)
        if (info is None or info.compress_type not in RAW_METHODS or info.flag_bits & ENCRYPTED
                or (path is not None and info.file_size != path.stat().st_size)):
            return None
        return RawMember(info=info, source=self._file, label=self._label)

    @contextlib.contextmanager
    def open(self, name: str) -> Iterator[tuple[BinaryIO, int]]:
        """The uncompressed stream and size of a file left in the source zip."""
        assert self._safe is not None, "only a zip source leaves files in the archive"
        with self._safe.open_member(self._prefix + name) as stream:
            yield stream, self._safe.entry(self._prefix + name).size
