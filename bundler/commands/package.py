"""`ort-bundler package BUNDLE.zip --msi --intunewin -o DIR`: a Windows bundle as the packages Intune and
ConfigMgr take.

The bundle is verified exactly as `ort-bundler verify` verifies it (one that fails is never packaged), unpacked
(`bundler.signing.layout.unpack`, which keeps every member inside its folder) and wrapped:

- `DIR/<name>-<version>-win_amd64.msi` (--msi): the bundle's install image as an MSI (bundler/platforms/windows/msi.py);
- `DIR/<name>-<version>-win_amd64.intunewin`: that MSI as the setup file, or without --msi the unpacked bundle
  with install.cmd as the setup file;
- `DIR/<name>-<version>-vcredist-x64.intunewin`: when the bundle ships VC_redist.x64.exe, that file alone, to be
  the app's dependency in Intune;

each with its `.sha256`, and the Win32 app settings of each (commands, return codes, detection rules,
requirements, dependencies) in `--json`. Everything is made in a hidden folder inside DIR and moved into place
only once every output is complete, so a run that fails leaves DIR as it was. Free space on DIR's file system is
checked before each stage that writes much (unpacking, the MSI's image and package, the .intunewin), against
what the bundle's own member and wheel sizes say the stage writes: a bundle whose members inflate 1000:1 is
refused with exit 7 before it fills the disk.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from bundler.commands.shared import (
    add_signing_options,
    cache_of,
    check_output_folder,
    output_staging,
    signing_options,
)
from bundler.errors import BuildError, UnsupportedError, UsageError, VerificationError

if TYPE_CHECKING:
    from bundler.platforms.windows.intunewin import Intunewin
    from bundler.platforms.windows.msi import Msi
    from bundler.platforms.windows.win32app import Win32App
    from bundler.shipped.ort_bundle.bundle_info import BundleInfo
    from bundler.signing.bundle import SignOptions
    from bundler.signing.layout import Unpacked
    from bundler.sources.cache import Cache
    from bundler.writer.members import MemberCache

NAME = "package"
HELP = "wrap a verified Windows bundle for Intune and ConfigMgr: an MSI and .intunewin packages"
EXAMPLES = """examples:
  ort-bundler package dist/app-1.0.0-win_amd64.zip --msi -o packages/
  ort-bundler package dist/app-1.0.0-win_amd64.zip --msi --intunewin -o intune/ --json
  ort-bundler package dist/app-1.0.0-win_amd64.zip --intunewin -o intune/
  ort-bundler package signed/app-1.0.0-win_amd64.zip --intunewin -o intune/ --json
the inner zip of a .intunewin is byte-identical for the same bundle (its sha256 is reported); the file itself
differs on every run, because Intune's format encrypts it with fresh random keys"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path, help="a win_amd64 bundle zip (as `build` or `sign` wrote it)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="output folder")
    parser.add_argument("--intunewin", action="store_true",
                        help="write <name>-<version>-win_amd64.intunewin (install.cmd as the setup file) and, "
                             "when the bundle ships VC_redist.x64.exe, <name>-<version>-vcredist-x64.intunewin")
    parser.add_argument("--msi", action="store_true",
                        help="write <name>-<version>-win_amd64.msi (bundles with [python] runtime; needs wixl and "
                             "msitools); with --intunewin the .intunewin wraps the MSI")
    parser.add_argument("--cabinet-bytes", type=int, default=None, metavar="N",
                        help="the MSI's cabinets hold at most N uncompressed bytes each (default and most "
                             "2,000,000,000); past one cabinet of 128 MiB they are files beside the MSI (such as "
                             "9438D001.cab), to ship in the MSI's folder")
    add_signing_options(parser)
    parser.add_argument("--json", action="store_true",
                        help="print every output (path, size, sha256, inner zip) and its Win32 app settings as JSON")


def run(args: argparse.Namespace) -> int:
    if not args.intunewin and not args.msi:
        msg = "found no package format, expected --msi, --intunewin or both"
        raise UsageError(msg)
    if not args.msi and any((args.cert, args.key, args.pkcs12, args.signer, args.chain, args.timestamp_url)):
        msg = "the signing options sign the MSI: give --msi (sign the bundle itself with `ort-bundler sign`)"
        raise UsageError(msg)
    signing = signing_options(args)
    cabinet_bytes = _cabinet_bytes(args)
    result = package_bundle(args.bundle, args.output, cache=cache_of(args), msi=args.msi, intunewin=args.intunewin,
                            signing=signing, cabinet_bytes=cabinet_bytes,
                            say=None if args.quiet or args.json else say_stage)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    elif not args.quiet:
        if result.msi is not None:
            print(f"wrote {result.msi.path} ({result.msi.size:,} bytes, {result.msi.files:,} files), product code "
                  f"{result.msi.product.product_code}, upgrade code {result.msi.product.upgrade_code}")
            for cabinet in result.msi.cabinets:
                print(f"wrote {cabinet.path} ({cabinet.size:,} bytes): ship it in the MSI's folder")
        for package in result.packages:
            print(f"wrote {package.intunewin.path} ({package.intunewin.size:,} bytes), setup file "
                  f"{package.intunewin.setup_file}\n  inner zip sha256 {package.intunewin.inner_sha256} "
                  f"({package.intunewin.inner_size:,} bytes)")
    return 0


