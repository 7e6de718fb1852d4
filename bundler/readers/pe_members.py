"""Large Windows binaries inside a pinned archive (a CUDA wheel's DLLs, the CUDA provider in the ORT wheel), read
once per archive hash: the scan is kept by the archive's sha256 (`scan_store`), the PE facts and signature evidence
by the content's. Before, each build wrote every selected DLL out to parse it, 2.5 GB for the CUDA 12 route
(issue 37). A member whose facts are not all kept is read as it streams past in its archive (`pe_stream`), nothing
written out; only a layout a stream cannot keep enough of is written out under the build's work folder and parsed
from a mapped file, as before: a 700 MB cuDNN DLL is never held in memory.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bundler.derived import known_sha256
from bundler.readers.archives import SafeArchive
from bundler.readers.member_scan import ArchiveFile, copyable, read_files
from bundler.readers.pe import PeInfo, inspect_pe
from bundler.readers.pe_source import PackedPe
from bundler.readers.pe_stream import PeStream, all_kept, keep_streamed
from bundler.readers.scan_store import Scanned, keep_scans, stored_scans

_MODULES = ("bundler.readers.pe_members",)


@dataclass(frozen=True, kw_only=True)
class PeMember:
    file: ArchiveFile  # `extracted` only when this build had to read the member
    info: PeInfo


def read_pe_members(archive: SafeArchive, path: Path, names: Sequence[str], *, label: str, work: Path,
                    store: Path | None, shipped: bool) -> list[PeMember]:
    """The members `names` of the archive at `path` and their PE facts, in order. `shipped`: the bundle ships
    them, so the signature policy reads them too and their evidence must be kept as well before they go unread."""
    known = {name: scan.file for name, scan in stored_scans(store, path, names, modules=_MODULES).items()
             if store is not None and all_kept(PackedPe(path, name, scan.file.sha256), store, shipped=shipped)}
    unknown = [n for n in names if n not in known]
    infos = [archive.zip_info(name) for name in unknown]
    if store is None or not all(info is not None and copyable(info) for info in infos):  # a tar is extracted
        read = {file.name: file for file in read_files(archive, path, unknown, label=label, work=work,
                                                        keep_files=True)}
    else:  # one at a time: what a stream keeps (up to pe_stream.KEPT_MAX) is let go of before the next
        read = {info.filename: _read_one(archive, path, info, label=label, work=work, store=store, shipped=shipped)
                for info in infos if info is not None}
    for file in read.values():
        if file.extracted is not None:  # hashed as it was written: the PE reader does not read it again to key it
            known_sha256(file.extracted, file.sha256)
    keep_scans(store, path, {name: Scanned(file=file, facts=None) for name, file in read.items()}, modules=_MODULES)
    members = []
    for name in names:
        file = known.get(name) or read[name]
        source = file.extracted if file.extracted is not None else PackedPe(path, name, file.sha256)
        members.append(PeMember(file=file, info=inspect_pe(source, label=f"{label}!{name}", store=store)))
    return members


def _read_one(archive: SafeArchive, path: Path, info: zipfile.ZipInfo, *, label: str, work: Path, store: Path,
              shipped: bool) -> ArchiveFile:
    """One member read as it streams past, its facts kept (`pe_stream`); written out and read whole as before only
    when its layout asks for more than a stream keeps."""
    stream = PeStream(info.file_size)
    name = info.filename
    [file] = read_files(archive, path, [name], label=label, work=work, observe=lambda _: stream.feed)
    if keep_streamed(stream, PackedPe(path, name, file.sha256), label=f"{label}!{name}", store=store, shipped=shipped):
        return file
    [file] = read_files(archive, path, [name], label=label, work=work, keep_files=True)
    return file
