"""Temporary files beside their final name, locked while they are written, so the next run can tell a dead
run's leftovers (lock free, older than a minute) from a live one's and remove only those."""

from __future__ import annotations

import os
import stat
import tempfile
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: an open file cannot be deleted there, which is the guarantee the lock gives
    fcntl = None  # type: ignore[assignment]

# A temporary file this young and still empty may have been created by a live writer an instant before it
# took its lock; it is left for a later run rather than pulled from under that writer.
_NEWBORN_SECONDS = 60


def locked_temp(folder: Path, *, prefix: str, suffix: str = ".tmp") -> tuple[int, str]:
    """`mkstemp` in `folder`, then an exclusive lock on it for as long as the descriptor stays open."""
    fd, name = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=suffix)
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)  # blocks only while a cleaner briefly holds it to test it
    return fd, name


def remove_dead_temps(folder: Path, pattern: str) -> list[Path]:
    """Delete the temporary files matching `pattern` whose writer is gone; a live writer's file stays."""
    removed = []
    try:
        candidates = sorted(folder.glob(pattern))
    except OSError:
        return []
    for path in candidates:
        if _dead_temp(path):
            removed.append(path)
    return removed


def _dead_temp(path: Path) -> bool:
    """Remove `path` if no process holds its lock (POSIX) or has it open (Windows); True if removed."""
    try:
        if fcntl is None:
            path.unlink()  # fails while the writer has it open
            return True
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held: a live writer
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (info.st_size == 0 and time.time() - info.st_mtime < _NEWBORN_SECONDS):
            return False
        path.unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)
