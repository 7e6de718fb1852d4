"""DSSE envelopes (github.com/secure-systems-lab/dsse, v1.0) for the provenance statements.

The signature is over PAE(payloadType, payload) = "DSSEv1 <len type> <type> <len payload> <payload>", made
with the key that signs `SHA256SUMS.p7s` (RSA PKCS#1 v1.5 with SHA-256, deterministic like the CMS
signature, or ECDSA with SHA-256). The envelope carries no certificate: its `keyid` is the sha256 of the
signing certificate (DER), and `verify` checks the signature with the certificate of `SHA256SUMS.p7s`, whose
chain it checks against `--trust`. So one certificate vouches for the bundle, its scripts and its provenance.

An external `--signer` makes Authenticode and CMS signatures only, and a CMS signature over the PAE bytes
is not a DSSE signature (it signs its own attributes, not the PAE): with `--signer` no envelope is made, and
`sign` says so. The in-bundle statement is then still covered, as a member listed in the signed SHA256SUMS.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from bundler.assembly.provenance import PAYLOAD_TYPE
from bundler.readers.certificates import verify_signature
from bundler.signing.cms import SignatureProblem
from bundler.signing.credentials import Identity
from bundler.signing.pkix import fingerprint


@dataclass(frozen=True, kw_only=True)
class Envelope:
    """A parsed envelope: what it carries, and its signatures as (keyid, signature bytes)."""

    payload_type: str
    payload: bytes
    signatures: tuple[tuple[str, bytes], ...]


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what the signature covers."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def signature(payload: bytes, identity: Identity) -> dict[str, str]:
    """One DSSE signature object over `payload` (an in-toto statement) by `identity`."""
    data = pae(PAYLOAD_TYPE, payload)
    if isinstance(identity.key, rsa.RSAPrivateKey):
        raw = identity.key.sign(data, padding.PKCS1v15(), hashes.SHA256())
    else:
        raw = identity.key.sign(data, ec.ECDSA(hashes.SHA256()))
    return {"keyid": fingerprint(identity.cert), "sig": base64.b64encode(raw).decode("ascii")}


def parse(data: bytes, *, what: str) -> Envelope:
    """An envelope from its JSON, or SignatureProblem naming what is wrong with it."""
    try:
        raw: Any = json.loads(data)
    except ValueError as exc:
        raise SignatureProblem(f"{what} is not a JSON DSSE envelope ({exc})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("payload"), str) or not isinstance(raw.get("signatures"), list):
        raise SignatureProblem(f"{what} is not a DSSE envelope: expected an object with payload and signatures")
    if raw.get("payloadType") != PAYLOAD_TYPE:
        raise SignatureProblem(f"{what}: payloadType is {raw.get('payloadType')!r}, expected {PAYLOAD_TYPE!r}")
    try:
        payload = base64.b64decode(raw["payload"], validate=True)
        signatures = tuple((str(s["keyid"]), base64.b64decode(s["sig"], validate=True)) for s in raw["signatures"])
    except (binascii.Error, KeyError, TypeError, ValueError) as exc:
        raise SignatureProblem(f"{what}: a payload or signature is not valid base64 in its place ({exc})") from None
    return Envelope(payload_type=PAYLOAD_TYPE, payload=payload, signatures=signatures)


def check(envelope: Envelope, cert: x509.Certificate, *, what: str) -> None:
    """Every signature must be by `cert` (keyid = its sha256) and hold over the PAE; at least one is needed."""
    if not envelope.signatures:
        raise SignatureProblem(f"{what} is not signed (its signature list is empty)")
    expected = fingerprint(cert)
    for keyid, raw in envelope.signatures:
        if keyid != expected:
            raise SignatureProblem(f"{what} is signed by key {keyid}, expected the certificate of SHA256SUMS.p7s "
                                   f"({expected})")
        try:
            verify_signature(cert.public_key(), raw, pae(envelope.payload_type, envelope.payload), hashes.SHA256())
        except (InvalidSignature, TypeError):
            raise SignatureProblem(f"{what}: the signature does not match its payload") from None
