"""The `.intunewin` format: what Microsoft's IntuneWinAppUtil writes and Intune takes as a Win32 app.

Read from the two public reimplementations, svrooij/ContentPrep (C#: `Packager.cs`, `Encryptor.cs`,
`Models/`) and manchtools/open-package (Go: `crypto/crypto.go`, `metadata/detection.go`); docs/facts.md §9:

- an outer zip holding `IntuneWinPackage/Contents/IntunePackage.intunewin` and
  `IntuneWinPackage/Metadata/Detection.xml`;
- the inner file: a zip of the setup folder, the setup file at its root, encrypted with AES-256-CBC and PKCS7
  padding, stored as HMAC-SHA256(MacKey, IV ‖ ciphertext) (32 bytes) ‖ IV (16) ‖ ciphertext;
- Detection.xml: `<ApplicationInfo ToolVersion="…">` with Name, UnencryptedContentSize (the inner zip's),
  FileName, SetupFile, EncryptionInfo (keys, IV and MAC in base64, ProfileIdentifier `ProfileVersion1`,
  FileDigest = base64 SHA-256 of the inner zip, FileDigestAlgorithm `SHA256`), then MsiInfo for an MSI
  (the element order of ContentPrep's serialised classes, which follow the tool's own).

The keys are random for every package, by design of the format (Intune receives them with the upload), so
two `.intunewin` files of one folder never share their bytes. What is reproducible is the inner zip: written by
our zip writer (sorted entries, the bundle's timestamp, fixed modes), it is byte-identical for the same folder
and epoch, and its SHA-256, the FileDigest, is the package's identity.

Pure parts (the MSI record, Detection.xml, the setup-file rule) are apart from the parts that touch the disk
(listing the folder, encrypting, writing the zips), which stream: a bundle of hundreds of MB is never in memory.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import secrets
import stat
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from cryptography.hazmat.primitives import hashes, hmac, padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from bundler.errors import BuildError
from bundler.hashing import CHUNK, file_sha256
from bundler.writer.members import Member, MemberCache
from bundler.writer.zipwriter import prepare_destination, write_zip

#: IntuneWinAppUtil's current release (1.8.6), the version ContentPrep writes too.
TOOL_VERSION = "1.8.6.0"
CONTENTS_FILE = "IntunePackage.intunewin"
CONTENTS_MEMBER = f"IntuneWinPackage/Contents/{CONTENTS_FILE}"
DETECTION_MEMBER = "IntuneWinPackage/Metadata/Detection.xml"
PROFILE_IDENTIFIER = "ProfileVersion1"
DIGEST_ALGORITHM = "SHA256"
KEY_BYTES, IV_BYTES, MAC_BYTES = 32, 16, 32
#: The namespace declarations .NET's XmlSerializer puts on the root, as the tool's Detection.xml has them.
XML_NAMESPACES = {"xmlns:xsd": "http://www.w3.org/2001/XMLSchema",
                  "xmlns:xsi": "http://www.w3.org/2001/XMLSchema-instance"}
_GUID = re.compile(r"^\{[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}\}$")

ExecutionContext = Literal["System", "User", "Any"]


@dataclass(frozen=True, kw_only=True)
class MsiInfo:
    """What Detection.xml says of an MSI setup file. IntuneWinAppUtil reads it from the MSI's tables; here the
    step that built the MSI fills it in. Intune pre-fills the app's install and uninstall commands and its
    product-code detection rule from it. The defaults describe a per-machine MSI that needs no reboot."""

    product_code: str  # {GUID}, upper case, as the MSI's Property table has it
    product_version: str
    upgrade_code: str
    package_code: str | None = None  # the summary information's revision number
    publisher: str | None = None  # the Manufacturer property
    execution_context: ExecutionContext = "System"
    requires_logon: bool = False
    requires_reboot: bool = False
    machine_install: bool = True
    user_install: bool = False
    includes_services: bool = False
    includes_odbc_data_source: bool = False
    contains_system_registry_keys: bool = False
    contains_system_folders: bool = False

    def __post_init__(self) -> None:
        for field, value in (("product_code", self.product_code), ("upgrade_code", self.upgrade_code),
                             ("package_code", self.package_code)):
            if value is not None and not _GUID.match(value):
                msg = (f"MsiInfo {field}: found {value!r}, expected a GUID in braces and upper case, "
                       "like {12345678-9ABC-DEF0-1234-56789ABCDEF0}")
                raise BuildError(msg)
        if self.execution_context not in get_args(ExecutionContext):
            msg = f"MsiInfo execution_context: found {self.execution_context!r}, expected System, User or Any"
            raise BuildError(msg)
        if not self.product_version:
            msg = "MsiInfo product_version: found an empty string, expected the MSI's ProductVersion"
            raise BuildError(msg)

    def elements(self) -> list[tuple[str, str]]:
        """The MsiInfo block's elements in the tool's order; absent optional strings are left out, as .NET's
        serializer leaves out a null."""
        optional = [("MsiPackageCode", self.package_code), ("MsiPublisher", self.publisher)]
        flags = [("MsiRequiresLogon", self.requires_logon), ("MsiRequiresReboot", self.requires_reboot),
                 ("MsiIsMachineInstall", self.machine_install), ("MsiIsUserInstall", self.user_install),
                 ("MsiIncludesServices", self.includes_services),
                 ("MsiIncludesODBCDataSource", self.includes_odbc_data_source),
                 ("MsiContainsSystemRegistryKeys", self.contains_system_registry_keys),
                 ("MsiContainsSystemFolders", self.contains_system_folders)]
        return [("MsiProductCode", self.product_code), ("MsiProductVersion", self.product_version),
                *[(tag, value) for tag, value in optional if value is not None],
                ("MsiUpgradeCode", self.upgrade_code), ("MsiExecutionContext", self.execution_context),
                *[(tag, "true" if value else "false") for tag, value in flags]]

    def to_json(self) -> dict[str, object]:
        return {"product_code": self.product_code, "product_version": self.product_version,
                "upgrade_code": self.upgrade_code, "package_code": self.package_code, "publisher": self.publisher,
                "execution_context": self.execution_context, "requires_reboot": self.requires_reboot}


@dataclass(frozen=True, kw_only=True)
class EncryptionInfo:
    """The secrets and digests of one encrypted inner zip: what Intune needs to check and decrypt it."""

    encryption_key: bytes
    mac_key: bytes
    iv: bytes
    mac: bytes  # HMAC-SHA256 over IV ‖ ciphertext, also the encrypted file's first 32 bytes
    file_digest: bytes  # SHA-256 of the unencrypted inner zip
    size: int  # of the unencrypted inner zip


@dataclass(frozen=True, kw_only=True)
class Detection:
    """Detection.xml's content. `name` is what Intune shows as the app's name when the file is uploaded."""

    name: str
    setup_file: str
    encryption: EncryptionInfo
    msi: MsiInfo | None = None


def detection_xml(detection: Detection) -> bytes:
    """Detection.xml as UTF-8, without an XML declaration (as the tool writes it), indented, deterministic."""
    enc = detection.encryption
    root = ET.Element("ApplicationInfo", {**XML_NAMESPACES, "ToolVersion": TOOL_VERSION})
    for tag, text in (("Name", detection.name), ("UnencryptedContentSize", str(enc.size)),
                      ("FileName", CONTENTS_FILE), ("SetupFile", detection.setup_file)):
        ET.SubElement(root, tag).text = text
    info = ET.SubElement(root, "EncryptionInfo")
    for tag, text in (("EncryptionKey", _b64(enc.encryption_key)), ("MacKey", _b64(enc.mac_key)),
                      ("InitializationVector", _b64(enc.iv)), ("Mac", _b64(enc.mac)),
                      ("ProfileIdentifier", PROFILE_IDENTIFIER), ("FileDigest", _b64(enc.file_digest)),
                      ("FileDigestAlgorithm", DIGEST_ALGORITHM)):
        ET.SubElement(info, tag).text = text
    if detection.msi is not None:
        block = ET.SubElement(root, "MsiInfo")
        for tag, text in detection.msi.elements():
            ET.SubElement(block, tag).text = text
    ET.indent(root, space="  ")
    return ET.tostring(root, encoding="unicode").encode("utf-8")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def check_setup_file(names: Iterable[str], setup_file: str, *, folder: Path) -> None:
    """Intune runs the setup file from the root of the unpacked content: it must be a file at the folder's root."""
    names = set(names)
    if "/" in setup_file or "\\" in setup_file or setup_file not in names:
        at_root = sorted(name for name in names if "/" not in name)
        shown = ", ".join(at_root[:5]) + (", …" if len(at_root) > 5 else "") if at_root else "no files"
        msg = f"{folder}: setup file {setup_file!r} is not a file at the folder's root, expected one of: {shown}"
        raise BuildError(msg)


