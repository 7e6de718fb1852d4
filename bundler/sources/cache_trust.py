"""Whether what lies in the cache could have been written by another local user: the one place that decides.

The cache holds what the build runs and ships: the model gate's Python environments (`ort-envs/`), the
verdicts and derived facts it reuses by name (`gate-results/`, `derived/`, `members/`, `templates/`,
`bundles/`) and every verified input (`sha256/`). Whoever can write any of it runs code as the builder or
changes the release, so the rule is the one ssh applies to a key file (sshd's StrictModes, OpenSSH's
`safe_path`):

- the cache folder and every folder or file in it that is used is owned by the running user or root and
  writable by no one else;
- every folder above the cache, up to `/`, is owned by the running user or root and writable by no one
  else unless it is sticky (as `/tmp` is: others may add names there, but not replace or remove ours).

"Writable by no one else" counts group write as harmless only when the group is the owner's own private
group (its one member is the owner: Debian's and Ubuntu's umask 002 for such users), as Debian's ssh does.
Anything else is refused with `InputUnavailableError` (exit 4), one sentence naming the folder, its owner
and mode, and what is expected. `Cache` (`bundler/sources/cache.py`) calls `check` when it opens or makes
a folder and when it finds a file; the model gate checks its environment's whole tree with it before it
starts the interpreter there (`bundler/assembly/ortenv.py`). Windows keeps per-user folders private by
their access control lists and is not checked here.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
from pathlib import Path

from bundler.errors import InputUnavailableError

#: The mode of a folder the cache makes (the umask may take more away, never add write for others).
FOLDER_MODE = 0o755
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def check(path: Path, *, root: Path | None = None, tree: bool = False) -> None:
    """Refuse `path` unless nobody but this user (or root) could have written it.

    `root` is the cache folder holding `path`: root and every folder from it down to `path` must be safe
    with no exception, the folders above root safe or sticky. Without `root`, every folder above `path` is
    held to the rule for folders above the cache. With `tree`, everything below `path` is checked as well
    (an environment whose interpreter is started, a store whose entries are used by name). A name that
    does not exist (yet) passes: nothing is used from it, and what this process makes there is its own.
    """
    if os.name == "nt":
        return
    if root is None:
        top = Path(os.path.realpath(path.parent))
        above, chain = [*reversed(top.parents), top], [top / path.name]
    else:
        top = Path(os.path.realpath(root))
        inside = path.relative_to(root).parts
        above = list(reversed(top.parents))
        chain = [top, *(top.joinpath(*inside[: index + 1]) for index in range(len(inside)))]
    for folder in above:
        _refuse(folder, above=True)
    for entry in chain:
        _refuse(entry, above=False)
        if entry.is_symlink():  # made by this user (or root, _refuse said so): where it leads is held to the rule too
            check(Path(os.path.realpath(entry)))
    if tree:
        _check_tree(chain[-1])


def make_folder(path: Path, *, root: Path | None = None) -> Path:
    """Make `path` (and any folder missing above it) with FOLDER_MODE, which no umask can make writable by
    group or others, then `check` it: a folder someone else made first under this name is refused."""
    if not path.is_dir():
        for folder in reversed([folder for folder in (path, *path.parents) if not folder.exists()]):
            with contextlib.suppress(FileExistsError):  # another process made it first: checked below
                folder.mkdir(mode=FOLDER_MODE)
    check(path, root=root)
    return path


def seal(path: Path) -> None:
    """Take group and other write away from everything below `path` that this process just made (a virtual
    environment pip wrote under the user's umask), so that `check` accepts it on the next run too."""
    if os.name == "nt":
        return
    for folder, names, files in os.walk(path):
        for name in [*names, *files]:
            entry = os.path.join(folder, name)
            info = os.lstat(entry)
            if not stat.S_ISLNK(info.st_mode) and info.st_mode & _OTHERS_WRITE:
                os.chmod(entry, stat.S_IMODE(info.st_mode) & ~_OTHERS_WRITE)
    info = os.lstat(path)
    if info.st_mode & _OTHERS_WRITE:
        os.chmod(path, stat.S_IMODE(info.st_mode) & ~_OTHERS_WRITE)


def _check_tree(path: Path) -> None:
    """Every folder and file below `path`, not following links (a link is judged by who made it). Thousands of
    entries (a model-gate environment): one `lstat` each from `scandir`, the full judgement only for an entry
    that is not plainly this user's or root's alone."""
    owners, stack = (0, os.geteuid()), [str(path)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except FileNotFoundError:  # removed while it was walked (another build's scratch): holds nothing to use
            continue
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if info.st_uid not in owners or info.st_mode & _OTHERS_WRITE and not stat.S_ISLNK(info.st_mode):
                    _refuse(Path(entry.path), above=False)
                if stat.S_ISDIR(info.st_mode):
                    stack.append(entry.path)


def _problem(info: os.stat_result, *, above: bool) -> str | None:
    """What makes an entry with this `lstat` unsafe, or None; a link is judged by its owner (its mode means
    nothing), as only the owner of its folder could have made it."""
    if info.st_uid not in (0, os.geteuid()):
        return "is owned by another user"
    if stat.S_ISLNK(info.st_mode):
        return None
    group_write = info.st_mode & stat.S_IWGRP and not _private_group(info.st_gid, info.st_uid)
    if not info.st_mode & stat.S_IWOTH and not group_write:
        return None
    if above and info.st_mode & stat.S_ISVTX and stat.S_ISDIR(info.st_mode):
        return None  # sticky: others may add names there, never replace or remove this user's
    return "is writable by other users"


def _refuse(path: Path, *, above: bool) -> None:
    """Raise the one sentence for `path` when it is unsafe; a name that does not exist is not used."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    problem = _problem(info, above=above)
    if problem is None:
        return
    what = "the folder above the cache" if above else "the cache folder" if stat.S_ISDIR(info.st_mode) else \
        "the cache file"
    sticky = " unless it is sticky (as /tmp is)" if above else ""
    msg = (f"{what} {path} (owner {_user(info.st_uid)}, mode {stat.filemode(info.st_mode)}) {problem}, but it must "
           f"be owned by you ({_user(os.geteuid())}) or root and writable by no one else{sticky}: fix its owner or "
           f"mode, or pass --cache DIR (or set ORT_BUNDLER_CACHE) for a folder of your own")
    raise InputUnavailableError(msg)


@functools.lru_cache(maxsize=64)
def _user(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name}, uid {uid}"
    except KeyError:
        return f"uid {uid}"


@functools.lru_cache(maxsize=64)
def _private_group(gid: int, uid: int) -> bool:
    """Whether `gid` is `uid`'s own group with no one else in it, as Debian's ssh decides it: every account
    whose primary group it is is `uid`, its member list names `uid` alone (or no one), and it has a member."""
    import grp
    import pwd

    try:
        group, owner = grp.getgrgid(gid), pwd.getpwuid(uid)
    except KeyError:
        return False
    primary = [account.pw_uid for account in pwd.getpwall() if account.pw_gid == gid]
    if any(account != uid for account in primary) or any(name != owner.pw_name for name in group.gr_mem):
        return False
    return bool(primary or group.gr_mem)