def _cabinet_bytes(args: argparse.Namespace) -> int:
    """--cabinet-bytes, checked before anything is read (it only means something with --msi)."""
    from bundler.platforms.windows.msi_cabinets import CABINET_BYTES, check_limit

    if args.cabinet_bytes is None:
        return CABINET_BYTES
    if not args.msi:
        msg = "--cabinet-bytes sizes the MSI's cabinets: give --msi"
        raise UsageError(msg)
    return check_limit(args.cabinet_bytes)


@dataclass(frozen=True, kw_only=True)
class Package:
    """One `.intunewin` written, and the Win32 app settings it is uploaded with."""

    role: str  # "app" or "vc_redist"
    intunewin: Intunewin
    app: Win32App

    def to_json(self) -> dict[str, object]:
        return {"role": self.role, **self.intunewin.to_json(), "win32_app": self.app.to_json()}


@dataclass(frozen=True, kw_only=True)
class Packaged:
    bundle: Path
    msi: Msi | None
    packages: tuple[Package, ...]

    def to_json(self) -> dict[str, object]:
        return {"bundle": str(self.bundle), "msi": self.msi.to_json() if self.msi else None,
                "packages": [p.to_json() for p in self.packages]}


def say_stage(text: str) -> None:
    """One line on stderr as each long stage of `package` starts (a GB bundle takes minutes; stdout is the result's)."""
    print(f"package: {text}", file=sys.stderr, flush=True)


def package_bundle(bundle: Path, out: Path, *, cache: Cache, msi: bool = False, intunewin: bool = True,
                   signing: SignOptions | None = None, cabinet_bytes: int | None = None,
                   say: Callable[[str], None] | None = None) -> Packaged:
    """Verify `bundle`, refuse one that is not for Windows, and write its packages into `out` (all or none).

    `say`, when given, hears each long stage as it starts (`say_stage` prints it: quiet and `--json` runs pass
    none)."""
    from bundler.signing.layout import unpack
    from bundler.signing.verify import verify_bundle
    from bundler.sources.progress import human
    from bundler.writer.members import MemberCache

    say = say or _silent
    check_output_folder(out)
    say(f"verifying {bundle.name}")
    report = verify_bundle(bundle, cache=cache)
    if not report.ok:
        msg = (f"{bundle.name} does not verify ({'; '.join(report.findings()[:3])}); nothing was packaged: run "
               f"`ort-bundler verify {bundle}` and package an intact bundle")
        raise VerificationError(msg)
    member_cache = MemberCache(cache.work_dir("members"))
    with zipfile.ZipFile(bundle) as archive, output_staging(out) as staging:
        top = archive.namelist()[0].split("/", 1)[0]
        wanted = frozenset(name for name, asked in (("msi", msi), ("intunewin", intunewin)) if asked)
        info = _packageable(bundle, archive, top, formats=wanted)
        inflated = sum(member.file_size for member in archive.infolist() if not member.is_dir())
        _check_room(bundle.name, out, [Stage("unpacking the bundle", inflated)]
                    + ([Stage("writing the .intunewin packages", 2 * inflated + MARGIN)] if intunewin and not msi else []))
        say(f"unpacking {human(inflated)}")
        unpacked = unpack(archive, top, staging / "bundle" / top)
        if msi:
            say(f"building the MSI from {human(inflated)}" + (" and signing it" if signing else ""))
        built = _msi(info, unpacked, staging, signing, intunewin=intunewin, cabinet_bytes=cabinet_bytes) if msi else None
        if intunewin:
            say("writing the .intunewin packages" + (" of the MSI" if built else ""))
        packages = _intunewins(info, unpacked, staging, member_cache=member_cache, msi=built) if intunewin else []
        return Packaged(bundle=bundle, msi=_publish_msi(built, out) if built else None,
                        packages=tuple(_publish(p, out) for p in packages))


def _silent(text: str) -> None:
    """No stage lines (a quiet or `--json` run)."""


