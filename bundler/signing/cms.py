"""CMS (PKCS#7) SignedData: making the detached bundle signature, and checking any SignedData we meet.

Why asn1crypto for the structure and cryptography for the key operations: cryptography's PKCS#7
builder cannot leave out the signing-time attribute together with keeping the other signed
attributes, and cannot add an unsigned attribute; building the structure ourselves keeps the
signature deterministic (same content + same RSA key = same bytes; RSA PKCS#1 v1.5 has no random
input) and readable by `openssl cms -verify` and .NET's `SignedCms` alike. The signed attributes are
content type and message digest only; no signing time, because it would make every signature differ
and no verifier trusts it anyway (only a timestamp proves a time).

Checking works for both the detached signature (the content is `SHA256SUMS`) and Authenticode (the
content is the SpcIndirectDataContent inside the signature): the message digest attribute must be
the digest of the content, and the signer's key must have signed the attributes. RFC 3161
timestamps (the Microsoft and the RFC 3161 attribute) are read and checked the same way.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import signify.asn1.spc  # noqa: F401  (registers the Authenticode content types with asn1crypto)
from asn1crypto import algos, cms, tsp
from asn1crypto import x509 as ax509
from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from bundler.readers.certificates import verify_signature
from bundler.signing.credentials import Identity

HASHES: dict[str, Callable[[], hashes.HashAlgorithm]] = {
    "sha1": hashes.SHA1, "sha256": hashes.SHA256, "sha384": hashes.SHA384, "sha512": hashes.SHA512}
TIMESTAMP_ATTRIBUTES = ("microsoft_time_stamp_token", "signature_time_stamp_token")


class SignatureProblem(Exception):
    """One check of a signature failed; the message says which, for the verification report."""


@dataclass(frozen=True, kw_only=True)
class Timestamp:
    """An RFC 3161 timestamp over a signature: when, by whom, and the certificates to build its chain."""

    time: dt.datetime
    authority: x509.Certificate
    certificates: tuple[x509.Certificate, ...]


@dataclass(frozen=True, kw_only=True)
class Checked:
    """A SignedData whose signature over its content holds; whether its signer is trusted is pkix's question."""

    signer: x509.Certificate
    certificates: tuple[x509.Certificate, ...]
    signing_time: dt.datetime | None
    timestamp: Timestamp | None
    timestamp_problem: str | None


def sign_detached(content: bytes, identity: Identity,
                  timestamp: Callable[[bytes], cms.ContentInfo] | None = None) -> bytes:
    """DER ContentInfo holding a detached SignedData over `content` (SHA-256), without a signing time.

    `timestamp`, given the signature value, returns an RFC 3161 token for the unsigned attributes.
    """
    attrs = sorted([cms.CMSAttribute({"type": "content_type", "values": ["data"]}),
                    cms.CMSAttribute({"type": "message_digest", "values": [hashlib.sha256(content).digest()]})],
                   key=lambda a: a.dump())  # DER orders a SET OF by encoding; verifiers re-encode it so
    signed_attrs = cms.CMSAttributes(attrs)
    signature = _sign(identity, signed_attrs.dump())
    cert = ax509.Certificate.load(identity.cert.public_bytes(serialization.Encoding.DER))
    signer = cms.SignerInfo({
        "version": "v1",
        "sid": cms.SignerIdentifier({"issuer_and_serial_number": cms.IssuerAndSerialNumber(
            {"issuer": cert.issuer, "serial_number": cert.serial_number})}),
        "digest_algorithm": algos.DigestAlgorithm({"algorithm": "sha256"}),
        "signed_attrs": cms.CMSAttributes.load(signed_attrs.dump()),
        "signature_algorithm": algos.SignedDigestAlgorithm(
            {"algorithm": "rsassa_pkcs1v15" if isinstance(identity.key, rsa.RSAPrivateKey) else "sha256_ecdsa"}),
        "signature": signature,
    })
    if timestamp is not None:
        signer["unsigned_attrs"] = cms.CMSAttributes([cms.CMSAttribute(
            {"type": "signature_time_stamp_token", "values": [timestamp(signature)]})])
    certs = [cert] + [ax509.Certificate.load(c.public_bytes(serialization.Encoding.DER)) for c in identity.chain]
    signed_data = cms.SignedData({
        "version": "v1", "digest_algorithms": [algos.DigestAlgorithm({"algorithm": "sha256"})],
        "encap_content_info": {"content_type": "data"}, "certificates": certs, "signer_infos": [signer]})
    return bytes(cms.ContentInfo({"content_type": "signed_data", "content": signed_data}).dump())


def _sign(identity: Identity, data: bytes) -> bytes:
    if isinstance(identity.key, rsa.RSAPrivateKey):
        return identity.key.sign(data, padding.PKCS1v15(), hashes.SHA256())
    return identity.key.sign(data, ec.ECDSA(hashes.SHA256()))


def load_signed_data(der: bytes, *, what: str) -> cms.SignedData:
    """The SignedData of a DER ContentInfo, parsed in full now so that damage is reported here."""
    try:
        info = cms.ContentInfo.load(der)
        if info["content_type"].native != "signed_data":
            msg = f"{what} holds a {info['content_type'].native}, expected CMS signed data"
            raise SignatureProblem(msg)
        signed_data = info["content"]
        for part in ("version", "digest_algorithms", "encap_content_info", "certificates", "signer_infos"):
            signed_data[part].contents  # noqa: B018  (parse the structure now; .native is very slow on tokens)
        for signer_info in signed_data["signer_infos"]:
            signer_info["signed_attrs"].native  # noqa: B018
    except (ValueError, TypeError, KeyError) as exc:
        msg = f"{what} cannot be parsed as a CMS signature ({exc})"
        raise SignatureProblem(msg) from None
    if len(signed_data["signer_infos"]) != 1:
        msg = f"{what} has {len(signed_data['signer_infos'])} signers, expected exactly one"
        raise SignatureProblem(msg)
    return signed_data


