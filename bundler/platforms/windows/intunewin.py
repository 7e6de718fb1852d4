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
import hmac
import os
import re
import secrets
import stat
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal, cast, get_args

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from isal import isal_zlib

from bundler.errors import BuildError
from bundler.hashing import CHUNK, file_sha256
from bundler.writer.members import STORED, Member, MemberCache, file_method
from bundler.writer.zipwriter import Produced, prepare_destination, stream_zip, write_zip

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
    """Every file below `folder` as a zip member named by its folder-relative POSIX path, with what the zip writer
    checks every byte it copies against: the CRC-32 of a file it will store as it is (an MSI, a cabinet; this
    header goes into the stream before the bytes), the sha256 of one it will deflate (the member cache's key).
    Every file gets mode 0644, whatever the disk says: Windows ignores the mode, and the inner zip must not depend
    on the umask. A link or special file is refused: the package would carry whatever it points at."""
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
                relative = path.relative_to(folder).as_posix()
                if file_method(relative, path) == STORED:
                    members.append(Member(name=relative, source=path, crc=_file_crc(path)))
                else:
                    members.append(Member(name=relative, source=path, sha256=file_sha256(path)))
    return members


def _file_crc(path: Path) -> int:
    crc = 0
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            crc = isal_zlib.crc32(chunk, crc)
    return crc


class _Encrypting:
    """The inner zip's bytes in, the format's encrypted file out at `out`'s position, in one pass: AES-256-CBC on
    the writing thread, while one thread hashes the plaintext (the FileDigest) and another MACs, CRCs and writes
    the ciphertext (hashlib lets go of the GIL). The MAC, known only at the end, goes over the 32 bytes kept free
    for it, and the CRC-32 of the whole is put together from the MAC's and the rest's."""

    _IN_FLIGHT = 8  # chunks queued at most: memory stays a few MiB whatever the size

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._key, self._mac_key = secrets.token_bytes(KEY_BYTES), secrets.token_bytes(KEY_BYTES)
        self._iv = secrets.token_bytes(IV_BYTES)
        self._encryptor = Cipher(algorithms.AES(self._key), modes.CBC(self._iv)).encryptor()
        self._padder = padding.PKCS7(algorithms.AES.block_size).padder()
        self._plain = hashlib.sha256()
        self._mac = hmac.new(self._mac_key, self._iv, "sha256")
        self._crc = isal_zlib.crc32(self._iv)
        self._size = self._sealed = 0
        self._buffer = bytearray()
        self._hashing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="intunewin-digest")
        self._sealing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="intunewin-seal")
        self._pending: deque[Future[None]] = deque()
        self._start = out.tell()
        out.write(bytes(MAC_BYTES) + self._iv)

    def write(self, data: bytes) -> int:
        self._size += len(data)
        if not self._buffer and len(data) >= CHUNK:
            self._encrypt(bytes(data))
        else:
            self._buffer += data
            if len(self._buffer) >= CHUNK:
                self._encrypt(bytes(self._buffer))
                self._buffer.clear()
        return len(data)

    def tell(self) -> int:
        return self._size

    def _encrypt(self, plain: bytes) -> None:
        self._pending.append(self._hashing.submit(self._plain.update, plain))
        sealed = self._encryptor.update(self._padder.update(plain))
        self._pending.append(self._sealing.submit(self._seal, sealed))
        while len(self._pending) > self._IN_FLIGHT:
            self._pending.popleft().result()

    def _seal(self, block: bytes) -> None:
        self._mac.update(block)
        self._crc = isal_zlib.crc32(block, self._crc)
        self._sealed += len(block)
        self._out.write(block)

    def finish(self) -> tuple[EncryptionInfo, int]:
        """The encryption record, and the CRC-32 of the encrypted file, which ends at the stream's position."""
        self._encrypt(bytes(self._buffer))
        self._buffer.clear()
        self._pending.append(self._sealing.submit(self._seal, self._encryptor.update(self._padder.finalize())
                                                  + self._encryptor.finalize()))
        while self._pending:
            self._pending.popleft().result()
        self.stop()
        tag = self._mac.digest()
        end = self._out.tell()
        self._out.seek(self._start)
        self._out.write(tag)
        self._out.seek(end)
        crc = isal_zlib.crc32_combine(isal_zlib.crc32(tag), self._crc, IV_BYTES + self._sealed)
        return EncryptionInfo(encryption_key=self._key, mac_key=self._mac_key, iv=self._iv, mac=tag,
                              file_digest=self._plain.digest(), size=self._size), crc

    def stop(self) -> None:
        """End the threads once what they are doing is done: all is written, or the caller has an error to raise."""
        self._hashing.shutdown(wait=True, cancel_futures=True)
        self._sealing.shutdown(wait=True, cancel_futures=True)


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
    describes an MSI setup file. Nothing else is written: the inner zip is encrypted as it is laid, straight into
    the outer zip's temporary file, so the content is read once and written once (then hashed for the sidecar).
    """
    prepare_destination(output)
    members = folder_members(setup_folder)
    check_setup_file((m.name for m in members), setup_file, folder=setup_folder)
    made: list[EncryptionInfo] = []

    def encrypted(out: BinaryIO) -> int:
        encrypting = _Encrypting(out)
        try:
            stream_zip(members, cast(BinaryIO, encrypting), epoch=epoch, member_cache=member_cache)
            encryption, crc = encrypting.finish()
        except BaseException:
            encrypting.stop()
            raise
        made.append(encryption)
        return crc

    def detection(out: BinaryIO) -> int:  # written after the encrypted file: name order
        xml = detection_xml(Detection(name=name, setup_file=setup_file, encryption=made[0], msi=msi))
        out.write(xml)
        return isal_zlib.crc32(xml)

    # The most the encrypted inner zip can take (deflate's worst case, every header and folder entry, padding):
    # past 4 GiB, its header is ZIP64 from the start.
    largest = 4096 + sum(m.size + (m.size >> 11) + (m.name.count("/") + 1) * (256 + 2 * len(m.name.encode()))
                         for m in members)
    sidecar = output.with_name(output.name + ".sha256")
    digest = write_zip([], output, epoch=epoch, member_cache=member_cache, sidecar=sidecar,
                       produced=[Produced(name=CONTENTS_MEMBER, produce=encrypted, bound=largest),
                                 Produced(name=DETECTION_MEMBER, produce=detection, bound=1 << 20)])
    encryption = made[0]
    return Intunewin(path=output, sha256=digest, size=output.stat().st_size, sha256_file=sidecar, name=name,
                     setup_file=setup_file, inner_sha256=encryption.file_digest.hex(), inner_size=encryption.size,
                     msi=msi)
