"""A real test PKI made with `cryptography`: root CA -> intermediate CA -> code-signing certificate.

Everything is generated in the test's folder; nothing is committed. `Pki.make(folder, name)` writes
`<name>-root.pem`, `<name>-intermediate.pem`, `<name>-signer.pem`, `<name>-signer.key` (PEM, no
password), `<name>-chain.pem` (intermediate) and `<name>-signer.p12` (password "test-password"). `Tsa.make` makes
a time-stamping authority that `openssl ts -reply` can run as.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

P12_PASSWORD = "test-password"
NOW = dt.datetime.now(dt.UTC)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ort-bundler tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def make_cert(common_name: str, key, *, issuer: x509.Certificate | None, issuer_key, ca: bool,
              eku: list | None = None, eku_critical: bool = False, not_before: dt.datetime | None = None,
              not_after: dt.datetime | None = None) -> x509.Certificate:
    """One certificate; `issuer=None` makes it self-signed."""
    subject = _name(common_name)
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer.subject if issuer else subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(not_before or NOW - dt.timedelta(days=1))
               .not_valid_after(not_after or NOW + dt.timedelta(days=365))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=not ca, content_commitment=False,
                                            key_encipherment=False, data_encipherment=False, key_agreement=False,
                                            key_cert_sign=ca, crl_sign=ca, encipher_only=False,
                                            decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
    if issuer is not None:
        builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                                        critical=False)
    if eku:
        builder = builder.add_extension(x509.ExtendedKeyUsage(eku), critical=eku_critical)
    return builder.sign(issuer_key, hashes.SHA256())


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass(frozen=True, kw_only=True)
class Pki:
    root: Path
    intermediate: Path
    chain: Path
    cert: Path
    key: Path
    p12: Path

    @classmethod
    def make(cls, folder: Path, name: str, *, eku: list | None = None,
             not_after: dt.datetime | None = None) -> Pki:
        """A root, an intermediate and a leaf (code signing unless `eku` says otherwise)."""
        folder.mkdir(parents=True, exist_ok=True)
        root_key, mid_key, leaf_key = _key(), _key(), _key()
        root = make_cert(f"{name} Root CA", root_key, issuer=None, issuer_key=root_key, ca=True)
        mid = make_cert(f"{name} Intermediate CA", mid_key, issuer=root, issuer_key=root_key, ca=True)
        not_before = NOW - dt.timedelta(days=30) if not_after else None
        leaf = make_cert(f"{name} Code Signing", leaf_key, issuer=mid, issuer_key=mid_key, ca=False,
                         eku=[ExtendedKeyUsageOID.CODE_SIGNING] if eku is None else eku,
                         not_before=not_before, not_after=not_after)
        paths = cls(root=folder / f"{name}-root.pem", intermediate=folder / f"{name}-intermediate.pem",
                    chain=folder / f"{name}-chain.pem", cert=folder / f"{name}-signer.pem",
                    key=folder / f"{name}-signer.key", p12=folder / f"{name}-signer.p12")
        paths.root.write_bytes(pem(root))
        paths.intermediate.write_bytes(pem(mid))
        paths.chain.write_bytes(pem(mid))
        paths.cert.write_bytes(pem(leaf))
        paths.key.write_bytes(key_pem(leaf_key))
        paths.p12.write_bytes(pkcs12.serialize_key_and_certificates(
            b"signer", leaf_key, leaf, [mid],
            serialization.BestAvailableEncryption(P12_PASSWORD.encode())))
        return paths


TSA_CONFIG = """
[ tsa ]
default_tsa = tsa_config
[ tsa_config ]
serial = {serial}
crypto_device = builtin
signer_digest = sha256
default_policy = 1.3.6.1.4.1.99999.1
digests = sha256, sha384, sha512
accuracy = secs:1
ordering = yes
tsa_name = yes
ess_cert_id_chain = no
ess_cert_id_alg = sha256
"""


@dataclass(frozen=True, kw_only=True)
class Tsa:
    """A time-stamping authority for `openssl ts -reply`: its own root and a timeStamping certificate."""

    root: Path
    cert: Path
    key: Path
    config: Path

    @classmethod
    def make(cls, folder: Path) -> Tsa:
        folder.mkdir(parents=True, exist_ok=True)
        root_key, leaf_key = _key(), _key()
        root = make_cert("test TSA Root", root_key, issuer=None, issuer_key=root_key, ca=True)
        leaf = make_cert("test Time Stamping", leaf_key, issuer=root, issuer_key=root_key, ca=False,
                         eku=[ExtendedKeyUsageOID.TIME_STAMPING], eku_critical=True)
        tsa = cls(root=folder / "tsa-root.pem", cert=folder / "tsa.pem", key=folder / "tsa.key",
                  config=folder / "tsa.cnf")
        tsa.root.write_bytes(pem(root))
        tsa.cert.write_bytes(pem(leaf))
        tsa.key.write_bytes(key_pem(leaf_key))
        (folder / "tsa-serial").write_text("01\n")
        tsa.config.write_text(TSA_CONFIG.format(serial=folder / "tsa-serial"))
        return tsa
