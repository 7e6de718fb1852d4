"""The code that runs on the target is one package, bundler/shipped/ort_bundle, shipped one way (issue 35).

The quickstart bundle's payload/ort_bundle/ is that folder byte for byte: every .py file of it and its data, nothing
renamed, generated or inlined, and no module left out (nothing lists them). The install plan copies the same
members to installer/ort_bundle/ (the engine's copy) and to site-packages/ort_bundle/ (the runtime's). The only
other .py members of the bundle are the ones EXPLAINED says why. Its one start file, ort_bundle/__main__.py, starts
the named program and refuses any other name.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS
from integration.real_wheels.test_build import build

import bundler.shipped.ort_bundle
from bundler.assembly.shipped_package import PACKAGE_DATA, package_files

PACKAGE = Path(bundler.shipped.ort_bundle.__file__).parent
BUNDLE_DIR = "payload/ort_bundle/"
#: The .py members outside the package, and why each is there.
EXPLAINED = {
    "payload/app/infer.py": "the manifest's [launch] script (app/infer.py beside the manifest), copied as it is",
    "payload/launchers/ort_bundle_hook.py": "the environment's start-up hook, rendered from "
                                            "templates/ort_bundle_hook.py.j2 with this bundle's values",
}


def repository_files() -> dict[str, bytes]:
    """payload/ort_bundle/<path> -> bytes of every .py file under bundler/shipped/ort_bundle, bytecode caches aside."""
    return {f"{BUNDLE_DIR}{path.relative_to(PACKAGE).as_posix()}": path.read_bytes()
            for path in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in path.parts}


@pytest.mark.integration
def test_the_quickstart_bundle_ships_the_package_folder_byte_for_byte_and_installs_it_twice(
        bundler_cache: Path, tmp_path: Path) -> None:
    archive_path = build(MANIFESTS / "quickstart-linux.toml", tmp_path, bundler_cache)
    with zipfile.ZipFile(archive_path) as archive:
        stem = archive_path.name.removesuffix(".zip")
        members = {name[len(stem) + 1:]: archive.read(name) for name in archive.namelist() if not name.endswith("/")}
    shipped = {name: data for name, data in members.items() if name.startswith(BUNDLE_DIR)}
    repository = repository_files()
    assert {name for name in shipped if name.endswith(".py")} == set(repository)
    assert [name for name in repository if shipped[name] != repository[name]] == []
    data = {f"{BUNDLE_DIR}{relative}": PACKAGE.joinpath(*relative.split("/")).read_bytes() for relative in PACKAGE_DATA}
    assert {name: value for name, value in shipped.items() if not name.endswith(".py")} == data
    others = sorted(name for name in members if name.endswith(".py") and not name.startswith(BUNDLE_DIR))
    assert others == sorted(EXPLAINED)
    plan = json.loads(members["install-plan.json"])
    copies = {entry["from"]: entry["to"] for entry in plan["copy"] if entry["from"].startswith(BUNDLE_DIR)}
    site = {entry["from"]: entry["to"] for entry in plan["venv"]["site_packages_files"]
            if entry["from"].startswith(BUNDLE_DIR)}
    assert copies == {name: f"installer/{name.removeprefix('payload/')}" for name in shipped}
    assert site == {name: name.removeprefix("payload/") for name in shipped}


def test_package_files_are_every_py_file_of_the_folder_and_its_data() -> None:
    """What the build ships is found, not listed: a module added to any subfolder ships without another edit."""
    found = package_files()
    expected = {name.removeprefix("payload/") for name in repository_files()}
    assert set(found) == expected | {f"ort_bundle/{relative}" for relative in PACKAGE_DATA}
    assert {"ort_bundle/__main__.py", "ort_bundle/engine/engine.py", "ort_bundle/engine/windows/msi_action.py",
            "ort_bundle/selfcheck/selfcheck.py", "ort_bundle/sandbox/sandbox.py", "ort_bundle/launcher.py"} <= set(found)


def copy_of_package(folder: Path) -> Path:
    for relative, data in package_files().items():
        path = folder.joinpath(*relative.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder / "ort_bundle" / "__main__.py"


def test_the_start_file_runs_a_named_program_from_a_copy_and_refuses_any_other_name(tmp_path: Path) -> None:
    start = copy_of_package(tmp_path / "payload")
    usage = subprocess.run([sys.executable, "-I", "-B", str(start), "nope"], capture_output=True, text=True)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: python -I -B ort_bundle/__main__.py"), usage.stderr
    assert "(got 'nope')" in usage.stderr
    engine = subprocess.run([sys.executable, "-I", "-B", str(start), "engine", "verify", "--root", str(tmp_path / "none")],
                            capture_output=True, text=True)
    assert engine.returncode == 10 and "holds no receipt.json" in engine.stderr, engine.stderr
    assert not list((tmp_path / "payload").rglob("__pycache__"))  # nothing written beside the sources


def test_the_start_file_imports_the_package_from_its_own_folder_only(tmp_path: Path) -> None:
    """An `ort_bundle` elsewhere on the path (here: this repository's, through PYTHONPATH, which -I ignores anyway)
    is never what runs: a program's modules are the start file's siblings."""
    start = copy_of_package(tmp_path / "payload")
    marker = tmp_path / "MARKER"
    shutil.rmtree(tmp_path / "payload" / "ort_bundle" / "sandbox")
    (tmp_path / "elsewhere" / "ort_bundle" / "sandbox").mkdir(parents=True)
    for name in ("__init__.py", "sandbox/__init__.py"):
        (tmp_path / "elsewhere" / "ort_bundle" / name).write_text("")
    (tmp_path / "elsewhere" / "ort_bundle" / "sandbox" / "sandbox.py").write_text(
        f"open({str(marker)!r}, 'w').close()\ndef main(argv):\n    return 0\n")
    proc = subprocess.run([sys.executable, "-B", str(start), "sandbox"], capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path / "elsewhere")})
    assert proc.returncode == 1 and "No module named 'ort_bundle.sandbox'" in proc.stderr, proc.stderr
    assert not marker.exists()
