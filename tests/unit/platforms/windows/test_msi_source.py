"""The MSI's WiX source from an image listing (pure): versions, GUIDs, the tree, actions and conditions."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from bundler.errors import UnsupportedError
from bundler.platforms.windows.msi_source import SEQUENCE, MsiProduct, guid, product_version, wxs

NS = {"w": "http://schemas.microsoft.com/wix/2006/wi"}


def product(**changes: object) -> MsiProduct:
    values: dict[str, object] = {
        "name": "app", "version": "1.2.3", "product_version": "1.2.3", "publisher": "Example",
        "product_code": guid("app", "product", "1.2.3"), "upgrade_code": guid("app", "upgrade"),
        "bundle_sha256": "ab" * 32, "interpreter": "python/python.exe", "vc_runtime_min": (14, 40, 33810)}
    values.update(changes)
    return MsiProduct(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(("version", "expected"), [("1.2.3", "1.2.3"), ("1.2", "1.2.0"), ("7", "7.0.0"),
                                                   ("255.255.65535", "255.255.65535")])
def test_plain_releases_map_to_three_numbers(version: str, expected: str) -> None:
    assert product_version(version, source="bundle.json") == expected


@pytest.mark.parametrize("version", ["1.0.0rc1", "1.0.0.post1", "1.0.0.dev2", "1.0.0+local", "1.0.0.4", "1!1.0",
                                     "256.0.0", "1.256.0", "1.0.65536", "not a version"])
def test_versions_msi_cannot_tell_apart_are_refused_naming_the_file(version: str) -> None:
    with pytest.raises(UnsupportedError, match=re.escape(f"bundle.json: version {version!r}")):
        product_version(version, source="bundle.json")


def test_guids_are_stable_upper_case_and_distinct() -> None:
    assert guid("app", "upgrade") == guid("app", "upgrade")
    assert guid("app", "product", "1.0.0") != guid("app", "product", "1.0.1")
    code = guid("app", "file", "python/python.exe")
    assert code.startswith("{") and code.endswith("}") and code == code.upper() and len(code) == 38


def parsed(files: list[str], **changes: object) -> ET.Element:
    return ET.fromstring(wxs(product(**changes), files))


def test_every_file_is_a_64_bit_component_under_installdir_with_its_folders() -> None:
    files = ["python/python.exe", "python/Lib/site-packages/x/__init__.py", "run.cmd", "receipt.json"]
    root = parsed(files)
    installdir = root.find(".//w:Directory[@Id='INSTALLDIR']", NS)
    assert installdir is not None and installdir.get("Name") == "app"
    sources = sorted(f.get("Source") or "" for f in root.iterfind(".//w:File", NS))
    assert sources == sorted(files)
    components = list(root.iterfind(".//w:Component", NS))
    assert all(c.get("Win64") == "yes" for c in components)
    assert len({c.get("Guid") for c in components}) == len(components) == len(files) + 1  # and the detection value
    nested = installdir.find("w:Directory[@Name='python']/w:Directory[@Name='Lib']/w:Directory[@Name='SITE-P~1|site-packages']", NS)
    assert nested is not None
    assert {r.get("Name"): r.get("Value") for r in root.iterfind(".//w:RegistryValue", NS)}["Route"] == "msi"


def test_the_self_check_runs_deferred_as_system_between_the_files_and_finalize() -> None:
    root = parsed(["python/python.exe"])
    actions = {a.get("Id"): a for a in root.iterfind(".//w:CustomAction", NS)}
    finish = actions["OrtFinish"]
    assert finish.get("Execute") == "deferred" and finish.get("Impersonate") == "no" and finish.get("Return") == "check"
    assert '--root "[INSTALLDIR]."' in (finish.get("ExeCommand") or "")  # no backslash before the closing quote
    assert actions["OrtForget"].get("Return") == "ignore"
    custom = {c.get("Action"): (int(c.get("Sequence") or 0), c.text) for c in root.iterfind(".//w:Custom", NS)}
    assert 4000 < custom["OrtFinish"][0] < 6600 and custom["OrtFinish"][1] == 'NOT REMOVE~="ALL" AND NOT NOSELFCHECK'
    # Removal, not the removal a major upgrade does: an upgrade rolled back must find the old version detected.
    assert custom["OrtForget"][0] < 3500 and custom["OrtForget"][1] == 'REMOVE~="ALL" AND NOT UPGRADINGPRODUCTCODE'
    assert SEQUENCE["remove_existing"] > 1500
    assert custom["OrtSaveInstallDir"][0] < 50 < custom["OrtRestoreInstallDir"][0]  # around AppSearch
    assert custom["OrtRestoreInstallDir"][1] == "ORT_CMDLINE_INSTALLDIR"
    searches = {s.get("Id"): s.get("Name") for s in root.iterfind(".//w:RegistrySearch", NS)}
    assert searches["SearchINSTALLDIR"] == "InstallDir"


def test_launch_conditions_compare_the_vc_runtime_in_fixed_widths_and_refuse_the_zip_route() -> None:
    conditions = [c.text or "" for c in parsed(["python/python.exe"]).iterfind("w:Product/w:Condition", NS)]
    assert any('VCRT_MINOR = "#40" AND VCRT_BLD >= "#33810"' in c for c in conditions)
    assert 'Installed OR ORT_ROUTE <> "zip"' in conditions
    no_vc = [c.text or "" for c in parsed(["python/python.exe"], vc_runtime_min=None).iterfind("w:Product/w:Condition", NS)]
    assert not any("VCRT" in c for c in no_vc)


def test_an_image_without_the_interpreter_is_refused() -> None:
    with pytest.raises(UnsupportedError, match="the install image has no python/python.exe"):
        wxs(product(), ["run.cmd"])


def test_a_missing_tool_or_python_is_named_with_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from bundler.errors import InputUnavailableError
    from bundler.platforms.windows.msi import compiler_python, tool

    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(InputUnavailableError, match="wixl is not installed; package --msi needs it: install the "
                                                    "Debian package wixl"):
        tool("wixl")
    with pytest.raises(UnsupportedError, match="the bundle's bytecode needs Python 3.99 .* put python3.99 on PATH"):
        compiler_python("3.99")


# -- issue 34: the install folder's CreateFolder row, and text wixl cannot store -------------------------------


def test_installdir_is_a_created_folder_of_the_detection_component() -> None:
    """The MsiLockPermissionsEx row (added by msibuild) names INSTALLDIR's CreateFolder row, made here."""
    root = parsed(["python/python.exe", "receipt.json"])
    detection = root.find(".//w:Directory[@Id='INSTALLDIR']/w:Component[@Id='Detection']", NS)
    assert detection is not None and detection.find("w:CreateFolder", NS) is not None


