"""Artifacts the build derives from its inputs (the ORT wheel built from `capi`), cached by what they depend on.

A derived artifact is a pure function of its inputs: the hashes of the input files, the manifest values
that reach it, and the code that makes it. The key is the sha256 of all of those written out as JSON,
so a change to any one of them misses the cache and rebuilds; nothing is ever invalidated by time.

An entry is a folder `derived/<kind>/<key>/` holding the artifact and a `SHA256` file with its hash,
written in a temporary folder and renamed into place, so a crash leaves no half entry under a final
name. A hit is hashed again before use: a damaged entry is removed and rebuilt, never shipped.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundler.errors import BuildError
from bundler.hashing import file_sha256

DIGEST_FILE = "SHA256"


@dataclass(frozen=True, kw_only=True)
class Derived:
    """A cached artifact and its sha256 (checked when it was found or stored)."""

    path: Path
    sha256: str


@functools.lru_cache(maxsize=32)
def code_digest(modules: tuple[str, ...]) -> str:
    """The sha256 of the source files of the modules that make an artifact, plus what else shapes its bytes
    (the Python minor version, which `zipfile` comes with, and the zlib that deflates)."""
    digest = hashlib.sha256(f"python {sys.version_info[:2]} zlib {zlib.ZLIB_RUNTIME_VERSION}\n".encode())
    for name in sorted(modules):
        module = sys.modules[name]
        digest.update(f"{name}\n".encode())
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()


_SHA256: dict[tuple[int, int, int, int], str] = {}  # by file identity, see content_sha256


def content_sha256(path: Path) -> str:
    """A file's sha256, computed once per process for each file identity (device, inode, size,
    modification time): the wheel-binaries check, the PE facts and the signature evidence all key on it."""
    identity = _identity(path)
    if identity not in _SHA256:
        _remember(identity, file_sha256(path))
    return _SHA256[identity]


def known_sha256(path: Path, sha256: str) -> None:
    """Record the sha256 of a file just written (and hashed on the way: `SafeArchive.extract`), so
    `content_sha256` does not read it again; a link or a rename keeps the identity it is recorded under."""
    _remember(_identity(path), sha256)


def _identity(path: Path) -> tuple[int, int, int, int]:
    stat = path.stat()
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def _remember(identity: tuple[int, int, int, int], sha256: str) -> None:
    if len(_SHA256) >= 4096:
        _SHA256.clear()
    _SHA256[identity] = sha256


def read_entry(path: Path) -> Any:
    """A JSON entry of a derived-facts store, or None when it is missing or damaged (then it is made again)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_entry(path: Path, data: object) -> None:
    """Write a JSON entry beside its final name and rename it into place. No fsync: an entry lost to a crash
    is only made again, and a first build writes dozens of them."""
    make_folders(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def make_folders(path: Path) -> None:
    """Make `path` and the folders missing above it with mode 0755, which no umask makes writable by group or
    others: the cache holds only what its user alone can write (`bundler/sources/cache_trust.py`)."""
    for folder in reversed([folder for folder in (path, *path.parents) if not folder.exists()]):
        with contextlib.suppress(FileExistsError):  # another build made it first
            folder.mkdir(mode=0o755)


def derived_key(inputs: Mapping[str, object]) -> str:
    """The cache key of an artifact: the sha256 of its inputs as canonical JSON."""
    text = json.dumps(inputs, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class DerivedCache:
    root: Path  # e.g. <cache>/derived

    def find(self, kind: str, key: str) -> Derived | None:
        """The artifact stored under this key, if its bytes still hash to what was recorded."""
        folder = self.root / kind / key
        try:
            recorded = (folder / DIGEST_FILE).read_text(encoding="ascii").strip()
            files = [p for p in folder.iterdir() if p.name != DIGEST_FILE]
        except OSError:
            return None
        if len(files) == 1 and file_sha256(files[0]) == recorded:
            return Derived(path=files[0], sha256=recorded)
        shutil.rmtree(folder, ignore_errors=True)  # damaged or half-removed: rebuild it
        return None

    def store(self, kind: str, key: str, artifact: Path) -> Derived:
        """Move `artifact` into the cache under `key` and return where it now lives.

        Two builds storing the same key race harmlessly: both entries hold the same bytes, the first
        rename wins and the second build uses the winner's entry.
        """
        parent = self.root / kind
        make_folders(parent)
        staging = Path(tempfile.mkdtemp(dir=parent, prefix=".store-"))
        try:
            target = staging / artifact.name
            shutil.move(artifact, target)
            os.chmod(target, 0o644)  # made under the user's umask: writable by the user alone, as the cache requires
            sha256 = file_sha256(target)
            (staging / DIGEST_FILE).write_text(f"{sha256}\n", encoding="ascii")
            os.chmod(staging / DIGEST_FILE, 0o644)
            try:
                os.replace(staging, parent / key)
                return Derived(path=parent / key / artifact.name, sha256=sha256)  # hashed just now, in place
            except OSError:
                pass  # another build stored this key first
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        found = self.find(kind, key)
        if found is None:
            msg = f"{parent / key}: the derived-artifact cache lost the entry just stored"
            raise BuildError(msg)
        return found
