"""The DLLs and PYDs inside a wheel, extracted once per wheel hash and kept for later builds.

The DLL closure, the signature policy and the app-local layout read the binaries of every wheel in the
bundle. A wheel is pinned by its sha256, so what it holds never changes: its binaries are extracted into
`derived/wheel-binaries/<wheel sha256>/` once, with an index of each file's sha256, and a rebuild reads
them from there instead of inflating 60 MB again. Every file is hashed against the index before it is
used; a damaged or half-written entry is extracted again, never trusted.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from bundler.derived import content_sha256
from bundler.errors import BuildError
from bundler.readers.archives import SafeArchive

PE_SUFFIXES = (".dll", ".pyd")
INDEX = "INDEX.json"  # {member name: sha256 of the extracted file}
FOLDER = "wheel-binaries"


def wheel_binaries(name: str, wheel: Path, sha256: str, *, store: Path) -> dict[str, Path]:
    """`<name>!<member>` → extracted file for every DLL/PYD member of the wheel whose hash is `sha256`."""
    folder = store / FOLDER / sha256
    index = _checked_index(folder)
    if index is None:
        index = _extract(name, wheel, folder)
    return {f"{name}!{member}": folder / member for member in sorted(index)}


def seed_wheel_binaries(sha256: str, files: Mapping[str, Path], *, store: Path) -> None:
    """Record binaries already on disk as the extraction of the wheel `sha256` (member name → file with the
    same bytes): the wheel built from a capi tree holds the tree's files, so they need not be inflated again.
    Files are hard-linked where the file system allows, else copied."""
    folder = store / FOLDER / sha256
    if _checked_index(folder) is not None:
        return
    wanted = {member: path for member, path in files.items() if member.lower().endswith(PE_SUFFIXES)}
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".seed-"))
    try:
        for member, path in sorted(wanted.items()):
            target = staging / member
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, target)
            except OSError:
                shutil.copyfile(path, target)
        index = {member: content_sha256(staging / member) for member in wanted}
        (staging / INDEX).write_text(json.dumps(index, sort_keys=True), encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        try:
            os.replace(staging, folder)
        except OSError:
            pass  # another build recorded the same wheel first
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _checked_index(folder: Path) -> dict[str, str] | None:
    try:
        index: dict[str, str] = json.loads((folder / INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for member, digest in index.items():
        path = folder / member
        if not path.is_file() or content_sha256(path) != digest:
            shutil.rmtree(folder, ignore_errors=True)
            return None
    return index


def _extract(name: str, wheel: Path, folder: Path) -> dict[str, str]:
    """Extract into a temporary folder beside the final one and rename it into place when complete."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".extract-"))
    try:
        with SafeArchive.open(wheel, label=name) as archive:
            wanted = [e.name for e in archive.entries if not e.is_dir and e.name.lower().endswith(PE_SUFFIXES)]
            if wanted:
                archive.extract(staging, members=wanted)
        index = {member: content_sha256(staging / member) for member in wanted}  # a rename keeps identity
        (staging / INDEX).write_text(json.dumps(index, sort_keys=True), encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        try:
            os.replace(staging, folder)
            return index
        except OSError:
            pass  # another build extracted the same wheel first: use its entry, once checked
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    found = _checked_index(folder)
    if found is None:
        msg = f"{name}: cannot keep its extracted binaries in {folder}; check the cache folder's space and permissions"
        raise BuildError(msg)
    return found
