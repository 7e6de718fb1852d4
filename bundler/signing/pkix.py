"""Certificate chains: from a signer's certificate, through the certificates a signature carries, to an anchor.

The anchor is what the user trusts (`--trust CA.pem`), never something the signature brings along: a
signature that carries its own root proves nothing. Every link is a real signature check
(`verify_directly_issued_by`), and only a certificate authority (basic constraints `ca`, and key usage
`keyCertSign` when present) may vouch for the next one. Lifetimes are checked at one moment: the
time of a trusted timestamp when the signature has one, otherwise now (an expired certificate
without a timestamp no longer vouches for anything). Revocation needs the network and is not checked.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from bundler.readers.certificates import issued_by

MAX_CHAIN = 8


@dataclass(frozen=True, kw_only=True)
class Chain:
    """The outcome of building a chain: the subjects from the signer up to the anchor, or why it failed."""

    trusted: bool
    subjects: tuple[str, ...]
    reason: str | None = None
    expired: bool = False  # the chain is complete but a certificate in it was not valid at the moment checked


def build_chain(leaf: x509.Certificate, pool: Sequence[x509.Certificate], anchors: Sequence[x509.Certificate], *,
                at: dt.datetime) -> Chain:
    """Follow issuers from `leaf` through `pool` until an anchor signed the last one; check lifetimes at `at`."""
    path = [leaf]
    for _ in range(MAX_CHAIN):
        current = path[-1]
        anchor = next((a for a in anchors if _same(a, current) or issued_by(current, a)), None)
        if anchor is not None:
            if not _same(anchor, current):
                path.append(anchor)
            return _with_lifetimes(path, at=at)
        issuer = next((c for c in pool if not _same(c, current) and c not in path and issued_by(current, c)), None)
        if issuer is None:
            return Chain(trusted=False, subjects=tuple(describe(c) for c in path),
                         reason=f"the chain of {describe(leaf)} does not reach the trust anchor (it ends at "
                                f"{describe(current)}, issued by {_name(current.issuer)})")
        path.append(issuer)
    return Chain(trusted=False, subjects=tuple(describe(c) for c in path),
                 reason=f"the chain of {describe(leaf)} is longer than {MAX_CHAIN} certificates")


def _with_lifetimes(path: list[x509.Certificate], *, at: dt.datetime) -> Chain:
    subjects = tuple(describe(c) for c in path)
    for cert in path:
        if at > cert.not_valid_after_utc:
            return Chain(trusted=False, subjects=subjects, expired=True,
                         reason=f"{describe(cert)} expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")
        if at < cert.not_valid_before_utc:
            return Chain(trusted=False, subjects=subjects, expired=True,
                         reason=f"{describe(cert)} is valid only from {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC")
    return Chain(trusted=True, subjects=subjects)


def _same(a: x509.Certificate, b: x509.Certificate) -> bool:
    return fingerprint(a) == fingerprint(b)


def fingerprint(cert: x509.Certificate) -> str:
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def describe(cert: x509.Certificate) -> str:
    """The common name, which is what Windows shows as the publisher; the full name when there is none."""
    return _name(cert.subject)


def _name(name: x509.Name) -> str:
    names = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else name.rfc4514_string()
