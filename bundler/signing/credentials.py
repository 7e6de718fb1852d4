"""The signer's certificate and key: loaded from PEM files or a PKCS#12 file, and checked before any signing.

Everything that can be wrong with a signing identity is found here, before a byte is written: a
PKCS#12 password that does not open the file, a key that does not belong to the certificate, a
certificate that may not sign code (no code-signing extended key usage), one that has expired or is
not yet valid. The password of a PKCS#12 file is never a command-line argument (other users can read
those): it comes from an environment variable the user names, or from a prompt.
"""

from __future__ import annotations

import datetime as dt
import getpass
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID

from bundler.errors import UsageError
from bundler.readers.certificates import has_usage
from bundler.signing.pkix import describe

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


class CredentialError(UsageError):
    """The certificate, key or password given to `sign` cannot be used; nothing was written."""


@dataclass(frozen=True, kw_only=True)
class Identity:
    """A code-signing certificate, its private key and the intermediates that lead to a root."""

    cert: x509.Certificate
    key: PrivateKey
    chain: tuple[x509.Certificate, ...] = ()

    @property
    def subject(self) -> str:
        return describe(self.cert)

    def certs_pem(self) -> bytes:
        """The certificate first, then the chain: what osslsigncode's `-certs` reads."""
        return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (self.cert, *self.chain))

    def encrypted_key_pem(self, passphrase: str) -> bytes:
        """The key as encrypted PKCS#8 PEM: what reaches the disk for osslsigncode is useless without `passphrase`."""
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.BestAvailableEncryption(passphrase.encode("ascii")))


def load_certificates(path: Path, *, what: str) -> list[x509.Certificate]:
    """Every certificate in a PEM file (or one DER certificate), or a clear error naming the file."""
    data = _read(path, what=what)
    try:
        if b"-----BEGIN" in data:
            certs = x509.load_pem_x509_certificates(data)
        else:
            certs = [x509.load_der_x509_certificate(data)]
    except ValueError as exc:
        msg = f"{what} {path}: not a PEM or DER certificate file ({exc})"
        raise CredentialError(msg) from None
    return certs


def load_pem_identity(cert: Path, key: Path, *, chain: Path | None = None, now: dt.datetime | None = None) -> Identity:
    """`--cert`/`--key`: a PEM certificate (optionally followed by its chain) and an unencrypted PEM key."""
    certs = load_certificates(cert, what="--cert")
    try:
        private = serialization.load_pem_private_key(_read(key, what="--key"), password=None)
    except TypeError:
        msg = f"--key {key}: the key is encrypted; give an unencrypted PEM key, or use --pkcs12 with --password-env"
        raise CredentialError(msg) from None
    except ValueError as exc:
        msg = f"--key {key}: not a PEM private key ({exc})"
        raise CredentialError(msg) from None
    extra = tuple(certs[1:]) + tuple(load_certificates(chain, what="--chain") if chain else ())
    return checked(Identity(cert=certs[0], key=_supported(private, key), chain=extra), source=str(cert), now=now)


def load_pkcs12_identity(path: Path, password: str, *, chain: Path | None = None,
                         now: dt.datetime | None = None) -> Identity:
    """`--pkcs12`: a .p12/.pfx file holding the key, the certificate and usually the chain."""
    try:
        key, cert, more = pkcs12.load_key_and_certificates(_read(path, what="--pkcs12"), password.encode("utf-8"))
    except ValueError:
        msg = (f"--pkcs12 {path}: the file cannot be opened with the password given (wrong password, or not a "
               "PKCS#12 file)")
        raise CredentialError(msg) from None
    if key is None or cert is None:
        msg = f"--pkcs12 {path}: found no {'private key' if key is None else 'certificate'}, expected both"
        raise CredentialError(msg)
    extra = tuple(more) + tuple(load_certificates(chain, what="--chain") if chain else ())
    return checked(Identity(cert=cert, key=_supported(key, path), chain=extra), source=str(path), now=now)


def pkcs12_password(env_name: str | None, *, environ: Mapping[str, str], prompt: bool) -> str:
    """The PKCS#12 password: from the environment variable named by `--password-env`, else a prompt."""
    if env_name:
        if env_name not in environ:
            msg = f"--password-env {env_name}: that environment variable is not set; export it with the password"
            raise CredentialError(msg)
        return environ[env_name]
    if not prompt:
        msg = "--pkcs12 needs a password: name an environment variable that holds it with --password-env NAME"
        raise CredentialError(msg)
    return getpass.getpass("PKCS#12 password: ")


def checked(identity: Identity, *, source: str, now: dt.datetime | None = None) -> Identity:
    """Refuse an identity that cannot produce a signature a verifier would accept."""
    cert = identity.cert
    if _public_der(identity.key.public_key()) != _public_der(cert.public_key()):
        msg = f"{source}: the private key does not belong to the certificate {identity.subject}"
        raise CredentialError(msg)
    if not may_sign_code(cert):
        msg = (f"{source}: the certificate {identity.subject} is not for code signing (its extended key usage "
               "lacks codeSigning, 1.3.6.1.5.5.7.3.3); Windows refuses such script signatures")
        raise CredentialError(msg)
    moment = now or dt.datetime.now(dt.UTC)
    if moment > cert.not_valid_after_utc:
        msg = f"{source}: the certificate {identity.subject} expired on {cert.not_valid_after_utc:%Y-%m-%d}"
        raise CredentialError(msg)
    if moment < cert.not_valid_before_utc:
        msg = f"{source}: the certificate {identity.subject} is valid only from {cert.not_valid_before_utc:%Y-%m-%d}"
        raise CredentialError(msg)
    return identity


def may_sign_code(cert: x509.Certificate) -> bool:
    """An extended key usage that names code signing; a certificate without that extension does not qualify."""
    return has_usage(cert, ExtendedKeyUsageOID.CODE_SIGNING, when_absent=False)


def may_stamp_time(cert: x509.Certificate) -> bool:
    """RFC 3161 §2.3: a time-stamping authority's certificate has the timeStamping extended key usage."""
    return has_usage(cert, ExtendedKeyUsageOID.TIME_STAMPING, when_absent=False)


def _supported(key: object, path: Path) -> PrivateKey:
    if isinstance(key, (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey)):
        return key
    msg = f"{path}: found a {type(key).__name__} key, expected an RSA or EC key (what Authenticode uses)"
    raise CredentialError(msg)


def _public_der(key: PublicKeyTypes) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _read(path: Path, *, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        msg = f"{what} {path}: cannot be read ({exc.strerror or exc})"
        raise CredentialError(msg) from None


def environment() -> Mapping[str, str]:
    """The process environment, read once at the command boundary (never modified)."""
    return os.environ
