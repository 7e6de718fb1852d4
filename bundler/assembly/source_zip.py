"""The zip a `capi` tree was read from, as the wheel builder copies from it.

A member of an official wheel goes into the rebuilt wheel as it is compressed there (`RawMember.copy_to`):
deflating 35 MB of ORT binaries again costs seconds and gives nothing. A member that was not extracted is
inflated once on its way through, for its RECORD hash, and held to what reading it checks (`readers.member_scan.Inflating`).
"""

from __future__ import annotations

import contextlib
import stat
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from bundler.readers.archives import SafeArchive
from bundler.readers.capi import CapiTree
from bundler.readers.member_scan import Inflating, compressed_pieces, copyable


@dataclass(frozen=True, kw_only=True)
class RawMember:
    """One member of the source zip, by its entry and the file the tree holds it as."""

    info: zipfile.ZipInfo
    source: BinaryIO
    label: str  # the source zip, as errors name it

    def copy_to(self, out: BinaryIO, *, inflate: bool = False) -> bytes | None:
        """Copy the compressed bytes after the member's local header. With `inflate`, also inflate them on their way
        through and return the sha256 of what came out: the member is read once, for the copy and for RECORD."""
        check = Inflating(self.info, label=self.label) if inflate else None
        for chunk in compressed_pieces(self.source, self.info, label=self.label):
            out.write(chunk)
            if check is not None:
                check.feed(chunk)
        return check.sha256() if check is not None else None


class RawSource:
    """The zip a capi tree was extracted from, if any: which of its members hold which extracted file."""

    def __init__(self, tree: CapiTree) -> None:
        self._prefix = f"{tree.archive_root}/" if tree.archive_root else ""
        # What reads a member's bytes: counted, CRC-checked, and a corrupt member named as extracting names it.
        self._label = str(tree.archive)
        self._safe = SafeArchive.open(tree.archive, label=self._label) if tree.archive is not None else None
        self._file = tree.archive.open("rb") if tree.archive is not None else None
        self._zip = zipfile.ZipFile(self._file) if self._file is not None else None

    def __enter__(self) -> RawSource:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._zip is not None and self._file is not None:
            self._zip.close()
            self._file.close()
        if self._safe is not None:
            self._safe.close()

    def mode(self, name: str) -> int | None:
        """The permission bits the source zip gives the tree's file `name`, when it records those of a plain
        file (an official wheel does, made on Linux or Windows alike); None for a folder source."""
        info = self._zip.NameToInfo.get(self._prefix + name) if self._zip is not None else None
        unix = info.external_attr >> 16 if info is not None else 0
        return stat.S_IMODE(unix) or None if stat.S_ISREG(unix) else None

    def member(self, name: str, path: Path | None) -> RawMember | None:
        """The entry of the tree's file `name`, when it can be copied as it is (stored or deflated, not
        encrypted, and the size of `path` when it was extracted)."""
        if self._zip is None or self._file is None:
            return None
        info = self._zip.NameToInfo.get(self._prefix + name)
        if (info is None or not copyable(info)
                or (path is not None and info.file_size != path.stat().st_size)):
            return None
        return RawMember(info=info, source=self._file, label=self._label)

    @contextlib.contextmanager
    def open(self, name: str) -> Iterator[tuple[BinaryIO, int]]:
        """The uncompressed stream and size of a file left in the source zip."""
        assert self._safe is not None, "only a zip source leaves files in the archive"
        with self._safe.open_member(self._prefix + name) as stream:
            yield stream, self._safe.entry(self._prefix + name).size
