"""The content-addressed cache every input passes through.

A file is stored under its sha256 (`sha256/ab/abcd…/<file name>`), and only after its hash matched: it is
written to a temporary file in the cache and renamed into place, so a crash, SIGKILL or Ctrl-C never
leaves a wrong or partial file under a final name. Two processes that store the same content rename
identical bytes onto the same name, which is atomic and harmless; downloads of one hash are serialised by
a lock file so the second process waits and then finds the first one's file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import platformdirs
from filelock import FileLock

CACHE_ENV = "ORT_BUNDLER_CACHE"


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path(platformdirs.user_cache_dir("ort-bundler", appauthor=False))


def cached_sha256(path: Path) -> str:
    """The hash of a file found in the cache, which its folder is named after (verified on entry)."""
    return path.parent.name


@dataclass(frozen=True)
class Cache:
    root: Path

    def _dir(self, sha256: str) -> Path:
        return self.root / "sha256" / sha256[:2] / sha256

    def find(self, sha256: str, filename: str | None = None) -> Path | None:
        """The cached file with this hash, under `filename` when the input names one.

        The bundle takes file names from the cache, so an input must get its own name even when the
        same bytes arrived under another one: that copy is linked (or copied) to the wanted name, and
        what a build contains never depends on what else was fetched before.
        """
        folder = self._dir(sha256)
        try:
            names = sorted(p for p in folder.iterdir() if p.is_file())
        except FileNotFoundError:
            return None
        if not names or filename is None:
            return names[0] if names else None
        wanted = folder / filename
        if wanted not in names:
            with self.temporary() as tmp:
                tmp.unlink()
                try:
                    os.link(names[0], tmp)
                except OSError:
                    shutil.copyfile(names[0], tmp)
                self.adopt(tmp, sha256=sha256, filename=filename)
        return wanted

    def find_any(self, hashes: tuple[str, ...], filename: str | None = None) -> Path | None:
        for sha256 in hashes:
            found = self.find(sha256, filename)
            if found:
                return found
        return None

    def adopt(self, tmp: Path, *, sha256: str, filename: str) -> Path:
        """Move a verified temporary file (inside this cache) to its final name."""
        folder = self._dir(sha256)
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / filename
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
        return final

    @contextmanager
    def temporary(self, suffix: str = ".tmp") -> Iterator[Path]:
        """A temporary file on the cache's file system, removed unless adopted."""
        tmp_dir = self.root / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=tmp_dir, suffix=suffix)
        os.close(fd)
        path = Path(name)
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)

    def partial(self, sha256: str) -> Path:
        """Where an interrupted download of this hash keeps its bytes for resuming."""
        folder = self.root / "partial"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{sha256}.part"

    def lock(self, key: str) -> FileLock:
        folder = self.root / "locks"
        folder.mkdir(parents=True, exist_ok=True)
        return FileLock(folder / f"{key}.lock")

    def work_dir(self, name: str) -> Path:
        """A persistent working area (e.g. compressed members, isolated environments)."""
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path
