"""HTTP download that hashes as it writes, resumes with Range, and retries with backoff.

The caller owns the partial file and the verdict on the hash; this module only moves bytes and reports
the sha256 of what it wrote. Client errors (4xx) are final: retrying a 404 only delays the message.
"""

from __future__ import annotations

import contextlib
import hashlib
import queue
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from bundler.errors import InputUnavailableError
from bundler.hashing import CHUNK
from bundler.names import redact_url
from bundler.sources.cache import DISK_ERRNOS

if TYPE_CHECKING:  # imported where a download runs: a build from the cache never pays for requests
    import requests

Progress = Callable[[int], None]

# The most one network read returns. Reads take what has arrived (`read1`), so a stalled or killed
# download has written every byte it received and a resume really resumes, while a fast connection
# still moves large chunks (fewer, larger writes and hash updates).
NET_CHUNK = 1 << 20
# What one download may bring when the manifest does not declare the input's `size`: a server that never
# stops must not fill the cache's disk. Larger than any ORT, CUDA or cuDNN archive published so far;
# an input that needs more declares its `size` in the manifest, which then is the bound.
DEFAULT_MAX_DOWNLOAD = 4 * 1024**3
# Free space a download leaves on the cache's disk, up front and while it streams: a body without a
# Content-Length is cut off here rather than at ENOSPC, so the disk never fills to its last byte (the cache's
# records, locks and the next build's scratch live on it too).
FREE_SPACE_MARGIN = 16 * 1024**2


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    attempts: int = 5
    backoff: float = 0.5  # seconds before the second attempt; doubles each time
    max_backoff: float = 8.0
    timeout: float = 60.0  # seconds without a byte before a connection counts as dropped


class _Transient(Exception):
    """A failure worth another attempt: 5xx, 429, a dropped or stalled connection."""


class _TooBig(InputUnavailableError):
    """The file is (or is declared) larger than its bound, or than the disk's room: its partial can only fail
    the same way again, and holds the disk's space meanwhile, so it goes."""


def _hash_existing(path: Path) -> tuple[hashlib._Hash, int]:
    digest = hashlib.sha256()
    size = 0
    if path.exists():
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
    return digest, size


def download(url: str, partial: Path, *, label: str, session: requests.Session,
             progress: Progress | None = None, policy: RetryPolicy = RetryPolicy(),
             stop: threading.Event | None = None, max_size: int = DEFAULT_MAX_DOWNLOAD, declared: bool = False) -> str:
    """Complete `partial` from `url` and return the sha256 of the whole file.

    Bytes already in `partial` (from an interrupted run) are kept and hashed once; the rest is asked for
    with `Range: bytes=N-`. A server that ignores the range (200 instead of 206) restarts the file.
    `stop` (set on Ctrl-C) ends the download at the next chunk or backoff, keeping `partial` for a resume.
    The file may not exceed `max_size` bytes: a larger `Content-Length` is refused before a byte is
    written, a body that runs past it is cut off, and in both cases `partial` is removed, because
    resuming it could only fail the same way. The disk bounds it too: a `declared` size (the manifest's)
    or a Content-Length must fit in the free space before a byte is asked for, and a body that would
    leave less than FREE_SPACE_MARGIN free, or that meets a full disk, is cut off and its partial removed.
    """
    stop = stop or threading.Event()
    if partial.exists() and partial.stat().st_size > max_size:
        partial.unlink()  # left by a run with a larger bound: it cannot be the file we want
    if declared:
        _require_room(partial, label=label, url=url, needed=max_size - _size(partial))
    try:
        return _download(url, partial, label=label, session=session, progress=progress, policy=policy, stop=stop,
                         max_size=max_size)
    except _TooBig:
        with contextlib.suppress(OSError):  # a disk turned read-only keeps it: the message said why
            partial.unlink(missing_ok=True)
        raise


def _download(url: str, partial: Path, *, label: str, session: requests.Session, progress: Progress | None,
              policy: RetryPolicy, stop: threading.Event, max_size: int) -> str:
    digest, offset = _hash_existing(partial)
    if progress and offset:
        progress(offset)
    failures = 0
    while True:
        try:
            digest, offset = _attempt(url, partial, label=label, session=session, digest=digest, offset=offset,
                                      progress=progress, timeout=policy.timeout, stop=stop, max_size=max_size)
            return digest.hexdigest()
        except _Transient as exc:
            failures += 1
            if failures >= policy.attempts:
                msg = f"{label}: download of {redact_url(url)} failed after {failures} attempts: {redact_url(str(exc))}"
                raise InputUnavailableError(msg) from None
            if stop.wait(min(policy.backoff * 2 ** (failures - 1), policy.max_backoff)):
                _stopped(label)
            digest, offset = _hash_existing(partial)


class _Background:
    """Run `consume(chunk)` on a second thread while the first one receives.

    sha256, file writes and socket reads all release the GIL, so hashing and writing each get a thread
    and overlap with receiving: a fast download is not slowed to the sum of the three on one core. The
    queue is short, so memory stays a few chunks: with 16 a download faster than the disk grew a fetch's peak
    from 45 MiB at 50 MiB to 64 MiB at 3 GB (bench/scale.py). After a failure neither the file's tail nor the
    digest is trusted: `download` hashes the partial file again before resuming.
    """

    def __init__(self, consume: Callable[[bytes], object], name: str) -> None:
        self.consume = consume
        self.queue: queue.Queue[bytes | None] = queue.Queue(maxsize=4)
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        while (chunk := self.queue.get()) is not None:
            if self.error is None:
                try:
                    self.consume(chunk)
                except BaseException as exc:  # re-raised on the receiving thread
                    self.error = exc

    def put(self, chunk: bytes) -> None:
        if self.error is not None:
            raise self.error
        self.queue.put(chunk)

    def __enter__(self) -> _Background:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.queue.put(None)
        self.thread.join()
        if self.error is not None and exc[0] is None:
            raise self.error


