"""Writing a file so that readers see the old content or the new, never a half-written one."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write to a temporary file beside `path`, flush it to disk, then rename it over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)  # mkstemp's 0600 would otherwise reach the user's file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def link_or_copy(source: Path, target: Path) -> None:
    """Give `target` the bytes of `source` without reading them when the file system allows (a hard link), else
    by a streamed copy: a multi-gigabyte input never passes through memory."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
