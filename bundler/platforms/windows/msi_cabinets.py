"""An MSI's files in cabinets that keep within the cabinet format's and Windows Installer's limits, written by
gcab (Debian package `gcab`, libgcab's command line), which streams: wixl builds its one cabinet in memory (5 GiB
at 1.5 GB of payload) and fails at 2.2 GB (docs/facts.md, "MSI and cabinet limits").

The limits (docs/facts.md gives the sources):
- a CAB folder holds at most 65,535 data blocks of 32 KiB uncompressed (0x7FFF8000 bytes), and gcab writes one
  folder per cabinet, so a cabinet holds at most that many uncompressed bytes;
- a cabinet holds at most 65,535 files (CFHEADER.cFiles is 16 bits), and a cabinet file is under 2 GiB
  (CB_MAX_DISK, 0x7FFFFFFF);
- Windows Installer takes no .msi or cabinet of 2 GiB or more, and a File row's FileSize is a signed 32-bit
  number, so one file of 2 GiB or more cannot be in any MSI.

So the image's files, in the File table's sequence, fill cabinets of at most `limit` uncompressed bytes (by
default 2,000,000,000: a cabinet of incompressible data grows by MSZIP's 13 or so bytes a block and still stays
under 2 GiB) and at most CABINET_FILES files. One cabinet of at most EMBED_BYTES is embedded in the MSI (one file
to ship, as before); otherwise every cabinet is a file beside the MSI, named in 8.3 form as the Media table's
Cabinet column requires, and the MSI, which then holds only tables, must be shipped with them in one folder.
"""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bundler.errors import BuildError, UnsupportedError, UsageError

#: The most uncompressed bytes one CAB folder holds: 65,535 data blocks of 32 KiB ([MS-CAB] CFFOLDER.cCFData).
CAB_FOLDER_BYTES = 0xFFFF * 0x8000
#: The default (and largest) uncompressed bytes per cabinet: under CAB_FOLDER_BYTES with room for MSZIP's
#: per-block overhead, so that even incompressible data leaves the cabinet file under 2 GiB.
CABINET_BYTES = 2_000_000_000
#: Files per cabinet: the format allows 65,535; gcab takes its files on one command line (about 34 bytes each,
#: within Linux's 2 MiB for arguments and environment).
CABINET_FILES = 30_000
#: The largest single cabinet embedded in the MSI: msibuild holds a stream in memory while it adds it.
EMBED_BYTES = 128 << 20
#: The embedded cabinet's stream name (wixl's, kept so that MSIs of small bundles keep their streams).
EMBEDDED_NAME = "payload.cab"
#: A File row's FileSize and a file Windows Installer installs: a signed 32-bit number.
MSI_FILE_BYTES = 0x7FFFFFFF


@dataclass(frozen=True)
class Cabinet:
    """One cabinet: its name (a file beside the MSI, or the stream `EMBEDDED_NAME`), its files in sequence order."""

    name: str
    embedded: bool
    files: tuple[str, ...]  # image-relative, '/'-separated
    last_sequence: int  # the File.Sequence of its last file (Media.LastSequence)


@dataclass(frozen=True)
class Layout:
    """Every cabinet of an MSI, in DiskId order; the files' sequence numbers follow from it."""

    cabinets: tuple[Cabinet, ...]

    def sequences(self) -> dict[str, int]:
        found, number = {}, 0
        for cabinet in self.cabinets:
            for path in cabinet.files:
                number += 1
                found[path] = number
        return found

    @property
    def external(self) -> tuple[Cabinet, ...]:
        return tuple(cabinet for cabinet in self.cabinets if not cabinet.embedded)


def check_limit(limit: int) -> int:
    """A cabinet size asked for (`package --cabinet-bytes`), refused outside 1 MiB .. CABINET_BYTES."""
    if not (1 << 20) <= limit <= CABINET_BYTES:
        msg = (f"--cabinet-bytes {limit}: expected a number of bytes from {1 << 20:,} to {CABINET_BYTES:,} (a CAB "
               f"folder holds at most {CAB_FOLDER_BYTES:,} uncompressed bytes and a cabinet file stays under 2 GiB)")
        raise UsageError(msg)
    return limit


def too_large(path: str, size: int, limit: int) -> UnsupportedError:
    """The refusal of one file that no cabinet of `limit` bytes holds, with the way around it."""
    if size > CABINET_BYTES:
        why = (f"more than an MSI can install ({CABINET_BYTES:,} bytes per cabinet: a CAB folder holds "
               f"{CAB_FOLDER_BYTES:,} uncompressed bytes and a File row's size is a signed 32-bit number)")
        way = "ship this bundle by its zip route (package --intunewin without --msi)"
    else:
        why = f"more than one cabinet of --cabinet-bytes {limit:,} holds"
        way = f"raise --cabinet-bytes to at least {size:,} (at most {CABINET_BYTES:,})"
    return UnsupportedError(f"the install image's file {path} is {size:,} bytes, {why}: {way}")