def _stopped(label: str) -> NoReturn:
    """A worker thread cannot receive Ctrl-C itself; it ends the way the main thread did."""
    msg = f"{label}: download stopped; the bytes so far are kept for the next run"
    raise KeyboardInterrupt(msg)


def _declared_total(resp: requests.Response, offset: int) -> int | None:
    """The whole file's size as the server states it: Content-Range's total, else offset + Content-Length."""
    if resp.status_code == 206 and (total := resp.headers.get("Content-Range", "").rpartition("/")[2]).isdigit():
        return int(total)
    length = resp.headers.get("Content-Length", "")
    return (offset if resp.status_code == 206 else 0) + int(length) if length.isdigit() else None


def _check_room(resp: requests.Response, partial: Path, *, label: str, url: str, offset: int, max_size: int) -> int:
    """Refuse a file larger than its bound, and one the cache's disk has no room for, before writing;
    return how many more bytes this response may bring: its bound, or the disk's room, whichever is less."""
    total = _declared_total(resp, offset)
    if total is not None and total > max_size:
        msg = (f"{label}: {redact_url(url)} is {total} bytes, above the bound of {max_size} bytes; if that size is right, "
               f"declare it with `size = {total}` in the manifest entry")
        raise _TooBig(msg)
    start = offset if resp.status_code == 206 else 0
    room = _require_room(partial, label=label, url=url, needed=total - start if total is not None else 0)
    return min(max_size - start, room)


def _require_room(partial: Path, *, label: str, url: str, needed: int) -> int:
    """The bytes the cache's disk can take beyond FREE_SPACE_MARGIN; refused when `needed` does not fit."""
    free = shutil.disk_usage(partial.parent).free
    if needed + FREE_SPACE_MARGIN > free:
        msg = (f"{label}: {redact_url(url)} needs {needed} bytes but the cache folder {partial.parent} has {free} free; "
               f"free some space or pass --cache on a larger disk (the bytes so far are kept)")
        raise InputUnavailableError(msg)
    return free - FREE_SPACE_MARGIN


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _no_room(label: str, url: str, partial: Path, *, received: int) -> _TooBig:
    msg = (f"{label}: {redact_url(url)} sent {received} bytes without ending, all the room the cache folder {partial.parent} "
           f"has short of {FREE_SPACE_MARGIN} bytes kept free; the partial download was removed: free some space "
           f"or pass --cache on a larger disk, and declare the file's `size` in the manifest entry")
    return _TooBig(msg)


def _attempt(url: str, partial: Path, *, label: str, session: requests.Session, digest: hashlib._Hash,
             offset: int, progress: Progress | None, timeout: float,
             stop: threading.Event, max_size: int) -> tuple[hashlib._Hash, int]:
    import requests

    headers = {"Range": f"bytes={offset}-", "Accept-Encoding": "identity"} if offset else {"Accept-Encoding": "identity"}
    try:
        with session.get(url, stream=True, timeout=timeout, headers=headers) as resp:
            status = resp.status_code
            if status == 416 and offset:
                return digest, offset  # nothing left to fetch: the caller checks the hash
            if status == 429 or status >= 500:
                raise _Transient(f"HTTP {status} {resp.reason}")
            if status >= 400:
                msg = f"{label}: {redact_url(url)} answered HTTP {status} {resp.reason}; check the URL in the manifest"
                raise InputUnavailableError(msg)
            allowed = _check_room(resp, partial, label=label, url=url, offset=offset, max_size=max_size)
            if offset and status != 206:
                digest, offset = hashlib.sha256(), 0  # the server ignored Range: start over
            limit = offset + allowed
            with partial.open("ab" if offset else "wb") as fh, \
                    _Background(fh.write, "write") as writer, _Background(digest.update, "sha256") as hasher:
                while chunk := resp.raw.read1(NET_CHUNK, decode_content=False):
                    if stop.is_set():
                        _stopped(label)
                    if offset + len(chunk) > max_size:
                        msg = (f"{label}: {redact_url(url)} sent more than {max_size} bytes without ending, above the bound "
                               f"of {max_size} bytes; if the file really is larger, declare its `size` in the "
                               f"manifest entry")
                        raise _TooBig(msg)
                    if offset + len(chunk) > limit:
                        raise _no_room(label, url, partial, received=offset)
                    writer.put(chunk)
                    hasher.put(chunk)
                    offset += len(chunk)
                    if progress:
                        progress(len(chunk))
            return digest, offset
    except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
        raise _Transient(str(exc) or type(exc).__name__) from None
    except requests.RequestException as exc:  # an invalid URL, a redirect loop: retrying will not help
        msg = f"{label}: {redact_url(url)} cannot be downloaded: {redact_url(str(exc))}"
        raise InputUnavailableError(msg) from None
    except OSError as exc:  # the partial file: disk full, no permission (requests' own errors are caught above)
        msg = f"{label}: cannot write {partial} ({exc.strerror or exc}); check the cache folder's space and permissions"
        if exc.errno in DISK_ERRNOS:  # another writer filled the disk first: this partial only holds its space
            raise _TooBig(msg + "; the partial download was removed") from None
        raise InputUnavailableError(msg) from None
    except Exception as exc:  # urllib3 errors surface raw from resp.raw.read1
        if type(exc).__module__.startswith("urllib3"):
            raise _Transient(f"{type(exc).__name__}: {exc}") from None
        raise