@pytest.mark.parametrize(("changes", "files", "named"), [
    ({"publisher": "Müller 株式会社"}, [], "bundle.json: [bundle] publisher 'Müller 株式会社' holds '株', '式', '会', '社'"),
    ({"publisher": "Łódź Software"}, [], "holds 'Ł', 'ź'"),
    ({"name": "appΩ"}, [], "bundle.json: name 'appΩ' holds 'Ω'"),
    ({}, ["models/模型.onnx"], "the install image's file 'models/模型.onnx' holds '模', '型'"),
])
def test_text_outside_windows_1252_is_refused_before_wixl(changes: dict[str, str], files: list[str],
                                                          named: str) -> None:
    with pytest.raises(UnsupportedError) as refused:
        wxs(product(**changes), ["python/python.exe", "receipt.json", *files])
    assert named in str(refused.value) and "Windows-1252" in str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("publisher", ["Example Corp", "Müller & Söhne GmbH", "Œuvre € ‘quoted’", "Zoë"])
def test_windows_1252_text_is_accepted(publisher: str) -> None:
    root = parsed(["python/python.exe", "receipt.json"], publisher=publisher)
    assert root.find("w:Product", NS).get("Manufacturer") == publisher  # type: ignore[union-attr]


# -- issue 40: short names (ICE03) --------------------------------------------------------------------------------


def test_a_long_name_gets_a_deterministic_8_3_short_name_unique_in_its_folder() -> None:
    from bundler.platforms.windows.msi_source import short_names

    names = ["onnxruntime_pybind11_state.pyd", "onnxruntime_a.pyd", "python.exe", "README", "ONNXRU~1.PYD",
             "site-packages", "x y+z.txt", ".gitignore", "A.B.C.dll", "Müller.txt"]
    assert short_names(names) == {
        "python.exe": "python.exe", "README": "README", "ONNXRU~1.PYD": "ONNXRU~1.PYD",  # valid 8.3 names as they are
        "onnxruntime_a.pyd": "ONNXRU~2.PYD|onnxruntime_a.pyd",  # ~1 is another name of the folder
        "onnxruntime_pybind11_state.pyd": "ONNXRU~3.PYD|onnxruntime_pybind11_state.pyd",
        "site-packages": "SITE-P~1|site-packages", "x y+z.txt": "XY_Z~1.TXT|x y+z.txt",
        ".gitignore": "GITIGN~1|.gitignore", "A.B.C.dll": "ABC~1.DLL|A.B.C.dll", "Müller.txt": "M_LLER~1.TXT|Müller.txt"}
    assert short_names(list(reversed(names))) == short_names(names)  # the order given does not matter
    many = short_names([f"module_{n:02d}.py" for n in range(12)])
    assert many["module_08.py"] == "MODULE~9.PY|module_08.py" and many["module_09.py"] == "MODUL~10.PY|module_09.py"


def test_every_file_and_folder_name_in_the_source_is_8_3_or_short_and_long() -> None:
    files = ["python/python.exe", "python/Lib/site-packages/onnxruntime/capi/onnxruntime_pybind11_state.pyd",
             "python/Lib/site-packages/onnxruntime/capi/onnxruntime_providers_shared.dll", "run.cmd", "receipt.json"]
    root = parsed(files, name="my app")
    names = {element.get("Id"): element.get("Name") for element in root.iterfind(".//w:Directory", NS)}
    assert names["INSTALLDIR"] == "MYAPP~1|my app"
    files_named = sorted(element.get("Name") or "" for element in root.iterfind(".//w:File", NS))
    assert files_named == ["ONNXRU~1.DLL|onnxruntime_providers_shared.dll", "ONNXRU~1.PYD|onnxruntime_pybind11_state.pyd",
                           "RECEIP~1.JSO|receipt.json", "python.exe", "run.cmd"]
    assert "SITE-P~1|site-packages" in names.values() and "ONNXRU~1|onnxruntime" in names.values()