# -- the disk -------------------------------------------------------------------------------------------------


def folder_members(folder: Path) -> list[Member]:
    """Every file below `folder` as a zip member named by its folder-relative POSIX path, hashed now (the zip
    writer checks every byte it copies against that hash). Every file gets mode 0644, whatever the disk says:
    Windows ignores the mode, and the inner zip must not depend on the umask. A link or special file is refused:
    the package would carry whatever it points at."""
    if not folder.is_dir():
        msg = f"{folder}: not a folder, expected the setup folder to package"
        raise BuildError(msg)
    members: list[Member] = []
    for root, dirs, files in os.walk(folder):
        for name in sorted([*dirs, *files]):
            path = Path(root, name)
            mode = path.lstat().st_mode
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                msg = f"{path}: a link or special file in the setup folder, expected only plain files and folders"
                raise BuildError(msg)
            if stat.S_ISREG(mode):
                members.append(Member(name=path.relative_to(folder).as_posix(), source=path, sha256=file_sha256(path)))
    return members


def encrypt_file(source: Path, dest: Path) -> EncryptionInfo:
    """Encrypt `source` into `dest` in the format's layout with fresh random keys, streamed in chunks: the
    plaintext is read once (hashed, padded and encrypted in the same pass), and the HMAC, known only at the end,
    is written over the 32 bytes kept free for it."""
    key, mac_key, iv = secrets.token_bytes(KEY_BYTES), secrets.token_bytes(KEY_BYTES), secrets.token_bytes(IV_BYTES)
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    padder = padding.PKCS7(algorithms.AES.block_size).padder()
    mac = hmac.HMAC(mac_key, hashes.SHA256())
    digest = hashlib.sha256()
    size = 0
    try:
        with source.open("rb") as src, dest.open("wb") as out:
            out.write(bytes(MAC_BYTES) + iv)
            mac.update(iv)
            while chunk := src.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
                block = encryptor.update(padder.update(chunk))
                mac.update(block)
                out.write(block)
            block = encryptor.update(padder.finalize()) + encryptor.finalize()
            mac.update(block)
            out.write(block)
            tag = mac.finalize()
            out.seek(0)
            out.write(tag)
    except OSError as exc:
        msg = f"{dest}: the encrypted package cannot be written ({exc.strerror}); free space on that disk"
        raise BuildError(msg) from None
    return EncryptionInfo(encryption_key=key, mac_key=mac_key, iv=iv, mac=tag, file_digest=digest.digest(), size=size)


