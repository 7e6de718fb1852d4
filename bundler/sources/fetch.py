"""Bring every pinned input into the cache: from the cache itself, a mirror, the network or pip.

Order of preference per input: already cached (by hash) → `--mirror DIR` (by file name, then by hash;
never the network) or `--mirror oci://HOST/REPO` (by digest from that registry alone) → its source. `--offline` stops after the cache. Inputs are fetched in parallel; each
hash is locked while it is fetched, so processes sharing a cache do the work once.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import queue
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bundler.errors import BundleError, HashMismatchError, InputUnavailableError
from bundler.hashing import CHUNK, file_sha256, mismatch_message
from bundler.manifest import Input
from bundler.names import redact_url
from bundler.runner import Runner, run
from bundler.sources.cache import Cache, disk_errors
from bundler.sources.download import DEFAULT_MAX_DOWNLOAD, RetryPolicy, download
from bundler.sources.inputs import local_source
from bundler.sources.lock import Target
from bundler.sources.progress import ByteProgress

if TYPE_CHECKING:  # imported where they are used: a build from the cache never pays for them (0.1 s)
    import requests

    from bundler.sources.oci_inputs import RegistryMirror


@dataclass(frozen=True, kw_only=True)
class FetchOptions:
    offline: bool = False
    mirror: Path | None = None
    registry: RegistryMirror | None = None  # `--mirror oci://…`: inputs by digest from a registry, nothing else
    jobs: int = 4
    quiet: bool = False
    retry: RetryPolicy = RetryPolicy()


def cached_inputs(inputs: Sequence[Input], cache: Cache) -> dict[str, Path]:
    """The cached file of every input, or one error listing all that are missing."""
    from bundler.sources import mismatches

    found: dict[str, Path] = {}
    missing: list[str] = []
    seen_wrong: list[str] = []
    cache.checked(cache.root)
    for item in inputs:
        path = cache.find_any(item.sha256, item.filename)
        note = mismatches.recalled(cache, item) if path is None else None
        if note is not None:
            seen_wrong.append(f"{note} (as `ort-bundler fetch` found it; correct the sha256 or the source, then fetch "
                              "again)")
        elif path is None:
            missing.append(item.display)
        else:
            found[item.key] = path
    if seen_wrong:
        also = [f"also not in the cache ({cache.root}): " + "; ".join(missing)] if missing else []
        raise HashMismatchError("\n".join([*seen_wrong, *also]))
    if missing:
        msg = f"not in the cache ({cache.root}), run `ort-bundler fetch` first: " + "; ".join(missing)
        raise InputUnavailableError(msg)
    return found


def fetch_inputs(inputs: Sequence[Input], *, cache: Cache, target: Target, options: FetchOptions = FetchOptions(),
                 runner: Runner = run, targets: Mapping[str, Target] | None = None) -> dict[str, Path]:
    """Fetch every input (in parallel) and return key → cached file; all failures are reported together.

    pip fetches a `requirement` for `target`, or for `targets[key]` when given there (the model gate's wheels
    are the build machine's: `bundler/sources/gate.py`): all of one target's in one `pip download`
    (`bundler/sources/pip_batch.py`), alongside the other inputs' downloads; those pip did not bring are then
    fetched one by one, which names each failure. The bytes moved show on stderr (`bundler/sources/progress.py`)."""
    cache.checked(cache.root)  # a cache another user could write is refused once, not once per input
    with ByteProgress("fetch", files=len(inputs), quiet=options.quiet) as progress:
        fetcher = _Fetcher(cache=cache, target=target, options=options, runner=runner, targets=targets or {},
                           progress=progress)
        outcomes = _fetch_all(fetcher, inputs)
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, BundleError):
            raise outcome
    _note_mismatches(inputs, outcomes, cache)
    errors = [o for o in outcomes if isinstance(o, BundleError)]
    if errors:
        # One exit code for the lot: a hash mismatch (a wrong pin or a tampered source) outranks the rest.
        if any(isinstance(e, HashMismatchError) for e in errors):
            kind: type[BundleError] = HashMismatchError
        elif all(type(e) is type(errors[0]) for e in errors):
            kind = type(errors[0])
        else:
            kind = InputUnavailableError
        raise kind("\n".join(dict.fromkeys(str(e) for e in errors)))  # a folder all inputs share is named once
    return {item.key: path for item, path in zip(inputs, outcomes) if isinstance(path, Path)}


def _fetch_all(fetcher: _Fetcher, inputs: Sequence[Input]) -> list[object]:
    """The outcome of each input, in input order: pip's batches beside every other input first, then, one by one,
    the requirements no batch brought (a failed batch, or an input pinned twice)."""
    batched = fetcher.batches(inputs)
    others = [index for index, item in enumerate(inputs) if not fetcher.batchable(item)]
    work: list[Callable[[], object]] = [functools.partial(fetcher.fetch_batch, batch) for batch in batched]
    work += [functools.partial(fetcher.fetch_one, inputs[index]) for index in others]
    try:
        first = _in_parallel(work, jobs=fetcher.options.jobs, stop=fetcher.stop)
        brought: dict[str, Path] = {}
        for outcome in first[:len(batched)]:
            if isinstance(outcome, BaseException) and not isinstance(outcome, BundleError):
                raise outcome  # Ctrl-C or a bug; a batch's own failure is its inputs' to name, one by one, below
            if isinstance(outcome, dict):
                brought.update(outcome)
        found = dict(zip(others, first[len(batched):]))
        found |= {index: brought[item.key] for index, item in enumerate(inputs)
                  if index not in found and item.key in brought}
        rest = [index for index in range(len(inputs)) if index not in found]
        found |= dict(zip(rest, _in_parallel([functools.partial(fetcher.fetch_one, inputs[index]) for index in rest],
                                             jobs=fetcher.options.jobs, stop=fetcher.stop)))
    except BaseException:
        fetcher.stop.set()
        raise
    return [found[index] for index in range(len(inputs))]


def _note_mismatches(inputs: Sequence[Input], outcomes: Sequence[object], cache: Cache) -> None:
    """Keep what a mismatch was for `build` to name (bundler/sources/mismatches.py); a match clears it."""
    from bundler.sources import mismatches

    for item, outcome in zip(inputs, outcomes):
        if isinstance(outcome, HashMismatchError):
            mismatches.remember(cache, item, str(outcome))
        elif isinstance(outcome, Path):
            mismatches.forget(cache, item)


def _in_parallel(work: Sequence[Callable[[], object]], *, jobs: int, stop: threading.Event) -> list[object]:
    """Run each piece of `work` on daemon threads; the outcome of each (a result or the exception), in order.

    Daemon threads, not a ThreadPoolExecutor: the executor joins its threads at exit, so Ctrl-C during a
    stalled read would hang until the read timed out and the retries ran out. An abandoned thread leaves
    only a partial download, which is never under a final name.
    """
    pending: queue.SimpleQueue[int] = queue.SimpleQueue()
    for index in range(len(work)):
        pending.put(index)
    outcomes: list[object] = [None] * len(work)  # every slot is filled before returning
    finished = threading.Semaphore(0)

    def worker() -> None:
        while not stop.is_set():
            try:
                index = pending.get_nowait()
            except queue.Empty:
                return
            try:
                outcomes[index] = work[index]()
            except BaseException as exc:  # handed to the caller, who decides what is fatal
                outcomes[index] = exc
            finished.release()

    for _ in range(min(max(1, jobs), len(work))):
        threading.Thread(target=worker, name="fetch", daemon=True).start()
    for _ in work:
        while not finished.acquire(timeout=0.5):  # a timed wait stays interruptible by Ctrl-C on Windows too
            pass
    return outcomes


class _Fetcher:
    def __init__(self, *, cache: Cache, target: Target, options: FetchOptions, runner: Runner,
                 targets: Mapping[str, Target], progress: ByteProgress) -> None:
        self.cache = cache
        self.target = target
        self.targets = targets
        self.options = options
        self.runner = runner
        self.progress = progress
        self.stop = threading.Event()  # set on Ctrl-C: downloads end at their next chunk
        self._slot_lock = threading.Lock()
        self._mirror_index: dict[str, Path] | None = None
        self._local = threading.local()

    def batchable(self, item: Input) -> bool:
        """A requirement pip fetches in a batch: from its source, not from a mirror, a registry or the cache alone."""
        options = self.options
        return item.kind == "requirement" and not options.offline and options.mirror is None and options.registry is None

    def batches(self, inputs: Sequence[Input]) -> list[list[Input]]:
        """The batchable inputs not yet cached, grouped for one `pip download` each (one target, distinct projects)."""
        from bundler.sources.pip_batch import batches

        by_target: dict[Target, list[Input]] = {}
        for item in inputs:
            if self.batchable(item) and self.cache.find_any(item.sha256, item.filename) is None:
                by_target.setdefault(self.targets.get(item.key, self.target), []).append(item)
        return [batch for items in by_target.values() for batch in batches(items)]

    def fetch_batch(self, items: Sequence[Input]) -> dict[str, Path]:
        """Key → cached file of the `items` one pip run brought (all of one target), holding each one's lock so
        that processes sharing the cache do the work once; what it did not bring is left to `fetch_one`."""
        from bundler.sources.pip_batch import download_batch

        target = self.targets.get(items[0].key, self.target)
        with contextlib.ExitStack() as locks, disk_errors(InputUnavailableError, "pip's wheels: the cache's disk"):
            for item in sorted(items, key=lambda item: item.sha256[0]):  # one order for all: no process waits in a circle
                locks.enter_context(self.cache.lock(item.sha256[0]))
            found = {item.key: self.cache.find_any(item.sha256, item.filename) for item in items}
            cached = {key: path for key, path in found.items() if path is not None}
            wanted = [item for item in items if item.key not in cached]
            brought = download_batch(wanted, target=target, cache=self.cache, runner=self.runner,
                                     progress=self.progress) if wanted else {}
        for _ in [*cached, *brought]:
            self.progress.file_done()
        return cached | brought

    def fetch_one(self, item: Input) -> Path:
        """`fetch`, counted as one more file done, whatever the outcome."""
        try:
            return self.fetch(item)
        finally:
            self.progress.file_done()

    def fetch(self, item: Input) -> Path:
        """The cached file of `item`; a full or read-only cache disk met anywhere on the way (pip's scratch,
        a copy, a link) is exit 4 naming the input, as for a download, never an internal error."""
        with disk_errors(InputUnavailableError, f"{item.key}: the cache's disk"):
            return self._fetch(item)

    def _fetch(self, item: Input) -> Path:
        found = self.cache.find_any(item.sha256, item.filename)
        if found:
            return found
        local = local_source(item)
        if self.options.offline and local is None:  # a local file is read from disk, which --offline allows
            msg = f"{item.display}: not in the cache ({self.cache.root}) and --offline forbids the network"
            raise InputUnavailableError(msg)
        with self.cache.lock(item.sha256[0]):
            found = self.cache.find_any(item.sha256, item.filename)  # another process may have finished it
            if found:
                return found
            if self.options.mirror is not None:
                return self._from_mirror(item)
            if self.options.registry is not None:
                return self._from_registry(item, self.options.registry)
            if item.kind == "requirement":
                return self._from_pip(item)
            if local is not None:
                return self._copy(item, local)
            return self._download(item)

    # -- sources ----------------------------------------------------------------------------------

    def _copy(self, item: Input, source: Path) -> Path:
        if not source.is_file():
            msg = f"{item.display}: file not found"
            raise InputUnavailableError(msg)
        with self.cache.temporary() as tmp:
            digest = hashlib.sha256()
            with source.open("rb") as src, tmp.open("wb") as dst:
                while chunk := src.read(CHUNK):
                    digest.update(chunk)
                    dst.write(chunk)
                    self.progress.add(len(chunk))
            return self._adopt(item, tmp, digest.hexdigest(), item.filename or source.name)

    def _download(self, item: Input) -> Path:
        partial = self.cache.partial(item.sha256[0])
        actual = download(item.location, partial, label=item.key, session=self._session(), progress=self.progress.add,
                          policy=self.options.retry, stop=self.stop, max_size=item.size or DEFAULT_MAX_DOWNLOAD,
                          declared=item.size is not None)
        if actual not in item.sha256:
            partial.unlink(missing_ok=True)
            raise HashMismatchError(mismatch_message(item.key, item.location, item.sha256, actual))
        with self.cache.temporary() as tmp:
            partial.replace(tmp)
            return self.cache.adopt(tmp, sha256=actual, filename=item.filename or "download")

    def _from_pip(self, item: Input) -> Path:
        """pip download through the user's own pip configuration (index, proxy, certificates), pip checking the
        hash (`--require-hashes`): a file it downloaded is not read again here (bundler/sources/pip_batch.py)."""
        from bundler.sources.pip_batch import pip_download, verified_sha256

        target = self.targets.get(item.key, self.target)
        with self.cache.scratch(prefix="pip-") as tmp:
            try:
                dest, downloaded = pip_download([item], target=target, folder=tmp, runner=self.runner,
                                                progress=self.progress)
            except BundleError as exc:
                if "DO NOT MATCH THE HASHES" in str(exc):
                    actual = re.findall(r"Got\s+([0-9a-f]{64})", str(exc))
                    source = f"{item.location} ({item.filename})" if item.filename else item.location
                    raise HashMismatchError(mismatch_message(item.key, source, item.sha256,
                                                             actual[0] if actual else "unknown (see pip's report)")) from None
                msg = (f"{item.display}: pip could not download it for {target.platform} / Python {target.python}: "
                       f"{redact_url(str(exc))}")
                raise InputUnavailableError(msg) from None
            files = sorted(dest.iterdir())
            if len(files) != 1:
                msg = f"{item.display}: pip produced {len(files)} files, expected exactly one wheel"
                raise InputUnavailableError(msg)
            return self._adopt(item, files[0], verified_sha256(item, files[0], downloaded=downloaded), files[0].name)

    def _from_mirror(self, item: Input) -> Path:
        mirror = self.options.mirror
        assert mirror is not None
        candidates = [mirror / item.filename] if item.filename else []
        candidates += [mirror / h for h in item.sha256]
        mismatch: HashMismatchError | None = None
        for candidate in candidates:
            if candidate.is_file():
                try:
                    return self._copy(item, candidate)
                except HashMismatchError as exc:  # e.g. an older VC_redist.x64.exe: the pinned one may be elsewhere
                    mismatch = mismatch or exc
        for sha256 in item.sha256:
            hit = self._mirror_by_hash().get(sha256)
            if hit:
                return self._copy(item, hit)
        if mismatch:
            raise mismatch
        msg = f"{item.display}: not found in the mirror {mirror} by file name or sha256, and --mirror never uses the network"
        raise InputUnavailableError(msg)

    def _from_registry(self, item: Input, mirror: RegistryMirror) -> Path:
        """By digest from the registry, through the same resumable, hashing download as a URL input."""
        for sha256 in item.sha256:
            blob = mirror.blob(sha256)
            if blob is None:
                continue
            filename = mirror.filename(item, sha256)
            partial = self.cache.partial(sha256)
            actual = mirror.registry.fetch_blob(blob, partial, label=item.key, progress=self.progress.add,
                                                stop=self.stop, policy=self.options.retry)
            if actual != sha256:
                partial.unlink(missing_ok=True)
                raise HashMismatchError(mismatch_message(item.key, mirror.registry.blob_url(blob.digest), sha256, actual))
            with self.cache.temporary() as tmp:
                partial.replace(tmp)
                return self.cache.adopt(tmp, sha256=actual, filename=filename)
        msg = (f"{item.display}: not in the registry {mirror} (no blob sha256:{item.sha256[0]}), and --mirror never "
               f"uses the network; run `ort-bundler cache push` for this manifest on a connected machine")
        raise InputUnavailableError(msg)

    # -- helpers ----------------------------------------------------------------------------------

    def _adopt(self, item: Input, tmp: Path, actual: str, filename: str) -> Path:
        if actual not in item.sha256:
            raise HashMismatchError(mismatch_message(item.key, item.location, item.sha256, actual))
        return self.cache.adopt(tmp, sha256=actual, filename=filename)

    def _mirror_by_hash(self) -> dict[str, Path]:
        """Hash every file of the mirror once, for inputs whose file name differs there."""
        with self._slot_lock:
            if self._mirror_index is None:
                assert self.options.mirror is not None
                files = sorted(p for p in self.options.mirror.rglob("*") if p.is_file())
                self._mirror_index = {file_sha256(p): p for p in files}
            return self._mirror_index

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            import requests

            session = self._local.session = requests.Session()
        return session
