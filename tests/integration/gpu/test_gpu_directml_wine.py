"""The DirectML bundle installed and self-checked under Wine, on python.org's CPython 3.11 (the machine's Python at
C:\\Python311 in the prefix, as for manifests/gpu-win-directml.toml, which bundles none), with the real
onnxruntime-directml 1.24.4 wheel.

Wine has no DirectX 12 device for DirectML: ORT's DirectML factory logs "Failed to load dxcore.dll" and
onnxruntime's Python layer falls back to the CPU. That is the machine the strict self-check must refuse: the
self-check exits 3 naming the missing device, and with --allow-cpu-fallback it warns that the models ran on the
CPU and passes. The loaded-libraries check names the DirectML.dll the process mapped: the wheel's, preloaded by
the start-up hook from the install, even with a decoy DirectML.dll in System32 (a STAND-IN for Windows 10's
older inbox copy). The strict install itself (exit 14, the self-check's exit 3 named) costs a second install and
runs with ORT_BUNDLER_BIG=1. The same install, its record changed to expect CUDA (a STAND-IN for a CUDA bundle),
shows the CUDA check's driver probe naming nvcuda.dll, which Wine lacks, with the same exit 3.
Wine's limits, named: numpy 2 aborts under Wine 8 (the manifest pins numpy<2); the VC++ runtime key is a STAND-IN
(Wine has no VC_redist), as in test_windows_install.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path, PureWindowsPath

import pytest
import tomli_w
from fixtures.cli import MANIFESTS, run_cli
from fixtures.windows_python import MACHINE_PYTHON, WindowsPython, install_machine_python, windows_python  # noqa: F401
from fixtures.wine import Wine, wine  # noqa: F401
from integration.gpu.test_gpu_directml import DML_REQUIREMENT, DML_SHA256

from bundler.shipped.ort_bundle.records import INSTALL_EXIT_CODES

pytestmark = [pytest.mark.integration, pytest.mark.wine]

TIMEOUT = 600
VC_KEY = "HKLM\\SOFTWARE\\Microsoft\\VisualStudio\\14.0\\VC\\Runtimes\\x64"
INSTALL_DIR = "C:\\dml"
EXIT_NO_GPU_DRIVER = 3


def dml_manifest(work: Path, *, lock: Path | None = None) -> Path:
    data = {
        "bundle": {"name": "dmlapp", "version": "1.0.0", "platform": "win_amd64", "python": "3.11",
                   "source_date_epoch": 1767225600},
        "ort": {"version": "1.24.4", "capi": {"requirement": DML_REQUIREMENT, "sha256": DML_SHA256}},
        "python": {"requirements": ["numpy<2"]},  # numpy 2 aborts under Wine 8: Wine's limit, not Windows'

        "gpu": {"providers": ["DmlExecutionProvider"]},
        "models": [{"name": "tiny-mlp", "path": str(MANIFESTS / "models" / "tiny-mlp.onnx"), "allow_outside": True,
                    "sha256": "db67a4b8fc5f6964f6329c9db9dde717e7c0f1892abde30b0c141e1fbd2ece3a", "shapes": {"x": [2, 4]}}],
    }
    if lock is not None:
        data["python"]["lock"] = lock.name  # type: ignore[index]
    path = work / "dmlapp.toml"
    path.write_text(tomli_w.dumps(data))
    return path


@pytest.fixture(scope="module")
def bundle(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("dml-bundle")
    manifest = dml_manifest(work)
    run_cli("lock", "-q", "--cache", str(bundler_cache), str(manifest))
    manifest = dml_manifest(work, lock=manifest.with_suffix(".lock.toml"))
    run_cli("fetch", "-q", "--cache", str(bundler_cache), str(manifest))
    data = json.loads(run_cli("build", "--json", "--cache", str(bundler_cache), "-o", str(work / "dist"),
                              str(manifest)).stdout)
    folder = work / "unpacked"
    with zipfile.ZipFile(data["zip"]) as archive:
        archive.extractall(folder)
    [top] = folder.iterdir()
    return top


@pytest.fixture(scope="module")
def windows(wine: Wine, windows_python: WindowsPython) -> Wine:
    """The module's prefix with a machine Python and the VC++ runtime key (STAND-IN: Wine has no VC_redist)."""
    for name, value in (("Installed", 1), ("Major", 14), ("Minor", 44), ("Bld", 35208)):
        wine.reg_add(VC_KEY, name, value)
    install_machine_python(wine, windows_python)
    return wine


def drive(wine: Wine, windows_path: str) -> Path:
    return wine.drive_c().joinpath(*PureWindowsPath(windows_path).parts[1:])


