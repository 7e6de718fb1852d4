"""`sign`: turn a verified bundle into a signed one, reproducibly, leaving nothing behind on failure.

The steps: verify the input bundle (a damaged or altered bundle is never signed); unpack it into a
private folder; give every PowerShell script an Authenticode signature block; write
`signature.json` (what was signed, by whom, and the sha256 of the unsigned bundle); compute
`SHA256SUMS` again over the signed files (the scripts changed bytes) so that `sha256sum -c` and the
installers' integrity check still pass; sign `SHA256SUMS` into `SHA256SUMS.p7s`; write the zip with
the reproducible writer (temp file + rename) and its `.sha256` sidecar. Before the zip is kept, the
unsigned bundle is rebuilt from it and must equal the input byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bundler.assembly.provenance import BESIDE_SUFFIX, PROVENANCE_MEMBER, envelope_line
from bundler.assembly.records import to_json
from bundler.atomic import write_atomic
from bundler.errors import BuildError, UsageError, VerificationError
from bundler.hashing import file_sha256
from bundler.runner import Runner, run
from bundler.signing import authenticode, cms, dsse
from bundler.signing.credentials import Identity
from bundler.signing.external import run_signer
from bundler.signing.layout import (
    PROVENANCE_ENVELOPE,
    SIGNATURE_RECORD,
    SUMS,
    SUMS_SIGNATURE,
    File,
    Unpacked,
    members,
    unpack,
    unsigned_sha256,
)
from bundler.signing.pkix import describe, fingerprint
from bundler.signing.timestamp import request_token
from bundler.signing.verify import verify_bundle
from bundler.sources.cache import Cache, disk_errors
from bundler.writer.members import Member, MemberCache
from bundler.writer.zipwriter import write_zip

FORMAT = 1
log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class SignOptions:
    """Either an identity (PEM or PKCS#12, signing done here) or an external command, not both."""

    identity: Identity | None = None
    signer_command: Sequence[str] | None = None
    timestamp_url: str | None = None


@dataclass(frozen=True, kw_only=True)
class SignResult:
    zip_path: Path
    sha256: str
    size: int
    signer: str
    signed: tuple[str, ...]


def sign_bundle(source: Path, dest: Path, *, options: SignOptions, cache: Cache, runner: Runner = run) -> SignResult:
    """Sign `source` into `dest` (and `dest.sha256`); `cache` gives the scratch folder and the member cache."""
    unsigned_digest = file_sha256(source)
    member_cache = MemberCache(cache.work_dir("members"))
    with cache.scratch(prefix="sign-") as work, disk_errors(BuildError, "sign"):
        work.chmod(0o700)  # the unpacked bundle and the (encrypted) key copy are this user's alone
        unpacked = _unpack_verified(source, work / "in")
        statements = signed_beside(source, unsigned_digest, identity=options.identity)  # checked before any output
        signer = _Signer(options=options, work=work, epoch=unpacked.epoch, runner=runner)
        files = dict(unpacked.files)
        scripts = sorted(rel for rel in files if authenticode.is_script(rel))
        for rel in scripts:
            files[rel] = signer.script(rel, files[rel])
        envelope = signer.provenance(files)  # before SHA256SUMS: the envelope is listed in it
        if envelope is not None:
            files[PROVENANCE_ENVELOPE] = envelope
        elif PROVENANCE_MEMBER in files:
            log.warning("%s: no DSSE envelope with --signer (it makes Authenticode and CMS signatures only); "
                        "SHA256SUMS.p7s covers the statement as a listed member", PROVENANCE_MEMBER)
        record = _record(source.name, unsigned_digest, unpacked, files, scripts, signer)
        files[SIGNATURE_RECORD] = _bytes_file(work / "out" / SIGNATURE_RECORD, to_json(record))
        zip_members = members(unpacked.top, files)  # SHA256SUMS is computed here, over the signed files
        sums = next(m for m in zip_members if m.name == f"{unpacked.top}/{SUMS}")
        assert sums.data is not None
        files[SUMS_SIGNATURE] = signer.sums(_bytes_file(work / "out" / SUMS, sums.data).path)
        zip_members.append(Member(name=f"{unpacked.top}/{SUMS_SIGNATURE}", source=files[SUMS_SIGNATURE].path,
                                  sha256=files[SUMS_SIGNATURE].sha256))
        # First in the scratch folder, checked there; then the same bytes to `dest`, with the writer's own
        # atomic rename and sidecar replacement, so a failed check leaves `dest` as it was.
        trial = write_zip(zip_members, work / "trial" / dest.name, epoch=unpacked.epoch, member_cache=member_cache)
        _check_unsigned_view(work / "trial" / dest.name, unsigned_digest, work=work, member_cache=member_cache)
        digest = write_zip(zip_members, dest, epoch=unpacked.epoch, member_cache=member_cache,
                           sidecar=dest.with_name(dest.name + ".sha256"))
    if digest != trial:
        msg = f"{dest}: the zip written differs from the one checked (sha256 {digest}, expected {trial})"
        raise BuildError(msg)
    beside = dest.with_name(dest.name + BESIDE_SUFFIX)
    if statements is None:
        beside.unlink(missing_ok=True)  # never leave a statement about another zip beside this one
    else:
        write_atomic(beside, statements)  # after the zip, as `build` writes it
    return SignResult(zip_path=dest, sha256=digest, size=dest.stat().st_size, signer=signer.subject or "",
                      signed=(*scripts, *([PROVENANCE_ENVELOPE] if envelope else []), SUMS,
                              *([beside.name] if statements else [])))


def sign_msi(source: Path, dest: Path, *, options: SignOptions, work: Path, epoch: int, runner: Runner = run) -> str:
    """Authenticode-sign an MSI (osslsigncode signs MSI files whole, as Windows Installer checks them) into
    `dest`; returns the signer's subject. With our own key the signing time is fixed, so the bytes repeat."""
    work.mkdir(mode=0o700)  # the key copy is this user's alone
    signer = _Signer(options=options, work=work, epoch=epoch, runner=runner)
    signer.authenticode(source, dest)
    return signer.subject or "the external signer"


def _unpack_verified(source: Path, dest: Path) -> Unpacked:
    """Only a bundle that verifies is signed: a signature would vouch for whatever damage it carries."""
    report = verify_bundle(source)
    if not report.ok:
        msg = (f"{source.name} does not verify ({'; '.join(report.findings()[:3])}); run `ort-bundler verify "
               f"{source}` and sign an intact build")
        raise VerificationError(msg)
    with zipfile.ZipFile(source) as archive:
        top = archive.namelist()[0].split("/", 1)[0]
        if f"{top}/{SUMS_SIGNATURE}" in archive.namelist():
            msg = f"{source.name} is already signed ({SUMS_SIGNATURE} is present); sign the unsigned build instead"
            raise UsageError(msg)
        return unpack(archive, top, dest)


class _Signer:
    """Makes one signature at a time, with our own key or through the user's command."""

    def __init__(self, *, options: SignOptions, work: Path, epoch: int, runner: Runner) -> None:
        self.options, self.work, self.runner = options, work, runner
        self.subject: str | None = None
        self.tool: str | None = None
        self.fingerprint: str | None = None
        identity = options.identity
        if identity is not None:
            self.subject, self.fingerprint = identity.subject, fingerprint(identity.cert)
            self.certs, self.key = work / "certs.pem", work / "key.pem"
            self.certs.write_bytes(identity.certs_pem())
            # osslsigncode reads the key from a file: a copy encrypted with a one-time passphrase, so
            # that a copy left behind by a killed run is useless; the passphrase only lives in this process
            # and osslsigncode's arguments.
            self.passphrase = secrets.token_urlsafe(24)
            self.key.touch(mode=0o600)
            self.key.write_bytes(identity.encrypted_key_pem(self.passphrase))
            # No timestamp: a fixed signing time (the bundle's, or the certificate's start if later) keeps
            # the signature reproducible; verifiers do not trust a signing time anyway.
            self.signing_time = max(epoch, int(identity.cert.not_valid_before_utc.timestamp()))

    def authenticode(self, source: Path, dest: Path) -> None:
        """An Authenticode signature over the whole of `source` (a script, an MSI), written to `dest`."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        if self.options.signer_command:
            run_signer(self.options.signer_command, source, dest, kind="authenticode", runner=self.runner)
        else:
            self.tool = self.tool or authenticode.osslsigncode(self.runner)  # checked once, on the first file
            authenticode.sign_script(source, dest, tool=self.tool, certs=self.certs, key=self.key,
                                     passphrase=self.passphrase, runner=self.runner, signing_time=self.signing_time,
                                     timestamp_url=self.options.timestamp_url)

    def script(self, rel: str, file: File) -> File:
        _check_encoding(rel, file.path.read_bytes())
        dest = self.work / "out" / rel
        self.authenticode(file.path, dest)
        data = dest.read_bytes()
        self._check_script(rel, file, data)
        return File(path=dest, sha256=_sha256(data), executable=file.executable)

    def _check_script(self, rel: str, file: File, data: bytes) -> None:
        try:
            split, signed_data, covered = authenticode.load_script_signature(data)
            checked = cms.check_signed_data(signed_data, covered, what=rel)
        except cms.SignatureProblem as exc:
            msg = f"{rel}: the signed script is not usable: {exc}"
            raise BuildError(msg) from None
        if split.content != file.path.read_bytes():
            msg = f"{rel}: the signer changed the script itself, not only appended a signature block"
            raise BuildError(msg)
        self._same_signer(rel, checked)

    def provenance(self, files: dict[str, File]) -> File | None:
        """The DSSE envelope of the build's provenance statement, signed as it is: its subjects are the unsigned
        build's members, which `verify` rebuilds from the signed bundle. None without a statement, or with
        `--signer` (it cannot make a DSSE signature: `bundler.signing.dsse`)."""
        statement = files.get(PROVENANCE_MEMBER)
        if statement is None or self.options.identity is None:
            return None
        payload = statement.path.read_bytes()
        dest = self.work / "out" / PROVENANCE_ENVELOPE
        return _bytes_file(dest, envelope_line(payload, [dsse.signature(payload, self.options.identity)]))

    def sums(self, sums_path: Path) -> File:
        dest = self.work / "out" / SUMS_SIGNATURE
        if self.options.signer_command:
            run_signer(self.options.signer_command, sums_path, dest, kind="cms", runner=self.runner)
        else:
            assert self.options.identity is not None
            url = self.options.timestamp_url
            stamp = (lambda signature: request_token(url, signature)) if url else None
            dest.write_bytes(cms.sign_detached(sums_path.read_bytes(), self.options.identity, timestamp=stamp))
        data = dest.read_bytes()
        try:
            checked = cms.check_signed_data(cms.load_signed_data(data, what=SUMS_SIGNATURE), sums_path.read_bytes(),
                                            what=SUMS_SIGNATURE)
        except cms.SignatureProblem as exc:
            msg = f"{SUMS_SIGNATURE}: the signature is not usable: {exc}"
            raise BuildError(msg) from None
        self._same_signer(SUMS_SIGNATURE, checked)
        return File(path=dest, sha256=_sha256(data), executable=False)

    def _same_signer(self, what: str, checked: cms.Checked) -> None:
        """Every signature of one bundle comes from one certificate: the installers compare them."""
        print_ = fingerprint(checked.signer)
        if self.fingerprint is None:
            self.subject, self.fingerprint = describe(checked.signer), print_
        elif print_ != self.fingerprint:
            msg = f"{what} was signed by {describe(checked.signer)}, the other files by {self.subject}; expected one signer"
            raise BuildError(msg)


def _record(source_name: str, unsigned_digest: str, unpacked: Unpacked, files: dict[str, File],
            scripts: list[str], signer: _Signer) -> dict[str, object]:
    """signature.json: what was signed and from which unsigned bundle; deterministic (no clock).

    The signer is known before SHA256SUMS is signed except for a `--signer` tool on a bundle without
    scripts: then it is null here, and SHA256SUMS.p7s names it.
    """
    return {
        "format": FORMAT,
        "unsigned_bundle": {"file": source_name, "sha256": unsigned_digest},
        "signer": {"subject": signer.subject, "sha256": signer.fingerprint},
        "bundle_signature": {"file": SUMS_SIGNATURE, "signs": SUMS, "format": "CMS detached, DER"},
        "scripts": [{"path": rel, "sha256": files[rel].sha256, "unsigned_sha256": unpacked.files[rel].sha256}
                    for rel in scripts],
        "timestamp_url": signer.options.timestamp_url,
        "provenance": {"statement": PROVENANCE_MEMBER if PROVENANCE_MEMBER in files else None,
                       "envelope": PROVENANCE_ENVELOPE if PROVENANCE_ENVELOPE in files else None},
    }


def signed_beside(source: Path, unsigned_digest: str, *, identity: Identity | None) -> bytes | None:
    """The content of `<signed zip>.intoto.jsonl`, from `<unsigned zip>.intoto.jsonl`: the builder's statement,
    signed (with `--signer`, copied unsigned). Its subject stays the unsigned zip, which `verify` rebuilds from
    the signed one. None when the build left no statement beside the zip."""
    source_beside = source.with_name(source.name + BESIDE_SUFFIX)
    if not source_beside.is_file():
        return None
    lines = []
    for number, line in enumerate(source_beside.read_bytes().splitlines(), 1):
        try:
            envelope = dsse.parse(line, what=f"{source_beside.name} line {number}")
        except cms.SignatureProblem as exc:
            raise VerificationError(f"{exc}; rebuild to get a new one, or remove it") from None
        subjects = _subject_digests(envelope.payload)
        if subjects != [unsigned_digest]:
            msg = (f"{source_beside.name} line {number}: its subject is {', '.join(subjects) or 'missing'}, expected "
                   f"{source.name}'s sha256 {unsigned_digest}; it describes another build: rebuild, or remove it")
            raise VerificationError(msg)
        signatures = [dsse.signature(envelope.payload, identity)] if identity is not None else []
        lines.append(envelope_line(envelope.payload, signatures))
    return b"".join(lines)


def _subject_digests(payload: bytes) -> list[str]:
    try:
        subjects = json.loads(payload)["subject"]
        return [str(s["digest"]["sha256"]) for s in subjects]
    except (KeyError, TypeError, ValueError):
        return []


def _check_unsigned_view(dest: Path, expected: str, *, work: Path, member_cache: MemberCache) -> None:
    """The promise `verify` checks later, kept now: removing the signatures gives back the input."""
    with zipfile.ZipFile(dest) as archive:
        top = archive.namelist()[0].split("/", 1)[0]
        unpacked = unpack(archive, top, work / "check")
    (work / "check-zip").mkdir()
    actual = unsigned_sha256(unpacked, work / "check-zip", member_cache=member_cache)
    if actual != expected:
        msg = (f"without its signatures the signed bundle is not the input bundle (sha256 {actual}, "
               f"expected {expected}); nothing was written")
        raise VerificationError(msg)


def _check_encoding(rel: str, data: bytes) -> None:
    """Only UTF-8 with a byte-order mark and CRLF line ends hash the same on every Windows code page:
    without the mark, PowerShell reads non-ASCII text in the machine's ANSI code page and reports a
    signed script as changed (PowerShell/PowerShell#3466); bare LFs make mixed line ends after signing."""
    if not data.startswith(b"\xef\xbb\xbf") or b"\n" in data.replace(b"\r\n", b""):
        msg = (f"{rel} is not UTF-8 with a byte-order mark and CRLF line ends (what `build` writes); its signature "
               "would not verify on every Windows machine")
        raise BuildError(msg)


def _bytes_file(path: Path, data: bytes) -> File:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return File(path=path, sha256=_sha256(data), executable=False)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
