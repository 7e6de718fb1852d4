"""A reproducible, parallel zip writer.

Why not `zipfile`: it compresses on the writing thread and cannot take an already-deflated stream, so it
can neither compress members in parallel nor reuse members compressed by an earlier build. Here workers
deflate members concurrently (zlib releases the GIL) into a member cache keyed by (sha256, level), hashing
each input in the same pass; the writing thread then lays the members down in sorted order.

Everything that could vary between machines is fixed: entry order (sorted by name), timestamps (one
`date_time`), permissions (0644, 0755 for executables and directories), "made by" Unix, UTF-8 names, no
extra fields except ZIP64 when a size or offset needs it. The output goes to a temporary file beside the
destination and is renamed into place only when complete.

Temporary files (the hidden `.<zip>.*.tmp` beside the output, `.tmp-*` in the member cache) are held under
an exclusive `flock` while written. The OS drops that lock when its process dies, so a later run can tell
a file a SIGKILLed build left behind (lock free) from one a concurrent build is writing (lock held) and
remove only the former. On Windows an open file cannot be deleted, which gives the same guarantee.
"""

from __future__ import annotations

import errno
import glob
import hashlib
import os
import struct
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from isal import isal_zlib

from bundler.atomic import write_atomic
from bundler.errors import BuildError, HashMismatchError
from bundler.hashing import CHUNK
from bundler.writer.members import (
    DEFLATED,
    STORED,
    Member,
    MemberCache,
    Prepared,
    choose_method,
    deflate_bytes,
    deflate_file,
)
from bundler.writer.temps import locked_temp, remove_dead_temps

MAX32 = 0xFFFFFFFF
MADE_BY_UNIX = 3 << 8
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EPERM})


