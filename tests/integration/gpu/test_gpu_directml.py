"""The DirectML route: onnxruntime-directml's own DirectML.dll, checked at lock and build, installed and
self-checked under Wine.

The wheel is the real `onnxruntime_directml-1.24.4-cp311-cp311-win_amd64.whl` (25 MB, fetched once with pip into
the test cache), the newest the package index serves. Wine has no DirectX 12 device for DirectML (ORT logs
"Failed to load dxcore.dll"), which is exactly the machine without a GPU that the strict self-check must refuse:
the Wine test proves the refusal (exit 3, naming the missing device), the allowed CPU fallback, and which
DirectML.dll the process loaded. No test here meets a real DirectX 12 GPU.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tomllib
import zipfile
from pathlib import Path

import pytest
import tomli_w
from fixtures.cli import MANIFESTS, run_cli
from fixtures.wheels import pip_download

from bundler.assembly.gpu_pairs import OrtBuild, distribution_problems, pair_problems, read_ort_build
from bundler.errors import BuildError, ManifestError
from bundler.manifest import parse
from bundler.platforms.windows.gpu_directml import check_directml, read_binaries
from bundler.platforms.windows.gpu_strings import unexplained_names

DML_REQUIREMENT = "onnxruntime-directml==1.24.4"
DML_SHA256 = "96642a787e5a6f33bf043521c0f06eb1eb663f6b830e5862a2026d03f9c90543"
DIRECTML_SHA256 = "c07cb8c2f870f0152bfb690f64c4b048e78bbc219efad420a9758fc896cbecb0"  # DirectML 1.15.4, in the wheel
MANIFEST = MANIFESTS / "gpu-win-directml.toml"
CAPI = "onnxruntime/capi"


@pytest.fixture(scope="module")
def dml_wheel() -> Path:
    wheel = pip_download(DML_REQUIREMENT, "win_amd64")
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == DML_SHA256
    return wheel


def manifest_data(*, platform: str = "win_amd64", gpu: dict[str, object] | None = None) -> dict[str, object]:
    return {
        "bundle": {"name": "dml", "version": "1.0.0", "platform": platform, "python": "3.11"},
        "ort": {"version": "1.24.4", "capi": {"requirement": DML_REQUIREMENT, "sha256": DML_SHA256}},
        "gpu": gpu if gpu is not None else {"providers": ["DmlExecutionProvider"]},
    }


def parsed(data: dict[str, object], tmp_path: Path):
    return parse(data, path=tmp_path / "dml.toml")


# -- the manifest ----------------------------------------------------------------------------------------------


def test_directml_is_named_by_its_provider_alone_without_cuda(tmp_path):
    gpu = parsed(manifest_data(), tmp_path).gpu
    assert gpu is not None and gpu.directml and gpu.providers == ("DmlExecutionProvider",)
    assert (gpu.cuda, gpu.cudnn, gpu.sources) == ("", "", ())
    assert not parsed(manifest_data(gpu={"cuda": "12.8", "cudnn": "9.10", "sources": [
        {"path": "x.zip", "sha256": "b" * 64}]}), tmp_path).gpu.directml


@pytest.mark.parametrize(("gpu", "platform", "expected"), [
    ({"providers": ["DmlExecutionProvider"], "cuda": "12.8"}, "win_amd64",
     "dml.toml: gpu.cuda: found '12.8', expected no cuda with providers = ['DmlExecutionProvider']: DirectML needs "
     "no CUDA, and its DirectML.dll comes inside the onnxruntime-directml wheel"),
    ({"providers": ["DmlExecutionProvider", "CUDAExecutionProvider"]}, "win_amd64",
     "dml.toml: gpu.providers: found ['DmlExecutionProvider', 'CUDAExecutionProvider'], expected "
     "['DmlExecutionProvider'] alone: onnxruntime-directml carries no other GPU provider"),
    ({"providers": ["DmlExecutionProvider"]}, "linux_x86_64",
     "dml.toml: gpu.providers: found 'DmlExecutionProvider' for platform 'linux_x86_64', expected it only for "
     "Windows: DirectML is a DirectX 12 library"),
])
def test_a_directml_gpu_table_that_cannot_be_is_named(tmp_path, gpu, platform, expected):
    with pytest.raises(ManifestError) as caught:
        parsed(manifest_data(platform=platform, gpu=gpu), tmp_path)
    assert expected in str(caught.value)


def test_directml_without_the_python_binding_is_named(tmp_path):
    data = manifest_data()
    data["ort"] = {"version": "1.24.4", "archive": {"path": "ort.zip", "sha256": "a" * 64}}
    with pytest.raises(ManifestError) as caught:
        parsed(data, tmp_path)
    assert ("dml.toml: gpu.providers: found 'DmlExecutionProvider' with no [ort] wheel or capi, expected the "
            "onnxruntime-directml wheel there") in str(caught.value)


# -- lock: the wrong wheel, two distributions ---------------------------------------------------------------------


@pytest.mark.integration
def test_the_real_directml_wheel_says_what_it_is(dml_wheel):
    assert read_ort_build(dml_wheel) == OrtBuild(distribution="onnxruntime-directml", version="1.24.4", cuda=None,
                                                 cudnn=None)


@pytest.mark.integration
def test_directml_with_the_cpu_wheel_is_refused_at_lock_in_one_sentence(tmp_path):
    wheel = pip_download("onnxruntime==1.23.1", "win_amd64")
    data = manifest_data()
    data["ort"] = {"version": "1.23.1", "capi": {"path": str(wheel), "allow_outside": True,
                                                 "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}}
    path = tmp_path / "dml.toml"
    path.write_text(tomli_w.dumps(data))
    result = run_cli("lock", "-q", "--cache", str(tmp_path / "cache"), str(path), check=False)
    assert result.returncode != 0
    assert ("dml.toml: [gpu] providers = ['DmlExecutionProvider'], but [ort]'s wheel is onnxruntime 1.23.1 (its "
            "capi/build_and_package_info.py), which has no DirectML provider; expected onnxruntime-directml"
            ) in result.stderr
    assert not path.with_suffix(".lock.toml").exists()


@pytest.mark.integration
def test_cuda_with_the_directml_wheel_is_refused(tmp_path, dml_wheel):
    manifest = parsed(manifest_data(gpu={"cuda": "12.8", "cudnn": "9.10",
                                         "sources": [{"path": "x.zip", "sha256": "b" * 64}]}), tmp_path)
    assert pair_problems(manifest, read_ort_build(dml_wheel)) == [
        "dml.toml: [gpu] providers = ['CUDAExecutionProvider'], but [ort]'s wheel is onnxruntime-directml 1.24.4, "
        "which has no CUDA provider; expected onnxruntime-gpu, or providers = ['DmlExecutionProvider'] without "
        "cuda, cudnn and [[gpu.sources]]."]
    assert pair_problems(parsed(manifest_data(), tmp_path), read_ort_build(dml_wheel)) == []


@pytest.mark.integration
@pytest.mark.parametrize("other", ["onnxruntime", "onnxruntime-gpu"])
def test_directml_beside_another_ort_distribution_is_refused(tmp_path, dml_wheel, other):
    manifest = parsed(manifest_data(), tmp_path)
    [problem] = distribution_problems(manifest, read_ort_build(dml_wheel), [("numpy", "2.4.6"), (other, "1.23.2")])
    held = " and ".join(sorted([f"{other} 1.23.2", "onnxruntime-directml 1.24.4"]))
    assert problem.startswith(f"dml.toml: the lock holds {held}, which all install the module onnxruntime")


# -- build: DirectML.dll checked where the binding loads it ------------------------------------------------------


def rewritten(wheel: Path, out: Path, *, drop: str = "", rename: tuple[str, str] = ("", ""),
              add: tuple[str, bytes] | None = None) -> Path:
    """A copy of a real wheel with one member dropped, moved or added (the other members' bytes unchanged)."""
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            if info.filename == drop:
                continue
            name = rename[1] if info.filename == rename[0] else info.filename
            target.writestr(name, source.read(info))
        if add is not None:
            target.writestr(*add)
    return out


@pytest.mark.integration
def test_the_real_wheels_directml_dll_is_loaded_by_its_binding_and_needs_only_windows(tmp_path, dml_wheel):
    binaries = read_binaries(dml_wheel, label="ort.capi", work=tmp_path)
    assert binaries[f"{CAPI}/DirectML.dll"].sha256 == DIRECTML_SHA256
    assert binaries[f"{CAPI}/DirectML.dll"].info.file_version.startswith("1.15.4")
    assert "DirectML.dll" in binaries[f"{CAPI}/onnxruntime_pybind11_state.pyd"].info.delay_imports
    check_directml(binaries, label="ort.capi", target_python="3.11")  # raises on any gap


@pytest.mark.integration
def test_directml_strings_name_pix_which_is_explained_not_ignored(tmp_path, dml_wheel):
    """DirectML.dll names PIX's event runtime: the strings check passes only because NOT_LOADS says why."""
    dll = read_binaries(dml_wheel, label="ort.capi", work=tmp_path)[f"{CAPI}/DirectML.dll"].info
    assert {"WinPixEventRuntime.dll", "WinPixEventRuntime_UAP.dll"} <= set(dll.runtime_names)
    assert unexplained_names("DirectML.dll", dll.runtime_names, shipped={"directml.dll"}, target_python="3.11") == []
    assert unexplained_names("DirectML.dll", ["WinPixEventRuntime2.dll"], shipped=(), target_python="3.11")


@pytest.mark.integration
@pytest.mark.parametrize(("change", "expected"), [
    ({"drop": f"{CAPI}/DirectML.dll"}, "(w.whl): found nothing for DirectML.dll, expected exactly "
                                       "onnxruntime/capi/DirectML.dll"),
    ({"rename": (f"{CAPI}/DirectML.dll", "onnxruntime/DirectML.dll")},
     "(w.whl): found onnxruntime/DirectML.dll for DirectML.dll, expected exactly onnxruntime/capi/DirectML.dll"),
])
def test_a_wheel_without_directml_dll_beside_its_binding_is_refused(tmp_path, dml_wheel, change, expected):
    wheel = rewritten(dml_wheel, tmp_path / "w.whl", **change)
    with pytest.raises(BuildError) as caught:
        read_binaries(wheel, label="ort.capi (w.whl)", work=tmp_path / "x")
    assert expected in str(caught.value)


@pytest.mark.integration
def test_a_binding_that_does_not_load_directml_is_refused(tmp_path, dml_wheel):
    """The CPU wheel's real binding with DirectML.dll added beside it: nothing would ever load the DLL."""
    with zipfile.ZipFile(dml_wheel) as source:
        directml = source.read(f"{CAPI}/DirectML.dll")
    wheel = rewritten(pip_download("onnxruntime==1.23.1", "win_amd64"), tmp_path / "cpu.whl",
                      add=(f"{CAPI}/DirectML.dll", directml))
    binaries = read_binaries(wheel, label="ort.capi (cpu.whl)", work=tmp_path / "x")
    with pytest.raises(BuildError) as caught:
        check_directml(binaries, label="ort.capi (cpu.whl)", target_python="3.11")
    assert str(caught.value) == (
        "ort.capi (cpu.whl): onnxruntime/capi/onnxruntime_pybind11_state.pyd neither imports nor delay-loads "
        "DirectML.dll, so this ONNX Runtime has no DirectML provider to load it; expected the onnxruntime-directml "
        "wheel")


def copy_example(dest: Path) -> Path:
    """manifests/gpu-win-directml.toml with its lock, model and script, so a build never writes into manifests/."""
    dest.mkdir(parents=True)
    for name in (MANIFEST.name, "gpu-win-directml.lock.toml"):
        shutil.copy2(MANIFESTS / name, dest / name)
    shutil.copytree(MANIFESTS / "models", dest / "models")
    shutil.copytree(MANIFESTS / "app", dest / "app")
    return dest / MANIFEST.name


@pytest.mark.integration
def test_the_example_builds_and_records_the_wheels_directml_dll_to_preload(tmp_path, bundler_cache):
    manifest = copy_example(tmp_path / "example")
    run_cli("fetch", "-q", "--cache", str(bundler_cache), str(manifest))
    result = json.loads(run_cli("build", "--json", "--cache", str(bundler_cache), "-o", str(tmp_path / "dist"),
                                str(manifest)).stdout)
    installed = "venv/Lib/site-packages/onnxruntime/capi/DirectML.dll"
    with zipfile.ZipFile(result["zip"]) as bundle:
        top = bundle.namelist()[0].split("/")[0]
        info = json.loads(bundle.read(f"{top}/bundle.json"))
        hook = bundle.read(f"{top}/payload/launchers/ort_bundle_hook.py").decode()
        [wheel_name] = [n for n in bundle.namelist() if n.startswith(f"{top}/payload/wheels/onnxruntime_directml-")]
        with zipfile.ZipFile(bundle.open(wheel_name)) as wheel:
            shipped = hashlib.sha256(wheel.read(f"{CAPI}/DirectML.dll")).hexdigest()
        assert not [n for n in bundle.namelist() if n.startswith(f"{top}/payload/gpu/")]
    assert info["expected_providers"] == ["CPUExecutionProvider", "DmlExecutionProvider"]
    assert info["gpu"]["provider"] == "DmlExecutionProvider" and info["gpu"]["dlls"] == [installed]
    [record] = info["gpu"]["files"]
    assert record["sha256"] == shipped == DIRECTML_SHA256 and record["version"].startswith("1.15.4")
    assert "DirectX 12" in info["gpu"]["requires"]
    assert f'GPU_PRELOAD = ["{installed}"]' in hook


def test_the_example_manifest_is_locked_for_its_wheel():
    data = tomllib.loads(MANIFEST.read_text())
    assert data["ort"]["capi"] == {"requirement": DML_REQUIREMENT, "sha256": DML_SHA256}
    lock = tomllib.loads((MANIFESTS / data["python"]["lock"]).read_text())
    assert lock["target"] == {"platform": "win_amd64", "python": "3.11"}
    assert not {w["name"] for w in lock["wheel"]} & {"onnxruntime", "onnxruntime-gpu"}
