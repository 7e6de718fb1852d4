"""A Windows DLL's facts read from its bytes as they stream past in its wheel, nothing written out.

A first build of the CUDA 12 Windows route wrote every selected DLL out (2.2 GB) only to parse it and check its
signature once, and so wrote 3.8 times the size of its zip (issue 37). What those readers use of a DLL is small:
its headers, its import, delay-import and resource directories with what follows them in their sections (the
names they point to), the certificate table, the Authenticode digest and the DLL names in its strings: about 1 MiB
of a 490 MB cuDNN DLL. A `PeStream` keeps exactly that while the member inflates: the headers decide which ranges
to keep, the digest and the name search run on every piece. The facts are then read from a `SparseImage` by the
same code that reads a mapped file; a read outside the kept ranges raises `NotKept`, and the caller reads that DLL
the old way (`pe_members`), so an unusual layout costs time, never a wrong fact.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pefile

from bundler.readers.member_scan import scan_member
from bundler.readers.pe import NameScan, keep_streamed_facts, known_pe_facts
from bundler.readers.pe_source import PackedPe
from bundler.readers.pe_sparse import NotKept, SparseImage
from bundler.readers.signatures import hashed_ranges, keep_streamed_evidence, known_evidence

#: The headers (DOS, PE, optional header, section table) lie in the first SizeOfHeaders bytes: 1 KiB in every
#: CUDA and ORT DLL; a file whose headers need more than this is read the old way.
HEAD = 64 << 10
#: A section this small is kept whatever it holds (a name may lie outside the directory's own section).
SMALL_SECTION = 1 << 20
#: How much of its section is kept after a directory: the DLL names its imports point to follow it (within 40 KB
#: in every CUDA, cuDNN and ORT DLL), and a resource directory's entries and data. A 45 MB .rdata is not held whole.
NEAR = 1 << 20
#: The most a stream keeps of one DLL.
KEPT_MAX = 64 << 20
_DIRECTORIES = ("IMAGE_DIRECTORY_ENTRY_IMPORT", "IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT", "IMAGE_DIRECTORY_ENTRY_RESOURCE")
_SECURITY = pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_SECURITY"]


class PeStream:
    """Fed a DLL's bytes in order (`feed`); then `image()` holds what its readers use, or None when its layout
    asks for more than is kept (`failed` says why), or it is not a PE file at all (its reader will say so)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.names = NameScan()
        self.failed: str | None = None
        self._position = 0
        self._head = bytearray()
        self._keep: list[tuple[int, int]] = []  # [start, end) ranges, planned once the headers are in
        self._kept: dict[int, bytearray] = {}
        self._hashed: list[tuple[int, int]] = []
        self._digest: hashlib._Hash | None = None
        self.signed = False

    def feed(self, piece: bytes) -> None:
        if self.failed is not None:
            return
        self.names.feed(piece)
        start = self._position
        self._position += len(piece)
        if self._digest is None and not self._keep:
            self._head += piece
            if len(self._head) < min(HEAD, self.size):
                return
            piece, start = bytes(self._head), 0
            self._head = bytearray()
            if not self._plan(piece):
                return
        self._take(piece, start)

    def image(self) -> SparseImage | None:
        if self.failed is not None or not self._keep or self._position != self.size:
            return None
        return SparseImage(self.size, [(start, self._kept[start]) for start, _ in self._keep])

    def authenticode_sha256(self) -> bytes | None:
        """The SHA-256 Authenticode digest, computed as the bytes passed; None for an unsigned file."""
        return self._digest.digest() if self._digest is not None and self.signed else None

    def _plan(self, head: bytes) -> bool:
        """Decide from the headers which ranges to keep and which to hash."""
        try:
            pe = pefile.PE(data=SparseImage(self.size, [(0, head)]), fast_load=True)
        except (pefile.PEFormatError, NotKept) as exc:
            self.failed = f"its headers cannot be read from its first {len(head)} bytes ({exc})"
            return False
        ranges = [(0, len(head))]
        for section in pe.sections:
            start = section.get_PointerToRawData_adj()
            end = min(self.size, start + section.SizeOfRawData)
            if 0 < end - start <= SMALL_SECTION:
                ranges.append((start, end))
            for name in _DIRECTORIES:
                directory = pe.OPTIONAL_HEADER.DATA_DIRECTORY[pefile.DIRECTORY_ENTRY[name]]
                if directory.VirtualAddress and section.contains_rva(directory.VirtualAddress):
                    offset = section.get_offset_from_rva(directory.VirtualAddress)
                    if offset < end:  # else it lies in the section's memory only; a read of it fails: read whole
                        ranges.append((offset, min(end, offset + directory.Size + NEAR)))
        security = pe.OPTIONAL_HEADER.DATA_DIRECTORY[_SECURITY]
        self.signed = bool(security.VirtualAddress and security.Size)
        if self.signed and security.VirtualAddress < self.size:  # one past the end reads as empty, as in a file
            ranges.append((security.VirtualAddress, min(self.size, security.VirtualAddress + security.Size)))
        self._keep = _merged(ranges)
        if sum(end - start for start, end in self._keep) > KEPT_MAX:
            self.failed = f"the ranges its readers need hold more than {KEPT_MAX >> 20} MiB"
            return False
        self._kept = {start: bytearray(end - start) for start, end in self._keep}  # filled as the bytes pass
        self._hashed = hashed_ranges(pe, self.size)
        self._digest = hashlib.sha256()
        return True

    def _take(self, piece: bytes, start: int) -> None:
        end = start + len(piece)
        view = memoryview(piece)
        for first, last in self._keep:
            if first < end and start < last:
                low, high = max(first, start), min(last, end)
                self._kept[first][low - first:high - first] = view[low - start:high - start]
        if self.signed and self._digest is not None:
            for first, last in self._hashed:
                if first < end and start < last:
                    self._digest.update(view[max(first, start) - start:min(last, end) - start])
        view.release()


def keep_streamed(stream: PeStream, source: PackedPe, *, label: str, store: Path, shipped: bool) -> bool:
    """Keep the facts (and, for a shipped DLL, the signature evidence) read from `stream` in their stores, where
    `inspect_pe` and `signature_evidence` find them; False when the stream did not keep what they need."""
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


def all_kept(source: PackedPe, store: Path, *, shipped: bool) -> bool:
    """Whether what `keep_streamed` keeps of `source` is in the stores, so that no reader needs its bytes."""
    return known_pe_facts(source, store) and (not shipped or known_evidence(source, store))


def read_streamed(archive: Path, info: zipfile.ZipInfo, *, label: str, store: Path) -> str | None:
    """Read a shipped DLL of `archive` once, keeping its facts and evidence (`keep_streamed`): its sha256, or None
    when they could not be kept and it must be read whole."""
    stream = PeStream(info.file_size)
    sha256 = scan_member(archive, info, label=label, on_piece=stream.feed).sha256
    source = PackedPe(archive, info.filename, sha256)
    return sha256 if keep_streamed(stream, source, label=f"{label}!{info.filename}", store=store, shipped=True) else None


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Ranges sorted, with those that overlap or touch joined: a read spanning two of them stays within one."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
