"""The MSI's summary information made reproducible, in place: the PackageCode from the image's receipt digest and
both timestamps from the bundle's SOURCE_DATE_EPOCH (wixl writes a random code and the build's clock; docs/facts.md
§9).

An .msi is a Compound File ([MS-CFB]); the summary is one small stream in it. olefile's write mode first reads
the whole sector table, joining one sector's worth at a time onto a growing array: a cost that quadruples each
time the file doubles (about 7 minutes at 1.5 GB, under load). Here only the sectors on the way to the stream are
read (the header, the DIFAT, the table sectors that the directory's, the mini table's and the mini stream's chains
pass through), and the stream's bytes are written back where they lie, same size.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from bundler.errors import BuildError

SUMMARY_STREAM = "\x05SummaryInformation"
#: Summary information property ids (MS-OLEPS; Windows Installer's "Summary Information Stream Property Set").
PID_REVISION, PID_CREATE_TIME, PID_LAST_SAVE_TIME = 9, 12, 13
VT_LPSTR, VT_FILETIME = 30, 64
#: FILETIME counts 100 ns since 1601-01-01.
FILETIME_EPOCH_OFFSET = 11644473600
SIGNATURE = bytes.fromhex("D0CF11E0A1B11AE1")
#: Sector numbers at or above this end a chain or mark special sectors ([MS-CFB] 2.1).
MAX_SECTOR = 0xFFFFFFFA
DIRECTORY_ENTRY = 128


class CompoundFile:
    """The few structures of a Compound File needed to find one stream's bytes, each read once when first needed."""

    def __init__(self, handle: BinaryIO, name: str) -> None:
        self.handle, self.name = handle, name
        header = self._read(0, 512)
        if header[:8] != SIGNATURE:
            msg = f"{name}: not a Compound File (an MSI), expected the signature D0CF11E0A1B11AE1"
            raise BuildError(msg)
        self.sector = 1 << int(struct.unpack_from("<H", header, 0x1E)[0])
        self.mini_sector = 1 << int(struct.unpack_from("<H", header, 0x20)[0])
        (self.directory_start,) = struct.unpack_from("<I", header, 0x30)
        self.cutoff, self.minifat_start = struct.unpack_from("<II", header, 0x38)
        difat_start, difat_count = struct.unpack_from("<II", header, 0x44)
        self.difat = [n for n in struct.unpack_from("<109I", header, 0x4C) if n < MAX_SECTOR]
        per = self.sector // 4
        sector = difat_start
        for _ in range(difat_count):  # each DIFAT sector: per - 1 table sectors, then the next DIFAT sector
            entries = struct.unpack(f"<{per}I", self._read(self._offset(sector), self.sector))
            self.difat += [n for n in entries[:-1] if n < MAX_SECTOR]
            sector = entries[-1]
        self._fat: dict[int, tuple[int, ...]] = {}

    def _read(self, offset: int, size: int) -> bytes:
        self.handle.seek(offset)
        data = self.handle.read(size)
        if len(data) != size:
            msg = f"{self.name}: ends at {offset + len(data):,} bytes inside a sector its tables name; a truncated MSI"
            raise BuildError(msg)
        return data

    def _offset(self, sector: int) -> int:
        return (sector + 1) * self.sector

    def _next(self, sector: int) -> int:
        per = self.sector // 4
        index = sector // per
        if index not in self._fat:
            if index >= len(self.difat):
                msg = f"{self.name}: sector {sector} is beyond its sector table; a damaged MSI"
                raise BuildError(msg)
            self._fat[index] = struct.unpack(f"<{per}I", self._read(self._offset(self.difat[index]), self.sector))
        return int(self._fat[index][sector % per])

    def chain(self, start: int) -> Iterator[int]:
        """The sectors of a chain, in order (a loop is refused)."""
        seen = set()
        sector = start
        while sector < MAX_SECTOR:
            if sector in seen:
                msg = f"{self.name}: sector {sector} appears twice in one chain; a damaged MSI"
                raise BuildError(msg)
            seen.add(sector)
            yield sector
            sector = self._next(sector)

    def stream_spans(self, stream: str) -> list[tuple[int, int]]:
        """Where `stream`'s bytes lie in the file, in order: (offset, length) of each sector (or mini sector)."""
        root, entry = None, None
        for sector in self.chain(self.directory_start):
            block = self._read(self._offset(sector), self.sector)
            for at in range(0, self.sector, DIRECTORY_ENTRY):
                raw = block[at:at + DIRECTORY_ENTRY]
                length, kind = struct.unpack_from("<HB", raw, 64)
                name = raw[:max(length - 2, 0)].decode("utf-16-le", "replace")
                start, size = struct.unpack_from("<IQ", raw, 116)
                if kind == 5:
                    root = (start, size)
                elif kind == 2 and name == stream:
                    entry = (start, size & 0xFFFFFFFF if self.sector == 512 else size)
        if root is None or entry is None:
            msg = f"{self.name}: holds no {stream!r} stream; expected the MSI's summary information"
            raise BuildError(msg)
        start, size = entry
        if size >= self.cutoff:
            return self._spans([self._offset(s) for s in self.chain(start)], self.sector, size)
        ministream = [self._offset(s) for s in self.chain(root[0])]
        minifat = list(self.chain(self.minifat_start))
        offsets: list[int] = []
        sector = start
        per = self.sector // 4
        while sector < MAX_SECTOR and len(offsets) * self.mini_sector < size:
            position = sector * self.mini_sector
            offsets.append(ministream[position // self.sector] + position % self.sector)
            table = self._read(self._offset(minifat[sector // per]), self.sector)
            sector = int(struct.unpack_from("<I", table, (sector % per) * 4)[0])
        return self._spans(offsets, self.mini_sector, size)

    @staticmethod
    def _spans(offsets: list[int], unit: int, size: int) -> list[tuple[int, int]]:
        spans = []
        for offset in offsets:
            spans.append((offset, min(unit, size)))
            size -= unit
            if size <= 0:
                break
        return spans


def fix_summary(msi: Path, *, package_code: str, epoch: int) -> None:
    """Set the PackageCode and both timestamps of the summary information, in place (same sizes)."""
    with open(msi, "r+b") as handle:
        spans = CompoundFile(handle, msi.name).stream_spans(SUMMARY_STREAM)
        stream = bytearray()
        for offset, length in spans:
            handle.seek(offset)
            stream += handle.read(length)
        offsets = _property_offsets(bytes(stream))
        filetime = struct.pack("<Q", (epoch + FILETIME_EPOCH_OFFSET) * 10_000_000)
        for pid in (PID_CREATE_TIME, PID_LAST_SAVE_TIME):
            kind, where = offsets[pid]
            if kind != VT_FILETIME:
                msg = f"{msi.name}: summary property {pid} has type {kind}, expected a FILETIME; wixl changed its output"
                raise BuildError(msg)
            stream[where:where + 8] = filetime
        kind, where = offsets[PID_REVISION]
        length = struct.unpack_from("<I", stream, where)[0]
        text = package_code.encode("ascii") + b"\0"
        if kind != VT_LPSTR or length != len(text):
            msg = f"{msi.name}: the summary's PackageCode is {length} bytes of type {kind}, expected a GUID string"
            raise BuildError(msg)
        stream[where + 4:where + 4 + length] = text
        position = 0
        for offset, length in spans:
            handle.seek(offset)
            handle.write(stream[position:position + length])
            position += length


def _property_offsets(stream: bytes) -> dict[int, tuple[int, int]]:
    """{property id: (type, offset of its value)} of the first section of an OLE property set stream."""
    section = struct.unpack_from("<I", stream, 28 + 16)[0]  # header (28) + the section's FMTID (16)
    count = struct.unpack_from("<I", stream, section + 4)[0]
    found = {}
    for index in range(count):
        pid, offset = struct.unpack_from("<II", stream, section + 8 + 8 * index)
        kind = struct.unpack_from("<I", stream, section + offset)[0] & 0xFFFF
        found[pid] = (kind, section + offset + 4)
    return found
