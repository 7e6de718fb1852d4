"""Check a finished bundle without trusting anything inside it but SHA256SUMS (`ort-bundler verify`; `sign`
checks its input, `publish` and `pull` the bundle they move the same way).

Structure (one top folder named like the bundle, the required files, and only plain files and folders
with names that stay inside it: no `..`, no empty parts, no links or devices), `bundle.json` (parses
and agrees with the folder name), every `SHA256SUMS` entry (streamed and hashed; a member whose data
cannot be decompressed is named), and the files the sums do not mention. A signed bundle's signatures
are checked too (`bundler.signing.check`), against `--trust CA.pem` when given, and the unsigned build
is rebuilt from it and compared with the one `signature.json` names. All findings are collected; any
finding makes the bundle fail.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import stat
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from cryptography import x509

from bundler.errors import InputUnavailableError, VerificationError
from bundler.hashing import CHUNK, file_sha256
from bundler.signing.check import SignatureCheck, check_signatures
from bundler.signing.credentials import CredentialError, load_certificates
from bundler.signing.layout import SIGNATURE_RECORD, SUMS_SIGNATURE, scratch, unpack, unsigned_files, unsigned_sha256
from bundler.signing.provenance_check import ProvenanceCheck, provenance_of
from bundler.sources.cache import Cache
from bundler.writer.members import MemberCache

REQUIRED = ("SHA256SUMS", "bundle.json", "install-plan.json")
# What reading one member can raise: damaged data (zlib.error for a broken deflate stream, BadZipFile for
# a bad CRC), an encrypted entry, an unknown compression method.
UNREADABLE = (zipfile.BadZipFile, zlib.error, OSError, EOFError, RuntimeError, NotImplementedError)
SUM_LINE = re.compile(r"^([0-9a-f]{64})  (\S.*)$")
_REGULAR_TYPES = (0, stat.S_IFREG, stat.S_IFDIR)  # 0: no Unix mode recorded (a zip made on Windows)


@dataclass(frozen=True, kw_only=True)
class UnsignedBuild:
    """Whether the signed bundle, without its signatures, is the unsigned build it says it was made from."""

    recorded: str | None
    rebuilt: str

    @property
    def equal(self) -> bool:
        return self.recorded == self.rebuilt

    def to_json(self) -> dict[str, object]:
        return {"recorded_sha256": self.recorded, "rebuilt_sha256": self.rebuilt, "equal": self.equal}


@dataclass(frozen=True, kw_only=True)
class Report:
    bundle: str
    files: int
    missing: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    altered: tuple[str, ...] = ()
    problems: tuple[str, ...] = field(default=())
    anchor: str | None = None
    signatures: tuple[SignatureCheck, ...] = ()
    unsigned_build: UnsignedBuild | None = None
    # What the user should know but what does not make the bundle fail (a file renamed by a browser or a share).
    notes: tuple[str, ...] = ()
    provenance: ProvenanceCheck | None = None

    @property
    def ok(self) -> bool:
        return not self.findings()

    def findings(self) -> list[str]:
        """Every reason the bundle fails, one sentence each."""
        found = [f"missing: {n}" for n in self.missing] + [f"extra (not in SHA256SUMS): {n}" for n in self.extra]
        found += [f"altered (hash differs): {n}" for n in self.altered] + list(self.problems)
        found += [f"signature {c.path}: {'; '.join(c.problems) or 'not trusted'}" for c in self.signatures if not c.ok]
        if self.unsigned_build and not self.unsigned_build.equal:
            found.append("without its signatures the bundle is not the unsigned build signature.json names")
        found += [f"provenance: {p}" for p in (self.provenance.problems if self.provenance else ())]
        return found

    def to_json(self) -> dict[str, object]:
        return {"bundle": self.bundle, "ok": self.ok, "files": self.files, "missing": list(self.missing),
                "extra": list(self.extra), "altered": list(self.altered), "problems": list(self.problems),
                "signed": any(c.signer for c in self.signatures), "trust_anchor": self.anchor,
                "signatures": [c.to_json() for c in self.signatures],
                "unsigned_build": self.unsigned_build.to_json() if self.unsigned_build else None,
                "notes": list(self.notes),
                "provenance": self.provenance.to_json() if self.provenance else None}

    def summary(self) -> str:
        lines = [f"{self.bundle}: {'OK' if self.ok else 'FAILED'} ({self.files} files checked)"]
        lines += [f"  missing: {n}" for n in self.missing]
        lines += [f"  extra (not in SHA256SUMS): {n}" for n in self.extra]
        lines += [f"  altered (hash differs): {n}" for n in self.altered]
        lines += [f"  problem: {p}" for p in self.problems]
        lines += [f"  note: {n}" for n in self.notes]
        lines += [c.summary() for c in self.signatures]
        if self.unsigned_build:
            verdict = "equals" if self.unsigned_build.equal else "DIFFERS from"
            lines.append(f"  without its signatures the bundle {verdict} the unsigned build "
                         f"(rebuilt sha256 {self.unsigned_build.rebuilt}, recorded {self.unsigned_build.recorded})")
        if self.provenance:
            lines.append(self.provenance.summary())
        return "\n".join(lines)


def verify_bundle(path: Path, *, trust: Path | None = None, cache: Cache | None = None,
                  now: dt.datetime | None = None) -> Report:
    """`trust`: a PEM file of anchor certificates; with it an unsigned bundle fails. `cache` lends its
    member cache to rebuilding a signed bundle's unsigned zip (only then is it touched)."""
    anchors = _anchors(trust) if trust else None
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:  # exit 4, "not found" (README's exit codes), as for any input that is not there
        msg = f"{path}: not found; expected the path of a bundle zip"
        raise InputUnavailableError(msg) from None
    except OSError as exc:
        msg = f"{path}: cannot be read ({exc.strerror}), expected a bundle zip file"
        raise VerificationError(msg) from None
    except zipfile.BadZipFile as exc:
        msg = f"{path.name}: not a readable zip ({exc}); the bundle is truncated or not a bundle"
        raise VerificationError(msg) from None
    with archive:
        report = _verify(path, archive)
        if trust is None and SUMS_SIGNATURE not in _member_names(archive):
            return report
        return _with_signatures(report, archive, anchors=anchors, anchor=str(trust) if trust else None,
                                cache=cache, now=now or dt.datetime.now(dt.UTC), path=path)


