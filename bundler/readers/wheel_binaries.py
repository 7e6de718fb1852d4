"""The DLLs and PYDs inside a wheel, known once per wheel hash by their content's sha256 and kept for later builds.

The DLL closure, the signature policy and the app-local layout read the binaries of every wheel in the
bundle. A wheel is pinned by its sha256, so what it holds never changes: its binaries are read once, where they
lie (`pe_source.inflate`), and `derived/wheel-binaries/<wheel sha256>/INDEX.json` records each one's sha256; the
facts the readers derive are kept by that sha256 in their own stores, so a rebuild reads no binary at all. A
member too large to hold in memory (a 349 MB CUDA provider DLL) has its facts and signature evidence read as it
streams past (`pe_stream`) and is "streamed" in the index: the index stands only while both are kept, since
without them a reader would inflate the whole member into memory. Only a layout the stream cannot keep enough of
is written out, and hashed against the index before it is used; a damaged or half-written entry is made again,
never trusted. The index is as much the cache owner's as the facts stores beside it (`Cache.checked`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bundler.derived import content_sha256
from bundler.errors import BuildError
from bundler.readers.archives import SafeArchive
from bundler.readers.member_scan import copyable
from bundler.readers.pe_source import IN_MEMORY_MAX, PackedPe, PeSource, inflate
from bundler.readers.pe_stream import all_kept, read_streamed

PE_SUFFIXES = (".dll", ".pyd")
INDEX = "INDEX.json"  # {"members": {name: sha256 of its content}, "extracted": [written out], "streamed": [...]}
FOLDER = "wheel-binaries"


@dataclass(frozen=True)
class WheelIndex:
    members: dict[str, str]  # member name -> sha256 of its content
    extracted: frozenset[str]  # the members written out beside the index
    streamed: frozenset[str]  # large members left in the wheel, their facts and evidence kept

    def to_json(self) -> str:
        return json.dumps({"members": self.members, "extracted": sorted(self.extracted),
                           "streamed": sorted(self.streamed)}, sort_keys=True)


def wheel_binaries(name: str, wheel: Path, sha256: str, *, store: Path) -> dict[str, PeSource]:
    """`<name>!<member>` -> where to read each DLL/PYD member of the wheel whose hash is `sha256`."""
    folder = store / FOLDER / sha256
    index = _checked_index(folder, wheel, store)
    if index is None:
        index = _read(name, wheel, folder, store)
    return {f"{name}!{member}": folder / member if member in index.extracted else PackedPe(wheel, member, digest)
            for member, digest in sorted(index.members.items())}


def _checked_index(folder: Path, wheel: Path, store: Path) -> WheelIndex | None:
    try:
        data = json.loads((folder / INDEX).read_text(encoding="utf-8"))
        index = WheelIndex(dict(data["members"]), frozenset(data["extracted"]), frozenset(data["streamed"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None  # absent, damaged, or an index of an earlier version
    for member in index.extracted:
        path = folder / member
        if member not in index.members or not path.is_file() or content_sha256(path) != index.members[member]:
            shutil.rmtree(folder, ignore_errors=True)
            return None
    for member in index.streamed:  # kept facts that a newer bundler no longer finds: read the wheel again
        source = PackedPe(wheel, member, index.members.get(member, ""))
        if member not in index.members or not all_kept(source, store, shipped=True):
            shutil.rmtree(folder, ignore_errors=True)
            return None
    return index


def _read(name: str, wheel: Path, folder: Path, store: Path) -> WheelIndex:
    """Read the wheel's binaries where they lie; write out only those that can be neither held in memory nor
    streamed."""

    def fill(staging: Path) -> WheelIndex:
        members, streamed, large = {}, [], []
        with SafeArchive.open(wheel, label=name) as archive:
            for entry in archive.entries:
                if entry.is_dir or not entry.name.lower().endswith(PE_SUFFIXES):
                    continue
                info = archive.zip_info(entry.name)
                if info is not None and copyable(info) and info.file_size <= IN_MEMORY_MAX:
                    members[entry.name] = inflate(wheel, info)[0]
                elif info is not None and copyable(info) and (sha256 := read_streamed(wheel, info, label=name,
                                                                                      store=store)):
                    members[entry.name] = sha256
                    streamed.append(entry.name)
                else:
                    large.append(entry.name)
            if large:
                archive.extract(staging, members=large)
        members.update({member: content_sha256(staging / member) for member in large})  # a rename keeps identity
        return WheelIndex(members, frozenset(large), frozenset(streamed))

    index = _publish(folder, wheel, store, fill)
    if index is None:
        msg = f"{name}: cannot keep its binaries' index in {folder}; check the cache folder's space and permissions"
        raise BuildError(msg)
    return index


def _publish(folder: Path, wheel: Path, store: Path, fill: Callable[[Path], WheelIndex]) -> WheelIndex | None:
    """Fill a temporary folder beside the final one and rename it into place when complete; the index in place
    (another build's, if it won the rename), once checked."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".extract-"))
    try:
        index = fill(staging)
        (staging / INDEX).write_text(index.to_json(), encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        try:
            os.replace(staging, folder)
            return index
        except OSError:
            pass  # another build recorded the same wheel first: use its entry, once checked
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _checked_index(folder, wheel, store)
