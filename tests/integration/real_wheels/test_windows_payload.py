"""Windows payload checks on the real win_amd64 quickstart: DLL closure, VC++ minimum, VC_redist version."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli
from fixtures.wine import mingw_gcc  # noqa: F401  (fixture)

pytestmark = pytest.mark.integration

STEM = "quickstart-win-1.0.0-win_amd64"


def vc_redist_stand_in(gcc: str, tmp_path: Path, version: str) -> Path:
    """A STAND-IN for VC_redist.x64.exe (Microsoft's cannot be downloaded here): a real x64 PE
    executable with a version resource, built with mingw's windres and gcc."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    commas = version.replace(".", ",")
    rc = tmp_path / "version.rc"
    rc.write_text(
        "1 VERSIONINFO\nFILEVERSION " + commas + "\nPRODUCTVERSION " + commas + "\nBEGIN\n"
        ' BLOCK "StringFileInfo"\n BEGIN\n  BLOCK "040904b0"\n  BEGIN\n'
        f'   VALUE "FileVersion", "{version}"\n   VALUE "ProductVersion", "{version}"\n'
        '   VALUE "ProductName", "stand-in for Microsoft Visual C++ 2015-2022 Redistributable (x64)"\n'
        "  END\n END\n BLOCK \"VarFileInfo\"\n BEGIN\n  VALUE \"Translation\", 0x409, 1200\n END\nEND\n")
    src = tmp_path / "main.c"
    src.write_text("int main(void) { return 0; }\n")
    windres = gcc.replace("gcc", "windres")
    subprocess.run([windres, str(rc), "-O", "coff", "-o", str(tmp_path / "version.o")], check=True)
    exe = tmp_path / "VC_redist.x64.exe"
    subprocess.run([gcc, "-o", str(exe), str(src), str(tmp_path / "version.o")], check=True)
    return exe


def manifest_with_vc_redist(tmp_path: Path, exe: Path, min_version: str | None = None, *,
                            allow_unsigned: bool = True) -> Path:
    """The win quickstart plus [vc_redist]; the stand-in is unsigned, so by default the manifest allows that."""
    folder = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = folder / "quickstart-win.toml"
    extra = (f'\n[vc_redist]\npath = "{exe}"\nsha256 = "{hashlib.sha256(exe.read_bytes()).hexdigest()}"\n'
             "allow_outside = true\n")
    if min_version:
        extra += f'min_version = "{min_version}"\n'
    if allow_unsigned:
        extra += "allow_unsigned = true\n"
    manifest.write_text(manifest.read_text() + extra)
    return manifest


def bundle_json(zip_path: Path) -> dict:
    with zipfile.ZipFile(zip_path) as archive:
        return json.loads(archive.read(f"{STEM}/bundle.json"))


def test_closure_and_vc_minimum_of_the_real_win_payload(bundler_cache: Path, tmp_path: Path) -> None:
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(tmp_path), str(MANIFESTS / "quickstart-win.toml"))
    record = bundle_json(tmp_path / f"{STEM}.zip")
    closure = record["dll_closure"]
    assert closure["problems"] == []
    pyd = [d for d in closure["dependencies"] if d["importer"].endswith("onnxruntime_pybind11_state.pyd")]
    kinds = {d["dll"].lower(): d["kind"] for d in pyd}
    assert kinds["python311.dll"] == "python"
    assert kinds["vcruntime140.dll"] == "vc_runtime"
    assert kinds["api-ms-win-crt-runtime-l1-1-0.dll"] == "system"
    assert "onnxruntime.dll" not in kinds  # the .pyd links ORT statically (docs/facts.md §1)
    # ORT 1.23.1 needs 14.40.33810; numpy's binaries may come from a newer toolset and raise it further.
    minimum = tuple(int(p) for p in record["vc_runtime_min"].split("."))
    assert minimum >= (14, 40, 33810)


def test_vc_redist_is_checked_against_the_minimum(bundler_cache: Path, tmp_path: Path, mingw_gcc: str) -> None:
    old = vc_redist_stand_in(mingw_gcc, tmp_path / "old", "14.38.33130.0")
    manifest = manifest_with_vc_redist(tmp_path / "a", old)
    run_cli("fetch", "-q", "--cache", str(bundler_cache), str(manifest))
    proc = run_cli("build", "--cache", str(bundler_cache), "-o", str(tmp_path / "out"), str(manifest), check=False)
    assert proc.returncode == 7
    assert "version 14.38.33130.0 is older than the runtime this bundle needs" in proc.stderr

    new = vc_redist_stand_in(mingw_gcc, tmp_path / "new", "14.50.35719.0")
    manifest = manifest_with_vc_redist(tmp_path / "b", new)
    run_cli("fetch", "-q", "--cache", str(bundler_cache), str(manifest))
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(tmp_path / "out"), str(manifest))
    record = bundle_json(tmp_path / "out" / f"{STEM}.zip")
    assert record["vc_redist"]["version"] == "14.50.35719.0"
    vc = [s for s in record["signatures"] if s["bundle_path"] == "payload/vc_redist/VC_redist.x64.exe"]
    assert vc and not vc[0]["signed"] and vc[0]["allowed_by_manifest"]

    strict = manifest_with_vc_redist(tmp_path / "c", new, allow_unsigned=False)
    proc = run_cli("build", "--cache", str(bundler_cache), "-o", str(tmp_path / "out2"), str(strict), check=False)
    assert proc.returncode == 7
    assert "VC_redist.x64.exe: carries no Authenticode signature; expected one by Microsoft" in proc.stderr
    with zipfile.ZipFile(tmp_path / "out" / f"{STEM}.zip") as archive:
        assert f"{STEM}/payload/vc_redist/VC_redist.x64.exe" in archive.namelist()


def test_min_version_can_raise_but_never_lower(bundler_cache: Path, tmp_path: Path, mingw_gcc: str) -> None:
    exe = vc_redist_stand_in(mingw_gcc, tmp_path / "exe", "14.50.35719.0")
    lowered = manifest_with_vc_redist(tmp_path / "low", exe, min_version="14.29.30133")
    run_cli("fetch", "-q", "--cache", str(bundler_cache), str(lowered))
    proc = run_cli("build", "--cache", str(bundler_cache), "-o", str(tmp_path / "out"), str(lowered), check=False)
    assert proc.returncode == 3
    assert "vc_redist.min_version: found 14.29.30133, expected at least" in proc.stderr
    assert "never lowered" in proc.stderr
    raised = manifest_with_vc_redist(tmp_path / "high", exe, min_version="14.50.35719")
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(tmp_path / "out"), str(raised))
    assert bundle_json(tmp_path / "out" / f"{STEM}.zip")["vc_runtime_min"] == "14.50.35719"
