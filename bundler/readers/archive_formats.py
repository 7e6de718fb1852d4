"""The zip and tar formats behind `SafeArchive`: sniffing, reading entries and their bytes, and the budgets a
reader enforces before it writes anything. Foreign exceptions become `UnsafeArchiveError`s here."""

from __future__ import annotations

import bz2
import copy
import gzip
import io
import lzma
import stat
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, Protocol, cast

from isal import isal_zlib

from bundler.errors import (
    InputUnavailableError,
    UnsafeArchiveError,
    UnsupportedError,
)
from bundler.hashing import CHUNK


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Bounds that keep a hostile or broken archive from exhausting disk, memory or the path budget."""

    max_members: int = 100_000
    max_total_size: int = 8 * 1024**3
    max_ratio: float = 200.0
    max_path_length: int = 200


DEFAULT_LIMITS = Limits()


# Small members compress far beyond any sane ratio (a page of zeros, a padded header) without being a
# threat, so the ratio rule only looks at members, and archives, that expand past this many bytes.
_RATIO_GRACE_BYTES = 1024 * 1024
_LOCAL_HEADER_SIZE = 30
_LOCAL_HEADER_MAGIC = b"PK\x03\x04"


_CHUNK = 1024 * 1024


_TAR_BLOCK = 512


_ZIP_LOCAL_MAGIC = b"PK\x03\x04"


_ZIP_EMPTY_MAGIC = b"PK\x05\x06"


_ZIP_EOCD_SEARCH = 22 + 65535  # the record plus the longest possible archive comment


_ZIP_ENCRYPTED = 0x1


_ZIP_STRONG_ENCRYPTION = 0x40


_ZIP_AES_METHOD = 99


_ZIP_READABLE_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}


_COMPRESSION = {  # kind -> (leading bytes, name for messages, opener of the decompressed stream)
    "gz": (b"\x1f\x8b", "gzip", gzip.open),
    "bz2": (b"BZh", "bzip2", bz2.open),
    "xz": (b"\xfd7zXZ\x00", "xz", lzma.open),
}


_TAR_MODES = {"tar": "r:", "gz": "r:gz", "bz2": "r:bz2", "xz": "r:xz"}


def unsafe(label: str, name: str | None, problem: str) -> UnsafeArchiveError:
    where = f"{label}: entry {name!r}" if name is not None else label
    return UnsafeArchiveError(f"{where} {problem}")


@contextmanager
def translated_errors(label: str, fmt: str, name: str | None = None) -> Iterator[None]:
    """Turn the standard library's archive and decompression errors into one named, actionable error."""
    try:
        yield
    except EOFError as exc:
        msg = f"is a truncated {fmt} stream: it ends before its end marker (an incomplete download?)"
        raise unsafe(label, name, msg) from exc
    except zipfile.BadZipFile as exc:
        raise unsafe(label, name, f"is corrupt zip data ({exc})") from exc
    except tarfile.TarError as exc:
        if str(exc) == "unexpected end of data":
            raise unsafe(label, name, "is a truncated tar: its data ends early (an incomplete download?)") from exc
        raise unsafe(label, name, f"is a corrupt tar ({exc})") from exc
    except (zlib.error, isal_zlib.error, lzma.LZMAError) as exc:  # type: ignore[misc]  # isal types it loosely
        raise unsafe(label, name, f"holds corrupt {fmt} compressed data ({exc})") from exc
    except OSError as exc:  # gzip.BadGzipFile, bz2's "Invalid data stream", or a failing disk
        raise unsafe(label, name, f"cannot be read as {fmt} data ({exc})") from exc


@dataclass(frozen=True, kw_only=True)
class RawEntry:
    """A member as its container describes it, before our rules; `handle` goes back to the reader."""

    name: str
    kind: str  # "file", "dir", "symlink", "hardlink", "device" or "other"
    size: int
    executable: bool
    handle: zipfile.ZipInfo | tarfile.TarInfo


class Reader(Protocol):
    fmt: str
    parallel: bool  # members may be read on several threads at once, each through its own stream

    def members(self) -> Iterator[RawEntry]: ...

    def open(self, raw: RawEntry) -> BinaryIO: ...

    def close(self) -> None: ...


