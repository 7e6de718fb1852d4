"""Where a PE file's bytes are read from: a file on disk, or a member of a zip (a wheel's DLL or PYD) read where
it lies.

A Windows bundle's wheels hold about 60 MB of DLLs and PYDs that the DLL closure, the signature policy and the
app-local layout read. Their facts are kept in the derived stores by the content's sha256, so a rebuild never
reads the bytes again; writing them out as files for a first build only to read them once doubled what the
build wrote (issue 37). A `PackedPe` names the member and its sha256 instead, and its bytes are inflated into
memory, and checked against that sha256, only when a fact is not in its store yet.
"""

from __future__ import annotations

import mmap
import threading
import zipfile
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bundler.derived import content_sha256
from bundler.errors import BuildError, HashMismatchError, InputUnavailableError
from bundler.readers.archives import SafeArchive
from bundler.readers.member_scan import scan_member

#: A member above this size is written out instead (a CUDA provider DLL is over 400 MB): memory stays flat.
IN_MEMORY_MAX = 64 << 20
#: Inflated members kept by their sha256, the least recently read dropped first beyond this many bytes (the
#: binaries of the Windows quickstart's wheels are about 60 MB).
KEPT_MAX = 128 << 20
_INFLATED: OrderedDict[str, bytes] = OrderedDict()
_KEPT_LOCK = threading.Lock()


@dataclass(frozen=True)
class PackedPe:
    """A DLL or PYD inside a zip, by the sha256 its content had when the build first read it."""

    archive: Path
    name: str  # the member's name in the archive
    sha256: str


PeSource = Path | PackedPe


def source_sha256(source: PeSource) -> str:
    return source.sha256 if isinstance(source, PackedPe) else content_sha256(source)


@contextmanager
def pe_data(source: PeSource, *, name: str) -> Iterator[mmap.mmap | bytes]:
    """The bytes of `source`: a file mapped, a member inflated (and checked: size, CRC, its recorded sha256)."""
    if isinstance(source, Path):
        with mapped(source, name=name) as data:
            yield data
        return
    content = _INFLATED.get(source.sha256)
    if content is None:
        with SafeArchive.open(source.archive, label=str(source.archive)) as archive:
            info = archive.zip_info(source.name)  # a member it lacks is named there
        assert info is not None  # a PackedPe is made of a zip's member only
        sha256, content = inflate(source.archive, info)
        if sha256 != source.sha256:
            msg = (f"{name}: its bytes have sha256 {sha256}, expected {source.sha256} (the archive changed while "
                   "the build read it)")
            raise HashMismatchError(msg)
    if not content:
        msg = f"{name} is empty; expected a Windows DLL, PYD or EXE."
        raise BuildError(msg)
    yield content


def inflate(archive: Path, info: zipfile.ZipInfo) -> tuple[str, bytes]:
    """A member's content and its sha256, read where it lies (checked as extracting checks it) and kept for the
    next reader of the same bytes: the closure, the signature policy and its digest thread read one DLL in turn."""
    pieces = bytearray()
    sha256 = scan_member(archive, info, label=str(archive), on_piece=pieces.extend).sha256
    content = bytes(pieces)
    pieces.clear()  # one copy held, not two
    with _KEPT_LOCK:  # the digest thread reads beside the signature checks
        _INFLATED[sha256] = content
        _INFLATED.move_to_end(sha256)
        while sum(len(kept) for kept in _INFLATED.values()) > KEPT_MAX and len(_INFLATED) > 1:
            _INFLATED.popitem(last=False)
    return sha256, content


@contextmanager
def mapped(path: Path, *, name: str) -> Iterator[mmap.mmap]:
    """A PE file memory-mapped read-only, with an empty or unreadable file reported as such."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        msg = f"{name} cannot be read ({exc.strerror}); expected a readable DLL or PYD file."
        raise InputUnavailableError(msg) from exc
    with handle:
        try:
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:
            msg = f"{name} is empty; expected a Windows DLL, PYD or EXE."
            raise BuildError(msg) from None
        with data:
            yield data
