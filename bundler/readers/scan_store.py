"""What reading a pinned archive's members found, kept by the archive's sha256 for later builds.

A GPU build reads gigabytes of libraries in their wheels: each inflated, hashed and parsed. The archive is pinned
by its sha256 (its folder's name in the input cache), so what it holds never changes, and a later build of the
same inputs (a new model, a new app version) need read none of it again: where each member's compressed bytes
lie, their sha256 and the content's, and what the caller derived from the content (`facts`, JSON). The zip writer
still checks the compressed bytes it copies against the sha256 kept here. The entries live in the cache's
derived folder, the cache owner's as the facts stores beside them are, under the digest of the code that made
them; a damaged or foreign-shaped entry is read again, never trusted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundler.derived import code_digest, read_entry, write_entry
from bundler.readers.member_scan import RAW_METHODS, ArchiveFile, PackedBytes

FOLDER = "member-scans"
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, kw_only=True)
class Scanned:
    file: ArchiveFile  # never `extracted`: a kept scan read nothing
    facts: Any  # what the caller kept beside it


def stored_scans(store: Path | None, path: Path, names: Sequence[str], *, modules: tuple[str, ...]) -> dict[str, Scanned]:
    """The kept scans of those `names` of the archive at `path` that have one (made by the code of `modules`)."""
    entry = _entry(store, path, modules)
    found = read_entry(entry) if entry is not None else None
    if not isinstance(found, dict):
        return {}
    scans = {}
    for name in names:
        try:
            scans[name] = Scanned(file=_from_json(path, name, found[name]), facts=found[name]["facts"])
        except (KeyError, TypeError, ValueError):
            continue  # not scanned yet, or an entry of another shape: read again
    return scans


def keep_scans(store: Path | None, path: Path, scans: Mapping[str, Scanned], *, modules: tuple[str, ...]) -> None:
    """Add these scans to the archive's entry (a tar's members, which have no compressed bytes to copy, are not kept)."""
    entry = _entry(store, path, modules)
    if entry is None or not scans or any(scan.file.packed is None for scan in scans.values()):
        return
    found = read_entry(entry)
    kept: dict[str, Any] = dict(found) if isinstance(found, dict) else {}
    for name, scan in scans.items():
        packed = scan.file.packed
        assert packed is not None
        kept[name] = {"sha256": scan.file.sha256, "offset": packed.offset, "method": packed.method, "crc": packed.crc,
                      "usize": packed.usize, "csize": packed.csize, "packed_sha256": packed.packed_sha256,
                      "facts": scan.facts}
    write_entry(entry, kept)


def _entry(store: Path | None, path: Path, modules: tuple[str, ...]) -> Path | None:
    """Kept by the archive's sha256, which names its folder in the input cache; an archive from elsewhere is not kept."""
    sha256 = path.parent.name
    if store is None or not _SHA256.fullmatch(sha256):
        return None
    return store / FOLDER / code_digest(("bundler.readers.member_scan", *modules))[:16] / f"{sha256}.json"


def _from_json(path: Path, name: str, data: dict[str, Any]) -> ArchiveFile:
    sha256, packed_sha256 = str(data["sha256"]), str(data["packed_sha256"])
    if not (_SHA256.fullmatch(sha256) and _SHA256.fullmatch(packed_sha256)) or int(data["method"]) not in RAW_METHODS:
        raise ValueError(name)
    packed = PackedBytes(archive=path, name=name, offset=int(data["offset"]), method=int(data["method"]),
                         crc=int(data["crc"]), usize=int(data["usize"]), csize=int(data["csize"]),
                         packed_sha256=packed_sha256)
    return ArchiveFile(name=name, sha256=sha256, elf=None, packed=packed)
