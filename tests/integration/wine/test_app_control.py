"""`ort-bundler policy`: App Control (WDAC) and AppLocker policies for every PE file a Windows install writes.

Real bundles of the real ORT 1.23.1 and numpy wheels (and python.org's CPython for the relocatable case). The
Authenticode hashes are held against two implementations that are not ours: LIEF's `authentihash` (of the file
zero-padded to 8 bytes, which is what Windows hashes and LIEF does not pad) and osslsigncode (`verify`'s
calculated digest for signed files, `extract-data` for unsigned ones, which pads as Windows does). No App Control
or AppLocker validator runs here (ConfigCI and the AppLocker cmdlets are Windows-only): the structure checks
below are ours, and docs/how-to/app-control.md gives the Windows commands and their expected output.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from fixtures.cli import run_cli
from fixtures.windows_bundles import build_zip, manifest
from fixtures.windows_python import WindowsPython, windows_python  # noqa: F401  (fixture)

from bundler.readers.pe import is_pe

pytestmark = pytest.mark.integration

NS = {"si": "urn:schemas-microsoft-com:sipolicy"}
BASE_ID = "{A244370E-44C9-4C06-B551-F6016E563076}"
#: Microsoft's published TBS hash of "Microsoft Code Signing PCA 2011", the CA that issued ORT's signing
#: certificate: it is in Microsoft's own example policies (e.g. the signer rule Windows Admin Center's docs ask
#: WDAC admins to add, learn.microsoft.com/windows-server/manage/windows-admin-center/use/manage-application-control-infrastructure).
PCA_2011_TBS = "F6F717A43AD9ABDDC8CEFDDE1C505462535E7D1307E630F9544A2D14FE8BF26E"
#: ConfigCI's order of the elements of a Signer (cipolicy.xsd's sequence).
SIGNER_ORDER = ("CertRoot", "CertEKU", "CertIssuer", "CertPublisher", "CertOemID", "FileAttribRef")


@dataclass(frozen=True)
class Written:
    out: Path
    report: dict
    bundle: Path


def policy(bundle: Path, out: Path, cache: Path, *flags: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_cli("policy", "--cache", str(cache), "-o", str(out), str(bundle), *flags, check=check)


def write_all(bundle: Path, out: Path, cache: Path) -> Written:
    result = policy(bundle, out, cache, "--wdac", "--base-policy-id", BASE_ID, "--wdac-base", "--applocker", "--json")
    return Written(out=out, report=json.loads(result.stdout), bundle=bundle)


@pytest.fixture(scope="module")
def quickstart(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Written:
    """A bundle on the target's own Python (as manifests/quickstart-win.toml), and its policies."""
    work = tmp_path_factory.mktemp("policy-quickstart")
    first = manifest(work, name="polapp", version="1.2.0", runtime=None, lock=None)
    run_cli("lock", str(first))
    bundle = build_zip(manifest(work, name="polapp", version="1.2.0", runtime=None,
                                lock=first.with_suffix(".lock.toml")), bundler_cache, work)
    return write_all(bundle, work / "policies", bundler_cache)


