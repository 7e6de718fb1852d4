"""The zip reader behind `SafeArchive`: zipfile plus the checks it does not make (encryption flags, bombs,
overlapping entries, a missing end record), and deflated members inflated with ISA-L."""

from __future__ import annotations

import copy
import io
import lzma
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

from isal import isal_zlib

from bundler.errors import UnsafeArchiveError, UnsupportedError
from bundler.hashing import CHUNK
from bundler.readers.archive_reader import RATIO_GRACE_BYTES, Limits, RawEntry, translated_errors, unsafe

_LOCAL_HEADER_SIZE = 30
LOCAL_HEADER_MAGIC = b"PK\x03\x04"
EMPTY_MAGIC = b"PK\x05\x06"
_ZIP_EOCD_SEARCH = 22 + 65535  # the record plus the longest possible archive comment
_ZIP_ENCRYPTED = 0x1
_ZIP_STRONG_ENCRYPTION = 0x40
_ZIP_AES_METHOD = 99
_ZIP_READABLE_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}


def _kind_from_mode(mode: int, *, is_dir: bool) -> str:
    kinds = {stat.S_IFLNK: "symlink", stat.S_IFDIR: "dir", stat.S_IFCHR: "device", stat.S_IFBLK: "device",
             stat.S_IFIFO: "device", stat.S_IFSOCK: "device"}
    return kinds.get(stat.S_IFMT(mode), "dir" if is_dir else "file")


def seek_to_data(file: BinaryIO, info: zipfile.ZipInfo) -> bool:
    """Put `file` at the member's first compressed byte, past its local header (whose name and extra lengths may
    differ from the central directory's); False when no local header is there."""
    file.seek(info.header_offset)
    header = file.read(_LOCAL_HEADER_SIZE)
    if len(header) < _LOCAL_HEADER_SIZE or header[:4] != LOCAL_HEADER_MAGIC:
        return False
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    file.seek(info.header_offset + _LOCAL_HEADER_SIZE + name_length + extra_length)
    return True


class _InflatedMember(io.RawIOBase):
    """A deflated zip member, inflated with ISA-L (the `isal` package) through a file handle of its own.

    zlib takes half as long again to inflate the binaries a build unpacks (60 MB for the Windows
    quickstart), and a handle of its own lets members be read on several threads without sharing a file
    position. As zipfile does, it starts after the local header, reads the central directory's compressed
    size and checks the CRC at the end; it hands out at most CHUNK bytes at a time, so memory stays flat
    whatever the member's ratio.
    """

    def __init__(self, path: Path, info: zipfile.ZipInfo) -> None:
        super().__init__()
        self._name, self._expected_crc = info.filename, info.CRC
        self._file = path.open("rb")
        try:
            if not seek_to_data(self._file, info):
                msg = f"Bad magic number for file header of {info.filename!r}"
                raise zipfile.BadZipFile(msg)
        except BaseException:
            self._file.close()
            raise
        # Like zipfile: no more than the declared size comes out, and the CRC of what did must match.
        self._compressed_left, self._left, self._crc = info.compress_size, info.file_size, 0
        self._inflate = isal_zlib.decompressobj(-15)  # a raw deflate stream, as zip members hold
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]  # io passes a memoryview
        if not self._pending:
            self._pending = memoryview(self._next())
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count

    def _next(self) -> bytes:
        """The next inflated piece, or b"" at the member's end (declared size or end of stream), CRC checked."""
        while self._left and not self._inflate.eof:
            if self._inflate.unconsumed_tail:
                compressed = self._inflate.unconsumed_tail
            elif self._compressed_left:
                compressed = self._file.read(min(CHUNK, self._compressed_left))
                if not compressed:
                    raise EOFError(f"the archive ends inside {self._name!r}")
                self._compressed_left -= len(compressed)
            else:
                raise EOFError(f"the deflate stream of {self._name!r} ends before its end marker")
            piece = self._inflate.decompress(compressed, min(CHUNK, self._left))
            if piece:
                self._left -= len(piece)
                self._crc = isal_zlib.crc32(piece, self._crc)
                return piece
        if self._crc != self._expected_crc:
            raise zipfile.BadZipFile(f"Bad CRC-32 for file {self._name!r}")
        return b""

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()


class _ThreadSafeZipFile(zipfile.ZipFile):
    """A ZipFile whose members can be read on several threads at once.

    zipfile reads each member's bytes under the file's lock, but counts the members open on the file
    without it (`_fpRefCount`, in `open` and `_fpclose`): a lost update would close the file under a
    reader. Both are done under that lock here (it is reentrant: `open` reads the header under it).
    """

    def open(self, *args: Any, **kwargs: Any) -> IO[bytes]:
        with self._lock:  # type: ignore[attr-defined]  # zipfile's own lock, not in the stubs
            return super().open(*args, **kwargs)

    def _fpclose(self, fp: IO[bytes]) -> None:
        with self._lock:  # type: ignore[attr-defined]
            super()._fpclose(fp)  # type: ignore[misc]  # private, not in the stubs


