"""Safe reading of the zip and tar archives a bundle is built from.

Every input archive is untrusted: it comes from a mirror, a colleague's share or a truncated download,
and its member names become paths on a Windows machine. So an archive is validated entry by entry when
it is opened, before anything is read or written, and reading still counts bytes, because a header can
lie about sizes. zipfile and tarfile exceptions never leave this module: they become
`UnsafeArchiveError`s that name the archive (through the caller's `label`) and the entry.
"""

from __future__ import annotations

import bz2
import copy
import gzip
import io
import lzma
import os
import re
import shutil
import stat
import struct
import tarfile
import unicodedata
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from bundler.errors import (
    BuildError,
    InputUnavailableError,
    UnsafeArchiveError,
    UnsupportedError,
)


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Bounds that keep a hostile or broken archive from exhausting disk, memory or the path budget."""

    max_members: int = 100_000
    max_total_size: int = 8 * 1024**3
    max_ratio: float = 200.0
    max_path_length: int = 200


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One validated member: a posix path that is safe to create under any extraction folder."""

    name: str
    size: int
    is_dir: bool


# Small members compress far beyond any sane ratio (a page of zeros, a padded header) without being a
# threat, so the ratio rule only looks at members, and archives, that expand past this many bytes.
_RATIO_GRACE_BYTES = 1024 * 1024
# read() holds a member in memory; anything bigger must be streamed so peak memory stays flat.
_READ_LIMIT = 256 * 1024 * 1024
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

_RESERVED_STEMS = frozenset(
    ["CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"] + [f"{port}{n}" for port in ("COM", "LPT") for n in "0123456789¹²³"]
)
_FORBIDDEN_CHARS = frozenset('<>:"|?*')
_DRIVE = re.compile(r"[A-Za-z]:")
_SEPARATORS = re.compile(r"[/\\]")


def _unsafe(label: str, name: str | None, problem: str) -> UnsafeArchiveError:
    where = f"{label}: entry {name!r}" if name is not None else label
    return UnsafeArchiveError(f"{where} {problem}")


@contextmanager
def _translated(label: str, fmt: str, name: str | None = None) -> Iterator[None]:
    """Turn the standard library's archive and decompression errors into one named, actionable error."""
    try:
        yield
    except EOFError as exc:
        msg = f"is a truncated {fmt} stream: it ends before its end marker (an incomplete download?)"
        raise _unsafe(label, name, msg) from exc
    except zipfile.BadZipFile as exc:
        raise _unsafe(label, name, f"is corrupt zip data ({exc})") from exc
    except tarfile.TarError as exc:
        if str(exc) == "unexpected end of data":
            raise _unsafe(label, name, "is a truncated tar: its data ends early (an incomplete download?)") from exc
        raise _unsafe(label, name, f"is a corrupt tar ({exc})") from exc
    except (zlib.error, lzma.LZMAError) as exc:
        raise _unsafe(label, name, f"holds corrupt {fmt} compressed data ({exc})") from exc
    except OSError as exc:  # gzip.BadGzipFile, bz2's "Invalid data stream", or a failing disk
        raise _unsafe(label, name, f"cannot be read as {fmt} data ({exc})") from exc


@dataclass(frozen=True, kw_only=True)
class _Raw:
    """A member as its container describes it, before our rules; `handle` goes back to the reader."""

    name: str
    kind: str  # "file", "dir", "symlink", "hardlink", "device" or "other"
    size: int
    executable: bool
    handle: zipfile.ZipInfo | tarfile.TarInfo


class _Reader(Protocol):
    fmt: str

    def members(self) -> Iterator[_Raw]: ...

    def open(self, raw: _Raw) -> BinaryIO: ...

    def close(self) -> None: ...