#: What a stage may write beyond its estimate (zip headers, Detection.xml, the receipt, wixl's tables).
MARGIN = 16 << 20


@dataclass(frozen=True)
class Stage:
    what: str  # as the message names it
    size: int  # the bytes it may write into the output folder's file system


def _check_room(bundle: str, out: Path, stages: list[Stage]) -> None:
    """Refuse, in one line, before a stage writes, when the output folder's file system cannot hold it: the rule
    and the wording are the install engine's (bundler/shipped/ort_bundle/engine/disk_space.py)."""
    from bundler.shipped.ort_bundle.engine.disk_space import Need, shortfalls

    problems = shortfalls([Need(out, stage.size, stage.what) for stage in stages])
    if problems:
        msg = (f"{bundle} cannot be packaged in {out}: {'; '.join(problems)}; free space there or choose "
               f"another -o folder (nothing was written)")
        raise BuildError(msg)


def _packageable(bundle: Path, archive: zipfile.ZipFile, top: str, *, formats: frozenset[str]) -> BundleInfo:
    """The bundle's own record, and only for a target whose backend offers every package format asked for
    (Intune and its packages are Windows')."""
    from bundler.platforms.backends import BACKENDS
    from bundler.shipped.ort_bundle.bundle_info import BUNDLE_FILE, BundleInfo, BundleInfoError

    try:
        info = BundleInfo.from_json(json.loads(archive.read(f"{top}/{BUNDLE_FILE}")), source=f"{bundle.name}: "
                                    f"{BUNDLE_FILE}")
    except BundleInfoError as exc:
        msg = f"{exc}; package reads the bundles of this ort-bundler version: rebuild the bundle with it"
        raise UnsupportedError(msg) from None
    backend = BACKENDS.get(info.platform)
    if backend is None or not formats <= backend.package_formats:
        able = " or ".join(tag for tag, other in BACKENDS.items() if formats <= other.package_formats)
        msg = (f"{bundle.name}: a bundle for {info.platform}, expected one for {able}: Intune packages wrap "
               "Windows bundles only")
        raise UnsupportedError(msg)
    return info


def _msi(info: BundleInfo, unpacked: Unpacked, staging: Path, signing: SignOptions | None, *,
         intunewin: bool, cabinet_bytes: int | None = None) -> Msi:
    """The MSI of the bundle unpacked in `staging/bundle` (signed when `signing` says how), its external cabinets
    and its `.sha256` (a line for each of them, as `sha256sum -c` reads it), in `staging/out`."""
    from bundler.atomic import write_atomic
    from bundler.platforms.windows.msi import build_msi, image_bytes, missing_upgrade_code, signed
    from bundler.platforms.windows.msi_cabinets import CABINET_BYTES
    from bundler.shipped.ort_bundle.records import PLAN_FILE, InstallPlan
    from bundler.signing.bundle import sign_msi

    folder = staging / "bundle" / unpacked.top
    plan = InstallPlan.loads((folder / PLAN_FILE).read_text(encoding="utf-8"), source=f"{unpacked.top}/{PLAN_FILE}")
    image = image_bytes(folder, plan)
    # The image, the MSI (its cabinet holds no more than the image) and, with --intunewin, its package (the inner
    # zip and its encrypted copy): all on the output folder's file system.
    _check_room(f"{unpacked.top}.zip", staging.parent, [Stage("making the MSI's install image", image),
                                                        Stage("writing the MSI", image + MARGIN)]
                + ([Stage("writing its .intunewin package", 2 * image + MARGIN)] if intunewin else []))
    work, out = staging / "msi-work", staging / "out"
    work.mkdir()
    out.mkdir(exist_ok=True)
    built = build_msi(staging / "bundle" / unpacked.top, info, work, out / f"{info.name}-{info.version}-{info.platform}"
                      ".msi", epoch=unpacked.epoch, cabinet_bytes=cabinet_bytes or CABINET_BYTES)
    if signing is not None:
        unsigned = built.path.rename(work / built.path.name)
        signer = sign_msi(unsigned, built.path, options=signing, work=work / "signing", epoch=unpacked.epoch)
        built = signed(built, signer=signer)
    sums = "".join(f"{sha256}  {path.name}\n" for path, sha256 in ((built.path, built.sha256),
                                                                   *((c.path, c.sha256) for c in built.cabinets)))
    write_atomic(built.path.with_name(built.path.name + ".sha256"), sums.encode())
    shutil.rmtree(work)
    if warning := missing_upgrade_code(info):  # said once the MSI exists: a refusal stays one sentence
        logging.getLogger("bundler").warning("warning: %s", warning)
    return built


