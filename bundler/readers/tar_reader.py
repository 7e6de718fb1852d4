"""The tar reader behind `SafeArchive` (plain, gzip, bzip2 or xz): tarfile plus the budgets it does not keep
and the end-of-archive check it skips."""

from __future__ import annotations

import bz2
import gzip
import lzma
import struct
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, cast

from bundler.errors import UnsafeArchiveError
from bundler.hashing import CHUNK
from bundler.readers.archive_reader import RATIO_GRACE_BYTES, Limits, RawEntry, translated_errors, unsafe

TAR_BLOCK = 512
COMPRESSION = {  # kind -> (leading bytes, name for messages, opener of the decompressed stream)
    "gz": (b"\x1f\x8b", "gzip", gzip.open),
    "bz2": (b"BZh", "bzip2", bz2.open),
    "xz": (b"\xfd7zXZ\x00", "xz", lzma.open),
}
_TAR_MODES = {"tar": "r:", "gz": "r:gz", "bz2": "r:bz2", "xz": "r:xz"}


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
    if total > RATIO_GRACE_BYTES and ratio > limits.max_ratio:
        raise unsafe(label, name, f"brings the uncompressed total to {total} bytes from an archive of "
                                   f"{archive_size} bytes (ratio {ratio:.0f}), above the limit of "
                                   f"{limits.max_ratio:g} (tar bomb or sparse-file bomb)")


class TarReader:
    """tarfile plus the end-of-archive check it skips: it stops silently at a corrupt or missing header."""

    parallel = False  # one stream, read front to back

    def __init__(self, path: Path, *, kind: str, label: str, limits: Limits) -> None:
        self._label, self._limits = label, limits
        self._archive_size = path.stat().st_size
        self.fmt = "tar" if kind == "tar" else COMPRESSION[kind][1]
        if kind in COMPRESSION and not holds_tar(path, kind, label=label):
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
        block = stream.read(TAR_BLOCK)
        if len(block) < TAR_BLOCK:
            raise UnsafeArchiveError(f"{self._label} is a truncated tar: it ends without the end-of-archive marker "
                                     f"(an incomplete download?)")
        if block.strip(b"\0"):
            raise UnsafeArchiveError(f"{self._label} is a corrupt tar: the block at offset {self._tar.offset} is "
                                     f"neither a valid member header nor the end-of-archive marker")
        while chunk := stream.read(CHUNK):
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


def holds_tar(path: Path, kind: str, *, label: str) -> bool:
    opener = cast(Callable[[Path, str], BinaryIO], COMPRESSION[kind][2])
    with translated_errors(label, COMPRESSION[kind][1]), opener(path, "rb") as stream:
        return is_tar_header(stream.read(TAR_BLOCK))


def is_tar_header(block: bytes) -> bool:
    """ustar magic, or (for old v7 archives) a header checksum that adds up."""
    if len(block) < TAR_BLOCK or not block.strip(b"\0"):
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
