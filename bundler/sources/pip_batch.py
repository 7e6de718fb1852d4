"""The `requirement` wheels of one target fetched by one `pip download --require-hashes`, each read once.

One pip per wheel paid pip's start-up, its index look-ups and our own second hashing pass for every file
(issue 37: 1.4-2.0x a plain `pip download` of the same wheels). Here pip runs once per target with every
wheel's pinned hashes in its requirements file and `--require-hashes`: pip refuses to save a file whose
sha256 is not among the ones given for it, so a wheel pip downloaded is adopted under the hash it was held to
without reading it again.

That holds for what pip downloaded (or took from its own HTTP cache): it writes the file into its temporary
folder, which is pointed into this process's private scratch folder, checks the hash there and copies that
file. A wheel pip found on a local path (a `file://` index, `--find-links DIR`) is checked where it lies and
copied from there afterwards, so whoever can write that folder could swap it in between: such a file, and one
pinned with several hashes (to learn which), is hashed here again. pip's own log says which is which
("Downloading …" / "Using cached …"); a line it does not write means hashing, never trust.

pip does the transport, so its configuration (index, find-links, proxy, certificates, credentials) is the
user's own. While it runs, the bytes it has written so far (in its temporary folder, pointed into our scratch
folder, and in the download folder) are reported to the progress; pip's own bar stays off.

Anything unexpected (pip fails, a file that cannot be matched to one input) makes the batch give up without
adopting anything it cannot vouch for: the inputs it did not bring are then fetched one by one, which names
each failure (a hash mismatch with the hash pip got) exactly as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import unquote

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from bundler.errors import BundleError
from bundler.hashing import file_sha256
from bundler.manifest import Input
from bundler.runner import Runner
from bundler.sources.cache import Cache
from bundler.sources.lock import Target
from bundler.sources.progress import ByteProgress

logger = logging.getLogger(__name__)

#: Seconds between two looks at what pip has written.
POLL_INTERVAL = 0.25


def pip_download_command(requirements: Path, dest: Path, target: Target) -> list[str]:
    """pip download of a hash-pinned requirements file for `target`, no dependencies, pip's own bar off."""
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--disable-pip-version-check",
            "--no-input", "--progress-bar", "off", "-d", str(dest), *target.pip_target_args(), "-r", str(requirements)]


def requirement_line(item: Input) -> str:
    return f"{item.location} " + " ".join(f"--hash=sha256:{h}" for h in item.sha256)


def batches(items: Sequence[Input]) -> list[list[Input]]:
    """`items` split so that no batch names a project twice (pip would refuse a double requirement, and the
    file it saves must map to one input); items whose requirement does not parse are left out (fetched alone)."""
    out: list[list[Input]] = []
    names: list[set[str]] = []
    seen: set[tuple[str, ...]] = set()
    for item in items:
        name = project_name(item)
        if name is None or item.sha256 in seen:  # the same pinned bytes twice: the second is a cache hit
            continue
        seen.add(item.sha256)
        index = next((i for i, taken in enumerate(names) if name not in taken), len(out))
        if index == len(out):
            out.append([])
            names.append(set())
        out[index].append(item)
        names[index].add(name)
    return out


def project_name(item: Input) -> str | None:
    try:
        return canonicalize_name(Requirement(item.location).name)
    except InvalidRequirement:
        return None


def download_batch(items: Sequence[Input], *, target: Target, cache: Cache, runner: Runner,
                   progress: ByteProgress) -> dict[str, Path]:
    """Input key → cached file for every item pip saved; {} when pip failed (the caller fetches them one by one).

    The caller holds the cache's lock of every item."""
    with cache.scratch(prefix="pip-") as folder:
        try:
            dest, downloaded = pip_download(items, target=target, folder=folder, runner=runner, progress=progress)
        except BundleError as exc:
            logger.info("pip could not fetch the %d wheels together; fetching them one by one: %s", len(items), exc)
            return {}
        return _adopt_all(items, dest, cache, downloaded)


