"""A bundle's MSI: its install image made here by the install engine, listed in a .wxs, built by wixl,
made reproducible and (optionally) signed.

Steps, each a tool that is not ours where one exists:

1. The image: `engine.py make-image` (bundler/shipped/ort_bundle/engine/image.py, the code install.cmd runs on the target),
   run by a Python of the bundle's minor version (bytecode is per minor version): the running one when it
   matches, else `pythonX.Y` on PATH, else exit 9 naming it. It runs our own engine, not the bundle's copy.
2. The source: bundler/packaging/msi_source.py, from the image's receipt (every file, and the receipt).
3. `wixl -a x64` (Debian package `wixl`), in the image folder, every file dated the bundle's time, in UTC; `msibuild` (package `msitools`) marks the
   public properties secure, so a managed install passes CACHEDIR and NOSELFCHECK to the server side, adds
   the MsiLockPermissionsEx row wixl cannot author, writes the Upgrade table wixl cannot (a same-version
   range), sets each PE file's version and drops wixl's MD5 rows of versioned files, and sets the strings'
   code page (msi_source's docstring).
4. The summary information: wixl writes a random PackageCode and the build's clock into it (docs/facts.md §9),
   so both are rewritten in place with `olefile`: the PackageCode from the image's receipt digest and the
   two FILETIMEs from the bundle's SOURCE_DATE_EPOCH. Two runs then give the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import sys
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from bundler.errors import BuildError, InputUnavailableError, UnsupportedError
from bundler.hashing import file_sha256
from bundler.packaging.msi_source import (
    CODEPAGE_TABLE,
    LOCK_TABLE,
    NAMESPACE,
    MsiProduct,
    braced,
    check_text,
    guid,
    identifier,
    product_version,
    upgrade_table,
    wxs,
)
from bundler.readers.pe_identity import file_version
from bundler.shipped.ort_bundle.bundle_info import BundleInfo
from bundler.shipped.ort_bundle.records import PLAN_FILE, RECEIPT_FILE, InstallPlan, Receipt

#: The tools and the Debian package that has each.
#: The outside programs the MSI work runs, and the Debian package of each.
TOOLS = {"wixl": "wixl", "msibuild": "msitools", "msiinfo": "msitools", "msiextract": "msitools",
         "osslsigncode": "osslsigncode"}
#: The files whose version resource the File table carries.
PE_SUFFIXES = (".dll", ".pyd", ".exe")
SUMMARY_STREAM = "\x05SummaryInformation"
#: Summary information property ids (MS-OLEPS; Windows Installer's "Summary Information Stream Property Set").
PID_REVISION, PID_CREATE_TIME, PID_LAST_SAVE_TIME = 9, 12, 13
VT_LPSTR, VT_FILETIME = 30, 64
#: FILETIME counts 100 ns since 1601-01-01.
FILETIME_EPOCH_OFFSET = 11644473600


@dataclass(frozen=True, kw_only=True)
class Msi:
    path: Path
    size: int
    sha256: str
    product: MsiProduct
    package_code: str
    files: int  # files the MSI installs
    signer: str | None = None  # the Authenticode signer's subject, when signed

    def to_json(self) -> dict[str, object]:
        return {"path": str(self.path), "size": self.size, "sha256": self.sha256, "files": self.files,
                "product_code": self.product.product_code, "upgrade_code": self.product.upgrade_code,
                "package_code": self.package_code, "product_version": self.product.product_version,
                "signer": self.signer,
                "install_command": f'msiexec /i "{self.path.name}" /qn /norestart',
                "uninstall_command": f"msiexec /x {self.product.product_code} /qn /norestart"}


def tool(name: str, *, purpose: str = "package --msi") -> str:
    found = shutil.which(name)
    if found is None:
        msg = f"{name} is not installed; {purpose} needs it: install the Debian package {TOOLS[name]}"
        raise InputUnavailableError(msg)
    return found


def build_msi(bundle: Path, info: BundleInfo, work: Path, output: Path, *, epoch: int) -> Msi:
    """The MSI of the unpacked, verified `bundle` at `output`; `work` is an empty folder for the image."""
    bundle, work, output = bundle.resolve(), work.resolve(), output.resolve()  # the tools run in other folders
    plan = InstallPlan.loads((bundle / PLAN_FILE).read_text(encoding="utf-8"), source=f"{bundle.name}/{PLAN_FILE}")
    if not plan.venv.runtime:
        msg = (f"{info.name} {info.version} runs on the target's own Python, so its installed tree depends on that "
               f"machine; an MSI needs a bundle that carries its interpreter: add [python] runtime to the manifest")
        raise UnsupportedError(msg)
    product = msi_product(info, plan, bundle_sha256="0" * 64, receipt=b"", source=f"{bundle.name}/bundle.json")
    check_text(product, [])  # before the image is made: the publisher or name alone refuses at once
    tool("wixl"), tool("msibuild")  # and a missing tool
    image = work / "image"
    receipt = make_image(bundle, image, plan, epoch=epoch, work=work)
    product = msi_product(info, plan, bundle_sha256=receipt.bundle_sha256, receipt=(image / RECEIPT_FILE).read_bytes(),
                          source=f"{bundle.name}/bundle.json")
    files = image_files(receipt)
    _date_files(image, files, epoch)
    write_database(product, files, image=image, output=output, work=work)
    code = package_code(product, (image / RECEIPT_FILE).read_bytes())
    fix_summary(output, package_code=code, epoch=epoch)
    return Msi(path=output, size=output.stat().st_size, sha256=file_sha256(output), product=product,
               package_code=code, files=len(files))


def msi_product(info: BundleInfo, plan: InstallPlan, *, bundle_sha256: str, receipt: bytes, source: str) -> MsiProduct:
    """What the MSI says about the product: from the bundle's own records (package reads them in the bundle,
    verify in the image the MSI installs). `receipt`: the image's receipt, whose digest makes the ProductCode
    (another content, another product; see msi_source's Identity)."""
    table = info.manifest.get("bundle") or {}
    owned = table.get("upgrade_code")
    namespace = uuid.UUID(str(owned)) if owned else NAMESPACE
    upgrade_code = braced(namespace) if owned else legacy_upgrade_code(info.name)
    content = hashlib.sha256(receipt).hexdigest()
    return MsiProduct(name=info.name, version=info.version, product_version=product_version(info.version, source=source),
                      publisher=str(table.get("publisher") or "ort-bundler"),
                      product_code=guid(info.name, "product", info.version, content, namespace=namespace),
                      upgrade_code=upgrade_code, bundle_sha256=bundle_sha256,
                      interpreter=f"{plan.venv.dir}/{plan.venv.interpreter}",
                      vc_runtime_min=_vc_minimum(info.vc_runtime_min), namespace=namespace)


def legacy_upgrade_code(name: str) -> str:
    """The UpgradeCode of a manifest without `[bundle] upgrade_code`: from the name alone, in ort-bundler's
    namespace (what every MSI had before the key existed, so those installs still upgrade)."""
    return guid(name, "upgrade")


def missing_upgrade_code(info: BundleInfo) -> str | None:
    """The warning for a manifest without `[bundle] upgrade_code`, with the exact line to add; None with one."""
    if (info.manifest.get("bundle") or {}).get("upgrade_code"):
        return None
    code = legacy_upgrade_code(info.name)
    return (f"the manifest has no [bundle] upgrade_code, so the MSI's UpgradeCode {code} comes from the name "
            f"{info.name!r} alone and any other product of that name shares it (each would remove the other); add "
            f'upgrade_code = "{code.strip("{}")}" to [bundle] to keep upgrading what is installed, or a new GUID for a '
            f"product not shipped yet")


def image_files(receipt: Receipt) -> list[str]:
    """The files the MSI installs: every file of the image's receipt, and the receipt."""
    return [entry.path for entry in receipt.files] + [RECEIPT_FILE]


def package_code(product: MsiProduct, receipt: bytes) -> str:
    """The summary's PackageCode: one per distinct package, from the image's receipt (so from every file)."""
    return guid(product.name, "package", product.version, hashlib.sha256(receipt).hexdigest())


def write_database(product: MsiProduct, files: list[str], *, image: Path, output: Path, work: Path,
                   purpose: str = "package --msi") -> None:
    """Every table of the MSI at `output`, with the cabinet of `files` from `image`: the .wxs, wixl, then msibuild
    for what wixl cannot author. `package` writes an MSI with this and `verify` rebuilds one with it to compare
    every table, so there is one description of what an MSI of ours holds."""
    wixl, msibuild = tool("wixl", purpose=purpose), tool("msibuild", purpose=purpose)
    source = work / "product.wxs"
    size = sum((image / relative).stat().st_size for relative in files)
    source.write_text(wxs(product, files, estimated_kb=-(-size // 1024)), encoding="utf-8")
    _run([wixl, "-a", "x64", "-o", str(output), str(source)], cwd=image, what="wixl")
    versions = file_versions(image, files)
    if versions:  # each query names one versioned file: its Version set, wixl's MD5 row (only for unversioned) gone
        queries = [f"UPDATE `File` SET `Version` = '{version}' WHERE `File` = '{identifier('f', path)}'"
                   for path, version in versions.items()]
        queries += [f"DELETE FROM `MsiFileHash` WHERE `File_` = '{identifier('f', path)}'" for path in versions]
        _run([msibuild, str(output), *(part for query in queries for part in ("-q", query))], cwd=work,
             what="msibuild")
    secure = ";".join(("INSTALLDIR", "CACHEDIR", "NOSELFCHECK", "NEWER_VERSION_FOUND", "OLDER_VERSION_FOUND"))
    _run([msibuild, str(output), "-q",
          f"UPDATE `Property` SET `Value` = '{secure}' WHERE `Property` = 'SecureCustomProperties'"],
         cwd=work, what="msibuild")
    tables = work / "tables"
    tables.mkdir(exist_ok=True)
    for name, text in (("MsiLockPermissionsEx", LOCK_TABLE), ("_ForceCodepage", CODEPAGE_TABLE),
                       ("Upgrade", upgrade_table(product))):
        with open(tables / f"{name}.idt", "w", encoding="ascii", newline="") as idt:
            idt.write(text)
        _run([msibuild, str(output), "-i", str(tables / f"{name}.idt")], cwd=work, what="msibuild")


def file_versions(image: Path, files: list[str]) -> dict[str, str]:
    """{file: its VS_FIXEDFILEINFO version} for the image's PE files that have one: Windows Installer's file rules
    (repair, upgrade) compare these; a file without is unversioned and keeps its MsiFileHash row."""
    found = {}
    for relative in files:
        if relative.lower().endswith(PE_SUFFIXES):
            version = file_version(image / relative)
            if version is not None:
                found[relative] = version
    return found


def image_bytes(bundle: Path, plan: InstallPlan) -> int:
    """An upper bound of the install image's size, read before it is made: the wheels as their own central
    directories say they inflate (a member of 1000:1 counts at its full size), half as much again for the bytecode,
    and the files copied as they are."""
    import zipfile

    inflated = 0
    for wheel in plan.venv.wheels:
        with zipfile.ZipFile(bundle / wheel) as archive:
            inflated += sum(info.file_size for info in archive.infolist())
    copied = sum((bundle / entry.source).stat().st_size for entry in (*plan.copy, *plan.venv.runtime,
                                                                       *plan.venv.site_packages_files))
    return inflated + inflated // 2 + copied


def signed(msi: Msi, *, signer: str) -> Msi:
    """The record of `msi` after it was signed in place (its bytes, so its size and hash, changed)."""
    return replace(msi, size=msi.path.stat().st_size, sha256=file_sha256(msi.path), signer=signer)


def compiler_python(minor: str) -> str:
    """A Python of the bundle's minor version, for the image's bytecode."""
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if running == minor:
        return sys.executable
    found = shutil.which(f"python{minor}")
    if found is None:
        msg = (f"the bundle's bytecode needs Python {minor} and this is Python {running}: "
               f"put python{minor} on PATH (e.g. the Debian or deadsnakes package python{minor}) or run ort-bundler "
               f"with Python {minor}")
        raise UnsupportedError(msg)
    return found


def make_image(bundle: Path, image: Path, plan: InstallPlan, *, epoch: int, work: Path) -> Receipt:
    """The install engine's `make-image`, from this ort-bundler's copy of the engine, in a Python of the
    bundle's minor version; the receipt it wrote."""
    from bundler.assembly.shipped_package import START, package_files

    engine = work / "engine"
    for relative, data in package_files().items():
        path = engine.joinpath(*relative.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    start = engine / "ort_bundle" / START
    _run([compiler_python(plan.python), "-I", "-B", str(start), "engine", "make-image", "--bundle", str(bundle),
          "--out", str(image), "--epoch", str(epoch)], cwd=work, what="the install engine's make-image")
    return Receipt.loads((image / RECEIPT_FILE).read_text(encoding="utf-8"), source=str(image / RECEIPT_FILE))


def fix_summary(msi: Path, *, package_code: str, epoch: int) -> None:
    """Set the PackageCode and both timestamps of the summary information, in place (same sizes)."""
    import olefile

    with olefile.OleFileIO(str(msi), write_mode=True) as ole:
        stream = bytearray(ole.openstream(SUMMARY_STREAM).read())
        offsets = _property_offsets(bytes(stream))
        filetime = struct.pack("<Q", (epoch + FILETIME_EPOCH_OFFSET) * 10_000_000)
        for pid in (PID_CREATE_TIME, PID_LAST_SAVE_TIME):
            kind, where = offsets[pid]
            if kind != VT_FILETIME:
                msg = f"{msi.name}: summary property {pid} has type {kind}, expected a FILETIME; wixl changed its output"
                raise BuildError(msg)
            stream[where:where + 8] = filetime
        kind, where = offsets[PID_REVISION]
        length = struct.unpack_from("<I", stream, where)[0]
        text = package_code.encode("ascii") + b"\0"
        if kind != VT_LPSTR or length != len(text):
            msg = f"{msi.name}: the summary's PackageCode is {length} bytes of type {kind}, expected a GUID string"
            raise BuildError(msg)
        stream[where + 4:where + 4 + length] = text
        ole.write_stream(SUMMARY_STREAM, bytes(stream))


def _property_offsets(stream: bytes) -> dict[int, tuple[int, int]]:
    """{property id: (type, offset of its value)} of the first section of an OLE property set stream."""
    section = struct.unpack_from("<I", stream, 28 + 16)[0]  # header (28) + the section's FMTID (16)
    count = struct.unpack_from("<I", stream, section + 4)[0]
    found = {}
    for index in range(count):
        pid, offset = struct.unpack_from("<II", stream, section + 8 + 8 * index)
        kind = struct.unpack_from("<I", stream, section + offset)[0] & 0xFFFF
        found[pid] = (kind, section + offset + 4)
    return found


def _vc_minimum(text: str | None) -> tuple[int, int, int] | None:
    """bundle.json's "14.40.33810" (or with a fourth part) as the three numbers the registry holds."""
    if not text:
        return None
    major, minor, build = ([int(part) for part in text.split(".")[:3]] + [0, 0])[:3]
    return major, minor, build


def _date_files(image: Path, files: list[str], epoch: int) -> None:
    """The cabinet records each file's modification time: the bundle's time, not the moment of this run."""
    for relative in files:
        os.utime(image / relative, (epoch, epoch), follow_symlinks=False)


def _run(command: list[str], *, cwd: Path, what: str) -> None:
    """`command`, in UTC (wixl turns file times into the cabinet's local DOS times), without PYTHON* variables."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env["TZ"] = "UTC"
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        output = (proc.stderr.strip() or proc.stdout.strip())[-800:]
        msg = f"{what} failed with exit code {proc.returncode}: {output}"
        raise BuildError(msg)
