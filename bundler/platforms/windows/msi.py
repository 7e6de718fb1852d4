"""A bundle's MSI: its install image made here by the install engine, listed in a .wxs, built by wixl,
made reproducible and (optionally) signed.

Steps, each a tool that is not ours where one exists:

1. The image: `engine.py make-image` (bundler/shipped/ort_bundle/engine/image.py, the code install.cmd runs on the target),
   run by a Python of the bundle's minor version (bytecode is per minor version): the running one when it
   matches, else `pythonX.Y` on PATH, else exit 9 naming it. It runs our own engine, not the bundle's copy.
2. The source: bundler/platforms/windows/msi_source.py, from the image's receipt (every file, and the receipt).
3. The cabinets: `gcab -c -z` (Debian package `gcab`), streaming, split within the cabinet format's limits
   (bundler/platforms/windows/msi_cabinets.py): one small cabinet embedded, else every cabinet a file beside the MSI.
4. The tables: `wixl -a x64` (Debian package `wixl`), run on empty stand-ins of the image's files (wixl reads
   every file whole into memory and builds its one cabinet there), every file dated the bundle's time, in UTC;
   the File, MsiFileHash and Media tables are then written from the real files and the cabinets' layout;
   `msibuild` (package `msitools`) marks the
   public properties secure, so a managed install passes CACHEDIR and NOSELFCHECK to the server side, adds
   the MsiLockPermissionsEx row wixl cannot author, writes the Upgrade table wixl cannot (a same-version
   range), sets each PE file's version and drops wixl's MD5 rows of versioned files, sets the property-setting
   actions' type wixl gets wrong, inserts the INSTALLDIR check's script and error actions wixl cannot author, and
   sets the strings' code page (msi_source's docstring).
5. The summary information: wixl writes a random PackageCode and the build's clock into it (docs/facts.md §9),
   so both are rewritten in place (bundler/platforms/windows/msi_summary.py, which reads only the sectors on the way to
   the summary stream: olefile's write mode read the whole sector table in a way that grows with its square):
   the PackageCode from the image's receipt digest and the two FILETIMEs from the bundle's SOURCE_DATE_EPOCH.
   Two runs then give the same bytes, MSI and cabinets.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from bundler.errors import BuildError, UnsupportedError
from bundler.hashing import file_sha256
from bundler.integrations import tools
from bundler.platforms.windows.msi_cabinets import (
    CABINET_BYTES,
    EMBEDDED_NAME,
    Layout,
    file_hash_parts,
    single,
    split,
    too_large,
    write_cabinets,
)
from bundler.platforms.windows.msi_source import (
    CODEPAGE_TABLE,
    LOCK_TABLE,
    NAMESPACE,
    SET_PROPERTY,
    MsiProduct,
    braced,
    check_text,
    guid,
    identifier,
    installdir_checks,
    planted_file_check,
    product_version,
    upgrade_table,
    wxs,
)
from bundler.platforms.windows.msi_summary import fix_summary
from bundler.readers.pe_identity import file_version
from bundler.runner import run
from bundler.shipped.ort_bundle.bundle_info import BundleInfo
from bundler.shipped.ort_bundle.records import PLAN_FILE, RECEIPT_FILE, InstallPlan, Receipt

#: The files whose version resource the File table carries.
PE_SUFFIXES = (".dll", ".pyd", ".exe")


@dataclass(frozen=True, kw_only=True)
class Msi:
    path: Path
    size: int
    sha256: str
    product: MsiProduct
    package_code: str
    files: int  # files the MSI installs
    signer: str | None = None  # the Authenticode signer's subject, when signed
    cabinets: tuple[CabinetFile, ...] = ()  # the external cabinets, beside the MSI: shipped with it, in its folder

    def to_json(self) -> dict[str, object]:
        return {"path": str(self.path), "size": self.size, "sha256": self.sha256, "files": self.files,
                "cabinets": [cabinet.to_json() for cabinet in self.cabinets],
                "product_code": self.product.product_code, "upgrade_code": self.product.upgrade_code,
                "package_code": self.package_code, "product_version": self.product.product_version,
                "signer": self.signer,
                "install_command": f'msiexec /i "{self.path.name}" /qn /norestart',
                "uninstall_command": f"msiexec /x {self.product.product_code} /qn /norestart"}


@dataclass(frozen=True)
class CabinetFile:
    """An external cabinet the MSI's Media table names: Windows Installer reads it from the MSI's own folder."""

    path: Path
    size: int
    sha256: str

    def to_json(self) -> dict[str, object]:
        return {"path": str(self.path), "size": self.size, "sha256": self.sha256}


def tool(name: str, *, purpose: str = "package --msi") -> str:
    """The path of one of the MSI work's outside programs (bundler/integrations/tools.py), or one sentence."""
    return tools.find(tools.TOOLS[name], purpose, runner=run)