def check_signed_data(signed_data: cms.SignedData, content: bytes, *, what: str) -> Checked:
    """The signer's signature over `content` holds; read its signing time and timestamp."""
    try:
        return _check_signed_data(signed_data, content, what=what)
    except (ValueError, TypeError, KeyError) as exc:  # a field asn1crypto parses only when it is read
        msg = f"{what} cannot be parsed ({exc})"
        raise SignatureProblem(msg) from None


def _check_signed_data(signed_data: cms.SignedData, content: bytes, *, what: str) -> Checked:
    certs = tuple(_load_cert(c.chosen.dump()) for c in signed_data["certificates"] or [])
    signer_info = signed_data["signer_infos"][0]
    signer = _signer_cert(signer_info, certs, what=what)
    _check_signer_info(signer_info, signer, content, what=what)
    attrs = {a["type"].native: a["values"] for a in signer_info["signed_attrs"]}
    signing_time = attrs["signing_time"][0].native if "signing_time" in attrs else None
    timestamp, problem = None, None
    try:
        timestamp = _timestamp(signer_info)
    except SignatureProblem as exc:
        problem = str(exc)
    return Checked(signer=signer, certificates=certs, signing_time=signing_time, timestamp=timestamp,
                   timestamp_problem=problem)


def _signer_cert(signer_info: cms.SignerInfo, certs: tuple[x509.Certificate, ...], *, what: str) -> x509.Certificate:
    sid = signer_info["sid"]
    if sid.name != "issuer_and_serial_number":
        msg = f"{what}: the signer is not identified by issuer and serial number"
        raise SignatureProblem(msg)
    wanted_issuer, wanted_serial = sid.chosen["issuer"].dump(), sid.chosen["serial_number"].native
    for cert in certs:
        parsed = ax509.Certificate.load(cert.public_bytes(serialization.Encoding.DER))
        if parsed.issuer.dump() == wanted_issuer and parsed.serial_number == wanted_serial:
            return cert
    msg = f"{what}: the signer's certificate is not included in the signature"
    raise SignatureProblem(msg)


def _check_signer_info(signer_info: cms.SignerInfo, signer: x509.Certificate, content: bytes, *, what: str) -> None:
    algorithm = signer_info["digest_algorithm"]["algorithm"].native
    if algorithm not in HASHES:
        msg = f"{what}: the signature uses the unsupported digest algorithm {algorithm}"
        raise SignatureProblem(msg)
    signed_attrs = signer_info["signed_attrs"]
    if not signed_attrs:
        signed_bytes = content
    else:
        attrs = {a["type"].native: a["values"] for a in signed_attrs}
        if "message_digest" not in attrs or attrs["message_digest"][0].native != hashlib.new(algorithm, content).digest():
            msg = f"{what}: the signed digest does not match the content: it was changed after signing"
            raise SignatureProblem(msg)
        signed_bytes = cms.CMSAttributes(contents=signed_attrs.contents).dump()  # RFC 5652 §5.4: as a SET OF
    try:
        verify_signature(signer.public_key(), signer_info["signature"].native, signed_bytes, HASHES[algorithm]())
    except (InvalidSignature, UnsupportedAlgorithm, TypeError):
        msg = f"{what}: the signature does not verify with the key of the certificate it names"
        raise SignatureProblem(msg) from None


def _timestamp(signer_info: cms.SignerInfo) -> Timestamp | None:
    """The RFC 3161 token in the unsigned attributes: its imprint must be the digest of this signature."""
    unsigned = signer_info["unsigned_attrs"]
    tokens = [a["values"][0] for a in unsigned or [] if a["type"].native in TIMESTAMP_ATTRIBUTES]
    if not tokens:
        if any(a["type"].native == "counter_signature" for a in unsigned or []):
            msg = "a legacy (non-RFC 3161) counter-signature timestamp, which is not checked"
            raise SignatureProblem(msg)
        return None
    token = load_signed_data(tokens[0].dump(), what="the timestamp")
    info = token["encap_content_info"]
    if info["content_type"].native != "tst_info":
        msg = "the timestamp token does not hold a TSTInfo"
        raise SignatureProblem(msg)
    tst_der = info["content"].contents  # the digest covers the TSTInfo encoding inside the octet string
    tst = tsp.TSTInfo.load(tst_der)
    imprint = tst["message_imprint"]
    algorithm = imprint["hash_algorithm"]["algorithm"].native
    if algorithm not in HASHES or imprint["hashed_message"].native != hashlib.new(
            algorithm, signer_info["signature"].native).digest():
        msg = "the timestamp is over another signature"
        raise SignatureProblem(msg)
    checked = check_signed_data(token, tst_der, what="the timestamp")
    return Timestamp(time=tst["gen_time"].native, authority=checked.signer, certificates=checked.certificates)


def _load_cert(der: bytes) -> x509.Certificate:
    try:
        return x509.load_der_x509_certificate(der)
    except ValueError as exc:
        msg = f"a certificate in the signature cannot be parsed ({exc})"
        raise SignatureProblem(msg) from None