class ZipReader:
    """zipfile plus the checks it does not make: encryption flags, bombs, overlapping entries."""

    fmt = "zip"
    parallel = True

    def __init__(self, path: Path, *, label: str, limits: Limits) -> None:
        self._path, self._label, self._limits = path, label, limits
        _require_zip_end_record(path, label=label)
        with translated_errors(label, self.fmt):
            self._zip = _ThreadSafeZipFile(path)

    def members(self) -> Iterator[RawEntry]:
        infos = self._zip.infolist()
        for info in infos:
            if "\0" in info.orig_filename:  # zipfile cuts the name there: refuse it rather than read another name
                raise unsafe(self._label, info.orig_filename, "has a NUL character in its name; expected a plain path")
            self._check_member(info)
            mode = info.external_attr >> 16  # trusted whatever the "made by" system: a link is never harmless
            kind = _kind_from_mode(mode, is_dir=info.filename.endswith(("/", "\\")))
            yield RawEntry(name=info.filename, kind=kind, size=0 if kind == "dir" else info.file_size,
                       executable=bool(mode & 0o111), handle=info)
        self._check_layout(infos)

    def open(self, raw: RawEntry) -> BinaryIO:
        assert isinstance(raw.handle, zipfile.ZipInfo)
        with translated_errors(self._label, self.fmt, raw.name):
            if raw.handle.compress_type == zipfile.ZIP_DEFLATED:
                return cast(BinaryIO, _InflatedMember(self._path, raw.handle))
            return cast(BinaryIO, self._zip.open(raw.handle))

    def close(self) -> None:
        self._zip.close()

    def _check_member(self, info: zipfile.ZipInfo) -> None:
        """The ratio comes first: telling pseudo from real encryption decompresses the entry."""
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > RATIO_GRACE_BYTES and ratio > self._limits.max_ratio:
            raise unsafe(self._label, info.filename,
                          f"expands {info.compress_size} bytes to {info.file_size} (ratio {ratio:.0f}), above "
                          f"the limit of {self._limits.max_ratio:g} (zip bomb)")
        if info.flag_bits & _ZIP_ENCRYPTED:
            raise unsafe(self._label, info.filename, self._encryption_problem(info))
        if info.compress_type not in _ZIP_READABLE_METHODS:
            msg = (f"{self._label}: entry {info.filename!r} uses zip compression method {info.compress_type}, "
                   f"which ort-bundler cannot read; expected stored, deflate, bzip2 or lzma")
            raise UnsupportedError(msg)

    def _encryption_problem(self, info: zipfile.ZipInfo) -> str:
        if not (info.flag_bits & _ZIP_STRONG_ENCRYPTION or info.compress_type == _ZIP_AES_METHOD):
            if self._reads_as_plain(info):
                return ("is pseudo-encrypted: its encryption flag is set but its data is not encrypted "
                        "(a tampered or mis-made archive); re-create the archive without the flag")
        return "is encrypted; ort-bundler cannot read encrypted archives, provide an unencrypted one"

    def _reads_as_plain(self, info: zipfile.ZipInfo) -> bool:
        """A flagged entry whose data decompresses and matches its CRC was never really encrypted."""
        plain = copy.copy(info)
        plain.flag_bits &= ~_ZIP_ENCRYPTED
        try:
            with self._zip.open(plain) as stream:
                while stream.read(CHUNK):
                    pass
        except (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, OSError, NotImplementedError):
            return False
        return True

    def _check_layout(self, infos: list[zipfile.ZipInfo]) -> None:
        """Overlapping entries share compressed data (Fifield's zip bomb); only the layout reveals them."""
        ordered = sorted(infos, key=lambda info: info.header_offset)
        archive_size = self._path.stat().st_size
        with self._path.open("rb") as raw:
            for info, after in zip(ordered, [*ordered[1:], None]):  # an empty zip has no entry to check
                end = self._data_end(raw, info)
                if after is not None and end > after.header_offset:
                    raise unsafe(self._label, info.filename,
                                  f"has data that overlaps entry {after.filename!r} (overlapping entries are a "
                                  f"zip-bomb technique); expected each entry's data to stand alone")
                if end > archive_size:
                    raise unsafe(self._label, info.filename,
                                  f"declares data up to byte {end} of an archive of {archive_size} bytes "
                                  f"(truncated or corrupt zip)")
        total = sum(info.file_size for info in infos)
        ratio = total / max(archive_size, 1)
        if total > RATIO_GRACE_BYTES and ratio > self._limits.max_ratio:
            msg = (f"{self._label} declares {total} bytes uncompressed in {archive_size} bytes (ratio {ratio:.0f}), "
                   f"above the limit of {self._limits.max_ratio:g} (zip bomb)")
            raise UnsafeArchiveError(msg)

    def _data_end(self, raw: BinaryIO, info: zipfile.ZipInfo) -> int:
        raw.seek(info.header_offset)
        header = raw.read(30)
        if len(header) < 30 or not header.startswith(LOCAL_HEADER_MAGIC):
            raise unsafe(self._label, info.filename,
                          f"has no local file header at offset {info.header_offset} (corrupt zip)")
        name_length, extra_length = struct.unpack("<HH", header[26:30])
        end: int = info.header_offset + 30 + name_length + extra_length + info.compress_size
        return end


def _require_zip_end_record(path: Path, *, label: str) -> None:
    """zipfile calls a chopped download "not a zip file"; the missing end record says what really happened."""
    size = path.stat().st_size
    with path.open("rb") as raw:
        raw.seek(max(0, size - _ZIP_EOCD_SEARCH))
        tail = raw.read()
    if EMPTY_MAGIC not in tail:
        msg = (f"{label} is truncated or not a zip: it has no end-of-central-directory record "
               f"(an incomplete download?)")
        raise UnsafeArchiveError(msg)