@dataclass(frozen=True, kw_only=True)
class Intunewin:
    """One `.intunewin` written: the file, and the inner zip that is its reproducible identity."""

    path: Path
    sha256: str
    size: int
    sha256_file: Path
    name: str
    setup_file: str
    inner_sha256: str
    inner_size: int
    msi: MsiInfo | None

    def to_json(self) -> dict[str, object]:
        return {"path": str(self.path), "size": self.size, "sha256": self.sha256, "sha256_file": str(self.sha256_file),
                "name": self.name, "setup_file": self.setup_file,
                "inner_zip": {"sha256": self.inner_sha256, "size": self.inner_size},
                "msi": self.msi.to_json() if self.msi else None}


def write_intunewin(setup_folder: Path, setup_file: str, output: Path, *, name: str, epoch: int,
                    member_cache: MemberCache, msi: MsiInfo | None = None) -> Intunewin:
    """Wrap `setup_folder` (with `setup_file` at its root) into the `.intunewin` file `output`, and its sha256 into
    `output.sha256` (`sha256sum` format), each written atomically.

    `name` is the app name Detection.xml gives; `epoch` the inner zip's timestamp (the bundle's, so the inner
    zip is reproducible); `member_cache` lends the zip writer the members the build deflated already; `msi`
    describes an MSI setup file. The working files live in a hidden folder beside `output`, one copy of the
    content at a time, and go when this returns or fails.
    """
    prepare_destination(output)
    members = folder_members(setup_folder)
    check_setup_file((m.name for m in members), setup_file, folder=setup_folder)
    sidecar = output.with_name(output.name + ".sha256")
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{output.name}.", suffix=".work") as tmp:
        inner, encrypted = Path(tmp, "inner.zip"), Path(tmp, CONTENTS_FILE)
        write_zip(members, inner, epoch=epoch, member_cache=member_cache)
        encryption = encrypt_file(inner, encrypted)
        inner.unlink()  # only its digest and size are needed from here on
        xml = detection_xml(Detection(name=name, setup_file=setup_file, encryption=encryption, msi=msi))
        outer = [Member(name=CONTENTS_MEMBER, source=encrypted, sha256=file_sha256(encrypted)),
                 Member(name=DETECTION_MEMBER, data=xml)]
        digest = write_zip(outer, output, epoch=epoch, member_cache=member_cache, sidecar=sidecar)
    return Intunewin(path=output, sha256=digest, size=output.stat().st_size, sha256_file=sidecar, name=name,
                     setup_file=setup_file, inner_sha256=encryption.file_digest.hex(), inner_size=encryption.size,
                     msi=msi)