def _anchors(trust: Path) -> list[x509.Certificate]:
    try:
        return load_certificates(trust, what="--trust")
    except CredentialError as exc:
        raise VerificationError(str(exc)) from None


def _member_names(archive: zipfile.ZipFile) -> set[str]:
    return {i.filename.split("/", 1)[1] for i in archive.infolist() if "/" in i.filename}


def _verify(path: Path, archive: zipfile.ZipFile) -> Report:
    problems: list[str] = []
    infos = archive.infolist()
    tops = {i.filename.split("/", 1)[0] for i in infos}
    if len(tops) != 1 or any("/" not in i.filename for i in infos if not i.is_dir()):
        msg = f"{path.name}: found top-level entries {sorted(tops)[:5]}, expected one top folder"
        raise VerificationError(msg)
    top = tops.pop()
    files = _safe_files(infos, top, problems)
    names = {i.filename[len(top) + 1:]: i for i in files}
    for required in REQUIRED:
        if required not in names:
            problems.append(f"{required} is missing")
    notes = _renamed(path, top, signed=SUMS_SIGNATURE in names)
    sums = _read_sums(archive, names, problems)
    _check_bundle_json(archive, names, top, problems)
    missing = tuple(sorted(n for n in sums if n not in names))
    extra = tuple(sorted(n for n in names if n not in sums and n not in ("SHA256SUMS", SUMS_SIGNATURE)))
    altered = tuple(sorted(n for n in sums if n in names and _sha256(archive, names[n], problems) != sums[n]))
    sidecar = path.with_name(path.name + ".sha256")
    if sidecar.is_file():
        recorded = sidecar.read_text(encoding="ascii", errors="replace").split()[:1]
        if recorded != [file_sha256(path)]:
            problems.append(f"{sidecar.name} does not match the zip's sha256")
    return Report(bundle=path.name, files=len(sums), missing=missing, extra=extra, altered=altered, notes=notes,
                  problems=tuple(problems))


