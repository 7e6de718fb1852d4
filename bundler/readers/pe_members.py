"""Large Windows binaries inside a pinned archive (a CUDA wheel's DLLs, the CUDA provider in the ORT wheel), read
once per archive hash: the scan is kept by the archive's sha256 (`scan_store`), the PE facts and signature evidence
by the content's. Before, each build wrote every selected DLL out to parse it, 2.5 GB for the CUDA 12 route
(issue 37). A member whose facts are not all kept is written out under the build's work folder in the same pass
that hashes it, as a first build does: a 700 MB cuDNN DLL is parsed from a mapped file, not held in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bundler.derived import known_sha256
from bundler.readers.archives import SafeArchive
from bundler.readers.member_scan import ArchiveFile, read_files
from bundler.readers.pe import PeInfo, inspect_pe, keep_streamed_facts, known_pe_facts
from bundler.readers.pe_source import PackedPe
from bundler.readers.pe_sparse import NotKept
from bundler.readers.pe_stream import PeStream
from bundler.readers.scan_store import Scanned, keep_scans, stored_scans
from bundler.readers.signatures import keep_streamed_evidence, known_evidence

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
             if store is not None and _all_known(PackedPe(path, name, scan.file.sha256), store, shipped=shipped)}
    streams: dict[str, PeStream] = {}

    def observe(name: str) -> Callable[[bytes], object]:
        info = archive.zip_info(name)
        stream = streams[name] = PeStream(info.file_size if info is not None else 0)
        return stream.feed

    unknown = [n for n in names if n not in known]
    read = {file.name: file for file in read_files(archive, path, unknown, label=label, work=work,
                                                    observe=observe if store is not None else None)}
    again = [name for name, file in read.items() if file.extracted is None and (
        store is None or not _streamed(streams[name], PackedPe(path, name, file.sha256), label=f"{label}!{name}",
                                       store=store, shipped=shipped))]
    if again:  # a layout the stream did not keep enough of: written out and read whole, as before
        read.update({file.name: file for file in read_files(archive, path, again, label=label, work=work,
                                                             keep_files=True)})
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


def _streamed(stream: PeStream, source: PackedPe, *, label: str, store: Path, shipped: bool) -> bool:
    """Keep the facts (and, for a shipped DLL, the signature evidence) read from `stream`; False when it did not keep
    what they need, and the DLL must be read whole."""
    image = stream.image()
    if image is None:
        return False
    try:
        keep_streamed_facts(source, image, stream.names, label=label, store=store)
        if shipped:
            keep_streamed_evidence(source, image, stream.authenticode_sha256(), label=label, store=store)
    except NotKept:
        return False
    return True


def _all_known(source: PackedPe, store: Path, *, shipped: bool) -> bool:
    return known_pe_facts(source, store) and (not shipped or known_evidence(source, store))
