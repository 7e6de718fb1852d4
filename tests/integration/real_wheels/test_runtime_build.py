"""Building bundles that carry their interpreter: the quickstart manifests plus `[python] runtime`, through the CLI.

The Windows interpreter is python.org's CPython 3.11.9, its embeddable package (fixtures/windows_python.py); the Linux
one is a STAND-IN made from this machine's CPython (tests/fixtures/runtime.py: python-build-standalone's archive
cannot be fetched here). The ORT wheels, locks, models and the build are real.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from fixtures.cli import MANIFESTS, run_cli
from fixtures.crafted_archives import chop, tar_member
from fixtures.runtime import (
    MINOR,
    mini_pbs,
    pbs_standin,  # noqa: F401
    relocatable_interpreter,
    set_elf_machine,
)
from fixtures.windows_python import REPORTER, WindowsPython, read_report, windows_python  # noqa: F401
from fixtures.wine import Wine, wine  # noqa: F401

pytestmark = pytest.mark.integration


def runtime_manifest(tmp_path: Path, quickstart: str, runtime: Path | None) -> Path:
    """The quickstart manifest, its paths made absolute, with the runtime pinned (as `init --from` pins it)."""
    data: dict[str, Any] = tomllib.loads((MANIFESTS / quickstart).read_text())
    data["python"]["lock"] = str(MANIFESTS / data["python"]["lock"])
    for model in data["models"]:  # the quickstart's files where they are: outside this manifest's folder
        model["path"] = str(MANIFESTS / model["path"])
        model["allow_outside"] = True
    data["launch"]["script"]["path"] = str(MANIFESTS / data["launch"]["script"]["path"])
    data["launch"]["script"]["allow_outside"] = True
    if runtime is not None:
        data["python"]["runtime"] = {"path": str(runtime), "sha256": hashlib.sha256(runtime.read_bytes()).hexdigest(),
                                     "allow_outside": True}
    path = tmp_path / quickstart
    path.write_text(tomli_w.dumps(data))
    return path


def build(manifest: Path, cache: Path, out: Path, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    run_cli("fetch", "-q", "--cache", str(cache), str(manifest))
    return run_cli("build", "--json", "--cache", str(cache), "-o", str(out), str(manifest), check=check)


def read_member(zip_path: Path, name: str) -> bytes:
    with zipfile.ZipFile(zip_path) as archive:
        [member] = [n for n in archive.namelist() if n.split("/", 1)[1] == name]
        return archive.read(member)


def test_a_linux_bundle_carries_a_relocatable_interpreter(pbs_standin: Path, bundler_cache: Path,
                                                         tmp_path: Path) -> None:
    manifest = runtime_manifest(tmp_path, "quickstart-linux.toml", pbs_standin)
    result = json.loads(build(manifest, bundler_cache, tmp_path / "a").stdout)
    zip_path = Path(result["zip"])
    info = json.loads(read_member(zip_path, "bundle.json"))
    runtime = info["python_runtime"]
    assert runtime["kind"] == "python-build-standalone" and runtime["version"] == "{}.{}.{}".format(*sys.version_info[:3])
    assert (runtime["file"], runtime["interpreter"], runtime["machine"]) == (
        pbs_standin.name, f"python/bin/python{MINOR}", "x86-64")
    assert runtime["sha256"] == hashlib.sha256(pbs_standin.read_bytes()).hexdigest()
    [cpython_licence] = [entry for entry in info["licenses"] if entry["component"] == "cpython"]
    assert (cpython_licence["files"], cpython_licence["license"]) == (["licenses/cpython/LICENSE.txt"], "PSF-2.0")
    sbom = json.loads(read_member(zip_path, "sbom.cdx.json"))
    [cpython] = [c for c in sbom["components"] if c["name"] == "cpython"]
    assert cpython["version"] == runtime["version"] and cpython["licenses"] == [{"license": {"id": "PSF-2.0"}}]
    assert len(cpython["components"]) == runtime["files"]
    plan = json.loads(read_member(zip_path, "install-plan.json"))
    venv = plan["venv"]
    assert (venv["dir"], venv["interpreter"], venv["site_packages"]) == (
        "python", f"bin/python{MINOR}", f"lib/python{MINOR}/site-packages")
    runtime_files = {c["to"]: c["from"] for c in venv["runtime"]}
    assert runtime_files[f"python/bin/python{MINOR}"] == f"payload/python/bin/python{MINOR}"
    assert len(runtime_files) == runtime["files"] and not any(c["to"].startswith("python/") for c in plan["copy"])
    assert {"from": "payload/python-pth/ort_bundle_app.pth", "to": "ort_bundle_app.pth"} in venv["site_packages_files"]
    assert read_member(zip_path, "payload/python-pth/ort_bundle_app.pth") == b"../../../../app\n"
    assert plan["dll_dirs"] == [f"python/lib/python{MINOR}/site-packages/onnxruntime/capi"]
    again = json.loads(build(manifest, bundler_cache, tmp_path / "b").stdout)
    assert again["sha256"] == result["sha256"], "the same manifest and inputs must give the same bytes"
    base = json.loads(build(MANIFESTS / "quickstart-linux.toml", bundler_cache, tmp_path / "base").stdout)
    print(f"\nthe runtime stand-in adds {result['size'] - base['size']} bytes to the quickstart bundle "
          f"({base['size']} -> {result['size']}; {runtime['size']} bytes uncompressed)")


def test_the_unpacked_bundle_runs_its_interpreter_with_no_python_on_path(pbs_standin: Path, bundler_cache: Path,
                                                                         tmp_path: Path) -> None:
    """What the installer relies on: the bundle's own interpreter runs the engine before anything is installed."""
    manifest = runtime_manifest(tmp_path, "quickstart-linux.toml", pbs_standin)
    zip_path = Path(json.loads(build(manifest, bundler_cache, tmp_path / "dist").stdout)["zip"])
    unpacked = tmp_path / "unpacked with spaces"
    subprocess.run(["unzip", "-q", str(zip_path), "-d", str(unpacked)], check=True)
    [root] = unpacked.iterdir()
    subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=root, check=True)
    python = root / "payload" / "python" / "bin" / f"python{MINOR}"
    env = {"PATH": "/usr/bin/nonexistent", "PYTHONHOME": "/nonexistent", "PYTHONPATH": "/nonexistent"}
    proc = subprocess.run([str(python), "-I", "-c", "import sys, ssl, ctypes; print(sys.executable); print(sys.prefix)"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [str(python), str(root / "payload" / "python")]


@functools.cache
def build_windows_runtime_zip(embed_zip: Path, cache: Path, basetemp: Path) -> Path:
    """quickstart-win with python.org's embeddable package as its runtime, built once per test process (this
    module and test_runtime_wine.py read it; nothing writes into it)."""
    work = Path(tempfile.mkdtemp(prefix="windows-runtime-", dir=basetemp))
    manifest = runtime_manifest(work, "quickstart-win.toml", embed_zip)
    return Path(json.loads(build(manifest, cache, work / "dist").stdout)["zip"])


@pytest.fixture(scope="module")
def windows_runtime_zip(windows_python: WindowsPython, bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_windows_runtime_zip(windows_python.embed_zip, bundler_cache, tmp_path_factory.getbasetemp())


def test_a_windows_bundle_resolves_python311_from_its_interpreter(windows_runtime_zip: Path,
                                                                  windows_python: WindowsPython) -> None:
    zip_path = windows_runtime_zip
    info = json.loads(read_member(zip_path, "bundle.json"))
    assert info["python_runtime"]["kind"] == "embeddable" and info["python_runtime"]["interpreter"] == "python/python.exe"
    deps = {(d["importer"].rsplit("/", 1)[-1], d["dll"].lower()): d["kind"] for d in info["dll_closure"]["dependencies"]}
    pyd = next(k[0] for k in deps if k[0].endswith("onnxruntime_pybind11_state.pyd"))
    assert deps[pyd, "python311.dll"] == "payload"
    assert deps[pyd, "vcruntime140.dll"] == "payload" and deps[pyd, "vcruntime140_1.dll"] == "payload"
    assert deps[pyd, "msvcp140.dll"] == "vc_runtime", "the embeddable package does not ship msvcp140.dll"
    assert deps["_ctypes.pyd", "libffi-8.dll"] == "payload" and deps["_ctypes.pyd", "python311.dll"] == "payload"
    assert info["dll_closure"]["problems"] == []
    with zipfile.ZipFile(windows_python.embed_zip) as package:
        assert read_member(zip_path, "payload/python/python311._pth") == package.read("python311._pth")
    assert read_member(zip_path, "payload/python-pth/python311._pth") == (
        b"python311.zip\r\n.\r\nLib\\site-packages\r\n..\\app\r\nimport site\r\n")
    plan = json.loads(read_member(zip_path, "install-plan.json"))
    runtime_files = {c["to"]: c["from"] for c in plan["venv"]["runtime"]}
    assert runtime_files["python/python311._pth"] == "payload/python-pth/python311._pth"
    assert runtime_files["python/python.exe"] == "payload/python/python.exe"
    assert (plan["venv"]["dir"], plan["venv"]["interpreter"], plan["venv"]["site_packages"]) == (
        "python", "python.exe", "Lib/site-packages")


@pytest.mark.wine
def test_the_bundled_python_exe_runs_under_wine(windows_runtime_zip: Path, wine: Wine, tmp_path: Path) -> None:
    """The bundle's python.exe, unpacked and not yet installed, runs and loads the python311.dll beside it
    (tests/fixtures/windows_reporter.py reports the executable, the DLL and the arguments)."""
    subprocess.run(["unzip", "-q", str(windows_runtime_zip), "-d", str(tmp_path / "x")], check=True)
    [root] = (tmp_path / "x").iterdir()
    python = root / "payload" / "python" / "python.exe"
    report = tmp_path / "report.json"
    proc = wine.run([wine.to_windows(python), "-I", wine.to_windows(REPORTER), "an arg"],
                    env={"REPORTER_OUT": wine.to_windows(report), "REPORTER_EXIT": "0"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    started = read_report(report)
    assert started["executable"] == wine.to_windows(python)
    assert started["dll"] == wine.to_windows(python.parent / "python311.dll")
    assert started["argv"] == [wine.to_windows(REPORTER), "an arg"] and started["isolated"] == 1


def _other_version(tmp_path: Path, _standin: Path) -> Path:
    return mini_pbs(tmp_path / "cpython-3.12.7+20260101-x86_64-unknown-linux-gnu-install_only.tar.gz",
                    relocatable_interpreter(tmp_path), python="3.12")


def _wrong_machine(tmp_path: Path, _standin: Path) -> Path:
    return mini_pbs(tmp_path / "cpython-3.11.7+20260101-aarch64-unknown-linux-gnu-install_only.tar.gz",
                    set_elf_machine(relocatable_interpreter(tmp_path), 183))


def _truncated(tmp_path: Path, standin: Path) -> Path:
    cut = tmp_path / standin.name
    cut.write_bytes(standin.read_bytes())
    return chop(cut, keep=0.5)


def _leaving(tmp_path: Path, _standin: Path) -> Path:
    return mini_pbs(tmp_path / "cpython-leaving.tar.gz", relocatable_interpreter(tmp_path),
                    extra=[tar_member("python/../../../tmp/evil.sh", b"#!/bin/sh\n", mode=0o755)])


@pytest.mark.parametrize(("make", "code", "message"), [
    (_other_version, 3, r"python\.runtime \(cpython-3\.12\.7.*holds Python 3\.12 .*but \[bundle\] python is 3\.11"),
    (_wrong_machine, 7, r"ELF binary for machine 183, but the bundle targets x86-64"),
    (_truncated, 6, r"truncated"),
    (_leaving, 6, r"entry 'python/\.\./\.\./\.\./tmp/evil\.sh' has a '\.\.' component"),
], ids=["other-version", "wrong-machine", "truncated", "path-leaving-python"])
def test_a_bad_runtime_fails_the_build_and_writes_nothing(make, code: int, message: str, pbs_standin: Path,
                                                          bundler_cache: Path, tmp_path: Path) -> None:
    manifest = runtime_manifest(tmp_path, "quickstart-linux.toml", make(tmp_path, pbs_standin))
    out = tmp_path / "dist"
    out.mkdir()
    proc = build(manifest, bundler_cache, out, check=False)
    assert proc.returncode == code, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert re.search(message, proc.stderr), proc.stderr
    assert list(out.iterdir()) == []
