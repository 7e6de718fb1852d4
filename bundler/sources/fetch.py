"""Bring every pinned input into the cache: from the cache itself, a mirror, the network or pip.

Order of preference per input: already cached (by hash) → `--mirror DIR` (by file name, then by hash;
never the network) or `--mirror oci://HOST/REPO` (by digest from that registry alone) → its source. `--offline` stops after the cache. Inputs are fetched in parallel; each
hash is locked while it is fetched, so processes sharing a cache do the work once.
"""

from __future__ import annotations

import hashlib
import queue
import re
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundler.errors import BundleError, HashMismatchError, InputUnavailableError
from bundler.hashing import CHUNK, file_sha256, mismatch_message
from bundler.manifest import Input
from bundler.names import redact_url
from bundler.runner import Runner, run
from bundler.sources.cache import Cache, disk_errors
from bundler.sources.download import DEFAULT_MAX_DOWNLOAD, RetryPolicy, download
from bundler.sources.inputs import local_source
from bundler.sources.lock import Target

if TYPE_CHECKING:  # imported where they are used: a build from the cache never pays for them (0.1 s)
    import requests
    from tqdm import tqdm

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
    are the build machine's: `bundler/sources/gate.py`)."""
    from tqdm import tqdm

    cache.checked(cache.root)  # a cache another user could write is refused once, not once per input
    fetcher = _Fetcher(cache=cache, target=target, options=options, runner=runner, targets=targets or {})
    overall = tqdm(total=len(inputs), desc="inputs", unit="file", disable=options.quiet, position=0, leave=False)
    try:
        outcomes = _in_parallel(fetcher.fetch, inputs, jobs=options.jobs, stop=fetcher.stop,
                                done=lambda: _advance(overall))
    except BaseException:
        fetcher.stop.set()
        raise
    finally:
        overall.close()
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


def _note_mismatches(inputs: Sequence[Input], outcomes: Sequence[Path | BaseException | None], cache: Cache) -> None:
    """Keep what a mismatch was for `build` to name (bundler/sources/mismatches.py); a match clears it."""
    from bundler.sources import mismatches

    for item, outcome in zip(inputs, outcomes):
        if isinstance(outcome, HashMismatchError):
            mismatches.remember(cache, item, str(outcome))
        elif isinstance(outcome, Path):
            mismatches.forget(cache, item)


def _advance(bar: tqdm[Any]) -> None:
    bar.update(1)


def _add(bar: tqdm[Any], count: int) -> None:
    bar.update(count)


def _in_parallel(work: Callable[[Input], Path], inputs: Sequence[Input], *, jobs: int, stop: threading.Event,
                 done: Callable[[], None]) -> list[Path | BaseException | None]:
    """Run `work` on each input on daemon threads; the outcome of each, in input order.

    Daemon threads, not a ThreadPoolExecutor: the executor joins its threads at exit, so Ctrl-C during a
    stalled read would hang until the read timed out and the retries ran out. An abandoned thread leaves
    only a partial download, which is never under a final name.
    """
    pending: queue.SimpleQueue[int] = queue.SimpleQueue()
    for index in range(len(inputs)):
        pending.put(index)
    outcomes: list[Path | BaseException | None] = [None] * len(inputs)  # every slot is filled before returning
    finished = threading.Semaphore(0)

    def worker() -> None:
        while not stop.is_set():
            try:
                index = pending.get_nowait()
            except queue.Empty:
                return
            try:
                outcomes[index] = work(inputs[index])
            except BaseException as exc:  # handed to the caller, who decides what is fatal
                outcomes[index] = exc
            finished.release()

    for _ in range(min(max(1, jobs), len(inputs))):
        threading.Thread(target=worker, name="fetch", daemon=True).start()
    for _ in inputs:
        while not finished.acquire(timeout=0.5):  # a timed wait stays interruptible by Ctrl-C on Windows too
            pass
        done()
    return outcomes


class _Fetcher:
    def __init__(self, *, cache: Cache, target: Target, options: FetchOptions, runner: Runner,
                 targets: Mapping[str, Target]) -> None:
        self.cache = cache
        self.target = target
        self.targets = targets
        self.options = options
        self.runner = runner
        self.stop = threading.Event()  # set on Ctrl-C: downloads end at their next chunk
        self._slots = list(range(options.jobs, 0, -1))
        self._slot_lock = threading.Lock()
        self._mirror_index: dict[str, Path] | None = None
        self._local = threading.local()

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
            return self._adopt(item, tmp, digest.hexdigest(), item.filename or source.name)

    def _download(self, item: Input) -> Path:
        partial = self.cache.partial(item.sha256[0])
        with self._bar(item) as bar:
            actual = download(item.location, partial, label=item.key, session=self._session(),
                              progress=lambda n: _add(bar, n), policy=self.options.retry, stop=self.stop,
                              max_size=item.size or DEFAULT_MAX_DOWNLOAD, declared=item.size is not None)
        if actual not in item.sha256:
            partial.unlink(missing_ok=True)
            raise HashMismatchError(mismatch_message(item.key, item.location, item.sha256, actual))
        with self.cache.temporary() as tmp:
            partial.replace(tmp)
            return self.cache.adopt(tmp, sha256=actual, filename=item.filename or "download")

    def _from_pip(self, item: Input) -> Path:
        """pip download through the user's own pip configuration (index, proxy, certificates)."""
        target = self.targets.get(item.key, self.target)
        with self.cache.scratch(prefix="pip-") as tmp:
            dest = tmp / "out"
            reqs = tmp / "requirements.txt"
            hashes = " ".join(f"--hash=sha256:{h}" for h in item.sha256)
            reqs.write_text(f"{item.location} {hashes}\n", encoding="utf-8")
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
                   "--disable-pip-version-check", "--no-input", "--progress-bar", "off", "-d", str(dest),
                   *target.pip_target_args(), "-r", str(reqs)]
            try:
                self.runner(cmd)
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
            return self._adopt(item, files[0], file_sha256(files[0]), files[0].name)

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
            with self._bar(item) as bar:
                actual = mirror.registry.fetch_blob(blob, partial, label=item.key, progress=lambda n: _add(bar, n),
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

    def _bar(self, item: Input) -> _Bar:
        return _Bar(self, item)


class _Bar:
    """A per-file byte progress bar on its own line while the file downloads."""

    def __init__(self, fetcher: _Fetcher, item: Input) -> None:
        self.fetcher = fetcher
        self.item = item

    def __enter__(self) -> tqdm[Any]:
        with self.fetcher._slot_lock:
            self.slot = self.fetcher._slots.pop() if self.fetcher._slots else 1
        from tqdm import tqdm

        name = self.item.filename or self.item.key
        self.bar = tqdm(desc=name[:40], unit="B", unit_scale=True, unit_divisor=1024, leave=False,
                        position=self.slot, disable=self.fetcher.options.quiet)
        return self.bar

    def __exit__(self, *exc: object) -> None:
        self.bar.close()
        with self.fetcher._slot_lock:
            self.fetcher._slots.append(self.slot)


