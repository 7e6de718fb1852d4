"""X.509 facts both signature readers need: Microsoft's Authenticode on the inputs (`signatures.py`) and our
own bundle signatures (`bundler.signing`). One definition each, so the two verifiers cannot drift apart."""

from __future__ import annotations

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import ObjectIdentifier


def verify_signature(key: object, signature: bytes, data: bytes, algorithm: hashes.HashAlgorithm) -> None:
    """Raise InvalidSignature unless `signature` over `data` verifies with `key` (RSA PKCS#1 v1.5 or ECDSA)."""
    if isinstance(key, rsa.RSAPublicKey):
        key.verify(signature, data, padding.PKCS1v15(), algorithm)
    elif isinstance(key, ec.EllipticCurvePublicKey):
        key.verify(signature, data, ec.ECDSA(algorithm))
    else:
        msg = f"unsupported public key type {type(key).__name__}"
        raise TypeError(msg)


def is_ca(cert: x509.Certificate) -> bool:
    """Only a certificate authority may vouch for another certificate: an ordinary code-signing certificate
    that signs a certificate named "Microsoft Corporation" (or our signer's name) must not pass."""
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return False
    if not constraints.ca:
        return False
    try:
        return cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    except x509.ExtensionNotFound:
        return True


def issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    """`issuer` is a CA and its key signed `cert`."""
    if cert.issuer != issuer.subject or not is_ca(issuer):
        return False
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True


def has_usage(cert: x509.Certificate, usage: ObjectIdentifier, *, when_absent: bool) -> bool:
    """Whether the extended key usage allows `usage`. X.509 treats a missing extension as unrestricted
    (`when_absent=True`, for Microsoft's certificates); a certificate we sign with must name it (False)."""
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return when_absent
    return usage in usages