def _safe_files(infos: Sequence[zipfile.ZipInfo], top: str, problems: list[str]) -> list[zipfile.ZipInfo]:
    """The plain files with safe, unique names; every other entry becomes a problem and is not read."""
    files: list[zipfile.ZipInfo] = []
    seen: dict[str, str] = {}
    for info in infos:
        problem = entry_problem(info, top)
        if problem:
            problems.append(f"{info.orig_filename!r} {problem}")
            continue
        folded = info.filename.casefold()
        if folded in seen:  # an extractor may write either copy of a duplicated name: never ours
            problems.append(f"{info.filename} appears twice (also as {seen[folded]}); a bundle has unique names")
        seen.setdefault(folded, info.filename)
        if info.flag_bits & 0x1:  # kept: hashing it fails, so it is also reported as altered
            problems.append(f"{info.filename} is marked encrypted; ort-bundler never writes encrypted entries")
        if not info.is_dir():
            files.append(info)
    return files


def entry_problem(info: zipfile.ZipInfo, top: str) -> str | None:
    """Why an entry could land outside the bundle folder or be something other than a file, or None."""
    if "\0" in info.orig_filename:
        return "holds a NUL character, which extractors cut the name at"
    relative = info.filename[len(top) + 1:].rstrip("/") if info.is_dir() else info.filename[len(top) + 1:]
    problem = path_problem(relative) if relative or not info.is_dir() else None
    if problem:
        return problem
    kind = stat.S_IFMT(info.external_attr >> 16)
    if info.create_system == 3 and kind not in _REGULAR_TYPES:
        return "is a symbolic link or special file; a bundle holds only plain files and folders"
    return None


def path_problem(relative: str) -> str | None:
    """A bundle-relative path must name something inside the bundle: the same rule for entries and sums."""
    if not relative or relative.startswith("/") or "\\" in relative or ":" in relative:
        return "is not a relative path inside the bundle folder"
    if any(part in ("", ".", "..") for part in relative.split("/")):
        return "has an empty, '.' or '..' part; it could name a file outside the bundle folder"
    return None


def _read_sums(archive: zipfile.ZipFile, names: dict[str, zipfile.ZipInfo], problems: list[str]) -> dict[str, str]:
    info = names.get("SHA256SUMS")
    if info is None:
        return {}
    sums: dict[str, str] = {}
    try:
        text = archive.read(info).decode("utf-8", "replace")
    except UNREADABLE as exc:
        problems.append(f"SHA256SUMS is not readable: {exc}")
        return {}
    for number, line in enumerate(text.splitlines(), 1):
        match = SUM_LINE.match(line)
        if not match:
            problems.append(f"SHA256SUMS line {number}: found {line[:60]!r}, expected '<sha256>  <path>'")
            continue
        problem = path_problem(match.group(2))
        if problem:
            problems.append(f"SHA256SUMS line {number}: {match.group(2)!r} {problem}")
            continue
        sums[match.group(2)] = match.group(1)
    return sums


