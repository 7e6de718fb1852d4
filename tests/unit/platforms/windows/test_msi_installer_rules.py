"""The MSI follows Windows Installer's own rules (issue 40's MSI items): a verbose msiexec log in the Win32 app's
commands; Add/Remove Programs' InstallLocation, EstimatedSize and a repair; versions in the File table and MD5
hashes only for unversioned files; a ProductCode per content with a same-version replace; GUIDs in a namespace
the organisation owns (`[bundle] upgrade_code`).

The tables are built by real wixl and msibuild from a small image and read back by msitools' `msiinfo`. The
versioned file is a real PE with a version resource: Wine's own kernel32.dll (any PE would do; it is read, never
run). python.exe is a STAND-IN ("MZ" and nothing else): no PE, so unversioned; the tables are only read.
What only Windows shows (Windows Installer writing InstallLocation and EstimatedSize under the Uninstall key,
and `msiexec /f` replacing a file by these rules) is listed in docs/how-to/msi.md.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import struct
import subprocess
import uuid
from dataclasses import fields
from pathlib import Path

import pytest
from fixtures.wine import require

from bundler.errors import ManifestError
from bundler.integrations import tools
from bundler.manifest import load
from bundler.platforms.windows.msi import legacy_upgrade_code, missing_upgrade_code, msi_product, write_database
from bundler.platforms.windows.msi_source import NAMESPACE, SEQUENCE, guid, identifier, wxs
from bundler.platforms.windows.win32app import msi_app
from bundler.readers.pe_identity import file_version
from bundler.shipped.ort_bundle.bundle_info import BundleInfo
from bundler.shipped.ort_bundle.records import InstallPlan, VenvPlan

WINE_DLL = Path("/usr/lib/x86_64-linux-gnu/wine/x86_64-windows/kernel32.dll")
OWNED = "8C0F6F3E-2B1A-4D5E-9F00-1A2B3C4D5E6F"
#: A manifest that parses (its inputs are only named, never fetched), with one more [bundle] line.
MANIFEST = """[bundle]
name = "app"
version = "1.2.3"
platform = "win_amd64"
python = "3.11"
{extra}

[ort]
version = "1.23.1"
capi = {{ requirement = "onnxruntime==1.23.1", sha256 = "{sha}" }}
""".replace("{sha}", "a" * 64)
NS = {"w": "http://schemas.microsoft.com/wix/2006/wi"}


def bundle_info(**bundle: object) -> BundleInfo:
    """A bundle.json record with what the MSI reads: name, version, the manifest's [bundle] table."""
    values: dict[str, object] = {f.name: None for f in fields(BundleInfo)}
    values.update(name="app", version="1.2.3", platform="win_amd64", python="3.11", python_tag="cp311",
                  manifest={"bundle": {"name": "app", "version": "1.2.3", **bundle}}, vc_runtime_min=None,
                  python_runtime={"kind": "embeddable"})
    return BundleInfo(**values)  # type: ignore[arg-type]


def plan() -> InstallPlan:
    venv = VenvPlan(dir="python", interpreter="python.exe", scripts="Scripts", site_packages="Lib/site-packages",
                    script_kind="win-amd64", wheels=(), requirements="requirements.txt", site_packages_files=())
    return InstallPlan(install_id="app-1.2.3", name="app", version="1.2.3", platform="win_amd64", python="3.11",
                       dll_path_variable="PATH", installer_wheel="installer.whl", venv=venv, copy=(), dll_dirs=())