def dos_date_time(epoch: int) -> tuple[int, int]:
    """(time, date) in DOS format, in UTC: the zip format has no time zone, so we pick one."""
    t = time.gmtime(max(epoch, 315532800))
    dos_time = (t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec // 2)
    dos_date = ((t.tm_year - 1980) << 9) | (t.tm_mon << 5) | t.tm_mday
    return dos_time, dos_date


def _directories(names: Sequence[str]) -> list[str]:
    dirs = set()
    for name in names:
        for parent in PurePosixPath(name).parents:
            if str(parent) != ".":
                dirs.add(str(parent) + "/")
    return sorted(dirs)


@dataclass
class _Central:
    name: bytes
    flags: int
    method: int
    crc: int
    usize: int
    csize: int
    offset: int
    mode: int
    is_dir: bool
    zip64: bool = False  # a produced member whose bound called for ZIP64 before its size was known


@dataclass(frozen=True, kw_only=True)
class Produced:
    """A member whose bytes are made while the zip is written, stored as they come. `produce` writes them at the
    file's position, may go back over its own bytes (never before them), leaves the position at their end and
    returns their CRC-32. `bound` is the most it can write: it decides before the first byte whether the header
    needs ZIP64. Members are produced in name order, so a later one may use what an earlier one learned."""

    name: str
    produce: Callable[[BinaryIO], int]
    bound: int


class _Writer:
    def __init__(self, fh: BinaryIO, epoch: int, *, seekable: bool = True) -> None:
        self.fh = fh
        self.seekable = seekable
        self.time, self.date = dos_date_time(epoch)
        self.central: list[_Central] = []

    def _local_header(self, name: bytes, flags: int, method: int, crc: int, usize: int, csize: int) -> int:
        offset = self.fh.tell()
        zip64 = usize >= MAX32 or csize >= MAX32
        extra = struct.pack("<HHQQ", 1, 16, usize, csize) if zip64 else b""
        self.fh.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 45 if zip64 else 20, flags, method, self.time,
                                  self.date, crc, MAX32 if zip64 else csize, MAX32 if zip64 else usize,
                                  len(name), len(extra)))
        self.fh.write(name)
        self.fh.write(extra)
        return offset

    def add_directory(self, name: str) -> None:
        raw, flags = _encode(name)
        offset = self._local_header(raw, flags, STORED, 0, 0, 0)
        self.central.append(_Central(raw, flags, STORED, 0, 0, 0, offset, 0o40755, True))

    def add_prepared(self, name: str, prepared: Prepared, mode: int) -> None:
        raw, flags = _encode(name)
        offset = self._local_header(raw, flags, prepared.method, prepared.crc, prepared.usize, prepared.csize)
        if prepared.data is not None:
            self.fh.write(prepared.data)
        else:
            _copy_checked(prepared, self.fh)
        self.central.append(_Central(raw, flags, prepared.method, prepared.crc, prepared.usize, prepared.csize,
                                     offset, mode, False))

    def add_stored_file(self, name: str, member: Member, mode: int) -> None:
        """Copy a file as is, hashing and CRC-ing on the way; a CRC not known before goes into its header after."""
        raw, flags = _encode(name)
        size = member.size
        if member.crc is None and not self.seekable:
            msg = f"zip member {name}: a stored file needs its CRC-32 beforehand in a zip written to a stream"
            raise BuildError(msg)
        offset = self._local_header(raw, flags, STORED, member.crc or 0, size, size)
        digest = hashlib.sha256() if member.sha256 is not None else None
        crc = written = 0
        with member.source.open("rb") as src:  # type: ignore[union-attr]
            while chunk := src.read(CHUNK):
                if digest is not None:
                    digest.update(chunk)
                crc = isal_zlib.crc32(chunk, crc)
                written += len(chunk)
                self.fh.write(chunk)
        if digest is not None and (written != size or digest.hexdigest() != member.sha256):
            msg = (f"{member.source}: sha256 is {digest.hexdigest()}, expected {member.sha256} (for {member.name}); "
                   "the cache is corrupt: delete that file and run `ort-bundler fetch` again")
            raise HashMismatchError(msg)
        if member.crc is not None and (written != size or crc != member.crc):
            msg = (f"{member.source}: changed while it was written into the zip (CRC-32 {crc:08x}, {written} bytes; "
                   f"expected {member.crc:08x}, {size} bytes); nothing may write into that folder meanwhile")
            raise HashMismatchError(msg)
        if member.crc is None:
            end = self.fh.tell()
            self.fh.seek(offset + 14)
            self.fh.write(struct.pack("<I", crc))
            self.fh.seek(end)
        self.central.append(_Central(raw, flags, STORED, crc, size, size, offset, mode, False))

    def add_produced(self, name: str, produced: Produced, mode: int) -> None:
        """Write the member's bytes through its producer, then its CRC-32 and sizes into the header before them."""
        raw, flags = _encode(name)
        zip64 = produced.bound >= MAX32
        offset = self._local_header(raw, flags, STORED, 0, MAX32 if zip64 else 0, MAX32 if zip64 else 0)
        start = self.fh.tell()
        crc = produced.produce(self.fh)
        end = self.fh.tell()
        size = end - start
        if size > produced.bound:
            msg = f"zip member {name}: its producer wrote {size} bytes, more than the {produced.bound} it promised"
            raise BuildError(msg)
        self.fh.seek(offset + 14)
        if zip64:
            self.fh.write(struct.pack("<I", crc))
            self.fh.seek(offset + 30 + len(raw) + 4)
            self.fh.write(struct.pack("<QQ", size, size))
        else:
            self.fh.write(struct.pack("<III", crc, size, size))
        self.fh.seek(end)
        self.central.append(_Central(raw, flags, STORED, crc, size, size, offset, mode, False, zip64))

    def finish(self) -> None:
        start = self.fh.tell()
        for entry in self.central:
            self.fh.write(_central_record(entry, self.time, self.date))
        size = self.fh.tell() - start
        count = len(self.central)
        if count >= 0xFFFF or size >= MAX32 or start >= MAX32:
            eocd64 = self.fh.tell()
            self.fh.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, MADE_BY_UNIX | 45, 45, 0, 0, count, count, size, start))
            self.fh.write(struct.pack("<IIQI", 0x07064B50, 0, eocd64, 1))
            self.fh.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, MAX32, MAX32, 0))
        else:
            self.fh.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, size, start, 0))


def _copy_checked(prepared: Prepared, out: BinaryIO) -> None:
    """Copy compressed bytes from the member cache or an input archive, checking them on the way: a damaged entry
    must not reach a bundle."""
    assert prepared.path is not None
    packed, left = hashlib.sha256(), prepared.csize
    with prepared.path.open("rb") as src:
        src.seek(prepared.offset)
        while left and (chunk := src.read(min(CHUNK, left))):
            packed.update(chunk)
            out.write(chunk)
            left -= len(chunk)
    if prepared.within is not None and (left or packed.hexdigest() != prepared.packed_sha256):
        msg = (f"{prepared.path}: the compressed bytes of {prepared.within} changed after the build read them; the "
               "input cache was changed while the build ran: run `ort-bundler fetch` and the build again")
        raise HashMismatchError(msg)
    if left or packed.hexdigest() != prepared.packed_sha256:
        prepared.path.unlink(missing_ok=True)
        msg = (f"{prepared.path}: this compressed member in the cache is damaged; it has been removed, "
               "run the build again")
        raise HashMismatchError(msg)


