"""The CUDA 12 / cuDNN 9 route on win_amd64: onnxruntime-gpu 1.23.2 with NVIDIA's *-cu12 wheels, closure-checked.

The fast test uses a tiny mingw DLL that names nvJitLink_120_0.dll in its strings, as cuFFT 11.3 does (it loads
it by name for JIT-linked callbacks). The real-wheel tests fetch manifests/gpu-win-cuda12.toml's inputs (about
1.7 GB, checking the free space first), on every run.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli
from fixtures.parts import part_inputs
from fixtures.wheels import fetched_inputs
from fixtures.wine import mingw_gcc  # noqa: F401  (fixture)
from integration.gpu.test_gpu import complete_sources, dlls, ort_wheel, run_gpu  # noqa: F401  (fixtures)

from bundler.assembly.assembly import Assembly
from bundler.errors import BuildError
from bundler.manifest import load
from bundler.platforms.windows.gpu import add_gpu

CUDA12 = MANIFESTS / "gpu-win-cuda12.toml"


@pytest.fixture
def cufft_naming_nvjitlink(tmp_path, mingw_gcc) -> Path:
    source = tmp_path / "cufft.c"
    source.write_text('__declspec(dllexport) const char *jit = "nvJitLink_120_0.dll";\n', encoding="utf-8")
    out = tmp_path / "cufft64_11.dll"
    subprocess.run([mingw_gcc, "-shared", "-O2", "-o", str(out), str(source)], check=True, capture_output=True)
    return out


def test_a_library_loading_nvjitlink_by_name_needs_it(tmp_path, ort_wheel, complete_sources, cufft_naming_nvjitlink):
    with pytest.raises(BuildError) as caught:
        run_gpu(tmp_path, ort_wheel, [*complete_sources, (cufft_naming_nvjitlink, None)])
    message = str(caught.value)
    assert "gpu/cufft64_11.dll loads at run time nvJitLink_120_0.dll, which the bundle does not provide" in message
    assert "nvJitLink_120_0.dll: NVIDIA's nvidia-nvjitlink-cu11 wheel" in message


@pytest.fixture(scope="module")
def cuda12_files() -> dict[str, Path]:
    return fetched_inputs(CUDA12, needs_gib=2.5)


@pytest.mark.integration
def test_cuda12_closure_is_complete_from_nvidias_wheels(tmp_path, cuda12_files):
    assembly = Assembly()
    add_gpu(assembly, part_inputs(load(CUDA12), files=cuda12_files, work=tmp_path / "a"))
    record = assembly.facts.gpu.record
    assert record["dlls"] == [f"gpu/{n}" for n in (
        "cublas64_12.dll", "cublasLt64_12.dll", "cudart64_12.dll", "cudnn64_9.dll", "cudnn_adv64_9.dll",
        "cudnn_cnn64_9.dll", "cudnn_engines_precompiled64_9.dll", "cudnn_engines_runtime_compiled64_9.dll",
        "cudnn_graph64_9.dll", "cudnn_heuristic64_9.dll", "cudnn_ops64_9.dll", "cufft64_11.dll",
        "nvJitLink_120_0.dll", "nvrtc-builtins64_128.dll", "nvrtc64_120_0.dll")]
    assert {"cudart64_12.dll", "cudnn64_9.dll", "cufft64_11.dll"} <= set(record["provider_imports"])
    assert record["min_driver"] == "527.41"
    versions = {f["file"]: f["version"] for f in record["files"]}
    assert versions["gpu/cudnn64_9.dll"] == "9.10.2.21" and versions["gpu/cudart64_12.dll"] == "6,14,11,12080"


@pytest.mark.integration
def test_cuda12_without_nvjitlink_is_refused_naming_cufft(tmp_path, cuda12_files):
    manifest = load(CUDA12)
    index = next(i for i, s in enumerate(manifest.gpu.sources) if "nvjitlink" in s.source.location)
    sources = tuple(s for i, s in enumerate(manifest.gpu.sources) if i != index)
    files = {k: v for k, v in cuda12_files.items() if not k.startswith("gpu.sources[")}
    files |= {f"gpu.sources[{i}]": cuda12_files[s.source.key] for i, s in enumerate(sources)}
    renumbered = tuple(replace(s, source=replace(s.source, key=f"gpu.sources[{i}]")) for i, s in enumerate(sources))
    with pytest.raises(BuildError) as caught:
        add_gpu(Assembly(), part_inputs(replace(manifest, gpu=replace(manifest.gpu, sources=renumbered)), files=files,
                                        work=tmp_path / "a"))
    message = str(caught.value)
    assert "gpu/cufft64_11.dll loads at run time nvJitLink_120_0.dll, which the bundle does not provide" in message
    assert "nvJitLink_120_0.dll: NVIDIA's nvidia-nvjitlink-cu12 wheel" in message


# ---- [gpu] providers -----------------------------------------------------------------------------------------

def gpu_table(extra: str) -> str:
    return f"""