def _kind_from_mode(mode: int, *, is_dir: bool) -> str:
    kinds = {stat.S_IFLNK: "symlink", stat.S_IFDIR: "dir", stat.S_IFCHR: "device", stat.S_IFBLK: "device",
             stat.S_IFIFO: "device", stat.S_IFSOCK: "device"}
    return kinds.get(stat.S_IFMT(mode), "dir" if is_dir else "file")


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
            self._file.seek(info.header_offset)
            header = self._file.read(_LOCAL_HEADER_SIZE)
            if len(header) < _LOCAL_HEADER_SIZE or header[:4] != _LOCAL_HEADER_MAGIC:
                msg = f"Bad magic number for file header of {info.filename!r}"
                raise zipfile.BadZipFile(msg)
            name_length, extra_length = struct.unpack("<HH", header[26:30])
            self._file.seek(info.header_offset + _LOCAL_HEADER_SIZE + name_length + extra_length)
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


class _ZipReader:
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
        if info.file_size > _RATIO_GRACE_BYTES and ratio > self._limits.max_ratio:
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
                while stream.read(_CHUNK):
                    pass
        except (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, OSError, NotImplementedError):
            return False
        return True

    def _check_layout(self, infos: list[zipfile.ZipInfo]) -> None:
        """Overlapping entries share compressed data (Fifield's zip bomb); only the layout reveals them."""
        ordered = sorted(infos, key=lambda info: info.header_offset)
        archive_size = self._path.stat().st_size
        with self._path.open("rb") as raw:
            for info, after in zip(ordered, [*ordered[1:], None], strict=True):
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
        if total > _RATIO_GRACE_BYTES and ratio > self._limits.max_ratio:
            msg = (f"{self._label} declares {total} bytes uncompressed in {archive_size} bytes (ratio {ratio:.0f}), "
                   f"above the limit of {self._limits.max_ratio:g} (zip bomb)")
            raise UnsafeArchiveError(msg)

    def _data_end(self, raw: BinaryIO, info: zipfile.ZipInfo) -> int:
        raw.seek(info.header_offset)
        header = raw.read(30)
        if len(header) < 30 or not header.startswith(_ZIP_LOCAL_MAGIC):
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
    if _ZIP_EMPTY_MAGIC not in tail:
        msg = (f"{label} is truncated or not a zip: it has no end-of-central-directory record "
               f"(an incomplete download?)")
        raise UnsafeArchiveError(msg)


def check_tar_budget(label: str, name: str, *, count: int, total: int, archive_size: int, limits: Limits) -> None:
    """Refuse a tar member before any of its bytes are written: by count, by total and by expansion ratio.

    `total` includes this member at its real size (a sparse member's expanded size, which tarfile reports),
    so a 200-byte sparse archive that claims 7 GiB is refused here rather than extracted into a full disk.
    A tar's compression is over the whole stream, so the ratio is the running total against the archive's
    size on disk; the total only grows, so an early refusal is always the final verdict.
    """
    if count > limits.max_members:
        raise unsafe(label, name, f"is beyond the limit of {limits.max_members} members")
    if total > limits.max_total_size:
        raise unsafe(label, name, f"brings the uncompressed total to {total} bytes, above the limit of "
                                   f"{limits.max_total_size}")
    ratio = total / max(archive_size, 1)
    if total > _RATIO_GRACE_BYTES and ratio > limits.max_ratio:
        raise unsafe(label, name, f"brings the uncompressed total to {total} bytes from an archive of "
                                   f"{archive_size} bytes (ratio {ratio:.0f}), above the limit of "
                                   f"{limits.max_ratio:g} (tar bomb or sparse-file bomb)")


