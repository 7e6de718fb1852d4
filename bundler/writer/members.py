"""Zip members and their compressed bytes: which method each gets, deflated in parallel and hashed in the same
pass, kept in a member cache keyed by (sha256, level) so a rebuild deflates nothing it deflated before."""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from isal import isal_zlib

from bundler.errors import BuildError, HashMismatchError
from bundler.hashing import CHUNK
from bundler.writer.temps import locked_temp, remove_dead_temps

STORED, DEFLATED = 0, 8
ALREADY_COMPRESSED = (".whl", ".zip", ".gz", ".tgz", ".xz", ".bz2", ".zst", ".7z", ".jar", ".png", ".jpg", ".jpeg")


TRIAL_BYTES = 256 * 1024


@dataclass(frozen=True, kw_only=True)
class Member:
    """One file of the archive: from a file (whose sha256 the build knows), from bytes, or from compressed bytes
    that already exist (`packed`: a member of an input archive, copied as it is compressed there; its `source`, if
    any, is a file with the same bytes for the parts that read it, never what the zip is written from).

    A file stored as it is may carry its CRC-32 instead of its sha256: the writer then checks the bytes it copies
    against that, and writes the member's header before its bytes without going back to it, which a zip laid into
    a stream (an encryptor) needs. A file to deflate needs its sha256, the member cache's key."""

    name: str
    source: Path | None = None
    data: bytes | None = None
    packed: Prepared | None = None
    sha256: str | None = None
    crc: int | None = None
    executable: bool = False

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.source if self.packed is None else None, self.data, self.packed)) != 1:
            msg = f"zip member {self.name}: exactly one of source, data and packed is needed"
            raise BuildError(msg)
        if self.packed is not None and (self.sha256 is None or self.packed.path is None):
            msg = f"zip member {self.name}: packed bytes need their file and the member's sha256"
            raise BuildError(msg)
        if self.source is not None and self.sha256 is None and self.crc is None:
            msg = f"zip member {self.name}: a file member needs its expected sha256 or CRC-32"
            raise BuildError(msg)

    @property
    def digest(self) -> str:
        if self.sha256 is not None:
            return self.sha256
        if self.data is None:
            msg = f"zip member {self.name}: a file member to deflate needs its expected sha256, not only its CRC-32"
            raise BuildError(msg)
        return hashlib.sha256(self.data).hexdigest()

    @property
    def size(self) -> int:
        if self.packed is not None:
            return self.packed.usize
        return len(self.data) if self.data is not None else self.source.stat().st_size  # type: ignore[union-attr]


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A member ready to be laid down: its compressed bytes live in `path` (at `offset`) or `data`. In the member
    cache they are the whole file; in an input archive (`within`: the member there) they are one member's."""

    method: int
    crc: int
    usize: int
    csize: int
    path: Path | None = None
    offset: int = 0
    within: str | None = None
    data: bytes | None = None
    packed_sha256: str | None = None  # of the compressed bytes in `path`, checked while they are copied


def choose_method(member: Member) -> int:
    """Store what is already compressed; deflate the rest. Decided from content, so deterministic. Packed bytes
    keep the method they were compressed with."""
    if member.packed is not None:
        return member.packed.method
    if member.source is not None:
        return file_method(member.name, member.source)
    assert member.data is not None
    return STORED if member.name.lower().endswith(ALREADY_COMPRESSED) else _sampled(member.data[:TRIAL_BYTES])


def file_method(name: str, source: Path) -> int:
    """choose_method's answer for a file before it is a member (whose header may then need its CRC-32 first)."""
    if name.lower().endswith(ALREADY_COMPRESSED):
        return STORED
    with source.open("rb") as fh:
        return _sampled(fh.read(TRIAL_BYTES))


def _sampled(sample: bytes) -> int:
    if len(sample) < 64:
        return DEFLATED
    return STORED if len(zlib.compress(sample, 1)) > 0.95 * len(sample) else DEFLATED