def _central_record(e: _Central, dos_time: int, dos_date: int) -> bytes:
    fields = []
    usize, csize, offset = e.usize, e.csize, e.offset
    if usize >= MAX32 or csize >= MAX32 or e.zip64:
        fields += [usize, csize]
        usize = csize = MAX32
    if offset >= MAX32:
        fields.append(offset)
        offset = MAX32
    extra = struct.pack("<HH", 1, 8 * len(fields)) + struct.pack(f"<{len(fields)}Q", *fields) if fields else b""
    version = 45 if extra else 20
    external = (e.mode << 16) | (0x10 if e.is_dir else 0)
    header = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, MADE_BY_UNIX | version, version, e.flags, e.method,
                         dos_time, dos_date, e.crc, csize, usize, len(e.name), len(extra), 0, 0, 0, external, offset)
    return header + e.name + extra


def _encode(name: str) -> tuple[bytes, int]:
    try:
        return name.encode("ascii"), 0
    except UnicodeEncodeError:
        return name.encode("utf-8"), 0x800


def prepare_destination(dest: Path) -> None:
    """Refuse an output that cannot be written before any work is done, and clear what killed builds left there."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        msg = f"{dest.parent}: the output folder is a file; expected a folder (or a path where one can be made)"
        raise BuildError(msg) from None
    except OSError as exc:
        msg = f"{dest.parent}: the output folder cannot be created ({exc.strerror}); choose another one"
        raise BuildError(msg) from None
    if dest.is_dir():
        msg = f"{dest}: a folder stands where the bundle zip goes; remove it or choose another output folder"
        raise BuildError(msg)
    remove_dead_temps(dest.parent, f".{glob.escape(dest.name)}.*.tmp")


def write_zip(members: Sequence[Member], dest: Path, *, epoch: int, member_cache: MemberCache, level: int = 6,
              jobs: int | None = None, progress: Callable[[int], object] | None = None,
              sidecar: Path | None = None, produced: Sequence[Produced] = ()) -> str:
    """Write `members` and `produced` (plus their parent directories) to `dest` atomically and reproducibly;
    return its sha256.

    `progress` is told the uncompressed size of each member once it is in the zip. `sidecar` gets
    `<sha256>  <zip name>` right after the zip is in place: replaced, never removed first, so a failed
    build leaves the previous zip and its digest as they were.
    """
    by_name = _checked_names([*members, *produced])
    prepare_destination(dest)
    member_cache.remove_dead_temps()
    try:
        digest = _write(by_name, dest, epoch=epoch, member_cache=member_cache, level=level, jobs=jobs,
                        progress=progress)
        if sidecar is not None:
            write_atomic(sidecar, f"{digest}  {dest.name}\n".encode("ascii"))
    except OSError as exc:
        if exc.errno not in _DISK_ERRNOS:
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        msg = f"{dest}: the bundle cannot be written: {exc.strerror}{where}; free space on that disk or choose another folder"
        raise BuildError(msg) from None
    return digest


def stream_zip(members: Sequence[Member], sink: BinaryIO, *, epoch: int, member_cache: MemberCache,
               level: int = 6, jobs: int | None = None) -> None:
    """Lay the zip of `members` into `sink`, which is only written to and asked its position (an encryptor):
    the bytes `write_zip` would write, provided every file stored as it is carries its CRC-32, so that no header
    is gone back to."""
    by_name = _checked_names(members)
    member_cache.remove_dead_temps()
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        try:
            _lay(_Writer(sink, epoch, seekable=False), by_name, pool, level=level, member_cache=member_cache)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def _checked_names(members: Sequence[Member | Produced]) -> dict[str, Member | Produced]:
    by_name: dict[str, Member | Produced] = {}
    for member in members:
        if member.name in by_name or member.name.startswith("/") or "\\" in member.name:
            msg = f"zip member {member.name!r}: duplicate or not a relative POSIX path"
            raise BuildError(msg)
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in member.name):
            msg = f"zip member {member.name!r}: has a control character in its name; expected a plain path"
            raise BuildError(msg)
        by_name[member.name] = member
    return by_name


def _write(by_name: dict[str, Member | Produced], dest: Path, *, epoch: int, member_cache: MemberCache, level: int,
           jobs: int | None, progress: Callable[[int], object] | None) -> str:
    fd, tmp_name = locked_temp(dest.parent, prefix=f".{dest.name}.")
    pool = ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1)
    try:
        with os.fdopen(fd, "wb") as fh:
            with _TrailingDigest(Path(tmp_name)) as trailing:
                def settled() -> None:
                    fh.flush()
                    trailing.final_up_to(fh.tell())  # only the member written next goes back over its bytes

                _lay(_Writer(fh, epoch), by_name, pool, level=level, member_cache=member_cache, progress=progress,
                     before_each=settled)
                fh.flush()
                trailing.ends_at(fh.tell())
                os.fsync(fh.fileno())  # while the digest thread reads what is not hashed yet
                digest = trailing.result()
            if os.name != "nt":
                _publish(tmp_name, dest)  # while still locked, so no cleaner can take it first
        if os.name == "nt":
            _publish(tmp_name, dest)  # Windows renames only a closed file
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # do not finish compressing for a build that failed
        Path(tmp_name).unlink(missing_ok=True)
        raise
    finally:
        pool.shutdown(wait=True)
    return digest


def _lay(writer: _Writer, by_name: dict[str, Member | Produced], pool: ThreadPoolExecutor, *, level: int,
         member_cache: MemberCache, progress: Callable[[int], object] | None = None,
         before_each: Callable[[], None] | None = None) -> None:
    """The entries in name order, their parent folders among them, then the central directory. The trials and
    the deflating run on the pool (zlib lets go of the GIL), generated members too, while this thread writes."""
    names = sorted(by_name)
    files = [member for name in names if isinstance(member := by_name[name], Member)]
    methods = dict(zip((m.name for m in files), pool.map(choose_method, files)))
    futures = {m.name: pool.submit(_deflated, m, level, member_cache) for m in files
               if methods[m.name] == DEFLATED and m.packed is None}
    for name in sorted(set(names) | set(_directories(names))):
        if before_each:
            before_each()
        if name.endswith("/"):
            writer.add_directory(name)
            continue
        member = by_name[name]
        if isinstance(member, Produced):
            writer.add_produced(name, member, 0o100644)
            continue
        _add_member(writer, name, member, futures)
        if progress:
            progress(member.size)
    writer.finish()


class _TrailingDigest:
    """The zip's sha256, taken on a thread of its own while the zip is written, so that it is ready with the
    last byte instead of costing a second pass over the zip at the end (hashlib lets go of the GIL). The
    thread reads the file behind the writer, only up to what will not change again: the writer patches
    nothing but the header of the member it is writing. Leaving the block early stops the thread."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._final, self._end = 0, -1  # bytes that will not change; the zip's size once it is complete
        self._stopped = False
        self._changed = threading.Condition()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zip-digest")
        self._digest = self._pool.submit(self._hash)

    def __enter__(self) -> _TrailingDigest:
        return self

    def __exit__(self, *exc: object) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify()
        self._pool.shutdown(wait=True)

    def final_up_to(self, position: int) -> None:
        with self._changed:
            self._final = position
            self._changed.notify()

    def ends_at(self, size: int) -> None:
        """The zip is complete at `size` bytes (and flushed): the thread may hash to its end."""
        with self._changed:
            self._final, self._end = size, size
            self._changed.notify()

    def result(self) -> str:
        return self._digest.result()

    def _hash(self) -> str:
        digest, position = hashlib.sha256(), 0
        with self._path.open("rb", buffering=0) as fh:  # unbuffered: a read-ahead would keep bytes later patched
            while True:
                with self._changed:
                    while position == self._final and self._end < 0 and not self._stopped:
                        self._changed.wait()
                    final, end, stopped = self._final, self._end, self._stopped
                if stopped and end < 0:
                    return ""  # the zip was abandoned
                while position < final:
                    chunk = fh.read(min(CHUNK, final - position))
                    if not chunk:
                        msg = f"{self._path}: ends at {position} bytes while being written, expected {final}"
                        raise BuildError(msg)
                    digest.update(chunk)
                    position += len(chunk)
                if position == end:
                    return digest.hexdigest()


def _publish(tmp_name: str, dest: Path) -> None:
    os.chmod(tmp_name, 0o644)
    os.replace(tmp_name, dest)


def _add_member(writer: _Writer, name: str, member: Member, futures: dict[str, Future[Prepared]]) -> None:
    mode = 0o100755 if member.executable else 0o100644
    if member.packed is not None:
        writer.add_prepared(name, member.packed, mode)
    elif name in futures:
        writer.add_prepared(name, futures[name].result(), mode)
    elif member.data is not None:
        writer.add_prepared(name, Prepared(method=STORED, crc=isal_zlib.crc32(member.data), usize=len(member.data),
                                           csize=len(member.data), data=member.data), mode)
    else:
        writer.add_stored_file(name, member, mode)


def _deflated(member: Member, level: int, member_cache: MemberCache) -> Prepared:
    """A member to be deflated: generated bytes as they are, a file through the member cache."""
    if member.data is not None:
        return deflate_bytes(member.data, level)
    return deflate_file(member, level, member_cache)
