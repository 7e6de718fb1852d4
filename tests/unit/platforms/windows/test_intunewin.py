"""`ort-bundler package --intunewin` on real bundles, read back by a reader written here from the format.

The reader (`read_intunewin`) knows only what IntuneWinAppUtil's format says (docs/facts.md §9; svrooij/ContentPrep,
manchtools/open-package): the outer zip's two members, Detection.xml's elements, and the inner file laid out as
HMAC-SHA256(MacKey, IV ‖ ciphertext) ‖ IV ‖ AES-256-CBC/PKCS7 ciphertext. It imports nothing of ort-bundler.

The bundle is the win quickstart with a VC_redist.x64.exe STAND-IN (Microsoft's cannot be downloaded here: a
mingw-built x64 PE with a version resource, tests/integration/real_wheels/test_windows_payload.py), so both packages
are written.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import json
import subprocess
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from fixtures.cli import MANIFESTS, run_cli
from fixtures.wine import mingw_gcc  # noqa: F401  (fixture)
from integration.real_wheels.test_windows_payload import manifest_with_vc_redist, vc_redist_stand_in

from bundler.errors import BuildError
from bundler.platforms.windows.intunewin import Detection, EncryptionInfo, MsiInfo, check_setup_file, detection_xml

STEM = "quickstart-win-1.0.0-win_amd64"
APP = f"{STEM}.intunewin"
VC = "quickstart-win-1.0.0-vcredist-x64.intunewin"
CONTENTS = "IntuneWinPackage/Contents/IntunePackage.intunewin"
DETECTION = "IntuneWinPackage/Metadata/Detection.xml"
VC_KEY = "HKEY_LOCAL_MACHINE\\SOFTWARE\\Microsoft\\VisualStudio\\14.0\\VC\\Runtimes\\x64"
integration = pytest.mark.integration


# -- the reader ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Read:
    detection: ET.Element
    inner: bytes  # the decrypted inner zip
    blob: bytes  # the encrypted file as stored


def read_intunewin(path: Path) -> Read:
    with zipfile.ZipFile(path) as outer:
        files = {i.filename for i in outer.infolist() if not i.is_dir()}
        assert files == {CONTENTS, DETECTION}
        detection = ET.fromstring(outer.read(DETECTION))
        blob = outer.read(CONTENTS)
    assert detection.tag == "ApplicationInfo" and detection.findtext("FileName") == "IntunePackage.intunewin"
    info = detection.find("EncryptionInfo")
    assert info is not None
    assert info.findtext("ProfileIdentifier") == "ProfileVersion1" and info.findtext("FileDigestAlgorithm") == "SHA256"
    key, mac_key, iv, mac, digest = (base64.b64decode(info.findtext(tag) or "") for tag in
                                     ("EncryptionKey", "MacKey", "InitializationVector", "Mac", "FileDigest"))
    assert (len(key), len(mac_key), len(iv), len(mac), len(digest)) == (32, 32, 16, 32, 32)
    assert blob[:32] == mac and blob[32:48] == iv
    assert hmac.compare_digest(hmac.new(mac_key, blob[32:], hashlib.sha256).digest(), mac)  # over IV ‖ ciphertext
    decryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
    unpadder = padding.PKCS7(128).unpadder()
    inner = unpadder.update(decryptor.update(blob[48:]) + decryptor.finalize()) + unpadder.finalize()
    assert hashlib.sha256(inner).digest() == digest
    assert len(inner) == int(detection.findtext("UnencryptedContentSize") or -1)
    return Read(detection=detection, inner=inner, blob=blob)


def zip_files(data: bytes, prefix: str = "") -> dict[str, bytes]:
    """The files of a zip (below `prefix`, which is cut off), by name."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {i.filename[len(prefix):]: archive.read(i) for i in archive.infolist()
                if not i.is_dir() and i.filename.startswith(prefix)}


# -- fixtures: one real bundle, packaged twice -------------------------------------------------------------------