def _kind_from_mode(mode: int, *, is_dir: bool) -> str:
    kinds = {stat.S_IFLNK: "symlink", stat.S_IFDIR: "dir", stat.S_IFCHR: "device", stat.S_IFBLK: "device",
             stat.S_IFIFO: "device", stat.S_IFSOCK: "device"}
    return kinds.get(stat.S_IFMT(mode), "dir" if is_dir else "file")


class _ZipReader:
    """zipfile plus the checks it does not make: encryption flags, bombs, overlapping entries."""

    fmt = "zip"

    def __init__(self, path: Path, *, label: str, limits: Limits) -> None:
        self._path, self._label, self._limits = path, label, limits
        _require_zip_end_record(path, label=label)
        with _translated(label, self.fmt):
            self._zip = zipfile.ZipFile(path)

    def members(self) -> Iterator[_Raw]:
        infos = self._zip.infolist()
        for info in infos:
            if "\0" in info.orig_filename:  # zipfile cuts the name there: refuse it rather than read another name
                raise _unsafe(self._label, info.orig_filename, "has a NUL character in its name; expected a plain path")
            self._check_member(info)
            mode = info.external_attr >> 16  # trusted whatever the "made by" system: a link is never harmless
            kind = _kind_from_mode(mode, is_dir=info.filename.endswith(("/", "\\")))
            yield _Raw(name=info.filename, kind=kind, size=0 if kind == "dir" else info.file_size,
                       executable=bool(mode & 0o111), handle=info)
        self._check_layout(infos)

    def open(self, raw: _Raw) -> BinaryIO:
        with _translated(self._label, self.fmt, raw.name):
            return self._zip.open(raw.handle)

    def close(self) -> None:
        self._zip.close()

    def _check_member(self, info: zipfile.ZipInfo) -> None:
        """The ratio comes first: telling pseudo from real encryption decompresses the entry."""
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > _RATIO_GRACE_BYTES and ratio > self._limits.max_ratio:
            raise _unsafe(self._label, info.filename,
                          f"expands {info.compress_size} bytes to {info.file_size} (ratio {ratio:.0f}), above "
                          f"the limit of {self._limits.max_ratio:g} (zip bomb)")
        if info.flag_bits & _ZIP_ENCRYPTED:
            raise _unsafe(self._label, info.filename, self._encryption_problem(info))
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
                    raise _unsafe(self._label, info.filename,
                                  f"has data that overlaps entry {after.filename!r} (overlapping entries are a "
                                  f"zip-bomb technique); expected each entry's data to stand alone")
                if end > archive_size:
                    raise _unsafe(self._label, info.filename,
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
            raise _unsafe(self._label, info.filename,
                          f"has no local file header at offset {info.header_offset} (corrupt zip)")
        name_length, extra_length = struct.unpack("<HH", header[26:30])
        return info.header_offset + 30 + name_length + extra_length + info.compress_size


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
        raise _unsafe(label, name, f"is beyond the limit of {limits.max_members} members")
    if total > limits.max_total_size:
        raise _unsafe(label, name, f"brings the uncompressed total to {total} bytes, above the limit of "
                                   f"{limits.max_total_size}")
    ratio = total / max(archive_size, 1)
    if total > _RATIO_GRACE_BYTES and ratio > limits.max_ratio:
        raise _unsafe(label, name, f"brings the uncompressed total to {total} bytes from an archive of "
                                   f"{archive_size} bytes (ratio {ratio:.0f}), above the limit of "
                                   f"{limits.max_ratio:g} (tar bomb or sparse-file bomb)")


class _TarReader:
    """tarfile plus the end-of-archive check it skips: it stops silently at a corrupt or missing header."""

    def __init__(self, path: Path, *, kind: str, label: str, limits: Limits) -> None:
        self._label, self._limits = label, limits
        self._archive_size = path.stat().st_size
        self.fmt = "tar" if kind == "tar" else _COMPRESSION[kind][1]
        if kind in _COMPRESSION and not _holds_tar(path, kind, label=label):
            raise UnsafeArchiveError(f"{label} is a {self.fmt} file that does not hold a tar archive")
        with _translated(label, self.fmt):
            self._tar = tarfile.open(path, mode=_TAR_MODES[kind])

    def members(self) -> Iterator[_Raw]:
        total = 0
        with _translated(self._label, self.fmt):
            for count, info in enumerate(self._tar, 1):
                size = info.size if info.isreg() else 0
                total += size
                check_tar_budget(self._label, info.name, count=count, total=total,
                                 archive_size=self._archive_size, limits=self._limits)
                yield _Raw(name=info.name, kind=_tar_kind(info), size=size,
                           executable=bool(info.mode & 0o111), handle=info)
            self._check_end()

    def open(self, raw: _Raw) -> BinaryIO:
        with _translated(self._label, self.fmt, raw.name):
            stream = self._tar.extractfile(raw.handle)
        if stream is None:
            raise _unsafe(self._label, raw.name, "is not a regular file and cannot be read")
        return stream

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
    opener = _COMPRESSION[kind][2]
    with _translated(label, _COMPRESSION[kind][1]), opener(path, "rb") as stream:
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


def _clean_name(raw: str, *, label: str, limits: Limits) -> str:
    """The posix path a member may be extracted to, or an error naming the rule it breaks."""
    def fail(problem: str) -> UnsafeArchiveError:
        return _unsafe(label, raw, problem)

    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise fail("has a name that is not valid UTF-8") from None
    if control := next((c for c in raw if ord(c) < 0x20 or ord(c) == 0x7F), None):
        raise fail(f"has the control character U+{ord(control):04X} in its name")
    if raw[:2] in ("//", "\\\\", "/\\", "\\/"):
        raise fail("is a UNC path (\\\\server\\share); expected a path relative to the archive root")
    if raw.startswith(("/", "\\")):
        raise fail("is an absolute path; expected a path relative to the archive root")
    if _DRIVE.match(raw):
        raise fail("starts with a drive letter; expected a path relative to the archive root")
    parts = [part for part in _SEPARATORS.split(raw) if part not in ("", ".")]
    if ".." in parts:
        raise fail("has a '..' component (path traversal); expected it to stay inside the extraction folder")
    for part in parts:
        _check_component(part, fail=fail)
    name = "/".join(parts)
    if len(name) > limits.max_path_length:
        raise fail(f"has a path of {len(name)} characters, above the limit of {limits.max_path_length} "
                   f"(Windows MAX_PATH budget)")
    return name


def _check_component(part: str, *, fail: Callable[[str], UnsafeArchiveError]) -> None:
    if bad := sorted(_FORBIDDEN_CHARS.intersection(part)):
        raise fail(f"has the character {bad[0]!r} in {part!r}, which Windows forbids in file names")
    if part.split(".")[0].rstrip(" ").upper() in _RESERVED_STEMS:
        raise fail(f"has the component {part!r}, a reserved device name on Windows")
    if part.endswith((".", " ")):
        raise fail(f"has the component {part!r} ending in a dot or space, which Windows silently strips")


_LINK_PROBLEMS = {
    "symlink": "is a symbolic link; bundles carry regular files and folders only",
    "hardlink": "is a hard link; bundles carry regular files and folders only",
    "device": "is a device, fifo or socket; bundles carry regular files and folders only",
    "other": "has an entry type that is neither a regular file nor a folder",
}


@dataclass(frozen=True, kw_only=True)
class _Member:
    entry: Entry
    raw: _Raw


class _Catalogue:
    """Accumulates members while enforcing the rules that span entries: counts, totals, collisions."""

    def __init__(self, *, label: str, limits: Limits) -> None:
        self._label, self._limits = label, limits
        self.members: dict[str, _Member] = {}
        self._folded: dict[str, str] = {}
        self._total = 0
        self._count = 0

    def add(self, raw: _Raw) -> None:
        self._count += 1
        if self._count > self._limits.max_members:
            raise _unsafe(self._label, raw.name, f"is beyond the limit of {self._limits.max_members} members")
        if raw.kind in _LINK_PROBLEMS:
            raise _unsafe(self._label, raw.name, _LINK_PROBLEMS[raw.kind])
        self._total += raw.size
        if self._total > self._limits.max_total_size:
            raise _unsafe(self._label, raw.name, f"brings the uncompressed total to {self._total} bytes, above "
                                                 f"the limit of {self._limits.max_total_size}")
        if raw.kind == "dir" and raw.name in (".", "./"):
            return  # the root folder itself, as `tar -C dir .` writes it
        name = _clean_name(raw.name, label=self._label, limits=self._limits)
        self._register(name, raw)

    def _register(self, name: str, raw: _Raw) -> None:
        if name in self.members:
            first = self.members[name].raw.name
            raise _unsafe(self._label, raw.name, f"is a duplicate of the earlier entry {first!r}")
        folded = unicodedata.normalize("NFC", name).casefold()
        if folded in self._folded:
            raise _unsafe(self._label, raw.name, f"collides with the entry {self._folded[folded]!r} on a "
                                                 f"case-insensitive or Unicode-normalising file system")
        self._folded[folded] = name
        entry = Entry(name=name, size=raw.size, is_dir=raw.kind == "dir")
        self.members[name] = _Member(entry=entry, raw=raw)

    def check_folders(self) -> None:
        """A file whose name another entry uses as a folder cannot be extracted on any file system."""
        folders = {folded.rsplit("/", 1)[0] for folded in self._folded if "/" in folded}
        folders |= {parent for folder in folders for parent in _parents(folder)}
        for folded, name in self._folded.items():
            if folded in folders and not self.members[name].entry.is_dir:
                raise _unsafe(self._label, self.members[name].raw.name,
                              "is a file, but other entries use the same name as a folder")


def _parents(folder: str) -> Iterator[str]:
    while "/" in folder:
        folder = folder.rsplit("/", 1)[0]
        yield folder


class _CountedStream(io.RawIOBase):
    """Counts what a member really yields, so a header that lies about the size cannot get past us."""

    def __init__(self, inner: BinaryIO, *, label: str, fmt: str, name: str, declared: int) -> None:
        super().__init__()
        self._inner, self._label, self._fmt, self._name, self._declared = inner, label, fmt, name, declared
        self._count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:
        with _translated(self._label, self._fmt, self._name):
            data = self._inner.read(len(buffer))
        self._count += len(data)
        if self._count > self._declared:
            raise _unsafe(self._label, self._name, f"expands beyond the {self._declared} bytes its header declares "
                                                   f"(zip bomb or corrupt header)")
        if not data and len(buffer) and self._count != self._declared:
            raise _unsafe(self._label, self._name, f"ends after {self._count} bytes but its header declares "
                                                   f"{self._declared} (corrupt or truncated archive)")
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
        super().close()


class SafeArchive:
    """A zip or tar whose every entry has been checked; use `SafeArchive.open` as a context manager."""

    def __init__(self, *, reader: _Reader, label: str, members: dict[str, _Member]) -> None:
        self._reader, self._label, self._members = reader, label, members
        self.entries: tuple[Entry, ...] = tuple(member.entry for member in members.values())

    @classmethod
    def open(cls, path: Path, *, label: str, limits: Limits = Limits()) -> SafeArchive:
        """Open and validate every entry now, so that nothing is extracted from an archive that is unsafe."""
        reader = _open_reader(path, label=label, limits=limits)
        try:
            catalogue = _Catalogue(label=label, limits=limits)
            for raw in reader.members():
                catalogue.add(raw)
            catalogue.check_folders()
        except BaseException:
            reader.close()
            raise
        return cls(reader=reader, label=label, members=catalogue.members)

    def __enter__(self) -> SafeArchive:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def names(self) -> list[str]:
        return [entry.name for entry in self.entries]

    def read(self, name: str) -> bytes:
        """The whole member in memory; big members go through `open_member` so memory stays flat."""
        entry = self._member(name).entry
        if entry.size > _READ_LIMIT:
            msg = (f"{self._label}: entry {name!r} is {entry.size} bytes, too big to read into memory "
                   f"(limit {_READ_LIMIT}); stream it with open_member or extract it")
            raise BuildError(msg)
        with self.open_member(name) as stream:
            return stream.read()

    def open_member(self, name: str) -> BinaryIO:
        member = self._member(name)
        if member.entry.is_dir:
            raise _unsafe(self._label, name, "is a folder and has no content to read")
        inner = self._reader.open(member.raw)
        counted = _CountedStream(inner, label=self._label, fmt=self._reader.fmt, name=name,
                                 declared=member.entry.size)
        return io.BufferedReader(counted, buffer_size=_CHUNK)

    def extract(self, dest: Path, *, members: Iterable[str] | None = None) -> list[Path]:
        """Write the chosen entries (all by default) under `dest`; returns their paths in archive order.

        Only regular files and folders are created, with fresh modes and times: nothing the archive says
        about owners, mtimes or permissions beyond "executable" reaches the target machine.
        """
        chosen = self._select(members)
        _make_folders(dest, label=self._label, name=None)
        root = dest.resolve(strict=True)
        written = []
        for member in chosen:
            target = self._target(root, member.entry.name)
            if member.entry.is_dir:
                target.mkdir(parents=True, exist_ok=True)
            else:
                self._write_file(member, target)
            written.append(target)
        return written

    def close(self) -> None:
        self._reader.close()

    def _member(self, name: str) -> _Member:
        if name not in self._members:
            raise InputUnavailableError(f"{self._label} has no entry {name!r}")
        return self._members[name]

    def _select(self, names: Iterable[str] | None) -> list[_Member]:
        if names is None:
            return list(self._members.values())
        wanted = {self._member(name).entry.name for name in names}
        return [member for name, member in self._members.items() if name in wanted]

    def _target(self, root: Path, name: str) -> Path:
        """Resolve again at extraction time: a link already inside `dest` could redirect a valid name."""
        target = root.joinpath(*name.split("/"))
        self._require_inside(root, target, name)
        _make_folders(target.parent, label=self._label, name=name)
        self._require_inside(root, target, name)  # a folder may have appeared, or been swapped for a link
        return target

    def _require_inside(self, root: Path, target: Path, name: str) -> None:
        if not target.resolve().is_relative_to(root):
            raise _unsafe(self._label, name, f"would be written outside {root} through a link already there")

    def _write_file(self, member: _Member, target: Path) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        with self.open_member(member.entry.name) as source:
            try:
                with os.fdopen(os.open(target, flags, 0o644), "wb") as out:
                    shutil.copyfileobj(source, out, _CHUNK)
            except BaseException as exc:
                target.unlink(missing_ok=True)
                if isinstance(exc, OSError):
                    msg = f"{self._label}: entry {member.entry.name!r} cannot be written to {target}: {exc.strerror}"
                    raise BuildError(msg) from exc
                raise
        os.chmod(target, 0o755 if member.raw.executable else 0o644)


def _make_folders(folder: Path, *, label: str, name: str | None) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        who = f"{label}: entry {name!r} needs" if name is not None else f"{label}: extracting needs"
        raise BuildError(f"{who} the folder {folder}, which cannot be created: {exc.strerror}") from exc


def _open_reader(path: Path, *, label: str, limits: Limits) -> _Reader:
    if not path.is_file():
        raise InputUnavailableError(f"{label} is missing or not a file: {path}")
    kind = _sniff(path)
    if kind is None:
        raise UnsafeArchiveError(f"{label} is neither a zip nor a tar archive (judged by its content)")
    if kind == "zip":
        return _ZipReader(path, label=label, limits=limits)
    return _TarReader(path, kind=kind, label=label, limits=limits)
