"""The install engine's file-system side: errors and log, hashing and walking a tree, the "stays below
its root" check for a path on disk, the lock that proves a leftover is dead, cleaning leftovers, the
atomic swap, and reading and writing the receipt. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator, List, Mapping, Optional, Sequence, TextIO, Tuple

from ..records import RECEIPT_FILE, InstalledFile, Receipt, RecordError, safe_relative

WINDOWS = os.name == "nt"
STAGING = ".staging-"
PREVIOUS = ".previous-"


class EngineError(Exception):
    """A failure with the installer exit code it maps to (a key of INSTALL_EXIT_CODES)."""

    def __init__(self, code: str, message: str, *, logged: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.logged = logged  # already written to the log by the step that raised it


class Log:
    """Timestamped lines, also appended to the log file when one is given: progress and warnings on stdout, and only
    the line that says why a run failed (`error`) on stderr. Windows PowerShell 5.1 turns every line a native
    program writes to stderr into an error record where stderr is captured (ISE, remoting, `2>&1`), which a caller's
    `$ErrorActionPreference = 'Stop'` makes fatal mid-way: a run that succeeds writes nothing there."""

    def __init__(self, path: Optional[Path]) -> None:
        self.path = path

    def __call__(self, message: str) -> None:
        self._write(message, sys.stdout)

    def error(self, message: str) -> None:
        self._write(f"ERROR: {message}", sys.stderr)

    def _write(self, message: str, stream: TextIO) -> None:
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {message}"
        print(line, file=stream, flush=True)
        if self.path is not None:
            with contextlib.suppress(OSError), open(self.path, "a", encoding="utf-8") as log:
                log.write(line + "\n")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def entry_sha256(path: Path) -> str:
    """A file's sha256; a symbolic link (the venv's bin/python) is recorded by its target text."""
    if path.is_symlink():
        return hashlib.sha256(b"symlink:" + os.fsencode(os.readlink(path))).hexdigest()
    return file_sha256(path)


def native(root: Path, relative: str) -> Path:
    return root.joinpath(*relative.split("/"))


def inside(root: Path, relative: str, *, what: str) -> Path:
    """`root / relative` for a checked relative path, refused when a link on the way leaves `root`."""
    path = root.joinpath(*safe_relative(relative, what=what).split("/"))
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(path.parent)]) != real_root:
        raise EngineError("usage", f"{what} {relative} leads outside {root} through a link; nothing was changed")
    return path


def walk(root: Path) -> List[str]:
    """Every file and link below `root`, '/'-separated and sorted; links are never followed."""
    found = []
    for folder, dirs, files in os.walk(root):
        base = Path(folder).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        found += [prefix + name for name in files]
        found += [prefix + name for name in dirs if os.path.islink(os.path.join(folder, name))]
    return sorted(found)


def walk_folders(root: Path) -> Tuple[str, ...]:
    """Every folder below `root` (not through links), '/'-separated and sorted."""
    found = []
    for folder, dirs, _ in os.walk(root):
        base = Path(folder).relative_to(root).as_posix()
        found += [("" if base == "." else base + "/") + name for name in dirs
                  if not os.path.islink(os.path.join(folder, name))]
    return tuple(sorted(found))


def hash_tree(root: Path, skip: Sequence[str], known: Mapping[str, str]) -> Tuple[InstalledFile, ...]:
    """Every file below `root` with its sha256; `known` ({absolute path: sha256} of what this run wrote
    itself and never changed since) spares reading those again."""
    paths = [rel for rel in walk(root) if rel not in set(skip)]

    def digest(rel: str) -> str:
        path = native(root, rel)
        return known.get(os.path.normpath(str(path))) or entry_sha256(path)

    with ThreadPoolExecutor(max_workers=4) as pool:
        digests = list(pool.map(digest, paths))
    return tuple(InstalledFile(path=rel, sha256=value) for rel, value in zip(paths, digests))


def remove_tree(path: Path) -> None:
    """Remove a folder we made, never following a link out of it (a link itself is just unlinked)."""
    if path.is_symlink() or not path.is_dir():
        path.unlink()
    else:
        shutil.rmtree(path)


@contextlib.contextmanager
def target_lock(target: Path) -> Iterator[None]:
    """One run per target at a time; holding it proves every staging/previous leftover is dead.

    A lock on `.<leaf>.lock` in the parent, one per target, so installs into sibling folders do not wait for
    each other, removed when the run ends. POSIX: flock on a file opened without following links; a run
    that locked a file another run has since removed sees that its inode is no longer the path's and
    takes the lock again. Windows: a byte lock (open files cannot be removed there while held).
    """
    busy = EngineError("retry", f"another installation into {target} is running; retry when it has finished")
    lock_path = target.parent / f".{target.name}.lock"
    if WINDOWS:
        import msvcrt

        handle = open(lock_path, "a+b")
        try:
            try:
                msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
            except OSError:
                raise busy from None
            yield
        finally:
            handle.close()
            with contextlib.suppress(OSError):
                lock_path.unlink()
        return
    import fcntl

    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:  # a link or a folder planted under the lock's name
            raise EngineError("install", f"cannot open the lock file {lock_path} ({exc.strerror}); remove it if no "
                                         f"installation is running (nothing was changed)") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise busy from None
        try:
            same = os.fstat(fd).st_ino == os.lstat(lock_path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the run before removed it after we opened it: lock the path's file instead
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock_path.unlink()  # while still held: a run waiting on this inode sees it gone and starts again
        os.close(fd)


def leftovers(target: Path) -> Tuple[List[Path], List[Path]]:
    """(staging, previous) folders a run into `target` made and did not remove."""
    prefix = f".{target.name}"
    names = sorted(os.listdir(target.parent)) if target.parent.is_dir() else []
    staging = [target.parent / n for n in names if n.startswith(prefix + STAGING)]
    previous = [target.parent / n for n in names if n.startswith(prefix + PREVIOUS)]
    return staging, previous


def journal_path(target: Path) -> Path:
    """Where a swap without an atomic exchange records the one previous-install folder it is making."""
    return target.parent / f".{target.name}.swap"


def recover(target: Path, log: Log) -> None:
    """Under the lock: finish or undo what a killed run left. A missing target with the previous-* folder
    that the journal names means a kill between the two renames of a non-atomic swap: that folder is the
    install. Any other leftover is removed, never adopted: a folder that someone planted beside the target
    (with a receipt and modules of their choosing) must not become the installation."""
    staging, previous = leftovers(target)
    journal = journal_path(target)
    recorded = None
    if journal.is_file() and not journal.is_symlink():
        recorded = journal.read_text(encoding="utf-8").strip()
    restore = [path for path in previous if path.name == recorded and not path.is_symlink() and path.is_dir()]
    if restore and not os.path.lexists(target):
        os.rename(restore[0], target)
        log(f"restored the previous installation {target} that an interrupted run had moved aside")
        previous.remove(restore[0])
    for path in staging + previous:
        remove_tree(path)
        log(f"removed {path}, left by an interrupted run")
    if os.path.lexists(journal):
        journal.unlink()


def _exchange(a: Path, b: Path) -> bool:
    """Linux renameat2(RENAME_EXCHANGE): both names stay valid at every instant. False when unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    function = getattr(libc, "renameat2", None)
    if function is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if function(at_fdcwd, os.fsencode(str(a)), at_fdcwd, os.fsencode(str(b)), rename_exchange) == 0:
        return True
    return False


