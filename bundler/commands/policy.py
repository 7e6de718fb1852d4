"""`ort-bundler policy BUNDLE.zip|APP.msi --wdac --applocker -o DIR`: the App Control (WDAC) and AppLocker
policies that let a locked-down fleet run what the install puts on disk.

Under a signed-only policy `import numpy` fails (its `.pyd` files and OpenBLAS DLL are unsigned), and so does
ORT. Admins then allow-list by hash, by hand, every release. The bundle knows every binary the install writes:
this command names each one in a rule (bundler/platforms/windows/app_control.py) and says which rule in a report.

The input is checked first, as `package` checks it: a bundle must verify (`verify`), an MSI must verify
against its receipt (and its signature with `--trust`). A policy never allows a file nobody checked.

Outputs, written in a hidden folder inside DIR and moved into place once all are complete:
`<name>-<version>-appcontrol-supplemental.xml` (--wdac, for the base policy `--base-policy-id` names),
`<name>-<version>-appcontrol-base.xml` (--wdac-base: the same rules as a base policy, for Merge-CIPolicy),
`<name>-<version>-applocker.xml` (--applocker) and `<name>-<version>-policy-report.txt` (every file, its signer
or hash, and its rule; `--json` prints it as data).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bundler.commands.shared import cache_of, check_output_folder, output_staging
from bundler.errors import UnsupportedError, UsageError, VerificationError

if TYPE_CHECKING:
    from bundler.platforms.windows.app_control import PolicyOptions, Rule, Uncovered
    from bundler.platforms.windows.install_files import InstallFiles
    from bundler.readers.pe_identity import PeIdentity
    from bundler.shipped.ort_bundle.bundle_info import BundleInfo
    from bundler.sources.cache import Cache

NAME = "policy"
HELP = "write App Control (WDAC) and AppLocker policies for every binary a Windows bundle installs"
EXAMPLES = """examples:
  ort-bundler policy dist/app-1.0.0-win_amd64.zip --wdac --base-policy-id {A244370E-44C9-4C06-B551-F6016E563076} -o policies/
  ort-bundler policy dist/app-1.0.0-win_amd64.zip --applocker --sid S-1-5-32-545 -o policies/
  ort-bundler policy packages/app-1.0.0-win_amd64.msi --trust our-root-ca.pem --wdac-base --applocker -o policies/ --json
signed files with a version resource get publisher rules, every other file a rule by its Authenticode SHA-256
hash; the report names each file and its rule, and any file no rule can name before it exists (and why)"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path, help="a win_amd64 bundle zip, or the MSI `package --msi` wrote")
    parser.add_argument("-o", "--output", type=Path, required=True, help="output folder")
    parser.add_argument("--wdac", action="store_true",
                        help="write an App Control supplemental policy (needs --base-policy-id)")
    parser.add_argument("--base-policy-id", metavar="GUID",
                        help="the PolicyID of the App Control base policy the supplemental policy extends")
    parser.add_argument("--wdac-base", action="store_true",
                        help="write the same rules as an App Control base policy, to merge with Merge-CIPolicy")
    parser.add_argument("--applocker", action="store_true", help="write an AppLocker policy (Exe and Dll rules)")
    parser.add_argument("--sid", default="S-1-1-0",
                        help="the user or group the AppLocker rules apply to (default S-1-1-0, Everyone)")
    parser.add_argument("--trust", type=Path, metavar="CA.pem",
                        help="anchors the bundle's or MSI's signature must chain to (an unsigned input then fails)")
    parser.add_argument("--json", action="store_true", help="print the report (every file and its rule) as JSON")


@dataclass(frozen=True, kw_only=True)
class Written:
    paths: tuple[Path, ...]
    report: dict[str, object]


def run(args: argparse.Namespace) -> int:
    if not (args.wdac or args.wdac_base or args.applocker):
        msg = "found no policy format, expected --wdac, --wdac-base, --applocker or several"
        raise UsageError(msg)
    if args.wdac and not args.base_policy_id:
        msg = ("--wdac writes a supplemental policy, which needs the base policy it extends: give --base-policy-id "
               "GUID (or --wdac-base for a base policy of these rules alone)")
        raise UsageError(msg)
    written = write_policies(args.bundle, args.output, cache=cache_of(args), trust=args.trust,
                             formats=frozenset(f for f in ("wdac", "wdac_base", "applocker") if getattr(args, f)),
                             base_policy_id=args.base_policy_id, sid=args.sid)
    if args.json:
        print(json.dumps(written.report, indent=2))
    elif not args.quiet:
        for path in written.paths:
            print(f"wrote {path}")
    return 0


