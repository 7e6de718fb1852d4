"""package --msi: built by wixl, read back by msitools, installed for real by Wine's msiexec with python.org's
CPython 3.11.9 and the real ORT 1.23.1 wheel.

What stands in, and what is Wine's: Wine has no VC++ runtime, so the test plants its registry values
(`HKLM\\...\\VC\\Runtimes\\x64` 14.44.35208, a STAND-IN) that the MSI's launch condition reads. The failing
self-check is real: numpy 2 aborts under Wine 8 (it lacks ucrtbase's crealf), so a bundle built with numpy 2
is one whose self-check fails on this machine, as strict providers would on a machine without the GPU.
Wine truncates exit codes to 8 bits, and its msiexec reports a failed custom action as 1627, not 1603. Wine's `msiexec /fa` exits 0
and restores nothing; the repair tested is `REINSTALL=ALL REINSTALLMODE=amus`, the form ConfigMgr uses.

The tests after `installed` run in order on one prefix: install, refusal of the zip route, upgrade, repair,
uninstall, failed fresh install, launch conditions, NOSELFCHECK and a failed upgrade. Wine 8 removes the old
product of an upgrade outside the transaction, so a failed upgrade cannot put the old version back here as
Windows does (see the last test).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

import pytest
from fixtures.cli import run_cli
from fixtures.signing_pki import Pki
from fixtures.windows_bundles import build_zip, manifest
from fixtures.windows_python import WindowsPython, windows_python  # noqa: F401  (fixture)
from fixtures.wine import Wine, require, wine  # noqa: F401  (fixture)

from bundler.integrations import tools

pytestmark = [pytest.mark.integration, pytest.mark.wine]

NAME = "winmsi"
PUBLISHER = "Example Corp"
VC_KEY = "HKLM\\SOFTWARE\\Microsoft\\VisualStudio\\14.0\\VC\\Runtimes\\x64"
DETECTION = f"HKLM\\SOFTWARE\\ort-bundler\\{NAME}"
UNINSTALL = "HKLM\\SOFTWARE\\Microsoft\\Windows\\CurrentVersion\\Uninstall\\{code}"
INSTALL_DIR = "C:\\Apps\\winmsi"
MSIEXEC_TIMEOUT = 900
#: A failed install: Windows' msiexec exits 1603 (ERROR_INSTALL_FAILURE); Wine 8's passes on the failed custom
#: action's 1627 (ERROR_FUNCTION_FAILED). Either arrives truncated to 8 bits.
FAILED = {1603 & 0xFF, 1627 & 0xFF}


@dataclass(frozen=True)
class Packages:
    first: dict  # `package --json` of 1.0.0 (--msi --intunewin)
    first_again: Path  # 1.0.0's MSI from a second run
    root_ca: Path  # the test CA both 1.0.0 MSIs are signed under
    second: dict  # 1.0.1
    failing: dict  # 1.0.2, built with numpy 2
    first_zip: Path


def package(bundle: Path, out: Path, cache: Path, *flags: str) -> dict:
    return json.loads(run_cli("package", "--json", "--cache", str(cache), "-o", str(out), str(bundle), *flags).stdout)


@pytest.fixture(scope="module")
def packages(windows_python: WindowsPython, bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Packages:
    for tool in (tools.WIXL, tools.MSIBUILD, tools.MSIINFO):
        require(tool)
    work = tmp_path_factory.mktemp("msi-bundles")
    zips = {}
    for version, numpy in (("1.0.0", "numpy<2"), ("1.0.1", "numpy<2"), ("1.0.2", "numpy>=2")):
        first = manifest(work, name=NAME, version=version, runtime=windows_python.embed_zip, lock=None, numpy=numpy,
                         publisher=PUBLISHER)
        run_cli("lock", str(first))
        lock = first.with_suffix(".lock.toml")
        zips[version] = build_zip(manifest(work, name=NAME, version=version, runtime=windows_python.embed_zip,
                                           lock=lock, numpy=numpy, publisher=PUBLISHER), bundler_cache, work)
    pki = Pki.make(work / "pki", "msi")
    signing = ("--cert", str(pki.cert), "--key", str(pki.key), "--chain", str(pki.chain))
    again = package(zips["1.0.0"], work / "again", bundler_cache, "--msi", *signing)
    return Packages(first=package(zips["1.0.0"], work / "first", bundler_cache, "--msi", "--intunewin", *signing),
                    root_ca=pki.root,
                    first_again=Path(again["msi"]["path"]),
                    second=package(zips["1.0.1"], work / "second", bundler_cache, "--msi"),
                    failing=package(zips["1.0.2"], work / "failing", bundler_cache, "--msi"), first_zip=zips["1.0.0"])


def table(msi: Path, name: str) -> list[dict[str, str]]:
    """A table as msitools' `msiinfo export` prints it: header, types, key line, then the rows."""
    lines = subprocess.run(["msiinfo", "export", str(msi), name], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[3:]]


