"""What App Control (WDAC) and AppLocker match a PE file by: its Authenticode hash, its version resource, and
the certificates of a verified signature.

Windows does not match the flat sha256 of a binary: both App Control hash rules and AppLocker file hash rules
hold the Authenticode SHA-256 digest (the PE image hash without the checksum, the certificate-table entry and
the certificate table, the file zero-padded to a multiple of 8 bytes), so a file keeps its hash when it is
signed later. Publisher rules name what Windows
reads from the signature and the file itself: App Control's `FilePublisher` level the TBS hash of a CA in the
chain plus the leaf's common name, the `OriginalFilename` of the version resource and a minimum file version
(the fixed-size VS_FIXEDFILEINFO, not the version string); AppLocker's the leaf's subject, the product name,
the binary name and a version range. docs/facts.md §10 has the sources.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pefile
from cryptography import x509
from cryptography.x509.oid import NameOID

from bundler.errors import BuildError
from bundler.readers.pe import version_strings
from bundler.readers.pe_source import mapped
from bundler.readers.signatures import authenticode_digest, embedded_chain, signature_evidence

_RESOURCE = pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_RESOURCE"]
#: How Windows writes the attribute types of a subject (`Get-AppLockerFileInformation`, certutil): "S" for
#: the state, not RFC 4514's "ST"; "E" for an e-mail address.
_WINDOWS_NAMES = {NameOID.COMMON_NAME: "CN", NameOID.ORGANIZATION_NAME: "O", NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
                  NameOID.LOCALITY_NAME: "L", NameOID.STATE_OR_PROVINCE_NAME: "S", NameOID.COUNTRY_NAME: "C",
                  NameOID.EMAIL_ADDRESS: "E", NameOID.SERIAL_NUMBER: "SERIALNUMBER",
                  NameOID.DOMAIN_COMPONENT: "DC", NameOID.STREET_ADDRESS: "STREET"}


@dataclass(frozen=True, kw_only=True)
class Publisher:
    """The signer as the two policy languages name it, from a signature that verified."""

    leaf_name: str  # the leaf's common name: App Control's CertPublisher
    leaf_subject: str  # the leaf's whole subject as Windows writes it: AppLocker's PublisherName
    ca_name: str  # the common name of the CA whose TBS hash is the rule's CertRoot
    ca_tbs_hash: str  # upper-case hex, with the CA certificate's own signature hash algorithm


@dataclass(frozen=True, kw_only=True)
class PeIdentity:
    path: str  # install-relative, '/'-separated
    size: int
    authenticode_sha256: str  # upper-case hex, as the policies hold it
    original_filename: str | None
    product_name: str | None
    file_version: str | None  # a.b.c.d from VS_FIXEDFILEINFO
    signed: bool
    publisher: Publisher | None  # None when unsigned or when the signature did not verify
    signature_note: str | None  # why there is no publisher, for a signed file


def pe_identity(path: Path, *, label: str) -> PeIdentity:
    """Read one PE file once: its image hash, version resource and (for a verified signature) its publisher."""
    evidence = signature_evidence(path, label=label)
    with mapped(path, name=label) as data:
        try:
            pe = pefile.PE(data=data, fast_load=True)
            pe.parse_data_directories(directories=[_RESOURCE])
        except pefile.PEFormatError as exc:
            msg = f"{label} is not a valid PE file ({exc.value}); expected a Windows DLL, PYD or EXE"
            raise BuildError(msg) from None
        digest = authenticode_digest(data, pe, algorithm="sha256", padded=True).hex().upper()
        chain = embedded_chain(data, pe) if evidence.verified else ()
        strings = version_strings(pe)
        fixed = fixed_version(pe)
        pe.close()
    return PeIdentity(path=label, size=path.stat().st_size, authenticode_sha256=digest,
                      original_filename=strings.get("OriginalFilename") or None,
                      product_name=strings.get("ProductName") or None, file_version=fixed, signed=evidence.signed,
                      publisher=_publisher(chain), signature_note=None if evidence.verified else evidence.reason)


def windows_subject(name: x509.Name) -> str:
    """A distinguished name as Windows prints it: most specific first (CN before C), Windows' short names."""
    parts = []
    for rdn in reversed(list(name.rdns)):
        for attribute in rdn:
            label = _WINDOWS_NAMES.get(attribute.oid, attribute.oid.dotted_string)
            value = attribute.value if isinstance(attribute.value, str) else attribute.value.hex()
            parts.append(f"{label}={_quoted(value)}")
    return ", ".join(parts)


def tbs_hash(cert: x509.Certificate) -> str:
    """The hash of the certificate's to-be-signed part with the algorithm of its own signature, as App Control's
    `CertRoot Type="TBS"` holds it (a SHA-384-signed CA gives 96 hex digits)."""
    algorithm = cert.signature_hash_algorithm
    name = algorithm.name if algorithm is not None else "sha256"
    return hashlib.new(name, cert.tbs_certificate_bytes).hexdigest().upper()


def _publisher(chain: tuple[x509.Certificate, ...]) -> Publisher | None:
    """The leaf, and the highest CA the signature carries (New-CIPolicy's PcaCertificate level: the root is not
    in the signature)."""
    if len(chain) < 2:
        return None
    leaf, ca = chain[0], chain[-1]
    return Publisher(leaf_name=_common_name(leaf), leaf_subject=windows_subject(leaf.subject),
                     ca_name=_common_name(ca), ca_tbs_hash=tbs_hash(ca))


def file_version(path: Path) -> str | None:
    """The VS_FIXEDFILEINFO file version of the PE file at `path` ("1.23.1.0"), or None when it is no PE file or
    has no version resource: the version Windows Installer's file rules compare (MsiGetFileVersion)."""
    try:
        pe = pefile.PE(str(path), fast_load=True)
    except pefile.PEFormatError:
        return None
    try:
        pe.parse_data_directories(directories=[_RESOURCE])
        return fixed_version(pe)
    except pefile.PEFormatError:
        return None
    finally:
        pe.close()


def fixed_version(pe: pefile.PE) -> str | None:
    """The file version of a parsed PE's VS_FIXEDFILEINFO, as "major.minor.build.revision"."""
    fixed = getattr(pe, "VS_FIXEDFILEINFO", None)
    if not fixed:
        return None
    ms, ls = fixed[0].FileVersionMS, fixed[0].FileVersionLS
    return f"{ms >> 16}.{ms & 0xFFFF}.{ls >> 16}.{ls & 0xFFFF}"


def _common_name(cert: x509.Certificate) -> str:
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else windows_subject(cert.subject)


def _quoted(value: str) -> str:
    """Windows quotes a value that holds a separator: `O="Example, Inc."`."""
    return f'"{value}"' if any(c in value for c in ',+=;"') else value