def build_msi(bundle: Path, info: BundleInfo, work: Path, output: Path, *, epoch: int,
              cabinet_bytes: int = CABINET_BYTES) -> Msi:
    """The MSI of the unpacked, verified `bundle` at `output`, its external cabinets (if any) beside it; `work` is an
    empty folder for the image. `cabinet_bytes`: the most uncompressed bytes per cabinet."""
    bundle, work, output = bundle.resolve(), work.resolve(), output.resolve()  # the tools run in other folders
    plan = InstallPlan.loads((bundle / PLAN_FILE).read_text(encoding="utf-8"), source=f"{bundle.name}/{PLAN_FILE}")
    if not plan.venv.runtime:
        msg = (f"{info.name} {info.version} runs on the target's own Python, so its installed tree depends on that "
               f"machine; an MSI needs a bundle that carries its interpreter: add [python] runtime to the manifest")
        raise UnsupportedError(msg)
    product = msi_product(info, plan, bundle_sha256="0" * 64, receipt=b"", source=f"{bundle.name}/bundle.json")
    check_text(product, [])  # before the image is made: the publisher or name alone refuses at once
    tool("wixl"), tool("msibuild"), tool("gcab")  # and a missing tool
    check_image_files(bundle, plan, limit=cabinet_bytes)  # a file no cabinet holds: refused before the image
    image = work / "image"
    receipt = make_image(bundle, image, plan, epoch=epoch, work=work)
    product = msi_product(info, plan, bundle_sha256=receipt.bundle_sha256, receipt=(image / RECEIPT_FILE).read_bytes(),
                          source=f"{bundle.name}/bundle.json")
    files = sorted(image_files(receipt))  # the File table's sequence
    split([(path, (image / path).stat().st_size) for path in files], limit=cabinet_bytes)  # and made by the engine
    _date_files(image, files, epoch)
    code = package_code(product, (image / RECEIPT_FILE).read_bytes())
    external = write_msi(product, files, image=image, output=output, work=work, epoch=epoch, package_code=code,
                         cabinet_bytes=cabinet_bytes)
    return Msi(path=output, size=output.stat().st_size, sha256=file_sha256(output), product=product,
               package_code=code, files=len(files), cabinets=external)


