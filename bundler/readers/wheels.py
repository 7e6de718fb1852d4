"""Reading a wheel without installing it: its METADATA, and the checks an official ORT wheel must pass."""

from __future__ import annotations

import csv
import hashlib
import io
from email.message import Message
from email.parser import Parser
from pathlib import Path

from packaging.tags import Tag
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import Version

from bundler.errors import BuildError, UnsupportedError
from bundler.hashing import CHUNK
from bundler.names import decode_utf8, record_digest
from bundler.readers.archives import SafeArchive
from bundler.readers.capi import (
    PYTHON_RE,
    _parse_headers,
    _parse_tags,
    _version,
)
from bundler.target_platform import TargetPlatform


def wheel_metadata(archive: SafeArchive, *, label: str) -> tuple[str, Message]:
    """The wheel's one top-level .dist-info folder and its parsed METADATA."""
    folders = sorted({n.split("/")[0] for n in archive.names() if n.split("/")[0].endswith(".dist-info")})
    if len(folders) != 1:
        msg = f"{label}: found {len(folders)} .dist-info folders ({', '.join(folders) or 'none'}), expected exactly one"
        raise BuildError(msg)
    text = archive.read(f"{folders[0]}/METADATA").decode("utf-8", "replace")
    return folders[0], Parser().parsestr(text)


# RECORD hashes we accept: fixed-length and at least as strong as sha256 (not md5/sha1, not the shake XOFs).
RECORD_ALGORITHMS = frozenset({"sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512", "blake2b", "blake2s"})


RECORD_SIGNATURES = ("RECORD", "RECORD.jws", "RECORD.p7s")


def verify_official_wheel(path: Path, *, expected_name: str, expected_version: str, target: TargetPlatform,
                          target_python: str, label: str) -> None:
    """Check an official wheel's name, version and tags against the manifest and its RECORD hashes."""
    tags = _check_wheel_filename(path, expected_name=expected_name, expected_version=expected_version,
                                 label=label)
    _check_serves(path, tags, target=target, python=target_python, label=label)
    with SafeArchive.open(path, label=label) as archive:
        dist_info = _wheel_dist_info(archive, path=path, label=label)
        _check_dist_info(archive, dist_info, path=path, tags=tags, expected_name=expected_name,
                         expected_version=expected_version, label=label)
        _check_record(archive, dist_info, path=path, label=label)


def _check_wheel_filename(path: Path, *, expected_name: str, expected_version: str, label: str) -> frozenset[Tag]:
    try:
        name, version, _build, tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        msg = f"{label}: found the file name '{path.name}' ({exc}), expected a wheel file name"
        raise BuildError(msg) from None
    if name != canonicalize_name(expected_name):
        msg = f"{label}: {path.name} is the distribution '{name}', expected '{expected_name}'"
        raise BuildError(msg)
    if version != _version(expected_version, where=f"{label} expected version"):
        msg = f"{label}: {path.name} is version {version}, expected {expected_version} as pinned by [ort] version"
        raise BuildError(msg)
    return tags


def _check_serves(path: Path, tags: frozenset[Tag], *, target: TargetPlatform, python: str, label: str) -> None:
    match = PYTHON_RE.match(python)
    if not match:
        msg = f"{label}: found the target Python {python}, expected '3.X'"
        raise UnsupportedError(msg)
    minor = int(match.group(1))
    if not any(target.serves(tag, minor=minor) and tag.abi != "none" for tag in tags):
        msg = (f"{label}: {path.name} carries the tags {', '.join(sorted(map(str, tags)))}, expected one that "
               f"serves CPython 3.{minor} on {target.tag}")
        raise BuildError(msg)


def _wheel_dist_info(archive: SafeArchive, *, path: Path, label: str) -> str:
    found = sorted({name.split("/")[0] for name in archive.names() if name.split("/")[0].endswith(".dist-info")})
    if len(found) != 1:
        msg = f"{label}: {path.name} has {len(found)} .dist-info folders ({', '.join(found) or 'none'}), expected exactly one"
        raise BuildError(msg)
    return found[0]