def split(sizes: Sequence[tuple[str, int]], *, limit: int = CABINET_BYTES,
          files: int = CABINET_FILES) -> list[tuple[str, ...]]:
    """The files (in sequence order, with their sizes) in consecutive groups of at most `limit` bytes and `files`
    files each; a file larger than `limit` is refused (too_large)."""
    groups: list[tuple[str, ...]] = []
    current: list[str] = []
    held = 0
    for path, size in sizes:
        if size > limit:
            raise too_large(path, size, limit)
        if current and (held + size > limit or len(current) >= files):
            groups.append(tuple(current))
            current, held = [], 0
        current.append(path)
        held += size
    if current or not groups:
        groups.append(tuple(current))
    return groups


def external_name(stem: str, index: int) -> str:
    """An external cabinet's 8.3 file name (the Cabinet data type forbids long names): `stem` (five letters or
    digits of the package code, so two packages' cabinets in one folder do not collide) and the disk's number."""
    return f"{stem}{index:03d}.cab"


def single(files: Sequence[str]) -> Layout:
    """All of `files` (in sequence order) in one embedded cabinet: the layout of a small image."""
    return Layout(cabinets=(Cabinet(name=EMBEDDED_NAME, embedded=True, files=tuple(files),
                                    last_sequence=len(files)),))


def write_cabinets(image: Path, files: Sequence[str], work: Path, *, stem: str, keys: dict[str, str],
                   limit: int = CABINET_BYTES, gcab: str,
                   on_written: Callable[[Path], object] | None = None) -> tuple[Layout, dict[str, Path]]:
    """The cabinets of `files` (sequence order) from `image`, written by gcab into `work`: the layout, and each
    cabinet's file by name. Each file is named in its cabinet by its File table key (`keys`), as Windows
    Installer looks it up. One small cabinet becomes the embedded one. `on_written` is called with each cabinet's
    file as soon as gcab has written it (to hash it while the next is compressed)."""
    groups = split([(path, (image / path).stat().st_size) for path in files], limit=limit)
    written: list[Path] = []
    for index, group in enumerate(groups, start=1):
        written.append(_gcab(image, group, work / f"disk{index}", keys=keys, gcab=gcab))
        if on_written is not None:
            on_written(written[-1])
    if len(written) == 1 and written[0].stat().st_size <= EMBED_BYTES:
        return single(groups[0]), {EMBEDDED_NAME: written[0]}
    cabinets, paths, number = [], {}, 0
    for index, (group, path) in enumerate(zip(groups, written), start=1):
        number += len(group)
        name = external_name(stem, index)
        cabinets.append(Cabinet(name=name, embedded=False, files=group, last_sequence=number))
        paths[name] = path
    return Layout(cabinets=tuple(cabinets)), paths


def _gcab(image: Path, group: Sequence[str], folder: Path, *, keys: dict[str, str], gcab: str) -> Path:
    """One cabinet (MSZIP, one folder) of `group`, each file linked into `folder` under its key, in that order."""
    from bundler.atomic import link_or_copy

    folder.mkdir(parents=True)
    links = folder / "files"
    links.mkdir()
    for path in group:
        link_or_copy(image / path, links / keys[path])
    output = folder / "cabinet.cab"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env["TZ"] = "UTC"  # gcab writes each file's time as a local DOS time; the files carry the bundle's time
    proc = subprocess.run([gcab, "-c", "-z", "-n", str(output), *(keys[path] for path in group)], cwd=links,
                          env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        msg = f"gcab failed with exit code {proc.returncode}: {(proc.stderr.strip() or proc.stdout.strip())[-800:]}"
        raise BuildError(msg)
    for path in group:
        (links / keys[path]).unlink()
    links.rmdir()
    if output.stat().st_size > MSI_FILE_BYTES:
        msg = f"gcab wrote a cabinet of {output.stat().st_size:,} bytes, over 2 GiB, from {len(group)} files"
        raise BuildError(msg)
    return output


def file_hash_parts(path: Path) -> tuple[int, int, int, int]:
    """MsiFileHash's four columns: the file's MD5 as four signed little-endian 32-bit numbers (read in chunks:
    wixl reads each file whole into memory to compute this)."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return struct.unpack("<4i", digest.digest())
