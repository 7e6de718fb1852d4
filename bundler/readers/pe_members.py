"""Large Windows binaries inside a pinned archive (a CUDA wheel's DLLs, the CUDA provider in the ORT wheel), read
once per archive hash: what a scan found about each member (where its compressed bytes lie, their sha256 and the
content's) is kept by the archive's sha256, and the PE facts and signature evidence by the content's, in the
cache's derived folder. A later build of the same inputs (a new model, a new app version) then reads none of them:
before, each build wrote every selected DLL out to parse it, 2.5 GB for the CUDA 12 route (issue 37).

A member whose facts are not all kept is written out under the build's work folder in the same pass that hashes
it, as a first build does: a 700 MB cuDNN DLL is parsed from a mapped file, not held in memory. The store is the
cache owner's, as the facts stores beside it are; a damaged entry is read again, never trusted. The zip writer
still checks the compressed bytes it copies against the sha256 kept here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundler.derived import code_digest, known_sha256, read_entry, write_entry
from bundler.readers.archives import SafeArchive
from bundler.readers.member_scan import RAW_METHODS, ArchiveFile, PackedBytes, read_files
from bundler.readers.pe import PeInfo, inspect_pe, known_pe_facts
from bundler.readers.pe_source import PackedPe
from bundler.readers.signatures import known_evidence

FOLDER = "member-scans"
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, kw_only=True)
class PeMember:
    file: ArchiveFile  # `extracted` only when this build had to read the member
    info: PeInfo


def read_pe_members(archive: SafeArchive, path: Path, names: Sequence[str], *, label: str, work: Path,
                    store: Path | None, shipped: bool) -> list[PeMember]:
    """The members `names` of the archive at `path` and their PE facts, in order. `shipped`: the bundle ships
    them, so the signature policy reads them too and their evidence must be kept as well before they go unread."""
    scans = _stored_scans(store, path, names)
    known = {name: file for name, file in scans.items()
             if store is not None and _all_known(PackedPe(path, name, file.sha256), store, shipped=shipped)}
    missing = [name for name in names if name not in known]
    read = {file.name: file for file in read_files(archive, path, missing, label=label, work=work, keep_files=True)}
    for file in read.values():
        if file.extracted is not None:  # hashed as it was written: the PE reader does not read it again to key it
            known_sha256(file.extracted, file.sha256)
    if store is not None and read and all(file.packed is not None for file in read.values()):
        _keep_scans(store, path, {**scans, **read})
    members = []
    for name in names:
        file = known.get(name) or read[name]
        source = file.extracted if file.extracted is not None else PackedPe(path, name, file.sha256)
        members.append(PeMember(file=file, info=inspect_pe(source, label=f"{label}!{name}", store=store)))
    return members


def _all_known(source: PackedPe, store: Path, *, shipped: bool) -> bool:
    return known_pe_facts(source, store) and (not shipped or known_evidence(source, store))


def _entry(store: Path, path: Path) -> Path | None:
    """Kept by the archive's sha256, which names its folder in the input cache; an archive from elsewhere is not kept."""
    sha256 = path.parent.name
    if not _SHA256.fullmatch(sha256):
        return None
    return store / FOLDER / code_digest(("bundler.readers.member_scan",))[:16] / f"{sha256}.json"


def _stored_scans(store: Path | None, path: Path, names: Sequence[str]) -> dict[str, ArchiveFile]:
    entry = _entry(store, path) if store is not None else None
    found = read_entry(entry) if entry is not None else None
    if not isinstance(found, dict):
        return {}
    scans = {}
    for name in names:
        try:
            scans[name] = _from_json(path, name, found[name])
        except (KeyError, TypeError, ValueError):
            continue  # not scanned yet, or an entry of another shape: read again
    return scans


def _keep_scans(store: Path, path: Path, files: dict[str, ArchiveFile]) -> None:
    entry = _entry(store, path)
    if entry is None:
        return
    found = read_entry(entry)
    kept: dict[str, Any] = dict(found) if isinstance(found, dict) else {}
    for name, file in files.items():
        assert file.packed is not None
        packed = file.packed
        kept[name] = {"sha256": file.sha256, "offset": packed.offset, "method": packed.method, "crc": packed.crc,
                      "usize": packed.usize, "csize": packed.csize, "packed_sha256": packed.packed_sha256}
    write_entry(entry, kept)


def _from_json(path: Path, name: str, data: dict[str, Any]) -> ArchiveFile:
    sha256, packed_sha256 = str(data["sha256"]), str(data["packed_sha256"])
    if not (_SHA256.fullmatch(sha256) and _SHA256.fullmatch(packed_sha256)) or int(data["method"]) not in RAW_METHODS:
        raise ValueError(name)
    packed = PackedBytes(archive=path, name=name, offset=int(data["offset"]), method=int(data["method"]),
                         crc=int(data["crc"]), usize=int(data["usize"]), csize=int(data["csize"]),
                         packed_sha256=packed_sha256)
    return ArchiveFile(name=name, sha256=sha256, elf=None, packed=packed)
