"""Room for an install, on every file system it writes to, before anything is written.

The install folder is not the only one: VC_redist unpacks itself into the temp folder and the self-check's
sessions write there too, so a full temp drive used to fail half-way with a message about neither (issue 22,
m8). Where two folders are on one file system their needs are added up, since they share its free space.
Standard library only (the engine runs before any environment exists).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

from .engine_fs import EngineError

#: What the engine's own run and the self-check's sessions may write into the temp folder.
TEMP_MARGIN = 64 << 20


@dataclass(frozen=True)
class Need:
    folder: Path  # where the bytes go; it need not exist yet
    size: int
    what: str  # "the install", "the temp folder", as the message names it


def existing(path: Path) -> Path:
    """The nearest folder of `path` that exists: the one whose file system the bytes will land on."""
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def shortfalls(needs: Sequence[Need], *, device: Callable[[Path], int] = lambda p: os.stat(p).st_dev,
               free: Callable[[Path], int] = lambda p: shutil.disk_usage(str(p)).free) -> List[str]:
    """One sentence per file system without room for what is written to it; none when all fit."""
    groups: Dict[int, Tuple[Path, List[Need]]] = {}
    for need in needs:
        folder = existing(need.folder)
        groups.setdefault(device(folder), (folder, []))[1].append(need)
    problems = []
    for folder, members in groups.values():
        wanted = sum(need.size for need in members)
        available = free(folder)
        if available < wanted:
            parts = " and ".join(f"{need.what} needs {need.size >> 20} MB" for need in members)
            total = f" ({wanted >> 20} MB in all)" if len(members) > 1 else ""
            problems.append(f"only {available >> 20} MB free on the file system of {folder}, where {parts}{total}")
    return problems


def check(needs: Sequence[Need]) -> None:
    problems = shortfalls(needs)
    if problems:
        raise EngineError("prerequisite", "; ".join(problems) + " (nothing was changed)")


def temp_need(size: int = TEMP_MARGIN) -> Need:
    return Need(Path(tempfile.gettempdir()), size, "the temp folder")