def swap(stage: Path, target: Path) -> Optional[Path]:
    """Put the stage at `target`; returns the folder now holding the old install (to delete), if any."""
    if not os.path.lexists(target):
        os.rename(stage, target)
        return None
    if _exchange(stage, target):
        return stage
    previous = target.parent / f".{target.name}{PREVIOUS}{os.urandom(6).hex()}"
    journal = journal_path(target)
    journal.write_text(previous.name + "\n", encoding="utf-8")
    os.rename(target, previous)  # fails, never follows, if something already has that name
    try:
        os.rename(stage, target)
    except OSError as exc:
        os.rename(previous, target)
        journal.unlink()
        raise EngineError("in_use" if WINDOWS else "install", f"cannot move the new installation into {target}: {exc} "
                                                              f"(is a program from it still running?); nothing was changed") from None
    journal.unlink()
    return previous


def write_receipt(root: Path, receipt: Receipt) -> None:
    """Written beside and renamed over, so a receipt is always whole."""
    temporary = root / f".{RECEIPT_FILE}.tmp"
    temporary.write_text(receipt.dumps(), encoding="utf-8")
    os.replace(temporary, root / RECEIPT_FILE)


def read_receipt(root: Path) -> Optional[Receipt]:
    """The receipt in `root`, None when there is none; a receipt that is not ours is a usage error."""
    path = root / RECEIPT_FILE
    if not os.path.lexists(path):
        return None
    if path.is_symlink() or not path.is_file():
        raise EngineError("usage", f"{path} is not a regular file; this folder was not made by this installer")
    try:
        return Receipt.loads(path.read_text(encoding="utf-8"), source=str(path))
    except (RecordError, UnicodeDecodeError) as exc:
        raise EngineError("usage", f"{root} holds a receipt.json this installer did not write ({exc}); nothing was "
                                   f"changed: choose another folder or remove it yourself") from None