def test_the_tables_hold_what_the_bundle_says(packages: Packages) -> None:
    msi = Path(packages.first["msi"]["path"])
    with zipfile.ZipFile(packages.first_zip) as bundle:
        top = bundle.namelist()[0].split("/")[0]
        plan = json.loads(bundle.read(f"{top}/install-plan.json"))
        info = json.loads(bundle.read(f"{top}/bundle.json"))
    properties = {row["Property"]: row["Value"] for row in table(msi, "Property")}
    assert properties["ProductVersion"] == "1.0.0" and properties["ProductName"] == NAME
    assert properties["ProductCode"] == packages.first["msi"]["product_code"]
    assert properties["UpgradeCode"] == packages.first["msi"]["upgrade_code"]
    assert properties["ALLUSERS"] == "1" and properties["ARPNOMODIFY"] == "1"
    assert "ARPNOREPAIR" not in properties and int(properties["ARPSIZE"]) > 1024  # KB of the image's files
    assert properties["Manufacturer"] == PUBLISHER  # [bundle] publisher
    assert set(properties["SecureCustomProperties"].split(";")) >= {"CACHEDIR", "NOSELFCHECK"}
    files = table(msi, "File")
    assert len(files) == packages.first["msi"]["files"]
    names = {row["FileName"].split("|")[-1] for row in files}
    versions = {row["FileName"].split("|")[-1]: row["Version"] for row in files}
    # ORT 1.23.1's DLL says 1.23.25.1002 (its own build numbering), python.exe 3.11.9150.1013; scripts have none
    assert re.fullmatch(r"1\.23\.\d+\.\d+", versions["onnxruntime.dll"]) and versions["run.cmd"] == ""
    assert re.fullmatch(r"3\.11\.\d+\.\d+", versions["python.exe"])
    hashed = {row["File_"] for row in table(msi, "MsiFileHash")}
    assert not hashed & {row["File"] for row in files if row["Version"]}
    assert hashed == {row["File"] for row in files if not row["Version"]}
    assert {"python.exe", "onnxruntime.dll", "receipt.json", "run.cmd", "__main__.py"} <= names
    components = table(msi, "Component")
    assert all(int(row["Attributes"]) & 256 for row in components)  # msidbComponentAttributes64bit
    assert len({row["ComponentId"] for row in components}) == len(components)
    registry = {row["Name"]: row["Value"] for row in table(msi, "Registry")}
    assert registry["Route"] == "msi" and registry["Version"] == "1.0.0" and registry["InstallDir"] == "[INSTALLDIR]"
    actions = {row["Action"]: row for row in table(msi, "CustomAction")}
    assert int(actions["OrtFinish"]["Type"]) == 18 | 0x400 | 0x800  # exe from a file, deferred, no impersonation
    assert "msi-finish" in actions["OrtFinish"]["Target"]
    sequence = {row["Action"]: int(row["Sequence"]) for row in table(msi, "InstallExecuteSequence")}
    assert sequence["InstallFiles"] < sequence["OrtFinish"] < sequence["InstallFinalize"]
    assert sequence["InstallInitialize"] < sequence["RemoveExistingProducts"] < sequence["InstallFiles"]
    upgrade = table(msi, "Upgrade")
    assert {row["ActionProperty"] for row in upgrade} == {"NEWER_VERSION_FOUND", "OLDER_VERSION_FOUND"}
    conditions = [row["Condition"] for row in table(msi, "LaunchCondition")]
    minor, build = (int(part) for part in info["vc_runtime_min"].split(".")[1:3])
    assert any(f'VCRT_MINOR = "#{minor:02d}" AND VCRT_BLD >= "#{build:05d}"' in c for c in conditions)
    assert any('ORT_ROUTE <> "zip"' in c for c in conditions)
    assert plan["name"] == NAME


#: An 8.3 name as Windows Installer's Filename data type takes a short name (ICE03), upper case: a stem of 1 to 8
#: and an extension of 1 to 3 characters, none a space, a dot or one of \ ? | > < : / * " + , ; = [ ].
SHORT_NAME = re.compile(r"[A-Z0-9!#$%&'()@^_`{}~-]{1,8}(\.[A-Z0-9!#$%&'()@^_`{}~-]{1,3})?")
#: A name that is its own short name (WiX and Windows Installer take either case).
OWN_SHORT_NAME = re.compile(SHORT_NAME.pattern, re.IGNORECASE)


def test_every_file_and_folder_has_a_valid_short_name_unique_in_its_folder(packages: Packages) -> None:
    """ICE03 (issue 40): wixl wrote long names alone; every name is now `SHORT|long` where the long one is no 8.3
    name. The File, Component and Directory tables as msitools reads them; the long names still make the tree."""
    msi = Path(packages.first["msi"]["path"])
    folders = {row["Directory"]: row for row in table(msi, "Directory")}
    component_folder = {row["Component"]: row["Directory_"] for row in table(msi, "Component")}
    entries = [(row["Directory_Parent"], row["DefaultDir"]) for key, row in folders.items()
               if key not in ("TARGETDIR", "ProgramFiles64Folder")]
    entries += [(component_folder[row["Component_"]], row["FileName"]) for row in table(msi, "File")]
    shorts: dict[str, set[str]] = {}
    pairs = 0
    for parent, column in entries:
        short, bar, long = column.partition("|")
        if bar:
            pairs += 1
            assert SHORT_NAME.fullmatch(short) and not OWN_SHORT_NAME.fullmatch(long), column
        else:
            assert OWN_SHORT_NAME.fullmatch(short), f"{column!r} is no 8.3 name and has no short name"
        assert short.upper() not in shorts.setdefault(parent, set()), f"{short} twice in {parent}"
        shorts[parent].add(short.upper())
    assert pairs > 100  # the image's site-packages, __pycache__ and the like

    def path(folder: str) -> str:
        if folder == "INSTALLDIR":
            return ""
        above = path(folders[folder]["Directory_Parent"])
        return f"{above}/{folders[folder]['DefaultDir'].split('|')[-1]}".lstrip("/")

    files = {f"{path(component_folder[row['Component_']])}/{row['FileName'].split('|')[-1]}".lstrip("/")
             for row in table(msi, "File")}
    assert len(files) == packages.first["msi"]["files"]
    assert {"python/python.exe", "receipt.json", "python/Lib/site-packages/onnxruntime/capi/onnxruntime.dll"} <= files