[bundle]
name = "gpu"
version = "1.0.0"
platform = "win_amd64"
python = "3.11"

[ort]
version = "1.23.2"
archive = {{ path = "ort.zip", sha256 = "{'a' * 64}" }}

[gpu]
cuda = "12.8"
cudnn = "9.10"
{extra}
[[gpu.sources]]
path = "cuda.zip"
sha256 = "{'b' * 64}"
"""


def parsed_gpu(extra: str, tmp_path: Path):
    import tomllib

    from bundler.manifest import parse

    return parse(tomllib.loads(gpu_table(extra)), path=tmp_path / "gpu.toml").gpu


def test_the_gpu_providers_default_to_cuda_and_are_read(tmp_path):
    assert parsed_gpu("", tmp_path).providers == ("CUDAExecutionProvider",)
    assert parsed_gpu('providers = ["CUDAExecutionProvider"]\n', tmp_path).providers == ("CUDAExecutionProvider",)


@pytest.mark.parametrize(("value", "expected"), [
    ('["TensorrtExecutionProvider"]', "gpu.toml: gpu.providers: found 'TensorrtExecutionProvider', expected a list "
                                      "of execution providers from 'CUDAExecutionProvider', 'DmlExecutionProvider'; "
                                      "the TensorrtExecutionProvider route is not implemented: ONNX Runtime's "
                                      "TensorRT provider imports nvinfer_10.dll and nvonnxparser_10.dll"),
    ('["CUDAExecutionProvider", "TensorrtExecutionProvider"]', "the package index serves NVIDIA's "
                                                                "tensorrt-cu12-libs only as a wheel-stub sdist"),
    ('["CUDA"]', "gpu.toml: gpu.providers: found 'CUDA', expected a list of execution providers"),
    ("[]", "gpu.toml: gpu.providers: found [], expected"),
])
def test_a_provider_without_a_route_is_named(tmp_path, value, expected):
    from bundler.errors import ManifestError

    with pytest.raises(ManifestError) as caught:
        parsed_gpu(f"providers = {value}\n", tmp_path)
    assert expected in str(caught.value)


# ---- the strings cross-check ---------------------------------------------------------------------------------

def test_an_unknown_library_name_in_a_gpu_librarys_strings_fails_the_build(tmp_path, ort_wheel, complete_sources,
                                                                          mingw_gcc):
    source = tmp_path / "cufft.c"
    source.write_text('__declspec(dllexport) const char *plugin = "cufft_plugin64_11.dll";\n', encoding="utf-8")
    out = tmp_path / "cufft64_11.dll"
    subprocess.run([mingw_gcc, "-shared", "-O2", "-o", str(out), str(source)], check=True, capture_output=True)
    with pytest.raises(BuildError) as caught:
        run_gpu(tmp_path, ort_wheel, [*complete_sources, (out, None)])
    assert ("gpu/cufft64_11.dll names cufft_plugin64_11.dll in its strings, which is neither in the bundle nor a "
            "Windows library: add it to [gpu], or, if it is not loaded, say why in NOT_LOADS") in str(caught.value)


def test_cudnns_nvrtc_template_needs_a_shipped_nvrtc():
    from bundler.platforms.windows.gpu_strings import unexplained_names

    names = ["d_0.dll", "zlibwapi.dll", "mntdll.dll", "combase.dll", "cask_profile_interface.dll"]
    assert unexplained_names("gpu/cudnn_graph64_9.dll", names, shipped={"nvrtc64_120_0.dll"},
                             target_python="3.11") == []
    assert unexplained_names("gpu/cudnn_graph64_9.dll", names, shipped=set(), target_python="3.11") == [
        "gpu/cudnn_graph64_9.dll loads nvrtc64_%d_0.dll at run time, and the bundle ships no such DLL: add NVIDIA's "
        "NVRTC to [gpu]."]


def test_lock_refuses_tensorrt_naming_what_blocks_it(tmp_path):
    """No pinned TensorRT file can be fetched from the package index: `lock` says so before fetching anything."""
    manifest = tmp_path / "gpu.toml"
    manifest.write_text(gpu_table('providers = ["CUDAExecutionProvider", "TensorrtExecutionProvider"]\n'))
    result = run_cli("lock", "--cache", str(tmp_path / "cache"), str(manifest), check=False)
    assert result.returncode == 3, result.stderr  # ManifestError
    assert "gpu.toml: gpu.providers: found 'TensorrtExecutionProvider'" in result.stderr
    assert "tensorrt-cu12-libs only as a wheel-stub sdist" in result.stderr
    assert not (tmp_path / "cache").exists() and not (tmp_path / "gpu.lock.toml").exists()