def _check_dist_info(archive: SafeArchive, dist_info: str, *, path: Path, tags: frozenset[Tag],
                     expected_name: str, expected_version: str, label: str) -> None:
    metadata = _parse_headers(_read_text(archive, f"{dist_info}/METADATA", path=path, label=label))
    if canonicalize_name(metadata["Name"] or "") != canonicalize_name(expected_name):
        msg = f"{label}: {path.name}'s METADATA names '{metadata['Name']}', expected '{expected_name}'"
        raise BuildError(msg)
    if _version(metadata["Version"] or "", where=f"{path.name} METADATA") != Version(expected_version):
        msg = f"{label}: {path.name}'s METADATA says version {metadata['Version']}, expected {expected_version}"
        raise BuildError(msg)
    wheel = _parse_headers(_read_text(archive, f"{dist_info}/WHEEL", path=path, label=label))
    declared = _parse_tags(wheel.get_all("Tag") or (), where=f"{label}: {path.name}'s WHEEL file")
    if declared != tags:
        msg = (f"{label}: {path.name}'s WHEEL file declares the tags {', '.join(sorted(map(str, declared))) or 'none'}, "
               f"expected the tags of its file name ({', '.join(sorted(map(str, tags)))})")
        raise BuildError(msg)


def _read_text(archive: SafeArchive, name: str, *, path: Path, label: str) -> str:
    if name not in archive.names():
        msg = f"{label}: {path.name} has no {name}, expected one in every wheel"
        raise BuildError(msg)
    return decode_utf8(archive.read(name), label=f"{label}: {path.name}", name=name)


def _check_record(archive: SafeArchive, dist_info: str, *, path: Path, label: str) -> None:
    """Every member is listed in RECORD and hashes to what it says, read in one streaming pass."""
    record = _record_entries(_read_text(archive, f"{dist_info}/RECORD", path=path, label=label), path=path, label=label)
    unhashed = {f"{dist_info}/{name}" for name in RECORD_SIGNATURES}
    members = [entry.name for entry in archive.entries if not entry.is_dir and entry.name not in unhashed]
    for name in members:
        if name not in record:
            msg = f"{label}: {path.name} contains {name}, which its RECORD does not list with a hash"
            raise BuildError(msg)
        _check_member(archive, name, record[name], path=path, label=label)
    missing = sorted(set(record) - set(members))
    if missing:
        msg = f"{label}: {path.name}'s RECORD lists {missing[0]}, which the wheel does not contain"
        raise BuildError(msg)


def _record_entries(text: str, *, path: Path, label: str) -> dict[str, tuple[str, bytes, int | None]]:
    entries = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) != 3:
            msg = f"{label}: {path.name}'s RECORD has the row {row!r}, expected path,hash,size"
            raise BuildError(msg)
        name, digest, size = row
        if not digest:
            continue
        algorithm, _, value = digest.partition("=")
        if algorithm not in RECORD_ALGORITHMS:
            msg = f"{label}: {path.name}'s RECORD hashes {name} with '{algorithm}', expected sha256 or stronger"
            raise BuildError(msg)
        digest_bytes = record_digest(value, algorithm=algorithm, where=f"{label}: {path.name}'s RECORD entry for {name}")
        entries[name] = (algorithm, digest_bytes, int(size) if size.isdigit() else None)
    return entries


def _check_member(archive: SafeArchive, name: str, expected: tuple[str, bytes, int | None], *, path: Path,
                  label: str) -> None:
    """Stream one member through its hash; corrupt data surfaces from SafeArchive as UnsafeArchiveError."""
    algorithm, digest, size = expected
    hasher = hashlib.new(algorithm)
    length = 0
    with archive.open_member(name) as member:
        while chunk := member.read(CHUNK):
            hasher.update(chunk)
            length += len(chunk)
    if hasher.digest() != digest or (size is not None and size != length):
        msg = (f"{label}: {path.name}: {name} does not match its RECORD entry ({algorithm} or size "
               f"differs), expected the file as published; the wheel was modified or damaged")
        raise BuildError(msg)