def test_two_runs_give_byte_identical_signed_msis_with_the_bundle_s_time(packages: Packages) -> None:
    first = Path(packages.first["msi"]["path"])
    assert first.read_bytes() == packages.first_again.read_bytes()
    assert packages.first["msi"]["signer"] and "msi Code Signing" in packages.first["msi"]["signer"]
    verified = subprocess.run(["osslsigncode", "verify", "-CAfile", str(packages.root_ca), "-in", str(first)],
                              capture_output=True, text=True, check=False)
    assert verified.returncode == 0 and "Signature verification: ok" in verified.stdout, verified.stdout[-2000:]
    assert hashlib.sha256(first.read_bytes()).hexdigest() == packages.first["msi"]["sha256"]
    assert (first.parent / (first.name + ".sha256")).read_text() == f"{packages.first['msi']['sha256']}  {first.name}\n"
    summary = subprocess.run(["msiinfo", "suminfo", str(first)], capture_output=True, text=True, check=True).stdout
    assert "Created: Thu Jan  1 00:00:00 2026" in summary and packages.first["msi"]["package_code"] in summary


def test_verify_checks_an_msi_s_files_against_its_receipt_and_its_signature(packages: Packages,
                                                                            tmp_path: Path) -> None:
    first, second = Path(packages.first["msi"]["path"]), Path(packages.second["msi"]["path"])
    report = json.loads(run_cli("verify", "--json", "--trust", str(packages.root_ca), str(first)).stdout)
    assert report["ok"] and report["signature"] == f"verified against {packages.root_ca.name}"
    assert report["files"] == packages.first["msi"]["files"] - 1 and not report["changed"] + report["missing"]
    assert report["tables"] == []  # every table as package writes it, the signature's streams aside
    other = Pki.make(tmp_path / "other", "other")
    refused = run_cli("verify", "--trust", str(other.root), str(first), check=False)
    assert refused.returncode == 8 and "does not verify against other-root.pem" in refused.stderr
    unsigned = run_cli("verify", "--trust", str(packages.root_ca), str(second), check=False)
    assert unsigned.returncode == 8 and "unsigned (--trust asks for a signature)" in unsigned.stderr
    # One byte of the cabinet altered: msiextract's checksum (a tool that is not ours) catches it.
    data = bytearray(second.read_bytes())
    data[len(data) // 2] ^= 0xFF
    altered = tmp_path / "altered.msi"
    altered.write_bytes(bytes(data))
    damaged = run_cli("verify", str(altered), check=False)
    assert damaged.returncode == 8 and "altered.msi: msiextract cannot read it" in damaged.stderr, damaged.stderr


def test_the_intunewin_wraps_the_msi_with_its_product_code(packages: Packages) -> None:
    [app] = [p for p in packages.first["packages"] if p["role"] == "app"]
    assert app["setup_file"] == Path(packages.first["msi"]["path"]).name
    with zipfile.ZipFile(app["path"]) as outer:
        detection = ET.fromstring(outer.read("IntuneWinPackage/Metadata/Detection.xml"))
    assert detection.findtext("SetupFile") == app["setup_file"]
    assert detection.findtext("MsiInfo/MsiProductCode") == packages.first["msi"]["product_code"]
    assert detection.findtext("MsiInfo/MsiUpgradeCode") == packages.first["msi"]["upgrade_code"]
    rules = app["win32_app"]["detection"]
    assert rules == [{"type": "registry", "keyPath": f"HKEY_LOCAL_MACHINE\\SOFTWARE\\ort-bundler\\{NAME}",
                      "valueName": "CheckedVersion", "detectionType": "string", "operator": "equal",
                      "detectionValue": "1.0.0", "check32BitOn64System": False},
                     {"type": "msi", "productCode": packages.first["msi"]["product_code"],
                      "productVersionOperator": "notConfigured"}]
    assert app["win32_app"]["install_command"].startswith("msiexec /i ")
    assert app["win32_app"]["install_command"].endswith(f'/l*v "%ProgramData%\\Microsoft\\IntuneManagementExtension'
                                                        f'\\Logs\\{NAME}-1.0.0-msiexec-install.log"')


# -- under Wine's msiexec -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def windows(wine: Wine) -> Wine:
    """The session prefix with the VC++ runtime's registry values (STAND-IN: Wine has no VC_redist)."""
    for name, value in (("Installed", 1), ("Major", 14), ("Minor", 44), ("Bld", 35208)):
        wine.reg_add(VC_KEY, name, value)
    return wine


def msiexec(wine: Wine, *args: str) -> subprocess.CompletedProcess[str]:
    return wine.run(["msiexec", *args, "/qn"], timeout=MSIEXEC_TIMEOUT)


def folder(wine: Wine) -> Path:
    return wine.drive_c() / "Apps" / NAME


def receipt_hashes(root: Path) -> dict[str, str]:
    return {entry["path"]: entry["sha256"] for entry in json.loads((root / "receipt.json").read_text())["files"]}


def hashes_below(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def msi_log(wine: Wine, version: str) -> str:
    [log] = (wine.drive_c() / "windows").glob(f"[Ll]ogs/Software/{NAME}-{version}-msi.log")
    return log.read_text()


@pytest.fixture(scope="module")
def installed(windows: Wine, packages: Packages) -> subprocess.CompletedProcess[str]:
    """1.0.0 into a folder made empty before the install, as an administrator may prepare it: the planted-file
    check lets an empty folder through (its refusal of a non-empty one is tested below)."""
    windows.drive_c().joinpath(*PureWindowsPath(INSTALL_DIR).parts[1:]).mkdir(parents=True)
    msi = windows.to_windows(Path(packages.first["msi"]["path"]))
    return msiexec(windows, "/i", msi, f"INSTALLDIR={INSTALL_DIR}", "CACHEDIR=C:\\ortcache")


def test_msiexec_installs_every_file_of_the_receipt_with_detection_and_an_arp_entry(
        windows: Wine, packages: Packages, installed: subprocess.CompletedProcess[str]) -> None:
    assert installed.returncode == 0, installed.stdout + installed.stderr
    root = folder(windows)
    expected = receipt_hashes(root)
    found = hashes_below(root)
    assert found.pop("cache_dir.txt") and (root / "cache_dir.txt").read_text().strip() == "C:\\ortcache"
    assert found.pop("receipt.json") and found == expected
    detection = windows.reg_query(DETECTION)
    assert detection is not None and detection["Version"] == "1.0.0" and detection["Route"] == "msi"
    assert detection["CheckedVersion"] == "1.0.0" and detection["SelfCheck"] == "passed"  # msi-finish's, after the check
    assert detection["InstallDir"].rstrip("\\").lower() == INSTALL_DIR.lower()
    entry = windows.reg_query(UNINSTALL.format(code=packages.first["msi"]["product_code"]))
    assert entry is not None and entry["DisplayVersion"] == "1.0.0" and entry["Publisher"] == PUBLISHER, entry
    assert entry["InstallLocation"].rstrip("\\").lower() == INSTALL_DIR.lower(), entry  # ARPINSTALLLOCATION
    assert "the self-check passed" in msi_log(windows, "1.0.0")


def test_the_receipt_names_the_msi_s_install_log(windows: Wine, installed) -> None:  # type: ignore[no-untyped-def]
    """Issue 26, defect 1, on the MSI route: the image's receipt, made on the build machine, named no log;
    msi-finish records where its log went, so the support bundle takes this install's log."""
    assert installed.returncode == 0, installed.stdout + installed.stderr
    [log] = (windows.drive_c() / "windows").glob(f"[Ll]ogs/Software/{NAME}-1.0.0-msi.log")
    recorded = PureWindowsPath(json.loads((folder(windows) / "receipt.json").read_text())["install_log"])
    expected = PureWindowsPath("C:\\", *log.relative_to(windows.drive_c()).parts)  # Windows paths ignore case
    assert str(recorded).lower() == str(expected).lower(), (recorded, expected)


def test_run_cmd_runs_the_entry_point_and_the_self_check_passes(windows: Wine, installed) -> None:  # type: ignore[no-untyped-def]
    root = folder(windows)
    entry = windows.cmd(root / "run.cmd", timeout=MSIEXEC_TIMEOUT)
    assert entry.returncode == 0, entry.stdout + entry.stderr
    assert "onnxruntime 1.23.1 from " in entry.stdout and "Apps\\winmsi\\python\\Lib\\site-packages" in entry.stdout
    check = windows.cmd(root / "run.cmd", "--self-check", "--json", timeout=MSIEXEC_TIMEOUT)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    report = json.loads(check.stdout[check.stdout.index("{"):])
    assert {c["id"]: c["status"] for c in report["checks"]}["files"] == "pass"
    # A console-script launcher made at package time finds python.exe relative to itself, in a folder the
    # image never knew.
    script = windows.run([f"{INSTALL_DIR}\\python\\Scripts\\humanfriendly.exe", "--format-size=1234567"])
    assert script.returncode == 0 and script.stdout.strip() == "1.23 MB", script.stdout + script.stderr


def test_the_zip_route_refuses_while_the_msi_s_install_is_there(windows: Wine, packages: Packages, installed,  # type: ignore[no-untyped-def]
                                                                 tmp_path: Path) -> None:
    with zipfile.ZipFile(packages.first_zip) as archive:
        archive.extractall(tmp_path)
    [top] = tmp_path.iterdir()
    result = windows.cmd(top / "install.cmd", "-InstallDir", "C:\\Apps\\other", timeout=MSIEXEC_TIMEOUT)
    assert result.returncode == 10, result.stdout + result.stderr
    assert f"{NAME} is installed by its MSI" in result.stderr and packages.first["msi"]["product_code"] in result.stderr
    assert not (windows.drive_c() / "Apps" / "other").exists()


#: The file a rebuilt 1.0.0 changes (any file of the image would do: a notice is one the self-check does not read).
REBUILT_FILE = "licenses/sympy/AUTHORS"


@pytest.fixture(scope="module")
def rebuilt(packages: Packages, bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, bytes]:
    """1.0.0 again with one file changed, packaged as an MSI: another content, so another ProductCode."""
    work = tmp_path_factory.mktemp("msi-rebuilt")
    with zipfile.ZipFile(packages.first_zip) as archive:
        top = archive.namelist()[0].split("/")[0]
        content = archive.read(f"{top}/{REBUILT_FILE}") + b"\nRebuilt: the same version with other content.\n"
    bundle = rewritten(packages.first_zip, work / "bundle", {REBUILT_FILE: content})
    return package(bundle, work / "out", bundler_cache, "--msi")["msi"], content


def test_a_same_version_rebuild_replaces_the_installed_product(  # type: ignore[no-untyped-def]
        windows: Wine, packages: Packages, installed, rebuilt: tuple[dict, bytes]) -> None:
    """Issue 40: a rebuilt 1.0.0 with other content met 1638 ("another version of this product is already
    installed"); its own ProductCode and the upgrade range's inclusive maximum make it replace the installed 1.0.0."""
    msi, content = rebuilt
    assert msi["product_code"] != packages.first["msi"]["product_code"]
    assert msi["upgrade_code"] == packages.first["msi"]["upgrade_code"] and msi["product_version"] == "1.0.0"
    result = msiexec(windows, "/i", windows.to_windows(Path(msi["path"])))
    assert result.returncode == 0, result.stdout + result.stderr
    root = folder(windows)  # the remembered folder: no INSTALLDIR was given
    assert (root / REBUILT_FILE).read_bytes() == content
    assert receipt_hashes(root)[REBUILT_FILE] == hashlib.sha256(content).hexdigest()
    assert windows.reg_query(UNINSTALL.format(code=packages.first["msi"]["product_code"])) is None
    assert windows.reg_query(UNINSTALL.format(code=msi["product_code"])) is not None
    assert windows.reg_query(DETECTION)["ProductCode"] == msi["product_code"]  # type: ignore[index]


def test_an_upgrade_keeps_a_user_file_and_leaves_one_arp_entry(windows: Wine, packages: Packages, installed) -> None:  # type: ignore[no-untyped-def]
    root = folder(windows)
    (root / "notes.txt").write_text("mine")
    # No INSTALLDIR: the upgrade finds the folder in the detection value, as a repair does.
    result = msiexec(windows, "/i", windows.to_windows(Path(packages.second["msi"]["path"])))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (root / "notes.txt").read_text() == "mine"
    assert json.loads((root / "receipt.json").read_text())["version"] == "1.0.1"
    assert windows.reg_query(UNINSTALL.format(code=packages.first["msi"]["product_code"])) is None
    assert windows.reg_query(UNINSTALL.format(code=packages.second["msi"]["product_code"])) is not None
    detection = windows.reg_query(DETECTION)
    assert detection is not None and detection["Version"] == detection["CheckedVersion"] == "1.0.1", detection


def test_a_repair_restores_a_deleted_file(windows: Wine, packages: Packages, installed) -> None:  # type: ignore[no-untyped-def]
    root = folder(windows)
    target = root / "python" / "Lib" / "site-packages" / "onnxruntime" / "__init__.py"
    expected = receipt_hashes(root)["python/Lib/site-packages/onnxruntime/__init__.py"]
    target.unlink()
    result = msiexec(windows, "/i", windows.to_windows(Path(packages.second["msi"]["path"])), "REINSTALL=ALL",
                     "REINSTALLMODE=amus")
    assert result.returncode == 0, result.stdout + result.stderr
    assert hashlib.sha256(target.read_bytes()).hexdigest() == expected
    assert not (windows.drive_c() / "Program Files" / NAME).exists()  # the remembered folder, not the default


def test_msiexec_x_removes_everything_but_the_user_file(windows: Wine, packages: Packages, installed) -> None:  # type: ignore[no-untyped-def]
    root = folder(windows)
    result = msiexec(windows, "/x", packages.second["msi"]["product_code"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert [p.name for p in root.rglob("*")] == ["notes.txt"]
    assert windows.reg_query(DETECTION) is None  # msi-finish --remove took CheckedVersion, then the emptied key
    assert windows.reg_query(UNINSTALL.format(code=packages.second["msi"]["product_code"])) is None


def test_a_fresh_install_whose_self_check_fails_leaves_nothing(windows: Wine, packages: Packages, installed) -> None:  # type: ignore[no-untyped-def]
    result = msiexec(windows, "/i", windows.to_windows(Path(packages.failing["msi"]["path"])))
    assert result.returncode in FAILED, result.stdout + result.stderr
    assert not (windows.drive_c() / "Program Files" / NAME).exists()
    assert windows.reg_query(DETECTION) is None
    assert windows.reg_query(UNINSTALL.format(code=packages.failing["msi"]["product_code"])) is None


def test_launch_conditions_refuse_without_the_vc_runtime_and_over_the_zip_route(  # type: ignore[no-untyped-def]
        windows: Wine, packages: Packages, installed) -> None:
    msi = windows.to_windows(Path(packages.first["msi"]["path"]))
    windows.run(["reg", "delete", VC_KEY, "/f", "/reg:64"])  # the STAND-IN runtime taken away
    try:
        without_vc = msiexec(windows, "/i", msi)
    finally:
        for name, value in (("Installed", 1), ("Major", 14), ("Minor", 44), ("Bld", 35208)):
            windows.reg_add(VC_KEY, name, value)
    # The zip route's detection value, which is all the launch condition reads (a STAND-IN for its install).
    windows.reg_add(DETECTION, "Route", "zip")
    try:
        over_zip = msiexec(windows, "/i", msi)
    finally:
        windows.run(["reg", "delete", DETECTION, "/f", "/reg:64"])
    for result in (without_vc, over_zip):
        assert result.returncode in FAILED, result.stdout + result.stderr
    assert not (windows.drive_c() / "Program Files" / NAME).exists()
    assert windows.reg_query(UNINSTALL.format(code=packages.first["msi"]["product_code"])) is None


def test_an_installdir_too_long_or_not_ascii_is_refused_before_anything_changes(  # type: ignore[no-untyped-def]
        windows: Wine, packages: Packages, installed, tmp_path: Path) -> None:
    """Issue 40: the zip route refuses such a folder up front; the MSI's inline JScript measures INSTALLDIR after
    CostFinalize and a type-19 action ends the install before InstallValidate. Wine's log names the problem in the
    property it leaves (Windows also logs the error message itself)."""
    msi = windows.to_windows(Path(packages.first["msi"]["path"]))
    cases = (("C:\\Apps\\" + "x" * 240, "characters long: the deepest file of this product adds"),
             ("C:\\Apps\\Müller", "contains non-ASCII or control characters or a semicolon"))
    for index, (value, named) in enumerate(cases):
        log = tmp_path / f"refused-{index}.log"
        result = msiexec(windows, "/i", msi, f"INSTALLDIR={value}", "/l*v", windows.to_windows(log))
        assert result.returncode in FAILED, result.stdout + result.stderr
        text = log.read_bytes().decode("utf-8", "replace")
        [line] = [line for line in text.splitlines() if "OrtInstallDirProblem = " in line]
        assert "OrtInstallDirProblem = INSTALLDIR C:\\Apps\\" in line and named in line, line
        assert "Action start" in text and "InstallFiles" not in text.split("OrtRefuseInstallDir", 1)[1]
        assert not (windows.drive_c() / "Apps" / value[8:]).exists()
    assert windows.reg_query(DETECTION) is None
    assert windows.reg_query(UNINSTALL.format(code=packages.first["msi"]["product_code"])) is None


def test_a_first_install_into_a_folder_holding_a_file_is_refused_before_anything_there_runs(  # type: ignore[no-untyped-def]
        windows: Wine, packages: Packages, installed, tmp_path: Path) -> None:
    """Issue 34, severe 7: a DLL another account put in a folder made before the install (VERSION.dll beside where
    python.exe goes) ran as SYSTEM when msi-finish started python.exe, before it refused the folder. The check now
    runs from the installer's script host before anything changes (and again after the lock, which only Windows
    enforces: Wine 8 ignores a deferred script's error): the install ends there, saying what it found, and nothing
    of the product is copied or run (msi-finish's log is unchanged)."""
    planted = windows.drive_c() / "Apps" / "planted"
    planted.mkdir(parents=True)
    (planted / "VERSION.dll").write_bytes(b"MZ a DLL another account put here")
    finish_log = windows.drive_c() / "windows" / "logs" / "Software" / f"{NAME}-1.0.0-msi.log"
    before = finish_log.read_bytes() if finish_log.exists() else b""
    log = tmp_path / "planted.log"
    msi = windows.to_windows(Path(packages.first["msi"]["path"]))
    result = msiexec(windows, "/i", msi, "INSTALLDIR=C:\\Apps\\planted", "/l*v", windows.to_windows(log))
    assert result.returncode in FAILED, result.stdout + result.stderr
    text = log.read_bytes().decode("utf-8", "replace")
    [line] = [line for line in text.splitlines() if "OrtInstallDirProblem = " in line]
    assert "INSTALLDIR C:\\Apps\\planted\\ already holds 1 file(s) and 0 folder(s) before this first install" in line
    assert "InstallFiles" not in text.split("OrtRefuseInstallDir", 1)[1]
    assert [p.name for p in planted.iterdir()] == ["VERSION.dll"]  # no file of the product copied
    assert (planted / "VERSION.dll").read_bytes() == b"MZ a DLL another account put here"
    assert (finish_log.read_bytes() if finish_log.exists() else b"") == before  # msi-finish never started
    assert windows.reg_query(DETECTION) is None
    assert windows.reg_query(UNINSTALL.format(code=packages.first["msi"]["product_code"])) is None
    shutil.rmtree(planted)


def test_noselfcheck_then_an_upgrade_whose_self_check_fails_leaves_nothing_of_the_new_version(  # type: ignore[no-untyped-def]
        windows: Wine, packages: Packages, installed) -> None:
    """NOSELFCHECK=1 installs 1.0.1 without the check; 1.0.2's check fails and its install is rolled back.

    What becomes of 1.0.1 is Windows Installer's: RemoveExistingProducts runs after InstallInitialize, inside the
    transaction, so Windows puts 1.0.1 back. Wine 8 removes the old product outside the transaction (seen here:
    its files and keys are gone after the failed upgrade), so that part cannot be shown under Wine."""
    root = windows.drive_c() / "Program Files" / NAME
    first = msiexec(windows, "/i", windows.to_windows(Path(packages.second["msi"]["path"])), "NOSELFCHECK=1")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "the self-check was skipped (NOSELFCHECK=1)" in msi_log(windows, "1.0.1")
    assert windows.reg_query(DETECTION)["SelfCheck"] == "skipped"  # type: ignore[index]
    assert (root / "python" / "python.exe").is_file()
    failed = msiexec(windows, "/i", windows.to_windows(Path(packages.failing["msi"]["path"])))
    assert failed.returncode in FAILED, failed.stdout + failed.stderr
    assert "the self-check failed" in msi_log(windows, "1.0.2")
    assert windows.reg_query(UNINSTALL.format(code=packages.failing["msi"]["product_code"])) is None
    # Nothing of 1.0.2 is detected. 1.0.1's removal inside the upgrade leaves CheckedVersion to the transaction
    # (OrtForget does not run with UPGRADINGPRODUCTCODE), so on Windows the restored 1.0.1 is detected again;
    # Wine keeps whatever of 1.0.1 its removal outside the transaction left.
    detection = windows.reg_query(DETECTION) or {}
    assert detection.get("Version", "1.0.1") == "1.0.1" and detection.get("CheckedVersion", "1.0.1") == "1.0.1"
    receipt = root / "receipt.json"
    assert not receipt.exists() or json.loads(receipt.read_text())["version"] == "1.0.1"
    msiexec(windows, "/x", packages.second["msi"]["product_code"])  # whatever Wine left of 1.0.1


# -- issue 34: the install folder's lock, every table verified, free space, the publisher's text ------------------


def test_the_install_folder_is_locked_as_the_zip_route_locks_it(packages: Packages) -> None:
    """Severe 7: INSTALLDIR is a created folder with one MsiLockPermissionsEx row (the zip route's icacls line
    in SDDL, unit/shipped/test_msi_folder_trust.py), and no LockPermissions table (both tables fail with error 1941)."""
    from bundler.platforms.windows.msi_source import INSTALLDIR_SDDL

    for msi in (Path(packages.first["msi"]["path"]), Path(packages.second["msi"]["path"])):
        [lock] = table(msi, "MsiLockPermissionsEx")
        assert lock == {"MsiLockPermissionsEx": "LockInstallDir", "LockObject": "INSTALLDIR", "Table": "CreateFolder",
                        "SDDLText": INSTALLDIR_SDDL, "Condition": ""}
        assert INSTALLDIR_SDDL == "O:BAD:P(A;OICI;FA;;;BA)(A;OICI;FA;;;SY)(A;OICI;0x1200a9;;;BU)"
        assert table(msi, "CreateFolder") == [{"Directory_": "INSTALLDIR", "Component_": "Detection"}]
        tables = subprocess.run(["msiinfo", "tables", str(msi)], capture_output=True, text=True, check=True).stdout
        assert "LockPermissions" not in tables.split()
        forced = subprocess.run(["msiinfo", "export", str(msi), "_ForceCodepage"], capture_output=True, text=True,
                                check=True).stdout
        assert "1252\t_ForceCodepage" in forced
    sequence = {row["Action"]: int(row["Sequence"]) for row in table(msi, "InstallExecuteSequence")}
    assert sequence["CreateFolders"] < sequence["InstallFiles"] < sequence["OrtFinish"]  # locked before any file
    # the planted-file check: before anything changes, refusing through the shared error action, and again after
    # the lock, before any file, deferred and as SYSTEM; both from the script host
    assert sequence["CostFinalize"] < sequence["OrtMeasureInstallDirFilled"] < sequence["OrtInstallDirFilled"]
    assert sequence["OrtInstallDirFilled"] < sequence["OrtRefuseInstallDir"] < sequence["InstallValidate"]
    assert sequence["CreateFolders"] < sequence["OrtCheckInstallDirEmpty"] < sequence["InstallFiles"]
    actions = {row["Action"]: row for row in table(msi, "CustomAction")}
    assert int(actions["OrtMeasureInstallDirFilled"]["Type"]) == 37  # inline JScript whose failure fails the install
    assert int(actions["OrtCheckInstallDirEmpty"]["Type"]) == 37 | 0x400 | 0x800  # inline JScript, in-script, SYSTEM
    assert actions["OrtSetEmptyCheck"]["Source"] == "OrtCheckInstallDirEmpty"  # its CustomActionData


def tampered(source: Path, dest: Path, *queries: str) -> Path:
    """A copy of `source` changed by msitools' msibuild, as an attacker without ort-bundler would change it."""
    shutil.copyfile(source, dest)
    for query in queries:
        subprocess.run(["msibuild", str(dest), "-q", query], check=True, capture_output=True)
    return dest


#: Each change an attacker makes with msitools alone, and the difference verify names for it.
TAMPERING = (
    ("UPDATE `CustomAction` SET `Target` = '-I -B \"C:\\Users\\Public\\run.py\"' WHERE `Action` = 'OrtFinish'",
     "CustomAction row OrtFinish: Target is '-I -B \"C:"),
    ("INSERT INTO `Registry` (`Registry`, `Root`, `Key`, `Name`, `Value`, `Component_`) VALUES ('RunEvil', 2, "
     "'SOFTWARE\\Microsoft\\Windows\\CurrentVersion\\Run', 'evil', 'C:\\evil.exe', 'Detection')",
     "Registry row RunEvil: a row package does not write"),
    ("DROP TABLE `MsiLockPermissionsEx`", "MsiLockPermissionsEx: the table is missing"),
    ("UPDATE `InstallExecuteSequence` SET `Condition` = 'NOSELFCHECK' WHERE `Action` = 'OrtFinish'",
     "InstallExecuteSequence row OrtFinish: Condition is 'NOSELFCHECK'"),
)


def test_verify_refuses_an_msi_whose_tables_are_not_the_ones_package_writes(packages: Packages,
                                                                            tmp_path: Path) -> None:
    """Moderate: an unsigned MSI whose deferred SYSTEM action was rewritten, or which gained a Run-key Registry
    row, kept every file, so the files alone said OK. Every table is now compared with the one package writes
    (one MSI carries every change: each verify rebuilds the MSI's tables, which takes a while)."""
    msi = tampered(Path(packages.second["msi"]["path"]), tmp_path / "winmsi-1.0.1-win_amd64.msi",
                   *(query for query, _ in TAMPERING))
    refused = run_cli("verify", "--json", str(msi), check=False)
    assert refused.returncode == 8, refused.stdout + refused.stderr
    report = json.loads(refused.stdout)
    assert not report["ok"] and not report["changed"] + report["missing"] + report["extra"]  # the files are intact
    for _, named in TAMPERING:
        assert sum(named in line for line in report["tables"]) == 1, (named, report["tables"])
    assert len(report["tables"]) == len(TAMPERING), report["tables"]


def rewritten(bundle: Path, dest_folder: Path, changes: dict[str, bytes]) -> Path:
    """A copy of the unsigned `bundle` with members replaced or added and its SHA256SUMS written again: a crafted
    bundle that still verifies (an unsigned bundle proves only that it is intact)."""
    dest_folder.mkdir(parents=True, exist_ok=True)
    dest = dest_folder / bundle.name
    with zipfile.ZipFile(bundle) as source, zipfile.ZipFile(dest, "w") as out:
        top = source.namelist()[0].split("/")[0]
        infos = {info.filename: info for info in source.infolist()}
        data = {name: source.read(info) for name, info in infos.items() if not info.is_dir()}
        for name, content in changes.items():
            full = f"{top}/{name}"
            data[full] = content
            infos.setdefault(full, zipfile.ZipInfo(full, date_time=infos[f"{top}/bundle.json"].date_time))
            infos[full].compress_type = zipfile.ZIP_DEFLATED
        sums = "".join(f"{hashlib.sha256(content).hexdigest()}  {name[len(top) + 1:]}\n"
                       for name, content in sorted(data.items()) if name != f"{top}/SHA256SUMS")
        data[f"{top}/SHA256SUMS"] = sums.encode()
        for name, info in sorted(infos.items()):
            if info.is_dir():
                out.writestr(info, b"")
            else:
                out.writestr(info, data[name], compresslevel=9)
    return dest


def test_a_publisher_wixl_cannot_store_is_refused_in_one_sentence(packages: Packages, bundler_cache: Path,
                                                                   tmp_path: Path) -> None:
    """Minor: Latin-1 and CJK in one publisher made wixl crash (exit -11) with no reason given; Latin-1 alone is
    stored, in the database's code page 1252 (shown by the tables test: 'Example Corp' and this test's import)."""
    with zipfile.ZipFile(packages.first_zip) as archive:
        top = archive.namelist()[0].split("/")[0]
        info = json.loads(archive.read(f"{top}/bundle.json"))
    info["manifest"]["bundle"]["publisher"] = "Müller 株式会社"
    bundle = rewritten(packages.first_zip, tmp_path / "crafted", {"bundle.json": json.dumps(info, indent=2).encode()})
    assert run_cli("verify", str(bundle)).returncode == 0  # a bundle that verifies
    out = tmp_path / "out"
    refused = run_cli("package", "--msi", "--cache", str(bundler_cache), "-o", str(out), str(bundle), check=False)
    assert refused.returncode == 9, refused.stderr
    lines = [line for line in refused.stderr.strip().splitlines() if not line.startswith("package: ")]  # less the stage lines
    assert len(lines) == 1 and "[bundle] publisher 'Müller 株式会社' holds '株', '式', '会', '社'" in lines[0], lines
    assert "Windows-1252" in lines[0] and not out.exists()


def test_latin_1_text_goes_through_real_wixl_in_code_page_1252(tmp_path: Path) -> None:
    """The same check's other side, with real wixl and msibuild: a publisher in Windows-1252 is stored and read
    back as written, in a database whose code page says 1252."""
    from bundler.platforms.windows.msi import write_database
    from bundler.platforms.windows.msi_source import MsiProduct, guid

    image = tmp_path / "image"
    (image / "python").mkdir(parents=True)
    (image / "python" / "python.exe").write_bytes(b"MZ stand-in")  # never run: only the tables are read
    (image / "receipt.json").write_text("{}")
    product = MsiProduct(name="app", version="1.0.0", product_version="1.0.0", publisher="Müller & Söhne GmbH",
                         product_code=guid("app", "product", "1.0.0"), upgrade_code=guid("app", "upgrade"),
                         bundle_sha256="ab" * 32, interpreter="python/python.exe", vc_runtime_min=None)
    work = tmp_path / "work"
    work.mkdir()
    write_database(product, ["python/python.exe", "receipt.json"], image=image, output=tmp_path / "app.msi", work=work)
    properties = {row["Property"]: row["Value"] for row in table(tmp_path / "app.msi", "Property")}
    assert properties["Manufacturer"] == "Müller & Söhne GmbH"


# -- free space (moderate): a bundle that verifies but inflates 1000:1 -------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A real 256 MiB file system (tmpfs; mounting needs root, so elsewhere the test is skipped)."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mount)], capture_output=True,
                          text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({made.stderr.strip()}); this test needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def bomb_wheel(source: bytes, size: int) -> bytes:
    """`source` (a wheel) with one more member of `size` zero bytes: deflated about 1000:1."""
    import io

    buffer = io.BytesIO(source)
    with zipfile.ZipFile(buffer, "a", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as wheel, \
            wheel.open("humanfriendly/zeros.bin", "w", force_zip64=True) as member:
        chunk = bytes(1 << 20)
        for _ in range(size >> 20):
            member.write(chunk)
    return buffer.getvalue()


def test_packaging_checks_free_space_before_it_fills_the_disk(packages: Packages, bundler_cache: Path,
                                                             small_disk: Path, tmp_path: Path) -> None:
    """Moderate: a bundle that verifies but holds a 1000:1 member ended "internal error: OSError 28" after filling
    the disk. The check is made first, against what the bundle's members (and the MSI's wheels) inflate to."""
    big = 400 << 20  # 400 MiB of zeros, about 400 KiB deflated
    with zipfile.ZipFile(packages.first_zip) as archive:
        top = archive.namelist()[0].split("/")[0]
        [wheel] = [n for n in archive.namelist() if "/humanfriendly-" in n and n.endswith(".whl")]
        wheel_bytes = archive.read(wheel)
    zeros = rewritten(packages.first_zip, tmp_path / "zeros", {"payload/app/zeros.bin": bytes(big)})
    inflating = rewritten(packages.first_zip, tmp_path / "wheel", {wheel[len(top) + 1:]: bomb_wheel(wheel_bytes, 1 << 30)})
    for bundle in (zeros, inflating):
        assert bundle.stat().st_size < packages.first_zip.stat().st_size + (8 << 20)  # small: it inflates 1000:1
        assert run_cli("verify", str(bundle)).returncode == 0
    # What worked still works on this file system: the bundle as built, as an .intunewin.
    fits = run_cli("package", "--intunewin", "--cache", str(bundler_cache), "-o", str(small_disk / "fits"),
                   str(packages.first_zip))
    assert fits.returncode == 0
    for bundle, flags, stage in ((zeros, ("--intunewin",), "unpacking the bundle needs"),
                                 (zeros, ("--msi",), "unpacking the bundle needs"),
                                 (inflating, ("--msi",), "making the MSI's install image needs")):
        out = small_disk / "out"
        refused = run_cli("package", *flags, "--cache", str(bundler_cache), "-o", str(out), str(bundle), check=False)
        lines = [line for line in refused.stderr.strip().splitlines() if not line.startswith("package: ")]  # less the stages
        assert refused.returncode == 7 and len(lines) == 1, refused.stderr
        assert f"{bundle.name} cannot be packaged in {out}: only " in lines[0] and stage in lines[0], lines[0]
        assert "OSError" not in lines[0] and not out.exists()  # nothing left behind