_MEMBER_NAME = re.compile(r"^[0-9a-f]{64}\.[0-9a-f]{8}\.[0-9]+\.[0-9a-f]{64}$")


class MemberCache:
    """Deflated members kept by (sha256, level), so a rebuild with unchanged inputs skips compression."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _folder(self, level: int) -> Path:
        return self.root / f"deflate-{level}"

    def find(self, sha256: str, level: int) -> Prepared | None:
        """A cached member, named `<sha256>.<crc>.<size>.<sha256 of the compressed bytes>`."""
        for path in sorted(self._folder(level).glob(f"{sha256}.*.*.*")):
            parts = path.name.split(".")
            if len(parts) != 4 or not _MEMBER_NAME.match(path.name) or not path.is_file():
                continue  # not one of ours (a stray or hand-made file): never trusted, never fatal
            _, crc, usize, packed = parts
            return Prepared(method=DEFLATED, crc=int(crc, 16), usize=int(usize), csize=path.stat().st_size,
                             path=path, packed_sha256=packed)
        return None

    def remove_dead_temps(self) -> list[Path]:
        """The half-written members of builds that were killed; a concurrent build's stay."""
        try:
            folders = sorted(p for p in self.root.glob("deflate-*") if p.is_dir())
        except OSError:
            return []
        return [path for folder in folders for path in remove_dead_temps(folder, ".tmp-*")]

    @contextmanager
    def writer(self, sha256: str, level: int) -> Iterator[tuple[BinaryIO, list[Prepared]]]:
        """Yield a temporary file; the caller appends the result, which is then renamed into place."""
        folder = self._folder(level)
        try:
            folder.mkdir(mode=0o755, parents=True, exist_ok=True)  # never group-writable, whatever the umask
        except FileExistsError:
            msg = f"{folder}: the member cache needs a folder here but found a file; remove it"
            raise BuildError(msg) from None
        fd, name = locked_temp(folder, prefix=".tmp-")
        result: list[Prepared] = []
        try:
            with os.fdopen(fd, "wb") as fh:
                yield fh, result
            p = result[0]
            final = folder / f"{sha256}.{p.crc:08x}.{p.usize}.{p.packed_sha256}"
            os.replace(name, final)
            result[0] = Prepared(method=DEFLATED, crc=p.crc, usize=p.usize, csize=p.csize, path=final,
                                  packed_sha256=p.packed_sha256)
        finally:
            Path(name).unlink(missing_ok=True)


def deflate_file(member: Member, level: int, cache: MemberCache) -> Prepared:
    """Hash, CRC and deflate one file in a single read; refuse it if its hash is not the expected one."""
    cached = cache.find(member.digest, level)
    if cached is not None:
        return cached
    assert member.source is not None
    digest, packed = hashlib.sha256(), hashlib.sha256()
    crc = usize = csize = 0
    compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
    with cache.writer(member.digest, level) as (out, result), member.source.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            crc = isal_zlib.crc32(chunk, crc)
            usize += len(chunk)
            block = compressor.compress(chunk)
            csize += len(block)
            packed.update(block)
            out.write(block)
        block = compressor.flush()
        csize += len(block)
        packed.update(block)
        out.write(block)
        actual = digest.hexdigest()
        if actual != member.sha256:
            msg = (f"{member.source}: sha256 is {actual}, expected {member.sha256} (for {member.name}); "
                   "the cache is corrupt: delete that file and run `ort-bundler fetch` again")
            raise HashMismatchError(msg)
        result.append(Prepared(method=DEFLATED, crc=crc, usize=usize, csize=csize, packed_sha256=packed.hexdigest()))
    return result[0]


def deflate_bytes(data: bytes, level: int) -> Prepared:
    compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
    packed = compressor.compress(data) + compressor.flush()
    return Prepared(method=DEFLATED, crc=isal_zlib.crc32(data), usize=len(data), csize=len(packed), data=packed)
