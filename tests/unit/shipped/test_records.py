"""One definition of bundle.json: the build writes it, the target reads it back, and every reader in the
rendered scripts and the shipped Python asks only for keys the definition has."""

from __future__ import annotations

import ast
import json
import re
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli
from integration.wine.test_scripts_windows import CONTEXTS

from bundler.assembly.render import render_scripts
from bundler.shipped.ort_bundle import bundle_info
from bundler.shipped.ort_bundle.bundle_info import BUNDLE_FORMAT, KEYS, BundleInfo, BundleInfoError

TARGET = Path(bundle_info.__file__).parent
# The build's plumbing that bundle.json once carried; users and tools never needed it.
PLUMBING = {"gpu_dll_dirs", "gpu_preload", "vc_redist_file", "dll_dirs", "site_packages"}


@pytest.mark.integration
@pytest.mark.parametrize("name", ["quickstart-linux.toml", "quickstart-win.toml"])
def test_the_built_bundle_json_reads_back_through_its_definition(name: str, bundler_cache: Path,
                                                                 tmp_path: Path) -> None:
    proc = run_cli("build", "--json", "--cache", str(bundler_cache), "-o", str(tmp_path), str(MANIFESTS / name))
    zip_path = Path(json.loads(proc.stdout)["zip"])
    with zipfile.ZipFile(zip_path) as archive:
        [member] = [n for n in archive.namelist() if n.endswith("/bundle.json")]
        written = json.loads(archive.read(member))
    info = BundleInfo.from_json(written)
    assert info.to_json() == written
    assert written["format"] == BUNDLE_FORMAT and set(written) == set(KEYS)
    assert not PLUMBING & set(written)
    assert info.ort is not None and info.ort["version"] == "1.23.1"
    assert info.platform == ("win_amd64" if "win" in name else "linux_x86_64")
    assert (info.vc_runtime_min is not None) == ("win" in name)


def test_a_reader_refuses_another_format_and_unknown_or_missing_keys(tmp_path: Path) -> None:
    good = {key: None for key in KEYS} | {"format": BUNDLE_FORMAT}
    BundleInfo.from_json(good)
    with pytest.raises(BundleInfoError, match=f"format is 1, expected {BUNDLE_FORMAT}"):
        BundleInfo.from_json({**good, "format": 1})
    with pytest.raises(BundleInfoError, match=r"unknown keys \['gpu_preload'\]"):
        BundleInfo.from_json({**good, "gpu_preload": []})
    missing = dict(good)
    del missing["models"]
    with pytest.raises(BundleInfoError, match=r"missing keys \['models'\]"):
        BundleInfo.from_json(missing)
    (tmp_path / "bundle.json").write_text("{not json")
    with pytest.raises(BundleInfoError, match="cannot be read as JSON"):
        BundleInfo.read(tmp_path / "bundle.json")


def powershell_bundle_keys(script: str, record: str = "bundle.json") -> set[str]:
    """Properties read from any variable that holds ConvertFrom-Json of `record`."""
    holders = set(re.findall(rf"\$(\w+)\s*=[^\n]*'{re.escape(record)}'[^\n]*ConvertFrom-Json", script))
    return {key for var in holders for key in re.findall(rf"\${var}\.(\w+)", script)} - {"PSObject"}


def python_bundle_keys(source: str) -> set[str]:
    """Keys the shipped Python reads from a value named `bundle` (`bundle[...]`, `bundle.get(...)`)."""
    keys: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        target, key = None, None
        if isinstance(node, ast.Subscript):
            target, key = node.value, node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
            target, key = node.func.value, node.args[0]
        name = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else None
        if name == "bundle" and isinstance(key, ast.Constant) and isinstance(key.value, str):
            keys.add(key.value)
    return keys


def test_no_rendered_powershell_reads_bundle_json() -> None:
    """install.ps1 used to read bundle.json (the signed files) itself; now every reader is the engine's Python,
    held to the definition by the test below. The finder is shown to work in test_the_key_finders_see_…"""
    for context in CONTEXTS.values():
        for path, data in render_scripts(context).items():
            if path.endswith(".ps1"):
                assert powershell_bundle_keys(data.decode("utf-8-sig")) == set(), path
                assert "bundle.json" not in data.decode("utf-8-sig"), path


def test_every_shipped_python_reader_asks_for_defined_keys() -> None:
    read = set().union(*(python_bundle_keys(p.read_text()) for p in TARGET.glob("*.py")))
    assert read, "no Python reader of bundle.json found: the check would prove nothing"
    assert read <= set(KEYS), f"the target code reads bundle.json keys the definition lacks: {sorted(read - set(KEYS))}"


def test_the_key_finders_see_a_key_that_is_not_defined() -> None:
    """The two finders above are what the checks rest on: show they report an undefined key."""
    script = "$record = Get-Content -LiteralPath (Join-Path $Root 'bundle.json') -Raw | ConvertFrom-Json\n$record.nope\n"
    assert powershell_bundle_keys(script) == {"nope"}
    assert python_bundle_keys("def f(ctx):\n    return ctx.bundle.get('nope'), bundle['also']\n") == {"nope", "also"}


def test_no_rendered_powershell_reads_the_receipt() -> None:
    """receipt.json is written and read by the engine through `Receipt`; uninstall.ps1 no longer reads it before
    the engine runs (any Python 3.8 runs the uninstall, not the one the receipt names)."""
    for context in CONTEXTS.values():
        for path, data in render_scripts(context).items():
            if path.endswith(".ps1"):
                assert powershell_bundle_keys(data.decode("utf-8-sig"), "receipt.json") == set(), path


def test_a_record_without_a_format_key_says_so_and_not_format_none(tmp_path: Path) -> None:
    """Issue 26, "format None": each reader names the missing key instead of printing Python's None."""
    from bundler.shipped.ort_bundle.records import InstallPlan, Receipt, RecordError
    from bundler.shipped.ort_bundle.tuning_file import TuningFile, TuningFileError

    with pytest.raises(RecordError, match='receipt.json has no "format" key; this program reads format 2'):
        Receipt.from_json({}, source="receipt.json")
    with pytest.raises(RecordError, match='install-plan.json has no "format" key; this program reads format 2'):
        InstallPlan.from_json({"format_": 2}, source="install-plan.json")
    info = {key: None for key in KEYS if key != "format"}
    with pytest.raises(BundleInfoError, match=f'bundle.json: has no "format" key, expected {BUNDLE_FORMAT}'):
        BundleInfo.from_json(info, source="bundle.json")
    (tmp_path / "tuning.json").write_text(json.dumps({"machine": {}, "models": []}))
    with pytest.raises(TuningFileError, match='tuning.json: has no "format" key, expected 1; run --tune again'):
        TuningFile.read(tmp_path)