def _intunewins(info: BundleInfo, unpacked: Unpacked, staging: Path, *, member_cache: MemberCache,
                msi: Msi | None) -> list[Package]:
    """Every package of the bundle unpacked in `staging/bundle` (or of its MSI), written to `staging/out`."""
    from bundler.platforms.windows.intunewin import MsiInfo, write_intunewin
    from bundler.platforms.windows.win32app import bundle_app, msi_app

    folder, out = staging / "bundle" / unpacked.top, staging / "out"
    vc = _vc_redist_package(info, unpacked, staging, member_cache=member_cache)
    payload = sum(file.path.stat().st_size for file in unpacked.files.values())
    vc_name = vc.intunewin.path.name if vc else None
    target = out / f"{info.name}-{info.version}-{info.platform}.intunewin"
    if msi is None:
        app = bundle_app(info, payload_bytes=payload, vc_redist_package=vc_name)
        wrapped = write_intunewin(folder, app.setup_file, target, name=app.display_name, epoch=unpacked.epoch,
                                  member_cache=member_cache)
    else:
        app = msi_app(info, msi_file=msi.path.name, product_code=msi.product.product_code, payload_bytes=payload,
                      vc_redist_package=vc_name)
        described = MsiInfo(product_code=msi.product.product_code, product_version=msi.product.product_version,
                            upgrade_code=msi.product.upgrade_code, package_code=msi.package_code,
                            publisher=msi.product.publisher, contains_system_registry_keys=True)
        wrapped = write_intunewin(files_folder([msi.path, *(c.path for c in msi.cabinets)], staging / "msi"),
                                  msi.path.name, target,
                                  name=app.display_name, epoch=unpacked.epoch, member_cache=member_cache, msi=described)
    return [Package(role="app", intunewin=wrapped, app=app), *([vc] if vc else [])]


def _vc_redist_package(info: BundleInfo, unpacked: Unpacked, staging: Path, *,
                       member_cache: MemberCache) -> Package | None:
    """The bundle's VC_redist.x64.exe wrapped on its own, when the bundle ships one."""
    from bundler.platforms.windows.intunewin import write_intunewin
    from bundler.platforms.windows.win32app import vc_redist_app

    if info.vc_redist is None:
        return None
    listed = unpacked.files.get(str(info.vc_redist["file"]))
    if listed is None:
        msg = f"bundle.json: vc_redist names {info.vc_redist['file']!r}, which the bundle does not hold"
        raise VerificationError(msg)
    folder = single_file_folder(listed.path, staging / "vc_redist")
    version = str(info.vc_redist["version"])
    app = vc_redist_app(setup_file=listed.path.name, version=version, minimum=info.vc_runtime_min or version)
    wrapped = write_intunewin(folder, app.setup_file, staging / "out" / f"{info.name}-{info.version}-vcredist-x64"
                              ".intunewin", name=app.display_name, epoch=unpacked.epoch, member_cache=member_cache)
    return Package(role="vc_redist", intunewin=wrapped, app=app)


def single_file_folder(file: Path, folder: Path) -> Path:
    """A new `folder` holding only `file` (linked, else copied): a setup folder is packaged whole, so a setup
    file that lives among others (VC_redist in the bundle, an MSI beside its build files) gets a folder of its
    own."""
    return files_folder([file], folder)


def files_folder(files: list[Path], folder: Path) -> Path:
    """A new `folder` holding only `files` (linked, else copied): an MSI and the cabinets it reads from its own
    folder go into its .intunewin together."""
    from bundler.atomic import link_or_copy

    folder.mkdir()
    for file in files:
        link_or_copy(file, folder / file.name)
    return folder


def _publish_msi(built: Msi, out: Path) -> Msi:
    """Move the cabinets, the MSI and then its `.sha256` into `out`."""
    cabinets = tuple(replace(cabinet, path=out / cabinet.path.name) for cabinet in built.cabinets)
    for cabinet, moved in zip(built.cabinets, cabinets):
        os.replace(cabinet.path, moved.path)
    final = replace(built, path=out / built.path.name, cabinets=cabinets)
    os.replace(built.path, final.path)
    os.replace(built.path.with_name(built.path.name + ".sha256"), final.path.with_name(final.path.name + ".sha256"))
    return final


def _publish(package: Package, out: Path) -> Package:
    """Move one output and then its `.sha256` into `out`: the sidecar never names a file not yet there."""
    wrapped = package.intunewin
    final = replace(wrapped, path=out / wrapped.path.name, sha256_file=out / wrapped.sha256_file.name)
    os.replace(wrapped.path, final.path)
    os.replace(wrapped.sha256_file, final.sha256_file)
    return replace(package, intunewin=final)