def table(msi: Path, name: str) -> list[dict[str, str]]:
    lines = subprocess.run(["msiinfo", "export", str(msi), name], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[3:]]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """An MSI of a three-file image made by package's own write_database (real wixl and msibuild)."""
    for tool in (tools.WIXL, tools.MSIBUILD, tools.MSIINFO):
        require(tool)
    if not WINE_DLL.is_file():
        pytest.skip(f"{WINE_DLL} (Wine's kernel32.dll, the real versioned PE read here) is not installed")
    root = tmp_path_factory.mktemp("msi-rules")
    image = root / "image"
    (image / "python").mkdir(parents=True)
    (image / "python" / "python.exe").write_bytes(b"MZ")  # STAND-IN, never run: an unversioned file
    shutil.copyfile(WINE_DLL, image / "python" / "kernel32.dll")
    (image / "receipt.json").write_text('{"stand-in": "the tables only"}\n')
    files = ["python/python.exe", "python/kernel32.dll", "receipt.json"]
    product = msi_product(bundle_info(publisher="Example"), plan(), bundle_sha256="ab" * 32,
                          receipt=(image / "receipt.json").read_bytes(), source="bundle.json")
    work = root / "work"
    work.mkdir()
    write_database(product, files, image=image, output=root / "app.msi", work=work)
    return root / "app.msi", image, files


# -- 1. the Win32 app's commands log verbosely -------------------------------------------------------------------


def test_the_win32_app_commands_write_a_verbose_msiexec_log_in_intune_s_log_folder() -> None:
    app = msi_app(bundle_info(), msi_file="app-1.2.3-win_amd64.msi", product_code=guid("x"), payload_bytes=2**20,
                  vc_redist_package=None).to_json()
    folder = "%ProgramData%\\Microsoft\\IntuneManagementExtension\\Logs"
    assert app["install_command"] == ('msiexec /i "app-1.2.3-win_amd64.msi" /qn /norestart '
                                      f'/l*v "{folder}\\app-1.2.3-msiexec-install.log"')
    assert app["uninstall_command"] == (f'msiexec /x {guid("x")} /qn /norestart '
                                        f'/l*v "{folder}\\app-1.2.3-msiexec-uninstall.log"')


# -- 2. Add/Remove Programs ---------------------------------------------------------------------------------------