def write_policies(bundle: Path, out: Path, *, cache: Cache, trust: Path | None, formats: frozenset[str],
                   base_policy_id: str | None, sid: str) -> Written:
    from bundler.platforms.windows.app_control import PolicyOptions, applocker_policy, rules_for, wdac_policy

    check_output_folder(out)
    with output_staging(out) as staging:
        name, version, found = _install_files(bundle, staging, cache=cache, trust=trust)
        options = PolicyOptions(name=name, version=version, base_policy_id=base_policy_id, sid=sid)
        identities = _identities(found)
        rules = rules_for(identities)
        report = policy_report(bundle, options, rules, found.uncovered)
        stem = f"{name}-{version}"
        outputs = {f"{stem}-policy-report.txt": report_text(report).encode()}
        if "wdac" in formats:
            outputs[f"{stem}-appcontrol-supplemental.xml"] = wdac_policy(rules, options, base=False)
        if "wdac_base" in formats:
            outputs[f"{stem}-appcontrol-base.xml"] = wdac_policy(rules, options, base=True)
        if "applocker" in formats:
            outputs[f"{stem}-applocker.xml"] = applocker_policy(rules, options)
        ready = staging / "out"
        ready.mkdir()
        for file_name, data in outputs.items():
            (ready / file_name).write_bytes(data)
        for file_name in sorted(outputs):
            os.replace(ready / file_name, out / file_name)
    return Written(paths=tuple(out / n for n in sorted(outputs)), report=report)


def policy_report(bundle: Path, options: PolicyOptions, rules: tuple[Rule, ...],
                  uncovered: tuple[Uncovered, ...]) -> dict[str, object]:
    """The report's data: every file's rule, and what no rule covers (the Authenticode readers load only here: the
    parser of every command imports this module)."""
    from bundler.platforms.windows.app_control import rule_ids, why_hash

    ids = rule_ids(rules, options)
    files = []
    for rule in rules:
        for identity in rule.files:
            wdac_id, applocker_id = ids[identity.path]
            publisher = identity.publisher
            files.append({
                "path": identity.path, "authenticode_sha256": identity.authenticode_sha256, "size": identity.size,
                "signer": publisher.leaf_name if publisher else None,
                "issuing_ca": publisher.ca_name if publisher else None,
                "original_filename": identity.original_filename, "file_version": identity.file_version,
                "level": rule.level, "why_hash": why_hash(identity) if rule.level == "hash" else None,
                "appcontrol_rule": wdac_id, "applocker_rule": applocker_id, "applocker_collection": rule.collection})
    return {"bundle": str(bundle), "name": options.name, "version": options.version,
            "files": sorted(files, key=lambda f: str(f["path"])),
            "not_covered": [{"path": u.path, "reason": u.reason} for u in uncovered]}


def report_text(report: dict[str, object]) -> str:
    files = report["files"]
    uncovered = report["not_covered"]
    assert isinstance(files, list) and isinstance(uncovered, list)
    lines = [f"App Control and AppLocker rules for {report['name']} {report['version']}: {len(files)} PE files, "
             f"{sum(f['level'] == 'publisher' for f in files)} by publisher, "
             f"{sum(f['level'] == 'hash' for f in files)} by Authenticode SHA-256 hash", ""]
    for entry in files:
        how = (f"publisher {entry['signer']} via {entry['issuing_ca']}, {entry['original_filename']} "
               f">= {entry['file_version']}" if entry["level"] == "publisher"
               else f"hash {entry['authenticode_sha256']} ({entry['why_hash']})")
        lines.append(f"{entry['path']}\n  {how}\n  App Control {entry['appcontrol_rule']}, "
                     f"AppLocker {entry['applocker_collection']} {entry['applocker_rule']}")
    if uncovered:
        lines += ["", "Not covered (no rule can name these before the install writes them):"]
        lines += [f"{u['path']}\n  {u['reason']}" for u in uncovered]
    return "\n".join(lines) + "\n"