def write_msi(product: MsiProduct, files: list[str], *, image: Path, output: Path, work: Path, epoch: int,
              package_code: str, cabinet_bytes: int = CABINET_BYTES) -> tuple[CabinetFile, ...]:
    """The MSI of `files` (sequence order, dated) of a made `image` at `output`: the cabinets, the tables, the
    small cabinet embedded, the summary; the external cabinets, moved beside `output`."""
    from concurrent.futures import Future, ThreadPoolExecutor

    # gcab compresses on one core; the files' versions and MD5s, and each written cabinet's sha256, are read on
    # another meanwhile (hashlib releases the GIL), one at a time.
    with ThreadPoolExecutor(max_workers=1) as pool:
        facts = pool.submit(file_facts, image, files)
        digests: dict[Path, Future[str]] = {}
        layout, written = write_cabinets(
            image, files, work / "cabinets", stem=package_code[1:6], limit=cabinet_bytes,
            keys={path: identifier("f", path) for path in files}, gcab=tool("gcab"),
            on_written=lambda path: digests.setdefault(path, pool.submit(file_sha256, path)))
        write_database(product, files, image=image, output=output, work=work, layout=layout, facts=facts.result())
        for cabinet in layout.cabinets:
            if cabinet.embedded:
                _run([tool("msibuild"), str(output), "-a", cabinet.name, str(written[cabinet.name])], cwd=work,
                     what="msibuild")
        fix_summary(output, package_code=package_code, epoch=epoch)
        external = []
        for cabinet in layout.external:
            beside = output.with_name(cabinet.name)
            sha256 = digests[written[cabinet.name]].result()
            os.replace(written[cabinet.name], beside)
            external.append(CabinetFile(path=beside, size=beside.stat().st_size, sha256=sha256))
    return tuple(external)