def test_add_remove_programs_gets_install_location_estimated_size_and_a_repair(
        built: tuple[Path, Path, list[str]]) -> None:
    msi, image, files = built
    properties = {row["Property"]: row["Value"] for row in table(msi, "Property")}
    assert "ARPNOREPAIR" not in properties and properties["ARPNOMODIFY"] == "1"
    size = sum((image / path).stat().st_size for path in files)
    assert properties["ARPSIZE"] == str(-(-size // 1024)) and int(properties["ARPSIZE"]) > 0
    actions = {row["Action"]: row for row in table(msi, "CustomAction")}
    location = actions["OrtArpInstallLocation"]
    assert int(location["Type"]) & 0x3F == 51  # set a property from formatted text
    assert location["Source"] == "ARPINSTALLLOCATION" and location["Target"] == "[INSTALLDIR]"
    sequence = {row["Action"]: int(row["Sequence"]) for row in table(msi, "InstallExecuteSequence")}
    assert sequence["CostFinalize"] < sequence["OrtArpInstallLocation"] == SEQUENCE["arp_location"]
    assert sequence["OrtArpInstallLocation"] < sequence["InstallValidate"] < sequence["InstallFinalize"]


# -- 3. repair: versions and hashes ------------------------------------------------------------------------------


def test_versioned_pe_files_carry_their_version_and_only_unversioned_files_a_hash(
        built: tuple[Path, Path, list[str]]) -> None:
    msi, image, files = built
    expected = file_version(image / "python" / "kernel32.dll")
    assert expected and re.fullmatch(r"\d+\.\d+\.\d+\.\d+", expected)
    versions = {row["File"]: row["Version"] for row in table(msi, "File")}
    assert versions == {identifier("f", "python/kernel32.dll"): expected, identifier("f", "python/python.exe"): "",
                        identifier("f", "receipt.json"): ""}
    hashes = {row["File_"]: tuple(int(row[f"HashPart{n}"]) for n in range(1, 5)) for row in table(msi, "MsiFileHash")}
    unversioned = ["python/python.exe", "receipt.json"]
    assert hashes == {identifier("f", path): struct.unpack("<4i", hashlib.md5((image / path).read_bytes()).digest())
                      for path in unversioned}


def test_a_file_that_is_no_pe_or_has_no_version_resource_has_no_version(tmp_path: Path) -> None:
    (tmp_path / "plain.dll").write_bytes(b"not a PE at all")
    assert file_version(tmp_path / "plain.dll") is None


# -- 4. ProductCode per content, same-version replace -----------------------------------------------------------


def test_two_contents_of_one_version_are_two_products_and_the_second_replaces_the_first(
        built: tuple[Path, Path, list[str]]) -> None:
    first = msi_product(bundle_info(), plan(), bundle_sha256="ab" * 32, receipt=b'{"files": 1}', source="b")
    second = msi_product(bundle_info(), plan(), bundle_sha256="cd" * 32, receipt=b'{"files": 2}', source="b")
    again = msi_product(bundle_info(), plan(), bundle_sha256="ab" * 32, receipt=b'{"files": 1}', source="b")
    assert first.product_code != second.product_code and first.product_code == again.product_code
    assert first.upgrade_code == second.upgrade_code
    assert first.product_code != guid("app", "product", "1.2.3")  # before: from name and version alone
    msi = built[0]
    [older] = [row for row in table(msi, "Upgrade") if row["ActionProperty"] == "OLDER_VERSION_FOUND"]
    assert older["VersionMax"] == "1.2.3" and int(older["Attributes"]) & 0x200  # msidbUpgradeAttributesVersionMaxInclusive
    [newer] = [row for row in table(msi, "Upgrade") if row["ActionProperty"] == "NEWER_VERSION_FOUND"]
    assert newer["VersionMin"] == "1.2.3" and not int(newer["Attributes"]) & 0x100  # a newer one only, not this


# -- 5. GUIDs the organisation owns -----------------------------------------------------------------------------


def test_upgrade_code_in_the_manifest_makes_the_upgrade_code_and_the_component_namespace() -> None:
    owned = msi_product(bundle_info(upgrade_code=OWNED.lower()), plan(), bundle_sha256="ab" * 32, receipt=b"r",
                        source="b")
    assert owned.upgrade_code == "{" + OWNED + "}" and owned.namespace == uuid.UUID(OWNED)
    assert missing_upgrade_code(bundle_info(upgrade_code=OWNED)) is None
    braced = msi_product(bundle_info(upgrade_code="{" + OWNED + "}"), plan(), bundle_sha256="ab" * 32, receipt=b"r",
                         source="b")
    assert braced.upgrade_code == owned.upgrade_code and braced.product_code == owned.product_code
    today = msi_product(bundle_info(), plan(), bundle_sha256="ab" * 32, receipt=b"r", source="b")
    assert today.upgrade_code == legacy_upgrade_code("app") == guid("app", "upgrade")  # what every MSI had
    # The value itself, as 4117c23's bundler/packaging/msi_source.py wrote it for a bundle named "app" (its
    # guid(name, "upgrade") in its own namespace): an MSI built before the key existed is found by this code.
    assert legacy_upgrade_code("app") == "{11A58047-FF98-527A-A861-6EA8D39AE41B}"
    assert today.namespace == NAMESPACE and owned.product_code != today.product_code
    files = ["python/python.exe"]
    mine = {c.get("Id"): c.get("Guid") for c in _components(wxs(owned, files))}
    theirs = {c.get("Id"): c.get("Guid") for c in _components(wxs(today, files))}
    assert mine.keys() == theirs.keys() and all(mine[key] != theirs[key] for key in mine)
    assert mine[identifier("c", "python/python.exe")] == guid("app", "file", "python/python.exe",
                                                              namespace=uuid.UUID(OWNED))


def _components(source: str) -> list:  # type: ignore[type-arg]
    import xml.etree.ElementTree as ET

    return ET.fromstring(source.split("\n", 1)[1]).findall(".//w:Component", NS)


def test_a_manifest_without_upgrade_code_keeps_today_s_code_and_the_warning_gives_the_line_to_add(
        tmp_path: Path) -> None:
    warning = missing_upgrade_code(bundle_info())
    code = guid("app", "upgrade")
    assert warning is not None
    line = f'upgrade_code = "{code.strip("{}")}"'
    assert line in warning and "[bundle]" in warning and "'app'" in warning
    # the line, added as the warning says, parses and keeps the same UpgradeCode
    manifest = tmp_path / "app.toml"
    manifest.write_text(MANIFEST.format(extra=line), encoding="utf-8")
    assert load(manifest).bundle.upgrade_code == code.strip("{}")
    kept = msi_product(bundle_info(upgrade_code=code.strip("{}")), plan(), bundle_sha256="ab" * 32, receipt=b"r",
                       source="b")
    assert kept.upgrade_code == code


def test_a_refused_msi_step_says_nothing_of_the_upgrade_code(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """package's own MSI step, on an unpacked bundle folder that holds nothing yet, stops at the missing
    install-plan.json: the upgrade-code warning is said only once an MSI was written (test_msi's packages show it
    on stderr), so a refusal stays one sentence, with or without [bundle] upgrade_code."""
    from bundler.commands.package import _msi
    from bundler.signing.layout import Unpacked

    (tmp_path / "bundle" / "app-1.2.3-win_amd64").mkdir(parents=True)
    unpacked = Unpacked(top="app-1.2.3-win_amd64", epoch=315532800, files={})
    for info in (bundle_info(), bundle_info(upgrade_code=OWNED)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="bundler"), pytest.raises(FileNotFoundError):
            _msi(info, unpacked, tmp_path, None, intunewin=False)
        assert "upgrade_code" not in caplog.text, caplog.text


@pytest.mark.parametrize("value", ["not-a-guid", "8C0F6F3E2B1A4D5E9F001A2B3C4D5E6F0", 42])
def test_a_bad_upgrade_code_is_refused_naming_the_key(tmp_path: Path, value: object) -> None:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    manifest = tmp_path / "app.toml"
    manifest.write_text(MANIFEST.format(extra=f"upgrade_code = {shown}"), encoding="utf-8")
    with pytest.raises(ManifestError, match=r"bundle\.upgrade_code.*a GUID"):
        load(manifest)


def test_init_writes_a_fresh_upgrade_code_each_time(tmp_path: Path) -> None:
    from bundler.operations.init import render_starter

    first, second = (render_starter(tmp_path / "app.toml", []) for _ in range(2))
    codes = [re.search(r'^upgrade_code = "([0-9A-F-]{36})"', text, re.MULTILINE) for text in (first, second)]
    assert codes[0] and codes[1] and codes[0].group(1) != codes[1].group(1)
    assert uuid.UUID(codes[0].group(1)).version == 4


# -- 6. INSTALLDIR kept in a full-UI install ---------------------------------------------------------------------


def test_a_command_line_installdir_is_saved_and_restored_around_appsearch_in_both_sequences(
        built: tuple[Path, Path, list[str]]) -> None:
    """In a full UI the client runs InstallUISequence, whose AppSearch put the remembered folder over a command-line
    INSTALLDIR before the server's sequence saved anything; the pair now runs around AppSearch in both tables,
    as plain type-51 actions (not wixl's 2099, a deferred action's bit, and not FirstSequence: the server's
    AppSearch must not replace what the client chose)."""
    msi = built[0]
    for name in ("InstallUISequence", "InstallExecuteSequence"):
        rows = {row["Action"]: row for row in table(msi, name)}
        save, search, restore = (int(rows[action]["Sequence"])
                                 for action in ("OrtSaveInstallDir", "AppSearch", "OrtRestoreInstallDir"))
        assert save < search < restore < int(rows["LaunchConditions"]["Sequence"]), name
        assert rows["OrtSaveInstallDir"]["Condition"] == "" and \
            rows["OrtRestoreInstallDir"]["Condition"] == "ORT_CMDLINE_INSTALLDIR", name
    actions = {row["Action"]: row for row in table(msi, "CustomAction")}
    assert (actions["OrtSaveInstallDir"]["Source"], actions["OrtSaveInstallDir"]["Target"]) == \
        ("ORT_CMDLINE_INSTALLDIR", "[INSTALLDIR]")
    assert (actions["OrtRestoreInstallDir"]["Source"], actions["OrtRestoreInstallDir"]["Target"]) == \
        ("INSTALLDIR", "[ORT_CMDLINE_INSTALLDIR]")
    assert {int(actions[a]["Type"]) for a in ("OrtSaveInstallDir", "OrtRestoreInstallDir", "OrtArpInstallLocation")} \
        == {51}


# -- 7. files in use: Restart Manager on ------------------------------------------------------------------------


def test_restart_manager_is_left_on_so_a_file_in_use_is_freed_before_it_is_replaced(
        built: tuple[Path, Path, list[str]]) -> None:
    """MSIRESTARTMANAGERCONTROL=Disable made an upgrade while run.cmd held onnxruntime.dll schedule the
    replacement for the reboot; without it (and without MSIRMSHUTDOWN, default 0) Windows Installer uses Restart
    Manager and a silent install closes the process. What only Windows shows is in docs/how-to/msi.md."""
    properties = {row["Property"]: row["Value"] for row in table(built[0], "Property")}
    assert not {"MSIRESTARTMANAGERCONTROL", "MSIRMSHUTDOWN", "MSIDISABLERMRESTART"} & properties.keys(), properties
    assert properties["ARPNOMODIFY"] == "1"  # the table read is the real one


# -- 8. INSTALLDIR checked before anything changes ---------------------------------------------------------------


def test_installdir_is_measured_and_refused_after_costfinalize_and_before_installvalidate(
        built: tuple[Path, Path, list[str]]) -> None:
    """MSI conditions have no length and no character class: an inline JScript action (37, its failure ignored:
    0x40) measures INSTALLDIR, two type-51 actions name the problem, a type-19 action ends the install with it.
    The limit is MAX_PATH (259 characters) less the deepest file; Wine's msiexec runs the script (test_msi.py)."""
    msi, _, files = built
    limit = 259 - max(len(path) for path in files)  # INSTALLDIR ends in a backslash: the file's path follows it
    actions = {row["Action"]: row for row in table(msi, "CustomAction")}
    rows = {row["Action"]: row for row in table(msi, "InstallExecuteSequence")}
    order = ["CostFinalize", "OrtMeasureInstallDir", "OrtInstallDirTooLong", "OrtInstallDirNotAscii",
             "OrtRefuseInstallDir", "InstallValidate", "InstallInitialize", "RemoveExistingProducts"]
    assert sorted(order, key=lambda action: int(rows[action]["Sequence"])) == order
    measure = actions["OrtMeasureInstallDir"]
    assert int(measure["Type"]) == 37 | 0x40 and rows["OrtMeasureInstallDir"]["Condition"] == 'NOT REMOVE~="ALL"'
    assert 'Session.Property("INSTALLDIR")' in measure["Target"] and "c>126||c==59" in measure["Target"]
    assert not {"[", "{"} & set(measure["Target"])  # nothing formatted text would read
    assert rows["OrtInstallDirTooLong"]["Condition"] == f"OrtInstallDirLength > {limit}"
    assert rows["OrtInstallDirNotAscii"]["Condition"] == "OrtInstallDirChars"
    for action in ("OrtInstallDirTooLong", "OrtInstallDirNotAscii"):
        assert int(actions[action]["Type"]) == 51 and actions[action]["Source"] == "OrtInstallDirProblem"
        assert actions[action]["Target"].startswith("INSTALLDIR [INSTALLDIR] ")
    assert f"at most {limit} characters" in actions["OrtInstallDirTooLong"]["Target"]
    refuse = actions["OrtRefuseInstallDir"]
    assert int(refuse["Type"]) == 19 and refuse["Target"] == "[OrtInstallDirProblem]; nothing was changed"
    assert rows["OrtRefuseInstallDir"]["Condition"] == "OrtInstallDirProblem"