def _renamed(path: Path, top: str, *, signed: bool) -> tuple[str, ...]:
    """A note, never a finding, when the file's name is not the one `build` (or `sign`) gave it.

    Browsers and shares rename files (`app (1).zip`, `app-signed.zip`): the bundle's identity is its content,
    which the sums, the signature over them and bundle.json's name and version (checked against the top
    folder) establish. The name is said, so a reader who relies on it sees which bundle this really is.
    """
    if path.name == f"{top}.zip" or (signed and path.name == f"{top}-signed.zip"):
        return ()
    return (f"the file is named {path.name!r} but holds the bundle {top!r} (renamed after the build; its content "
            "is what was checked)",)


def _check_bundle_json(archive: zipfile.ZipFile, names: dict[str, zipfile.ZipInfo], top: str, problems: list[str]) -> None:
    info = names.get("bundle.json")
    if info is None:
        return
    try:
        record = json.loads(archive.read(info))
    except (ValueError, *UNREADABLE) as exc:  # ValueError: not JSON, not UTF-8
        problems.append(f"bundle.json is not readable JSON: {exc}")
        return
    if not isinstance(record, dict):
        problems.append(f"bundle.json holds a {type(record).__name__}, expected an object")
        return
    expected = "{name}-{version}-{platform}".format_map({k: record.get(k) for k in ("name", "version", "platform")})
    if expected != top:
        problems.append(f"bundle.json describes {expected!r} but the top folder is {top!r}")


def _sha256(archive: zipfile.ZipFile, info: zipfile.ZipInfo, problems: list[str]) -> str:
    digest = hashlib.sha256()
    try:
        with archive.open(info) as fh:
            while chunk := fh.read(CHUNK):
                digest.update(chunk)
    except UNREADABLE as exc:
        problems.append(f"{info.filename} cannot be read ({exc}): the zip is damaged there; get the bundle again")
        return "unreadable"  # damaged, encrypted or an unknown compression method: also reported as altered
    return digest.hexdigest()


def _with_signatures(report: Report, archive: zipfile.ZipFile, *, anchors: list[x509.Certificate] | None,
                     anchor: str | None, cache: Cache | None, now: dt.datetime, path: Path) -> Report:
    """Signature checks only on a bundle whose structure held: they read members by name."""
    top = archive.infolist()[0].filename.split("/", 1)[0]
    if not report.ok:
        return replace(report, anchor=anchor)
    names = sorted(_member_names(archive) - {""})
    checks = check_signatures(names, lambda rel: archive.read(f"{top}/{rel}"), anchors=anchors, now=now)
    unsigned: dict[str, str] | None = {} if SUMS_SIGNATURE in names else None  # filled by _unsigned_build
    rebuilt = _unsigned_build(archive, top, cache=cache, unsigned=unsigned) if unsigned is not None else None
    provenance = provenance_of(archive, top, names, zip_path=path, unsigned=unsigned,
                               unsigned_zip=rebuilt.rebuilt if rebuilt else None)
    return replace(report, anchor=anchor, signatures=tuple(checks), unsigned_build=rebuilt, provenance=provenance)


def _unsigned_build(archive: zipfile.ZipFile, top: str, *, cache: Cache | None,
                    unsigned: dict[str, str] | None = None) -> UnsignedBuild:
    """`unsigned`, when given, receives the unsigned view's members and their sha256 (the provenance's subjects)."""
    recorded = None
    try:
        record = json.loads(archive.read(f"{top}/{SIGNATURE_RECORD}"))
        recorded = record["unsigned_bundle"]["sha256"]
    except (KeyError, TypeError, ValueError):
        recorded = None
    with scratch() as tmp:
        work = Path(tmp)
        unpacked = unpack(archive, top, work / "in")
        (work / "out").mkdir()
        members = MemberCache(cache.work_dir("members") if cache else work / "members")
        if unsigned is not None:
            (work / "view").mkdir()
            unsigned.update({rel: f.sha256 for rel, f in unsigned_files(unpacked, work / "view").items()})
        return UnsignedBuild(recorded=recorded, rebuilt=unsigned_sha256(unpacked, work / "out", member_cache=members))
