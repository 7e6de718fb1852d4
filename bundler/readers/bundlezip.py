"""A finished bundle, read in place: its members, `bundle.json` and `SHA256SUMS`, nothing extracted.

`reproduce` and `diff` compare bundles member by member. Both open the zip through `SafeArchive` first,
so a crafted zip (traversal, links, duplicates, bombs) is refused before anything reads it, and then read
members straight from the zip: whatever must be on disk (a DLL to parse) goes to the caller's private
scratch folder.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

from bundler.errors import InputUnavailableError, VerificationError
from bundler.hashing import CHUNK
from bundler.readers.archives import DEFAULT_LIMITS, SafeArchive

# The members a signed bundle carries beside what the build wrote (the `sign` command's detached signature,
# and the DSSE envelope of the build's provenance statement, `bundler.assembly.provenance.ENVELOPE_MEMBER`).
SIGNATURE_SUFFIXES = (".p7s", ".dsse.json")
SIGNATURE_BLOCK = re.compile(r"^# SIG # Begin signature block$.*?^# SIG # End signature block$\n?", re.MULTILINE | re.DOTALL)
LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # the zip local file header, up to the two length fields
# A bundle is read in place, each member hashed as it streams from the zip and never extracted whole, and a
# model's external data may be gigabytes that deflate close to deflate's own limit (1032:1, a tensor of
# zeros). The ratio rule is for archives that get extracted; here it sits above what deflate can reach, and
# the total above the largest release, so a sound bundle is never refused as a bomb. What is read whole
# (records, scripts, the SBOM) is bounded on its own.
BUNDLE_LIMITS = replace(DEFAULT_LIMITS, max_total_size=256 * 1024**3, max_ratio=1100.0)
MAX_READ_BYTES = 256 * 1024**2
# How deep bundle.json may nest. `build` writes a few levels (the manifest's tables inside the record); a record
# nested thousands deep made `diff` and `reproduce` fail with Python's RecursionError (issue 34), and one just
# under the parser's limit still breaks whatever walks it next (TOML writing, comparing).
MAX_RECORD_DEPTH = 32


@dataclass(frozen=True, kw_only=True)
class BundleZip:
    """One bundle: its top folder, its files by bundle-relative name, and the records it carries."""

    path: Path
    top: str
    infos: dict[str, zipfile.ZipInfo]
    record: dict[str, Any]
    sums: dict[str, str]

    @property
    def names(self) -> list[str]:
        return sorted(self.infos)

    @property
    def built_with(self) -> str:
        return str(self.record.get("built_with", {}).get("ort-bundler", "unknown"))

    @contextmanager
    def open(self, name: str) -> Iterator[BinaryIO]:
        with zipfile.ZipFile(self.path) as archive, archive.open(self.infos[name]) as member:
            yield member  # type: ignore[misc]

    def read(self, name: str) -> bytes:
        """A member that is read whole: one declaring more than MAX_READ_BYTES is refused before it is read."""
        if (size := self.infos[name].file_size) > MAX_READ_BYTES:
            msg = (f"{self.path.name}: {self.top}/{name} declares {size} bytes, expected at most {MAX_READ_BYTES} "
                   "for a member the bundle's readers hold in memory")
            raise VerificationError(msg)
        with self.open(name) as member:
            return member.read()

    def sha256(self, name: str) -> str:
        """The member's sha256, streamed: a wheel or DLL is never held in memory."""
        digest = hashlib.sha256()
        with self.open(name) as member:
            while chunk := member.read(CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def raw_sha256(self, name: str) -> str:
        """The sha256 of the member's stored (compressed) bytes, to tell a different zlib from different content."""
        info = self.infos[name]
        digest = hashlib.sha256()
        with self.path.open("rb") as fh:
            fh.seek(info.header_offset)
            header = LOCAL_HEADER.unpack(fh.read(LOCAL_HEADER.size))
            fh.seek(info.header_offset + LOCAL_HEADER.size + header[-2] + header[-1])
            left = info.compress_size
            while left:
                chunk = fh.read(min(CHUNK, left))
                if not chunk:
                    break
                digest.update(chunk)
                left -= len(chunk)
        return digest.hexdigest()


def open_bundle(path: Path) -> BundleZip:
    """Check the zip is safe to read and is a bundle (one top folder, bundle.json, SHA256SUMS); read its records."""
    if not path.exists():  # exit 4, "not found", as README's exit codes say
        msg = f"{path}: not found; expected the path of a bundle zip"
        raise InputUnavailableError(msg)
    if not path.is_file():
        msg = f"{path}: not a file; expected a bundle zip"
        raise VerificationError(msg)
    with SafeArchive.open(path, label=path.name, limits=BUNDLE_LIMITS):
        pass  # every entry checked: nothing unsafe is read below
    try:
        with zipfile.ZipFile(path) as archive:
            infos = [info for info in archive.infolist() if not info.is_dir()]
    except (zipfile.BadZipFile, OSError) as exc:
        msg = f"{path.name}: not a readable zip ({exc}); expected a bundle made by `ort-bundler build`"
        raise VerificationError(msg) from None
    tops = {info.filename.split("/", 1)[0] for info in infos}
    if len(tops) != 1 or any("/" not in info.filename for info in infos):
        msg = f"{path.name}: found top-level entries {sorted(tops)[:5]}, expected one top folder"
        raise VerificationError(msg)
    top = tops.pop()
    by_name = {info.filename[len(top) + 1:]: info for info in infos}
    for required in ("bundle.json", "SHA256SUMS"):
        if required not in by_name:
            msg = f"{path.name}: {top}/{required} is missing; expected a bundle made by `ort-bundler build`"
            raise VerificationError(msg)
    bundle = BundleZip(path=path, top=top, infos=by_name, record={}, sums={})
    return BundleZip(path=path, top=top, infos=by_name, record=_record(bundle), sums=_sums(bundle))


def _record(bundle: BundleZip) -> dict[str, Any]:
    try:
        record = json.loads(bundle.read("bundle.json"))
    except (ValueError, UnicodeDecodeError) as exc:
        msg = f"{bundle.path.name}: {bundle.top}/bundle.json is not valid JSON ({exc}); expected the build's record"
        raise VerificationError(msg) from None
    except RecursionError:
        record = None
    if record is None or _depth(record) > MAX_RECORD_DEPTH:
        msg = (f"{bundle.path.name}: {bundle.top}/bundle.json nests arrays or objects more than {MAX_RECORD_DEPTH} "
               "levels deep; expected the build's record, a few levels deep (the bundle was altered)")
        raise VerificationError(msg)
    if not isinstance(record, dict):
        msg = f"{bundle.path.name}: {bundle.top}/bundle.json holds a {type(record).__name__}, expected a JSON object"
        raise VerificationError(msg)
    return record


def _depth(value: Any) -> int:
    """How deep a parsed JSON value nests, walked without recursion (the value may be nearly as deep as the
    parser allows)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _sums(bundle: BundleZip) -> dict[str, str]:
    sums: dict[str, str] = {}
    for number, line in enumerate(bundle.read("SHA256SUMS").decode("utf-8", "replace").splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            msg = f"{bundle.path.name}: SHA256SUMS line {number} is {line[:80]!r}, expected '<sha256>  <path>'"
            raise VerificationError(msg)
        sums[name] = digest
    return sums


def is_signature(name: str) -> bool:
    """A member `sign` adds (a detached signature); compared bundles ignore it."""
    return name.endswith(SIGNATURE_SUFFIXES)


def script_text(data: bytes) -> str:
    """A script's text without an Authenticode signature block, so signing is not a change.

    Signing tools append the block after a line break of their own: trailing blank lines do not count.
    """
    return SIGNATURE_BLOCK.sub("", data.decode("utf-8", "replace").replace("\r\n", "\n")).rstrip() + "\n"