@pytest.fixture(scope="module")
def runtime(windows_python: WindowsPython, bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Written:
    """A bundle that carries python.org's CPython: its install image is relocatable, launchers included."""
    work = tmp_path_factory.mktemp("policy-runtime")
    first = manifest(work, name="polrt", version="2.0.1", runtime=windows_python.embed_zip, lock=None)
    run_cli("lock", str(first))
    bundle = build_zip(manifest(work, name="polrt", version="2.0.1", runtime=windows_python.embed_zip,
                                lock=first.with_suffix(".lock.toml")), bundler_cache, work)
    return write_all(bundle, work / "policies", bundler_cache)


def files_of(written: Written, suffix: str) -> Path:
    [found] = written.out.glob(f"*{suffix}")
    return found


def check_wdac(path: Path, report: dict, *, supplemental: bool) -> None:
    """Every referenced ID defined, IDs unique, every file's rule present and each PE in exactly one rule."""
    root = ET.parse(path).getroot()
    assert root.tag == f"{{{NS['si']}}}SiPolicy"
    assert root.get("PolicyType") == ("Supplemental Policy" if supplemental else "Base Policy")
    base = root.findtext("si:BasePolicyID", namespaces=NS)
    policy_id = root.findtext("si:PolicyID", namespaces=NS)
    assert re.fullmatch(r"\{[0-9A-F-]{36}\}", policy_id or "")
    assert base == (BASE_ID if supplemental else policy_id)
    defined = [e.get("ID") for e in root.iter() if e.get("ID") and e.tag.split("}")[1] in
               {"Allow", "FileAttrib", "Signer", "SigningScenario"}]
    assert len(defined) == len(set(defined)), "IDs must be unique"
    file_rules = {e.get("ID"): e for e in root.find("si:FileRules", NS)}
    signers = {e.get("ID"): e for e in root.find("si:Signers", NS)}
    for signer in signers.values():
        order = [child.tag.split("}")[1] for child in signer]
        assert order == sorted(order, key=SIGNER_ORDER.index), order
        assert len(signer.find("si:CertRoot", NS).get("Value")) in (40, 64, 96, 128)
        for ref in signer.findall("si:FileAttribRef", NS):
            assert file_rules[ref.get("RuleID")].tag.endswith("FileAttrib")
    [scenario] = root.find("si:SigningScenarios", NS)
    assert scenario.get("Value") == "12"
    allowed = {e.get("SignerId") for e in scenario.iter(f"{{{NS['si']}}}AllowedSigner")}
    referenced = {e.get("RuleID") for e in scenario.iter(f"{{{NS['si']}}}FileRuleRef")}
    assert allowed == set(signers)
    assert referenced == {i for i, e in file_rules.items() if e.tag.endswith("Allow")}
    attribs_in_signers = {r.get("RuleID") for s in signers.values() for r in s.findall("si:FileAttribRef", NS)}
    assert attribs_in_signers == {i for i, e in file_rules.items() if e.tag.endswith("FileAttrib")}
    for entry in report["files"]:
        rule = file_rules[entry["appcontrol_rule"]]
        if entry["level"] == "hash":
            assert rule.get("Hash") == entry["authenticode_sha256"]
        else:
            assert rule.get("FileName") == entry["original_filename"]
            assert rule.get("MinimumFileVersion") == entry["file_version"]


def check_applocker(path: Path, report: dict) -> None:
    root = ET.parse(path).getroot()
    assert root.tag == "AppLockerPolicy" and root.get("Version") == "1"
    collections = {c.get("Type"): c for c in root.findall("RuleCollection")}
    assert set(collections) == {"Exe", "Dll"}
    rules = {r.get("Id"): (c.get("Type"), r) for c in collections.values() for r in c}
    assert len(rules) == sum(len(c) for c in collections.values()), "rule Ids must be unique"
    for entry in report["files"]:
        collection, rule = rules[entry["applocker_rule"]]
        assert collection == ("Exe" if entry["path"].lower().endswith(".exe") else "Dll")
        assert rule.get("UserOrGroupSid") == "S-1-1-0" and rule.get("Action") == "Allow"
        if entry["level"] == "hash":
            [file_hash] = rule.iter("FileHash")
            assert file_hash.get("Type") == "SHA256" and file_hash.get("Data") == "0x" + entry["authenticode_sha256"]
        else:
            [condition] = rule.iter("FilePublisherCondition")
            assert condition.get("BinaryName") == entry["original_filename"]
            assert condition.get("PublisherName").startswith(f"CN={entry['signer']}")
    covered = {e["applocker_rule"] for e in report["files"]}
    assert covered == set(rules), "every rule covers a file"


def installed_pes(bundle: Path, work: Path) -> set[str]:
    """The basenames of every PE file in the bundle's wheels and payload, found without our code."""
    names = set()
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(work)
    for wheel in work.rglob("*.whl"):
        if wheel.name.startswith("installer-"):
            continue  # the engine's own installer: used, never installed
        with zipfile.ZipFile(wheel) as inner:
            for member in inner.namelist():
                if member.lower().endswith((".dll", ".pyd", ".exe")):
                    target = work / "members" / wheel.name / member
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(inner.read(member))
                    if is_pe(target):
                        names.add(Path(member).name)
    return names


def test_every_pe_file_the_install_writes_is_in_exactly_one_rule_of_each_policy(quickstart: Written,
                                                                                 tmp_path: Path) -> None:
    report = quickstart.report
    paths = [entry["path"] for entry in report["files"]]
    assert len(paths) == len(set(paths))
    assert {Path(p).name for p in paths} == installed_pes(quickstart.bundle, tmp_path)
    check_wdac(files_of(quickstart, "-appcontrol-supplemental.xml"), report, supplemental=True)
    check_wdac(files_of(quickstart, "-appcontrol-base.xml"), report, supplemental=False)
    check_applocker(files_of(quickstart, "-applocker.xml"), report)


def test_signed_ort_gets_a_publisher_rule_under_microsoft_s_pca_and_numpy_hash_rules(quickstart: Written) -> None:
    by_name = {Path(e["path"]).name: e for e in quickstart.report["files"]}
    ort = by_name["onnxruntime.dll"]
    assert ort["level"] == "publisher" and ort["signer"] == "Microsoft Corporation"
    assert ort["original_filename"] == "onnxruntime.dll" and ort["file_version"].startswith("1.23.")
    root = ET.parse(files_of(quickstart, "-appcontrol-supplemental.xml")).getroot()
    [signer] = [s for s in root.iter(f"{{{NS['si']}}}Signer")
                if any(r.get("RuleID") == ort["appcontrol_rule"] for r in s)]
    assert signer.get("Name") == "Microsoft Code Signing PCA 2011"
    assert signer.find("si:CertRoot", NS).get("Value") == PCA_2011_TBS
    umath = by_name["_multiarray_umath.cp311-win_amd64.pyd"]
    assert umath["level"] == "hash" and umath["why_hash"] == "unsigned"


def test_the_hashes_are_authenticode_digests_as_lief_and_osslsigncode_compute_them(quickstart: Written,
                                                                                   tmp_path: Path) -> None:
    lief = pytest.importorskip("lief")
    osslsigncode = shutil.which("osslsigncode")
    assert osslsigncode, "osslsigncode (Debian package osslsigncode) is needed"
    installed_pes(quickstart.bundle, tmp_path)
    members = {p.name: p for p in (tmp_path / "members").rglob("*") if p.is_file()}
    checked = {"signed": 0, "unsigned": 0}
    for entry in quickstart.report["files"]:
        path = members[Path(entry["path"]).name]
        # Windows hashes the file zero-padded to 8 bytes (as signing tools pad it); LIEF hashes it as it is.
        padded = tmp_path / "padded"
        padded.write_bytes(path.read_bytes() + bytes(-path.stat().st_size % 8))
        assert lief.parse(str(padded)).authentihash(lief.PE.ALGORITHMS.SHA_256).hex().upper() == \
            entry["authenticode_sha256"]
        if entry["signer"] or entry["why_hash"] != "unsigned":
            out = subprocess.run([osslsigncode, "verify", "-in", str(path)], capture_output=True, text=True).stdout
            calculated = re.search(r"Calculated message digest\s*:\s*([0-9A-F]+)", out)
            assert calculated and calculated.group(1) == entry["authenticode_sha256"], out[-500:]
            checked["signed"] += 1
        else:
            der = tmp_path / f"{checked['unsigned']}.der"  # osslsigncode does not overwrite an existing -out
            subprocess.run([osslsigncode, "extract-data", "-h", "sha256", "-in", str(path), "-out", str(der)],
                           check=True, capture_output=True)
            dump = subprocess.run(["openssl", "asn1parse", "-inform", "DER", "-in", str(der)], capture_output=True,
                                  text=True, check=True).stdout
            assert dump.rstrip().splitlines()[-2].endswith(":" + entry["authenticode_sha256"]), dump[-400:]
            checked["unsigned"] += 1
    assert checked["signed"] >= 3 and checked["unsigned"] >= 10, checked


def test_launchers_and_the_target_s_python_are_named_as_not_covered_with_the_reason(quickstart: Written) -> None:
    uncovered = {u["path"]: u["reason"] for u in quickstart.report["not_covered"]}
    assert "venv/Scripts/python.exe" in uncovered and "Python Software Foundation" in uncovered["venv/Scripts/python.exe"]
    assert "venv/Scripts/f2py.exe" in uncovered and "[python] runtime" in uncovered["venv/Scripts/f2py.exe"]
    report = files_of(quickstart, "-policy-report.txt").read_text()
    assert "Not covered" in report and "venv/Scripts/f2py.exe" in report


@pytest.mark.wine
def test_a_relocatable_bundle_covers_its_interpreter_and_its_launchers(runtime: Written) -> None:
    by_path = {e["path"]: e for e in runtime.report["files"]}
    assert runtime.report["not_covered"] == []
    python = next(e for p, e in by_path.items() if p.endswith("/python.exe") and "Scripts" not in p)
    assert python["level"] == "publisher" and python["signer"] == "Python Software Foundation"
    launchers = [e for p, e in by_path.items() if p.endswith("Scripts/f2py.exe")]
    assert len(launchers) == 1 and launchers[0]["level"] == "hash"
    check_wdac(files_of(runtime, "-appcontrol-supplemental.xml"), runtime.report, supplemental=True)
    check_applocker(files_of(runtime, "-applocker.xml"), runtime.report)


def test_the_same_bundle_gives_the_same_policy_bytes(quickstart: Written, bundler_cache: Path, tmp_path: Path) -> None:
    again = write_all(quickstart.bundle, tmp_path / "again", bundler_cache)
    for first in sorted(quickstart.out.iterdir()):
        assert (again.out / first.name).read_bytes() == first.read_bytes(), first.name


@pytest.mark.parametrize(("flags", "expected"), [
    ((), "found no policy format"),
    (("--wdac",), "--base-policy-id"),
    (("--wdac", "--base-policy-id", "not-a-guid"), "found 'not-a-guid'"),
    (("--applocker", "--sid", "Everyone"), "found 'Everyone'"),
])
def test_bad_options_are_refused_in_one_sentence_and_write_nothing(quickstart: Written, bundler_cache: Path,
                                                                    tmp_path: Path, flags: tuple[str, ...],
                                                                    expected: str) -> None:
    result = policy(quickstart.bundle, tmp_path / "out", bundler_cache, *flags, check=False)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_bundle_that_does_not_verify_gets_no_policy(quickstart: Written, bundler_cache: Path, tmp_path: Path) -> None:
    tampered = tmp_path / quickstart.bundle.name
    with zipfile.ZipFile(quickstart.bundle) as source, zipfile.ZipFile(tampered, "w") as dest:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith("bundle.json"):
                data = data.replace(b'"1.2.0"', b'"1.2.1"', 1)
            dest.writestr(info, data)
    result = policy(tampered, tmp_path / "out", bundler_cache, "--applocker", check=False)
    assert result.returncode == 8, result.stderr
    assert "does not verify" in result.stderr and "no policy was written" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.wine
def test_an_msi_gets_the_same_rules_as_the_bundle_it_was_packaged_from(runtime: Written, bundler_cache: Path,
                                                                       tmp_path: Path) -> None:
    packaged = json.loads(run_cli("package", "--json", "--cache", str(bundler_cache), "-o", str(tmp_path / "msi"),
                                  "--msi", str(runtime.bundle)).stdout)
    from_msi = write_all(Path(packaged["msi"]["path"]), tmp_path / "from-msi", bundler_cache)
    assert from_msi.report["files"] == runtime.report["files"]
    for name in ("appcontrol-supplemental.xml", "appcontrol-base.xml", "applocker.xml"):
        assert files_of(from_msi, name).read_bytes() == files_of(runtime, name).read_bytes()