def check_image_files(bundle: Path, plan: InstallPlan, *, limit: int) -> None:
    """Refuse, before the image is made, a file of the image that no cabinet of `limit` bytes holds: the wheels'
    members (as their central directories say) and the files copied as they are."""
    import zipfile

    for wheel in plan.venv.wheels:
        with zipfile.ZipFile(bundle / wheel) as archive:
            for member in archive.infolist():
                if member.file_size > limit:
                    raise too_large(f"{member.filename} (from {PurePosixPath(wheel).name})", member.file_size, limit)
    for entry in (*plan.copy, *plan.venv.runtime, *plan.venv.site_packages_files):
        size = (bundle / entry.source).stat().st_size
        if size > limit:
            raise too_large(entry.source, size, limit)


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
                   purpose: str = "package --msi", layout: Layout | None = None, facts: FileFacts | None = None) -> None:
    """Every table of the MSI at `output` for `files` of `image`, in the cabinets `layout` says (by default one
    embedded cabinet), without the cabinets themselves (write_cabinets): the .wxs, wixl on empty stand-ins of
    the files, then msibuild for what wixl cannot author. `package` writes an MSI with this and `verify` rebuilds
    one with it to compare every table, so there is one description of what an MSI of ours holds."""
    wixl, msibuild = tool("wixl", purpose=purpose), tool("msibuild", purpose=purpose)
    layout = layout or single(sorted(files))
    source = work / "product.wxs"
    size = sum((image / relative).stat().st_size for relative in files)
    source.write_text(wxs(product, files, estimated_kb=-(-size // 1024)), encoding="utf-8")
    stand_ins = work / "stand-ins"  # wixl reads each file whole to hash it and packs them in memory: none here
    for relative in files:
        (stand_ins / relative).parent.mkdir(parents=True, exist_ok=True)
        (stand_ins / relative).write_bytes(b"")
    _run([wixl, "-a", "x64", "-o", str(output), str(source)], cwd=stand_ins, what="wixl")
    shutil.rmtree(stand_ins)
    tables = work / "tables"
    tables.mkdir(exist_ok=True)
    exported = subprocess.run([tool("msiinfo", purpose=purpose), "export", str(output), "File"], capture_output=True,
                              check=True).stdout.decode("utf-8")
    versions, hashes = facts or file_facts(image, files)
    for name, text in (("File", file_table(exported, image, layout, versions)),
                       ("MsiFileHash", hash_table(hashes)), ("Media", media_table(layout))):
        with open(tables / f"{name}.idt", "w", encoding="utf-8", newline="") as idt:
            idt.write(text)
        _run([msibuild, str(output), "-i", str(tables / f"{name}.idt")], cwd=work, what="msibuild")
    _run([msibuild, str(output), "-q", f"DELETE FROM `_Streams` WHERE `Name` = '{EMBEDDED_NAME}'"], cwd=work,
         what="msibuild")  # wixl's cabinet of the stand-ins
    secure = ";".join(("INSTALLDIR", "CACHEDIR", "NOSELFCHECK", "NEWER_VERSION_FOUND", "OLDER_VERSION_FOUND"))
    _run([msibuild, str(output), "-q",
          f"UPDATE `Property` SET `Value` = '{secure}' WHERE `Property` = 'SecureCustomProperties'"],
         cwd=work, what="msibuild")
    # wixl's type-51 actions carry a deferred action's NoImpersonate bit (msi_source's docstring, The install folder)
    _run([msibuild, str(output), "-q",
          f"UPDATE `CustomAction` SET `Type` = {SET_PROPERTY} WHERE `Type` = {SET_PROPERTY | 0x800}"],
         cwd=work, what="msibuild")
    for check in (*installdir_checks(files), *planted_file_check()):
        for query in check.queries():
            _run([msibuild, str(output), "-q", query], cwd=work, what="msibuild")
    for name, text in (("MsiLockPermissionsEx", LOCK_TABLE), ("_ForceCodepage", CODEPAGE_TABLE),
                       ("Upgrade", upgrade_table(product))):
        with open(tables / f"{name}.idt", "w", encoding="ascii", newline="") as idt:
            idt.write(text)
        _run([msibuild, str(output), "-i", str(tables / f"{name}.idt")], cwd=work, what="msibuild")


def file_table(exported: str, image: Path, layout: Layout, versions: dict[str, str]) -> str:
    """wixl's File table (an .idt from `msiinfo export`) with each file's real size, its version and its sequence
    in `layout`; wixl's own columns (the component, the short|long name, the attributes) as they were."""
    lines = exported.split("\r\n")
    columns = lines[0].split("\t")
    paths = {identifier("f", path): path for path in layout.sequences()}
    sequences = layout.sequences()
    rows = []
    for line in lines[3:]:
        if not line:
            continue
        row = dict(zip(columns, line.split("\t")))
        path = paths[row["File"]]
        row.update(FileSize=str((image / path).stat().st_size), Version=versions.get(path, ""),
                   Sequence=str(sequences[path]))
        rows.append("\t".join(row[column] for column in columns))
    return "\r\n".join([*lines[:3], *rows]) + "\r\n"


#: (each PE file's version, each unversioned file's MD5 as MsiFileHash's four numbers)
FileFacts = tuple[dict[str, str], dict[str, tuple[int, int, int, int]]]


def file_facts(image: Path, files: Sequence[str]) -> FileFacts:
    """What the File and MsiFileHash tables say of each file beyond its size: its version, or else its MD5."""
    versions = file_versions(image, list(files))
    return versions, {path: file_hash_parts(image / path) for path in files if path not in versions}


def hash_table(hashes: dict[str, tuple[int, int, int, int]]) -> str:
    """MsiFileHash: the MD5 of every unversioned file (Windows Installer compares versions for the others)."""
    rows = [f"{identifier('f', path)}\t0\t" + "\t".join(map(str, hashes[path])) for path in sorted(hashes)]
    return ("File_\tOptions\tHashPart1\tHashPart2\tHashPart3\tHashPart4\r\n"
            "s72\ti2\ti4\ti4\ti4\ti4\r\n"
            "MsiFileHash\tFile_\r\n" + "".join(f"{row}\r\n" for row in rows))


def media_table(layout: Layout) -> str:
    """The Media table: one disk per cabinet, `#name` for the embedded one (a stream), the file name otherwise."""
    rows = [f"{disk}\t{cabinet.last_sequence}\t\t{'#' if cabinet.embedded else ''}{cabinet.name}\t\t"
            for disk, cabinet in enumerate(layout.cabinets, start=1)]
    return ("DiskId\tLastSequence\tDiskPrompt\tCabinet\tVolumeLabel\tSource\r\n"
            "i2\ti4\tL64\tS255\tS32\tS72\r\n"
            "Media\tDiskId\r\n" + "".join(f"{row}\r\n" for row in rows))


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
