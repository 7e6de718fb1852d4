"""The install folder as the engine finds it, before the stage is swapped in: whether it is ours, whether its
parent is safe to install into, and which files of an earlier install the stage carries over.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import List, Optional, Tuple

from ..folder_trust import posix_problem
from ..records import RECEIPT_FILE, InstallPlan, Receipt
from .engine_fs import WINDOWS, EngineError, Log, native, read_receipt, walk, walk_folders
from .installed import guarded_folders


def check_target(target: Path, plan: InstallPlan) -> Optional[Receipt]:
    """The receipt of our earlier install in `target`, None for a missing or empty folder; anything
    else (a link, a file, a foreign or broken receipt, a folder of someone else's files) is refused."""
    if target.is_symlink():
        raise EngineError("usage", f"{target} is a symbolic link; install into a real folder (nothing was changed)")
    if not target.exists():
        return None
    if not target.is_dir():
        raise EngineError("usage", f"{target} exists and is not a folder")
    receipt = read_receipt(target)
    if receipt is None:
        if any(target.iterdir()):
            raise EngineError("usage", f"{target} exists, is not empty and holds no receipt.json; choose another folder")
        return None
    if receipt.name != plan.name:
        raise EngineError("usage", f"{target} holds {receipt.install_id}, not an installation of {plan.name}; "
                                   f"nothing was changed: choose another folder")
    return receipt


def carry_over(previous: Optional[Receipt], target: Path, stage: Path, plan: InstallPlan,
               log: Optional[Log] = None) -> Tuple[str, ...]:
    """Files in the old install that are not ours (user data, a cache folder) are linked into the
    stage, so they survive the swap; the originals stay in place until the swap has happened.
    Nothing is carried into the environment or the DLL folders: what lies there decides what runs,
    and only the bundle's files belong there (a stray .pth or DLL stays behind with the old install)."""
    if previous is None:
        return ()
    ours = {entry.path for entry in previous.files} | {RECEIPT_FILE}
    guarded = tuple(folder + "/" for folder in guarded_folders(plan))
    kept, dropped = [], []
    for relative in walk(target):
        if relative in ours:
            continue
        if relative.startswith(guarded):
            dropped.append(relative)
            continue
        destination = native(stage, relative)
        if os.path.lexists(destination):
            continue  # the new install has its own file there
        destination.parent.mkdir(parents=True, exist_ok=True)
        source = native(target, relative)
        try:
            os.link(source, destination, follow_symlinks=False)
        except OSError:
            shutil.copy2(source, destination, follow_symlinks=False)
        kept.append(relative)
    empty: List[str] = []
    our_folders = set(previous.folders)
    for folder in walk_folders(target):  # a folder that is not ours and ends up without a file in the stage
        if folder in our_folders or native(stage, folder).is_dir():
            continue
        (dropped if folder.startswith(guarded) else empty).append(folder + "/")
    if log is not None:
        for reason, lost in (("only the bundle's files belong in the environment, DLL and code folders", sorted(dropped)),
                             ("empty folders that are not ours: only files are carried over", empty)):
            if lost:
                log(f"not carried over ({reason}): {_shown(lost)}")
    return tuple(sorted(kept))


def _shown(items: List[str]) -> str:
    return ", ".join(items[:5]) + (f" and {len(items) - 5} more" if len(items) > 5 else "")


def check_parent_posix(target: Path) -> None:
    """POSIX: the parent must not be writable by another user (Windows: windows_setup.check_parent reads its ACL).
    Whoever can write it can plant a `.NAME.previous-*` folder the next run would restore, or the folder itself."""
    if WINDOWS:
        return
    problem = posix_problem(os.stat(target.parent), euid=os.geteuid())
    if problem:
        raise EngineError("usage", f"the install folder's parent {target.parent} is not safe to install into: {problem}; "
                                   f"choose a folder only you (or root) can write (nothing was changed)")


def check_cache_dir_posix(cache_dir: Optional[str], target: Path) -> None:
    """POSIX: the cache folder the install records (--cache-dir) must not be one another user owns, or can write
    unless it is sticky (mode 1777, as /tmp: the launcher then gives each user a private folder in it). The
    launcher checks again at every start; this says so before anything is installed (issue 34, moderate)."""
    if WINDOWS or not cache_dir:
        return
    path = Path(os.path.normpath(os.path.join(str(target), cache_dir)))
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return  # each user's launcher makes it, private to that user
    if not stat.S_ISDIR(info.st_mode):
        problem: Optional[str] = "it is not a folder (a link or a file stands in its place)"
    else:
        problem = posix_problem(info, euid=os.geteuid())
        if problem and info.st_mode & stat.S_ISVTX and info.st_uid in (0, os.geteuid()):
            problem = None  # shared on purpose, as /tmp: each user works in a private folder inside it
    if problem:
        raise EngineError("usage", f"--cache-dir {cache_dir}: {path} is not safe as a cache folder: {problem}; use a "
                                   f"folder only root can write, or a shared one with mode 1777 (nothing was changed)")
