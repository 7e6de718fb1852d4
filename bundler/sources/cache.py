"""The content-addressed cache every input passes through.

A file is stored under its sha256 (`sha256/ab/abcd…/<file name>`), and only after its hash matched: it is
written to a temporary file in the cache and renamed into place, so a crash, SIGKILL or Ctrl-C never
leaves a wrong or partial file under a final name. Two processes that store the same content rename
identical bytes onto the same name, which is atomic and harmless; downloads of one hash are serialised by
a lock file so the second process waits and then finds the first one's file.

Nothing another local user could have written is used, let alone run: every folder the cache opens or
makes and every file it finds is held to `cache_trust.check` (owned by this user or root, writable by no
one else; the folders above it too, unless sticky), and a store whose entries are used by name is checked
whole when it is opened (`work_dir`).

Scratch space lives in `tmp/<token>/` folders, each guarded by `tmp/<token>.lock`, held for as long as the
folder is in use. The lock is taken before the folder exists and released after it is gone, so a folder
whose lock is free (or missing) belongs to a process that died (SIGKILL, power loss): the next process
that asks for scratch space removes it, and never touches a folder whose owner still runs.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import platformdirs
from filelock import FileLock, Timeout

from bundler.atomic import link_or_copy
from bundler.errors import BundleError, InputUnavailableError
from bundler.sources import cache_trust

# The OS errors that mean "this disk cannot take more" rather than a bug: translated into one sentence.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})
# ... and, for the cache's own folders, those that mean "not yours to write".
CACHE_ERRNOS = DISK_ERRNOS | {errno.EACCES, errno.EPERM}

CACHE_ENV = "ORT_BUNDLER_CACHE"
# A scratch folder's name (`build-` + 16 hex digits), and the build folders of versions without a lock.
_SCRATCH_RE = re.compile(r"^[a-z]+-[0-9a-f]{16}$")
_LEGACY_BUILD_RE = re.compile(r"^build-[a-z0-9_]{8}$")
# The working areas whose entries are this process's own (scratch, partial downloads checked by hash when
# done, lock files) or checked one by one before use (each model-gate environment, whole, before it runs):
# `work_dir` checks the folder, not all it holds. Every other area is used by name and checked whole.
_CHECKED_PER_ENTRY = frozenset({"tmp", "partial", "locks", "ort-envs"})


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
            return self.checked(names[0]) if names else None
        wanted = folder / filename
        if wanted in names:
            return self.checked(wanted)
        with self.temporary() as tmp:
            tmp.unlink()
            link_or_copy(self.checked(names[0]), tmp)
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
        final = folder / filename
        with _writable(folder):
            cache_trust.make_folder(folder, root=self.root)
            os.chmod(tmp, 0o644)
            os.replace(tmp, final)
        return final

    @contextmanager
    def temporary(self, suffix: str = ".tmp") -> Iterator[Path]:
        """A temporary file on the cache's file system, removed unless adopted (and by the next run after a crash)."""
        with self.scratch(prefix="file-") as folder:
            path = folder / f"file{suffix}"
            path.touch()
            yield path

    @contextmanager
    def scratch(self, *, prefix: str) -> Iterator[Path]:
        """A fresh folder under `tmp/` for this process alone, guarded by a lock and removed afterwards."""
        tmp = self.work_dir("tmp")
        self.remove_dead_scratch()
        token = f"{prefix}{secrets.token_hex(8)}"
        lock_path = tmp / f"{token}.lock"
        lock = FileLock(lock_path)
        with _writable(tmp):
            lock.acquire()
        folder = tmp / token
        try:
            with _writable(tmp):
                folder.mkdir(mode=0o700)  # this process's alone, whatever the umask
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            lock.release()
            lock_path.unlink(missing_ok=True)

    def remove_dead_scratch(self) -> list[Path]:
        """Remove the scratch folders under `tmp/` whose owner died; returns what was removed.

        Only names this class makes are considered (`<prefix>-<16 hex>` and its `.lock`), plus the
        `build-XXXXXXXX` folders of versions before the lock existed; anything else in `tmp/` (another
        command's temporary folder) is left alone, since nothing says whether its owner still runs.
        """
        tmp = self.root / "tmp"
        try:
            entries = sorted(tmp.iterdir())
        except OSError:  # no tmp/ yet, or unreadable: nothing of ours to clean
            return []
        removed = []
        for entry in entries:
            lock = tmp / f"{entry.name}.lock"
            if entry.suffix == ".lock" and _SCRATCH_RE.match(entry.stem):
                if not entry.with_suffix("").exists() and _free(entry):
                    entry.unlink(missing_ok=True)
            elif _SCRATCH_RE.match(entry.name) and (not lock.exists() or _free(lock)) or (
                    _LEGACY_BUILD_RE.match(entry.name) and not lock.exists()):
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
                lock.unlink(missing_ok=True)
                removed.append(entry)
        return removed

    def partial(self, sha256: str) -> Path:
        """Where an interrupted download of this hash keeps its bytes for resuming."""
        folder = self.work_dir("partial")
        return folder / f"{sha256}.part"

    def lock(self, key: str) -> FileLock:
        folder = self.work_dir("locks")
        with _writable(folder):
            (folder / f"{key}.lock").touch()
        return FileLock(folder / f"{key}.lock")

    def work_dir(self, name: str) -> Path:
        """A persistent working area (e.g. compressed members, isolated environments), made or opened only when
        no one else could have written it (`cache_trust`): checked whole unless its entries are checked one by
        one (`_CHECKED_PER_ENTRY`)."""
        path = self.root / name
        with _writable(path):
            cache_trust.make_folder(path, root=self.root)
        if name not in _CHECKED_PER_ENTRY:
            cache_trust.check(path, root=self.root, tree=True)
        return path

    def checked(self, path: Path, *, tree: bool = False) -> Path:
        """`path`, a file or folder in this cache, once `cache_trust` found that no one else could have written
        it nor any folder on the way to it (with `tree`, nor anything below it)."""
        cache_trust.check(path, root=self.root, tree=tree)
        return path


def _free(lock_path: Path) -> bool:
    """Whether nobody holds this lock: its owner has finished or died (the OS drops a dead process's locks)."""
    lock = FileLock(lock_path, timeout=0)
    try:
        lock.acquire()
    except (Timeout, OSError):
        return False
    lock.release()
    return True


@contextmanager
def _writable(path: Path) -> Iterator[None]:
    """A read-only, full or foreign-owned cache is named as such, instead of a traceback from deep inside."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in CACHE_ERRNOS:
            raise
        msg = (f"the cache folder {path} cannot be written ({exc.strerror}); make it writable, free space on its "
               f"disk, or pass --cache DIR (or set {CACHE_ENV}) for another one")
        raise InputUnavailableError(msg) from None


@contextmanager
def disk_errors(error: type[BundleError], what: str) -> Iterator[None]:
    """A disk that fills up (or turns read-only) mid-write, named in one sentence wherever it struck.

    For long stages that write many files through many libraries (the wheel build, the zip): the OS error
    carries what the user must know, and a traceback from zipfile adds nothing.
    """
    try:
        yield
    except OSError as exc:
        if exc.errno not in DISK_ERRNOS:
            raise
        if exc.filename:
            msg = f"{what}: cannot write {exc.filename} ({exc.strerror}); free space on that disk or choose another folder"
        else:  # zipfile and shutil often do not say which file
            msg = (f"{what}: a write failed ({exc.strerror}); free space on the disk of the cache (--cache) or of "
                   f"the output folder (-o), or choose others")
        raise error(msg) from None