class _TarReader:
    """tarfile plus the end-of-archive check it skips: it stops silently at a corrupt or missing header."""

    parallel = False  # one stream, read front to back

    def __init__(self, path: Path, *, kind: str, label: str, limits: Limits) -> None:
        self._label, self._limits = label, limits
        self._archive_size = path.stat().st_size
        self.fmt = "tar" if kind == "tar" else _COMPRESSION[kind][1]
        if kind in _COMPRESSION and not _holds_tar(path, kind, label=label):
            raise UnsafeArchiveError(f"{label} is a {self.fmt} file that does not hold a tar archive")
        with translated_errors(label, self.fmt):
            self._tar = tarfile.open(path, mode=_TAR_MODES[kind])  # type: ignore[call-overload]  # mode from a fixed table

    def members(self) -> Iterator[RawEntry]:
        total = 0
        with translated_errors(self._label, self.fmt):
            for count, info in enumerate(self._tar, 1):
                size = info.size if info.isreg() else 0
                total += size
                check_tar_budget(self._label, info.name, count=count, total=total,
                                 archive_size=self._archive_size, limits=self._limits)
                yield RawEntry(name=info.name, kind=_tar_kind(info), size=size,
                           executable=bool(info.mode & 0o111), handle=info)
            self._check_end()

    def open(self, raw: RawEntry) -> BinaryIO:
        assert isinstance(raw.handle, tarfile.TarInfo)
        with translated_errors(self._label, self.fmt, raw.name):
            stream = self._tar.extractfile(raw.handle)
        if stream is None:
            raise unsafe(self._label, raw.name, "is not a regular file and cannot be read")
        return cast(BinaryIO, stream)

    def close(self) -> None:
        self._tar.close()

    def _check_end(self) -> None:
        """What follows the last member must be the zero blocks that end an archive, and nothing else."""
        stream = self._tar.fileobj
        stream.seek(self._tar.offset)
        block = stream.read(_TAR_BLOCK)
        if len(block) < _TAR_BLOCK:
            raise UnsafeArchiveError(f"{self._label} is a truncated tar: it ends without the end-of-archive marker "
                                     f"(an incomplete download?)")
        if block.strip(b"\0"):
            raise UnsafeArchiveError(f"{self._label} is a corrupt tar: the block at offset {self._tar.offset} is "
                                     f"neither a valid member header nor the end-of-archive marker")
        while chunk := stream.read(_CHUNK):
            if chunk.strip(b"\0"):
                raise UnsafeArchiveError(f"{self._label} is a corrupt tar: it has data after its end-of-archive "
                                         f"marker at offset {self._tar.offset}")


def _tar_kind(info: tarfile.TarInfo) -> str:
    if info.isdir():
        return "dir"
    if info.isreg():
        return "file"
    if info.issym():
        return "symlink"
    if info.islnk():
        return "hardlink"
    if info.ischr() or info.isblk() or info.isfifo():
        return "device"
    return "other"


def _holds_tar(path: Path, kind: str, *, label: str) -> bool:
    opener = cast(Callable[[Path, str], BinaryIO], _COMPRESSION[kind][2])
    with translated_errors(label, _COMPRESSION[kind][1]), opener(path, "rb") as stream:
        return _is_tar_header(stream.read(_TAR_BLOCK))


def _is_tar_header(block: bytes) -> bool:
    """ustar magic, or (for old v7 archives) a header checksum that adds up."""
    if len(block) < _TAR_BLOCK or not block.strip(b"\0"):
        return False
    if block[257:262] == b"ustar":
        return True
    try:
        recorded = int(block[148:156].strip(b" \0") or b"-1", 8)
    except ValueError:
        return False
    unsigned = sum(block[:148]) + 8 * 0x20 + sum(block[156:512])
    signed = sum(struct.unpack("148b", block[:148])) + 8 * 0x20 + sum(struct.unpack("356b", block[156:512]))
    return recorded in (unsigned, signed)


def _sniff(path: Path) -> str | None:
    """The container kind from the leading bytes; extensions lie (a .whl is a zip, a .tgz may be a .tar)."""
    if path.is_dir():
        return None
    try:
        with path.open("rb") as raw:
            head = raw.read(_TAR_BLOCK)
    except OSError as exc:
        raise InputUnavailableError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if head.startswith((_ZIP_LOCAL_MAGIC, _ZIP_EMPTY_MAGIC)):
        return "zip"
    for kind, (magic, _, _) in _COMPRESSION.items():
        if head.startswith(magic):
            return kind
    if _is_tar_header(head):
        return "tar"
    return "zip" if zipfile.is_zipfile(path) else None  # a zip behind a stub, e.g. self-extracting


def is_archive(path: Path) -> bool:
    """Whether `path` holds a zip or a (possibly compressed) tar, judged by content.

    A compressed stream counts only if it holds a tar; one too damaged to tell counts, so that
    `SafeArchive.open` can name the damage instead of the caller treating it as a plain file. A folder is
    not an archive; a file that cannot be read raises `InputUnavailableError`.
    """
    kind = _sniff(path)
    if kind not in _COMPRESSION:
        return kind is not None
    try:
        return _holds_tar(path, kind, label=str(path))
    except UnsafeArchiveError:
        return True


def open_reader(path: Path, *, label: str, limits: Limits) -> Reader:
    if not path.is_file():
        raise InputUnavailableError(f"{label} is missing or not a file: {path}")
    kind = _sniff(path)
    if kind is None:
        raise UnsafeArchiveError(f"{label} is neither a zip nor a tar archive (judged by its content)")
    if kind == "zip":
        return _ZipReader(path, label=label, limits=limits)
    return _TarReader(path, kind=kind, label=label, limits=limits)