@pytest.fixture(scope="module")
def win_zip(bundler_cache: Path, mingw_gcc: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("win-vc")
    exe = vc_redist_stand_in(mingw_gcc, work / "exe", "14.50.35719.0")
    manifest = manifest_with_vc_redist(work, exe)
    run_cli("fetch", "-q", "--cache", str(bundler_cache), str(manifest))
    proc = run_cli("build", "--json", "--cache", str(bundler_cache), "-o", str(work / "dist"), str(manifest))
    return Path(json.loads(proc.stdout)["zip"])


def package(bundle: Path, out: Path, cache: Path, *extra: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_cli("package", "--cache", str(cache), str(bundle), "-o", str(out), *extra, check=check)


@pytest.fixture(scope="module")
def packaged(win_zip: Path, bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, dict]]:
    """Two runs of `package --intunewin --json` into two folders: (folder, report) each."""
    runs = []
    for _ in range(2):
        out = tmp_path_factory.mktemp("intune")
        runs.append((out, json.loads(package(win_zip, out, bundler_cache, "--intunewin", "--json").stdout)))
    return runs


def by_role(report: dict) -> dict[str, dict]:
    return {p["role"]: p for p in report["packages"]}


# -- the packages ------------------------------------------------------------------------------------------------


@integration
def test_the_app_package_decrypts_to_the_whole_bundle_with_install_cmd_at_its_root(win_zip: Path,
                                                                                   packaged: list) -> None:
    out, report = packaged[0]
    read = read_intunewin(out / APP)
    assert read.detection.findtext("SetupFile") == "install.cmd"
    assert read.detection.get("ToolVersion", "").count(".") == 3
    assert read.detection.findtext("Name") == "quickstart-win 1.0.0" and read.detection.find("MsiInfo") is None
    inner = zip_files(read.inner)
    assert "install.cmd" in inner
    assert inner == zip_files(win_zip.read_bytes(), f"{STEM}/")  # every bundle file, byte for byte, nothing else
    app = by_role(report)["app"]
    assert app["inner_zip"] == {"sha256": hashlib.sha256(read.inner).hexdigest(), "size": len(read.inner)}
    assert app["setup_file"] == "install.cmd"


@integration
def test_the_inner_zip_is_byte_identical_across_runs_while_the_packages_differ(packaged: list) -> None:
    (first, report1), (second, report2) = packaged
    for name in (APP, VC):
        one, two = read_intunewin(first / name), read_intunewin(second / name)
        assert one.inner == two.inner
        assert one.blob != two.blob  # fresh keys and IV every run, by the format's design
        assert (first / name).read_bytes() != (second / name).read_bytes()
    inner = [{p["role"]: p["inner_zip"] for p in r["packages"]} for r in (report1, report2)]
    assert inner[0] == inner[1]
    assert report1["packages"][0]["sha256"] != report2["packages"][0]["sha256"]


@integration
def test_each_output_has_its_sha256_and_the_folder_holds_nothing_else(packaged: list) -> None:
    out, report = packaged[0]
    assert sorted(p.name for p in out.iterdir()) == sorted([APP, f"{APP}.sha256", VC, f"{VC}.sha256"])
    for entry in report["packages"]:
        path = Path(entry["path"])
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert (entry["sha256"], entry["size"]) == (digest, path.stat().st_size)
        assert Path(entry["sha256_file"]).read_text() == f"{digest}  {path.name}\n"  # sha256sum -c format


@integration
def test_the_vc_redist_package_holds_only_the_redistributable_with_its_rule(win_zip: Path, packaged: list) -> None:
    out, report = packaged[0]
    read = read_intunewin(out / VC)
    with zipfile.ZipFile(win_zip) as archive:
        exe = archive.read(f"{STEM}/payload/vc_redist/VC_redist.x64.exe")
        minimum = json.loads(archive.read(f"{STEM}/bundle.json"))["vc_runtime_min"]
    assert read.detection.findtext("SetupFile") == "VC_redist.x64.exe"
    assert zip_files(read.inner) == {"VC_redist.x64.exe": exe}
    vc = by_role(report)["vc_redist"]["win32_app"]
    assert vc["install_command"] == "VC_redist.x64.exe /install /quiet /norestart"
    assert {c["returnCode"]: c["type"] for c in vc["return_codes"]} == {
        0: "success", 1638: "success", 3010: "softReboot", 1641: "hardReboot", 1618: "retry"}
    rules = {r["valueName"]: r for r in vc["detection"]}
    assert {r["keyPath"] for r in vc["detection"]} == {VC_KEY}
    assert (rules["Installed"]["operator"], rules["Installed"]["detectionValue"]) == ("equal", "1")
    assert rules["Bld"]["operator"] == "greaterThanOrEqual"
    assert rules["Bld"]["detectionValue"] == minimum.split(".")[2]  # the bundle's minimum, not the exe's version


@integration
def test_the_app_settings_name_the_engine_s_commands_codes_rule_and_dependencies(packaged: list) -> None:
    app = by_role(packaged[0][1])["app"]["win32_app"]
    assert (app["install_command"], app["uninstall_command"]) == ("install.cmd", "uninstall.cmd")
    assert {c["returnCode"]: c["type"] for c in app["return_codes"]} == {
        0: "success", 3010: "softReboot", 1618: "retry", 15: "retry"}
    assert app["detection"] == [{"type": "registry", "keyPath": "HKEY_LOCAL_MACHINE\\SOFTWARE\\ort-bundler\\quickstart-win",
                                 "valueName": "Version", "detectionType": "string", "operator": "equal",
                                 "detectionValue": "1.0.0", "check32BitOn64System": False}]
    assert app["requirements"]["architecture"] == "x64" and app["requirements"]["minimum_free_disk_mb"] > 0
    vc, python = app["dependencies"]
    assert vc["package"] == VC and {r["valueName"] for r in vc["detection"]} == {"Installed", "Bld"}
    assert python["name"] == "Python 3.11 (64-bit, all users)" and python["package"] is None  # no [python] runtime


# -- refusals: each one exits with its code and leaves nothing ------------------------------------------------------


@integration
def test_a_linux_bundle_is_refused_with_exit_9_and_nothing_written(bundler_cache: Path, tmp_path: Path) -> None:
    built = run_cli("build", "--json", "--cache", str(bundler_cache), "-o", str(tmp_path / "dist"),
                    str(MANIFESTS / "quickstart-linux.toml"))
    out = tmp_path / "out"
    proc = package(Path(json.loads(built.stdout)["zip"]), out, bundler_cache, "--intunewin", check=False)
    assert proc.returncode == 9
    assert "a bundle for linux_x86_64, expected one for win_amd64" in proc.stderr
    assert len([line for line in proc.stderr.strip().splitlines() if not line.startswith("package: ")]) == 1  # less the stage lines
    assert not out.exists()  # made for this run, and removed with it
    out.mkdir()
    assert package(Path(json.loads(built.stdout)["zip"]), out, bundler_cache, "--intunewin", check=False).returncode == 9
    assert list(out.iterdir()) == []  # an existing folder stays, empty as it was


@integration
def test_a_tampered_bundle_is_refused_with_exit_8_and_nothing_written(win_zip: Path, bundler_cache: Path,
                                                                      tmp_path: Path) -> None:
    tampered = tmp_path / win_zip.name
    with zipfile.ZipFile(win_zip) as old, zipfile.ZipFile(tampered, "w") as new:
        for info in old.infolist():
            data = old.read(info)
            new.writestr(info, data + b"rem tampered\r\n" if info.filename == f"{STEM}/install.cmd" else data)
    out = tmp_path / "out"
    proc = package(tampered, out, bundler_cache, "--intunewin", check=False)
    assert proc.returncode == 8
    assert "does not verify (altered (hash differs): install.cmd)" in proc.stderr
    assert not out.exists()


def test_an_output_that_is_a_file_is_refused_with_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.write_text("not a folder")
    proc = package(tmp_path / "any.zip", out, tmp_path / "cache", "--intunewin", check=False)
    assert proc.returncode == 2
    assert f"-o {out}: found a file, expected a folder" in proc.stderr
    assert out.read_text() == "not a folder"


def test_an_msi_of_a_bundle_without_its_interpreter_is_refused_with_exit_9(win_zip: Path, bundler_cache: Path,
                                                                           tmp_path: Path) -> None:
    """The tree of a bundle that runs on the machine's Python depends on that machine: no MSI can carry it."""
    out = tmp_path / "out"
    proc = package(win_zip, out, bundler_cache, "--msi", "--intunewin", check=False)
    assert proc.returncode == 9, proc.stderr
    assert "an MSI needs a bundle that carries its interpreter: add [python] runtime" in proc.stderr
    assert len([line for line in proc.stderr.strip().splitlines() if not line.startswith("package: ")]) == 1 and not out.exists()


def test_a_package_format_is_required_and_signing_needs_the_msi(tmp_path: Path) -> None:
    proc = package(tmp_path / "any.zip", tmp_path / "out", tmp_path / "cache", check=False)
    assert proc.returncode == 2 and "found no package format, expected --msi, --intunewin or both" in proc.stderr
    proc = package(tmp_path / "any.zip", tmp_path / "out", tmp_path / "cache", "--intunewin", "--cert", "c.pem",
                   "--key", "k.pem", check=False)
    assert proc.returncode == 2 and "the signing options sign the MSI: give --msi" in proc.stderr
    assert not (tmp_path / "out").exists()


# -- Detection.xml's MsiInfo block, from a record (pure) -----------------------------------------------------------

PRODUCT = "{0F4E9C1A-2B3D-4E5F-8A9B-0C1D2E3F4A5B}"
UPGRADE = "{A1B2C3D4-E5F6-4789-ABCD-EF0123456789}"


def encryption() -> EncryptionInfo:
    return EncryptionInfo(encryption_key=bytes(32), mac_key=bytes(range(32)), iv=bytes(16), mac=b"m" * 32,
                          file_digest=hashlib.sha256(b"inner").digest(), size=5)


def test_the_msi_block_follows_encryption_info_in_the_tool_s_order() -> None:
    msi = MsiInfo(product_code=PRODUCT, product_version="1.0.0", upgrade_code=UPGRADE, publisher="Contoso & Co",
                  contains_system_registry_keys=True)
    text = detection_xml(Detection(name="app 1.0.0", setup_file="app-1.0.0-win_amd64.msi", encryption=encryption(),
                                   msi=msi))
    assert text == detection_xml(Detection(name="app 1.0.0", setup_file="app-1.0.0-win_amd64.msi",
                                           encryption=encryption(), msi=msi))  # deterministic
    root = ET.fromstring(text)
    assert [child.tag for child in root] == ["Name", "UnencryptedContentSize", "FileName", "SetupFile",
                                             "EncryptionInfo", "MsiInfo"]
    block = root.find("MsiInfo")
    assert block is not None
    assert [(child.tag, child.text) for child in block] == [
        ("MsiProductCode", PRODUCT), ("MsiProductVersion", "1.0.0"), ("MsiPublisher", "Contoso & Co"),
        ("MsiUpgradeCode", UPGRADE), ("MsiExecutionContext", "System"), ("MsiRequiresLogon", "false"),
        ("MsiRequiresReboot", "false"), ("MsiIsMachineInstall", "true"), ("MsiIsUserInstall", "false"),
        ("MsiIncludesServices", "false"), ("MsiIncludesODBCDataSource", "false"),
        ("MsiContainsSystemRegistryKeys", "true"), ("MsiContainsSystemFolders", "false")]
    info = root.find("EncryptionInfo")
    assert info is not None and base64.b64decode(info.findtext("MacKey") or "") == bytes(range(32))
    assert root.findtext("UnencryptedContentSize") == "5"


@pytest.mark.parametrize(("field", "value"), [("product_code", "0F4E9C1A-2B3D-4E5F-8A9B-0C1D2E3F4A5B"),
                                              ("upgrade_code", UPGRADE.lower()), ("execution_context", "Machine")])
def test_a_malformed_msi_record_is_refused_naming_the_field(field: str, value: str) -> None:
    fields = {"product_code": PRODUCT, "product_version": "1.0.0", "upgrade_code": UPGRADE, field: value}
    with pytest.raises(BuildError, match=f"MsiInfo {field}: found {value!r}"):
        MsiInfo(**fields)


def test_the_setup_file_must_be_a_file_at_the_folder_s_root(tmp_path: Path) -> None:
    names = ["install.cmd", "payload/vc_redist/VC_redist.x64.exe"]
    check_setup_file(names, "install.cmd", folder=tmp_path)
    for wrong in ("payload/vc_redist/VC_redist.x64.exe", "setup.exe"):
        with pytest.raises(BuildError, match=f"setup file {wrong!r} is not a file at the folder's root, expected one "
                                             "of: install.cmd"):
            check_setup_file(names, wrong, folder=tmp_path)
