"""A bundle's files on disk, and the unsigned bundle a signed one was made from.

Signing and verifying both unpack a bundle into a private folder, because osslsigncode and the
user's `--signer` work on files, and because a bundle's members can be far larger than memory. The
unsigned view is the signed bundle with every signature block cut off its scripts, the signature
files left out and `SHA256SUMS` computed again: written with the same reproducible zip writer and
the same timestamp, it must be byte-identical to the build that was signed.
"""

from __future__ import annotations

import calendar
import hashlib
import stat
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from bundler.assembly.provenance import ENVELOPE_MEMBER
from bundler.assembly.records import sha256sums
from bundler.errors import VerificationError
from bundler.hashing import CHUNK, file_sha256
from bundler.signing.authenticode import is_script, split_signature
from bundler.writer.members import Member, MemberCache
from bundler.writer.zipwriter import write_zip

SUMS = "SHA256SUMS"
SUMS_SIGNATURE = "SHA256SUMS.p7s"
SIGNATURE_RECORD = "signature.json"
PROVENANCE_ENVELOPE = ENVELOPE_MEMBER  # the DSSE envelope of the build's provenance statement (`sign` adds it)
SIGNATURE_FILES = (SUMS_SIGNATURE, SIGNATURE_RECORD, PROVENANCE_ENVELOPE)


@dataclass(frozen=True, kw_only=True)
class File:
    """One unpacked member: where it is, its sha256, and whether the zip marked it executable."""

    path: Path
    sha256: str
    executable: bool


@dataclass(frozen=True, kw_only=True)
class Unpacked:
    top: str
    epoch: int
    files: Mapping[str, File]  # bundle-relative path -> file


def unpack(archive: zipfile.ZipFile, top: str, dest: Path) -> Unpacked:
    """Every regular member below `top` into `dest`, hashed on the way. Call only on a verified bundle."""
    files: dict[str, File] = {}
    infos = [i for i in archive.infolist() if not i.is_dir()]
    for info in infos:
        relative = info.filename[len(top) + 1:]
        target = dest.joinpath(*PurePosixPath(relative).parts)
        if not target.resolve().is_relative_to(dest.resolve()):
            msg = f"{info.filename}: this member would be written outside the bundle folder"
            raise VerificationError(msg)
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with archive.open(info) as src, target.open("wb") as out:
            while chunk := src.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
        mode = info.external_attr >> 16
        files[relative] = File(path=target, sha256=digest.hexdigest(), executable=bool(mode & stat.S_IXUSR))
    return Unpacked(top=top, epoch=zip_epoch(infos[0]) if infos else 0, files=files)


def zip_epoch(info: zipfile.ZipInfo) -> int:
    """The epoch the zip writer was given: every member carries the same DOS time (in UTC, 2 s steps)."""
    return calendar.timegm((*info.date_time, 0, 0, 0))


def members(top: str, files: Mapping[str, File]) -> list[Member]:
    """Zip members for `files` plus a SHA256SUMS over all but its own signature: the shape the build writes."""
    by_name = {rel: Member(name=rel, source=f.path, sha256=f.sha256, executable=f.executable)
               for rel, f in files.items() if rel != SUMS}
    rooted = [Member(name=f"{top}/{m.name}", source=m.source, sha256=m.sha256, executable=m.executable)
              for m in by_name.values()]
    listed = {rel: m for rel, m in by_name.items() if rel != SUMS_SIGNATURE}
    rooted.append(Member(name=f"{top}/{SUMS}", data=sha256sums(listed).encode("utf-8")))
    return rooted


def unsigned_files(unpacked: Unpacked, work: Path) -> dict[str, File]:
    """The files as they were before signing: scripts cut at their block, signature files left out."""
    found: dict[str, File] = {}
    for rel, file in unpacked.files.items():
        if rel in SIGNATURE_FILES:
            continue
        if is_script(rel):
            split = split_signature(file.path.read_bytes())
            if split.block is not None:
                target = work / "unsigned" / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(split.content)
                file = File(path=target, sha256=hashlib.sha256(split.content).hexdigest(), executable=file.executable)
        found[rel] = file
    return found


def unsigned_sha256(unpacked: Unpacked, work: Path, *, member_cache: MemberCache) -> str:
    """The sha256 of the unsigned bundle, rebuilt from the signed one."""
    zip_path = work / f"{unpacked.top}.zip"
    write_zip(members(unpacked.top, unsigned_files(unpacked, work)), zip_path, epoch=unpacked.epoch,
              member_cache=member_cache)
    return file_sha256(zip_path)


def scratch(parent: Path | None = None) -> tempfile.TemporaryDirectory[str]:
    """A private folder (mode 0700) for unpacked members and, while signing, the key."""
    return tempfile.TemporaryDirectory(prefix="ort-bundler-sign-", dir=parent)