def pip_download(items: Sequence[Input], *, target: Target, folder: Path, runner: Runner,
                 progress: ByteProgress) -> tuple[Path, frozenset[str]]:
    """Run pip for `items` in `folder` (a scratch folder of the cache): the folder pip saved them in, and the file
    names pip says it downloaded (into its temporary folder, ours) rather than took from a local path.

    pip's temporary files go to `folder` too (TMPDIR), where they are watched for progress and removed with it."""
    dest, pip_tmp = folder / "out", folder / "tmp"
    dest.mkdir()
    pip_tmp.mkdir()
    requirements = folder / "requirements.txt"
    requirements.write_text("".join(requirement_line(item) + "\n" for item in items), encoding="utf-8")
    env = {**os.environ, "TMPDIR": str(pip_tmp), "TEMP": str(pip_tmp), "TMP": str(pip_tmp)}
    with _watch((pip_tmp, dest), progress):
        log = runner(pip_download_command(requirements, dest, target), env=env)
    return dest, downloaded_names(log)


def downloaded_names(log: str) -> frozenset[str]:
    """The wheel file names pip's log says it downloaded or took from its HTTP cache (by file name or by URL)."""
    return frozenset(unquote(match.group(1).rsplit("/", 1)[-1]) for match in _DOWNLOADED.finditer(log))


_DOWNLOADED = re.compile(r"^\s*(?:Downloading|Using cached) (\S+\.whl)(?:\s|$)", re.MULTILINE)


def verified_sha256(item: Input, path: Path, *, downloaded: frozenset[str]) -> str:
    """The sha256 of a file pip saved for `item` under `--require-hashes`. pip refused any other, so for a file
    it downloaded into our scratch folder with one pinned hash, it is that one; any other file is hashed."""
    if len(item.sha256) == 1 and path.name in downloaded:
        return item.sha256[0]
    return file_sha256(path)


def _adopt_all(items: Sequence[Input], dest: Path, cache: Cache, downloaded: frozenset[str]) -> dict[str, Path]:
    """Each saved wheel under the hash pip held it to; nothing when the files do not map one-to-one."""
    by_name: dict[str, Path] = {}
    for path in sorted(dest.iterdir()):
        try:
            name: str = canonicalize_name(parse_wheel_filename(path.name)[0])
        except InvalidWheelFilename:
            logger.info("pip saved %s, not a wheel; fetching the batch one by one", path.name)
            return {}
        by_name[name] = path
    wanted = {str(project_name(item)): item for item in items}
    if set(by_name) != set(wanted):
        logger.info("pip saved %s for %s; fetching the batch one by one", sorted(by_name), sorted(wanted))
        return {}
    adopted = {}
    for name, item in wanted.items():
        path = by_name[name]
        sha256 = verified_sha256(item, path, downloaded=downloaded)
        if sha256 not in item.sha256:  # changed after pip's check: left to `fetch_one`, which names the mismatch
            logger.info("pip saved %s with sha256 %s, not pinned for %s", path.name, sha256, item.key)
            continue
        adopted[item.key] = cache.adopt(path, sha256=sha256, filename=path.name)
    return adopted


@contextlib.contextmanager
def _watch(folders: Sequence[Path], progress: ByteProgress) -> Iterator[None]:
    """Report, while the block runs, the bytes written below `folders` (a file pip copies from its temporary
    folder to the download folder counts once: by name, the larger of its two sizes)."""
    if progress.quiet:  # nothing to show: no thread walking the folders
        yield
        return
    stop = threading.Event()
    seen = 0

    def poll() -> None:
        nonlocal seen
        sizes: dict[str, int] = {}
        for folder in folders:
            for root, _, names in os.walk(folder):
                for name in names:
                    with contextlib.suppress(OSError):  # pip renames and removes as it goes
                        sizes[name] = max(sizes.get(name, 0), os.stat(os.path.join(root, name)).st_size)
        now = sum(sizes.values())
        if now > seen:
            progress.add(now - seen)
            seen = now

    def loop() -> None:
        while not stop.wait(POLL_INTERVAL):
            poll()

    watcher = threading.Thread(target=loop, name="pip-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
        poll()