def _install_files(bundle: Path, staging: Path, *, cache: Cache, trust: Path | None) -> tuple[str, str, InstallFiles]:
    """The bundle's (or MSI's) name, version and the PE files its install writes, once the input verified."""
    if bundle.suffix.lower() == ".msi":
        return _msi_files(bundle, staging, trust=trust)
    from bundler.platforms.windows.install_files import image_files, planned_files
    from bundler.platforms.windows.msi import make_image
    from bundler.shipped.ort_bundle.engine.image import relocatable
    from bundler.shipped.ort_bundle.records import PLAN_FILE, InstallPlan
    from bundler.signing.layout import unpack
    from bundler.signing.verify import verify_bundle

    report = verify_bundle(bundle, trust=trust, cache=cache)
    if not report.ok:
        msg = (f"{bundle.name} does not verify ({'; '.join(report.findings()[:3])}); no policy was written: run "
               f"`ort-bundler verify {bundle}` and write policies for an intact bundle")
        raise VerificationError(msg)
    with zipfile.ZipFile(bundle) as archive:
        top = archive.namelist()[0].split("/", 1)[0]
        info = _windows_bundle(bundle, archive, top)
        unpacked = unpack(archive, top, staging / "bundle" / top)
    folder = staging / "bundle" / top
    plan = InstallPlan.loads((folder / PLAN_FILE).read_text(encoding="utf-8"), source=f"{bundle.name}: {PLAN_FILE}")
    if relocatable(plan):
        work = staging / "image-work"
        work.mkdir()
        make_image(folder, work / "image", plan, epoch=unpacked.epoch, work=work)
        return info.name, info.version, image_files(work / "image")
    return info.name, info.version, planned_files(plan, folder, staging / "wheels")


def _windows_bundle(bundle: Path, archive: zipfile.ZipFile, top: str) -> BundleInfo:
    from bundler.shipped.ort_bundle.bundle_info import BUNDLE_FILE, BundleInfo, BundleInfoError

    try:
        info = BundleInfo.from_json(json.loads(archive.read(f"{top}/{BUNDLE_FILE}")),
                                    source=f"{bundle.name}: {BUNDLE_FILE}")
    except BundleInfoError as exc:
        msg = f"{exc}; policy reads the bundles of this ort-bundler version: rebuild the bundle with it"
        raise UnsupportedError(msg) from None
    if not info.platform.startswith("win"):
        msg = (f"{bundle.name}: a bundle for {info.platform}, expected one for win_amd64: App Control and AppLocker "
               "are Windows' own")
        raise UnsupportedError(msg)
    return info


def _msi_files(msi: Path, staging: Path, *, trust: Path | None) -> tuple[str, str, InstallFiles]:
    from bundler.platforms.windows.install_files import image_files
    from bundler.platforms.windows.msi import tool
    from bundler.platforms.windows.msi_verify import verify_msi
    from bundler.shipped.ort_bundle.records import RECEIPT_FILE, Receipt

    report = verify_msi(msi, trust=trust)
    if not report.ok:
        msg = f"{report.summary().splitlines()[-1]}; no policy was written: write policies for an intact MSI"
        raise VerificationError(msg)
    dest = staging / "msi"
    proc = subprocess.run([tool("msiextract", purpose="writing policies for an MSI"), "-C", str(dest), str(msi)],
                          capture_output=True, text=True, check=False)
    folders = [path for path in dest.iterdir() if path.is_dir()] if dest.is_dir() else []
    if proc.returncode != 0 or len(folders) != 1:
        msg = f"{msi.name}: msiextract did not give the one install folder it gave `verify`; expected the same MSI"
        raise VerificationError(msg)
    receipt = Receipt.loads((folders[0] / RECEIPT_FILE).read_text(encoding="utf-8"), source=f"{msi.name}: receipt")
    return receipt.name, receipt.version, image_files(folders[0])


def _identities(found: InstallFiles) -> list[PeIdentity]:
    """Each file read once; the image hashes are computed on threads (hashlib lets go of the GIL)."""
    from bundler.readers.pe_identity import pe_identity

    with ThreadPoolExecutor(max_workers=min(8, (os.cpu_count() or 1) + 1)) as pool:
        return list(pool.map(lambda item: pe_identity(item[1], label=item[0]), found.files))