def report(result: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    data = json.loads(result.stdout[result.stdout.index("{"):])
    return {check["id"]: check for check in data["checks"]}


@pytest.mark.skipif(os.environ.get("ORT_BUNDLER_BIG") != "1", reason="a second Wine install; set ORT_BUNDLER_BIG=1")
def test_the_strict_install_stops_naming_the_missing_directx_12_device(windows: Wine, bundle: Path) -> None:
    result = windows.cmd(bundle / "install.cmd", "-PythonExe", MACHINE_PYTHON, "-InstallDir", "C:\\dml-strict",
                         timeout=TIMEOUT)
    assert result.returncode == INSTALL_EXIT_CODES["selfcheck"], result.stdout[-3000:] + result.stderr[-3000:]
    assert f"the self-check failed with exit code {EXIT_NO_GPU_DRIVER}" in result.stderr
    assert "DirectML is expected but unavailable" in result.stdout and "no DirectX 12 device" in result.stdout
    assert not (drive(windows, "C:\\dml-strict") / "receipt.json").exists()


@pytest.fixture(scope="module")
def installed(windows: Wine, bundle: Path) -> Path:
    result = windows.cmd(bundle / "install.cmd", "-PythonExe", MACHINE_PYTHON, "-InstallDir", INSTALL_DIR,
                         "-NoSelfCheck", timeout=TIMEOUT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return drive(windows, INSTALL_DIR)


def linux_path(wine: Wine, windows_path: str) -> Path:
    """A path the Windows process reported (C:\\ of the prefix, or Z:\\ when run.cmd was started through Z:)."""
    path = PureWindowsPath(windows_path)
    if path.drive.upper() == "Z:":
        return Path("/", *path.parts[1:])
    return drive(wine, windows_path)


def test_the_self_check_exits_3_naming_the_device_and_the_directml_dll_it_loaded(windows: Wine, installed: Path):
    """With a decoy DirectML.dll in System32 (a STAND-IN for Windows 10's inbox 1.1.0: a copy of python3.dll), the
    process still maps the wheel's copy from the install: the start-up hook preloads it by full path."""
    decoy = windows.drive_c() / "windows" / "system32" / "DirectML.dll"
    shutil.copyfile(windows.drive_c() / "Python311" / "python3.dll", decoy)
    try:
        result = windows.cmd(installed / "run.cmd", "--self-check", "--json", timeout=TIMEOUT)
    finally:
        decoy.unlink()
    assert result.returncode == EXIT_NO_GPU_DRIVER, result.stdout[-3000:] + result.stderr[-3000:]
    checks = report(result)
    directml = checks["directml"]
    assert directml["status"] == "fail" and directml["details"]["missing_driver"] == "a DirectX 12 device"
    assert directml["message"].startswith("DirectML is expected but unavailable (a session requesting only DirectML "
                                          "ran on ['CPUExecutionProvider']): no DirectX 12 device")
    assert "dxcore.dll" in directml["details"]["evidence"]  # what ORT logged under Wine
    assert checks["providers"]["status"] == "pass" and "DmlExecutionProvider" in checks["providers"]["message"]
    [loaded] = [lib for lib in checks["libraries"]["details"]["libraries"] if lib["family"] == "directml"]
    assert linux_path(windows, loaded["path"]) == installed / "venv" / "Lib" / "site-packages" / "onnxruntime" / \
        "capi" / "DirectML.dll", loaded
    assert loaded["version"].startswith("1.15.4") and checks["libraries"]["status"] == "pass"


def test_with_cpu_fallback_allowed_it_warns_which_provider_ran_and_passes(windows: Wine, installed: Path) -> None:
    result = windows.cmd(installed / "run.cmd", "--self-check", "--allow-cpu-fallback", "--json", timeout=TIMEOUT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    checks = report(result)
    assert checks["directml"]["status"] == "warn"
    assert "the models run on CPUExecutionProvider, which --allow-cpu-fallback allows" in checks["directml"]["message"]
    assert checks["model:tiny-mlp"]["status"] == "pass"


def test_a_cuda_record_without_the_nvidia_driver_exits_3_naming_nvcuda_dll(windows: Wine, installed: Path) -> None:
    """The CUDA check's driver probe on Windows, run by the installed self-check on the real CPython under Wine, which
    has no nvcuda.dll. A STAND-IN for a CUDA bundle: this DirectML install with its record changed to expect CUDA (a
    CUDA bundle under Wine would need a 1.5 GB build of its own, with numpy<2 for Wine 8). The record's change is
    also what the receipt audit must name."""
    record = installed / "bundle.json"
    original = record.read_bytes()
    bundle = json.loads(original)
    bundle["expected_providers"] = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    bundle["gpu"] = {**bundle["gpu"], "cuda": "11.8", "cudnn": "8", "min_driver": "452.39"}
    record.write_text(json.dumps(bundle), encoding="utf-8")
    try:
        result = windows.cmd(installed / "run.cmd", "--self-check", "--json", timeout=TIMEOUT)
    finally:
        record.write_bytes(original)
    assert result.returncode == EXIT_NO_GPU_DRIVER, result.stdout[-3000:] + result.stderr[-3000:]
    checks = report(result)
    cuda = checks["cuda"]
    assert cuda["status"] == "fail" and cuda["details"]["missing_driver"] == "nvcuda.dll"
    assert cuda["message"].startswith("CUDA is expected but unavailable (the installed onnxruntime offers only ")
    assert "no NVIDIA driver: nvcuda.dll cannot be loaded" in cuda["message"] and "452.39" in cuda["fix"]
    assert checks["files"]["status"] == "fail" and "bundle.json" in checks["files"]["message"]
