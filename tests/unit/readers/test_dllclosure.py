"""DLL closure, VC++ runtime minimum and CUDA/cuDNN majors: synthetic PeInfo first, then real wheels."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from fixtures.wheels import pip_download
from unit.readers.test_pe import extract_capi_binaries

from bundler.errors import BuildError
from bundler.readers.dllclosure import (
    ClosureReport,
    DepKind,
    check_gpu_versions,
    classify,
    cuda_majors,
    dll_closure,
    vc_runtime_minimum,
    version_at_least,
)
from bundler.readers.pe import PeInfo, inspect_pe


def pe_info(*, imports=(), delay=(), runtime=(), machine=0x8664, linker=(14, 40)) -> PeInfo:
    return PeInfo(machine=machine, is_dll=True, linker_version=linker, file_version=None, product_version=None,
                  imports=tuple(imports), delay_imports=tuple(delay), runtime_names=tuple(runtime),
                  has_signature=False)


# ---- classify ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("dll", "kind"), [
    ("KERNEL32.dll", DepKind.SYSTEM),
    ("api-ms-win-crt-runtime-l1-1-0.dll", DepKind.SYSTEM),
    ("ext-ms-win-ntuser-window-l1-1-0.dll", DepKind.SYSTEM),
    ("VCRUNTIME140_1.dll", DepKind.VC_RUNTIME),
    ("msvcp140_atomic_wait.dll", DepKind.VC_RUNTIME),
    ("vcomp140.dll", DepKind.VC_RUNTIME),
    ("python311.dll", DepKind.PYTHON),
    ("python3.dll", DepKind.PYTHON),
    ("python310.dll", DepKind.UNKNOWN),
    ("cudart64_110.dll", DepKind.GPU_RUNTIME),
    ("cublasLt64_11.dll", DepKind.GPU_RUNTIME),
    ("cudnn_ops_infer64_8.dll", DepKind.GPU_RUNTIME),
    ("nvinfer_plugin.dll", DepKind.GPU_RUNTIME),
    ("zlibwapi.dll", DepKind.GPU_RUNTIME),
    ("nvcuda.dll", DepKind.DRIVER),
    ("onnxruntime_providers_shared.dll", DepKind.PAYLOAD),
    ("libfoo.dll", DepKind.UNKNOWN),
])
def test_classify(dll, kind):
    assert classify(dll, payload={"ONNXRUNTIME_PROVIDERS_SHARED.DLL"}, target_python="3.11") is kind


# ---- dll_closure on synthetic binaries ---------------------------------------------------------

def test_closure_with_everything_provided_has_no_problems():
    binaries = {
        "capi/onnxruntime_pybind11_state.pyd": pe_info(imports=["python311.dll", "KERNEL32.dll", "MSVCP140.dll"]),
        "capi/onnxruntime_providers_cuda.dll": pe_info(imports=["cudnn64_8.dll", "onnxruntime_providers_shared.dll"],
                                                       runtime=["nvcuda.dll"]),
        "capi/onnxruntime_providers_shared.dll": pe_info(imports=["KERNEL32.dll"]),
    }
    report = dll_closure(binaries, target_python="3.11", provided=["CUDNN64_8.dll"])
    assert report.problems == ()
    kinds = {(d.importer, d.dll): (d.kind, d.how) for d in report.dependencies}
    assert kinds[("capi/onnxruntime_providers_cuda.dll", "cudnn64_8.dll")] == (DepKind.GPU_RUNTIME, "import")
    assert kinds[("capi/onnxruntime_providers_cuda.dll", "nvcuda.dll")] == (DepKind.DRIVER, "runtime")
    assert kinds[("capi/onnxruntime_pybind11_state.pyd", "python311.dll")] == (DepKind.PYTHON, "import")


def test_closure_names_importer_and_missing_dll():
    binaries = {
        "capi/mod.pyd": pe_info(imports=["python310.dll"], delay=["libfoo.dll"]),
        "capi/onnxruntime_providers_cuda.dll": pe_info(imports=["cudnn64_8.dll"]),
        "capi/x86.dll": pe_info(machine=0x014C),
    }
    problems = dll_closure(binaries, target_python="3.11").problems
    assert problems == (
        "capi/mod.pyd imports python310.dll, which belongs to Python 3.10, but the target Python is 3.11: "
        "use the binary built for Python 3.11.",
        "capi/mod.pyd imports libfoo.dll, which is not in the payload and is neither a Windows system DLL, "
        "the VC++ runtime nor the target Python's DLL: add it to the bundle.",
        "capi/onnxruntime_providers_cuda.dll imports cudnn64_8.dll, which the bundle does not provide: add it to [gpu].",
        "capi/x86.dll is a x86 binary, but the bundle targets x64 (win_amd64).",
    )


def test_runtime_loaded_names_count_only_for_gpu_libraries():
    sub_libraries = ["cudnn_ops_infer64_8.dll", "zlibwapi.dll", "libunknown.dll"]
    binaries = {
        "gpu/cudnn64_8.dll": pe_info(runtime=sub_libraries),
        "capi/onnxruntime.dll": pe_info(runtime=["cudnn_cnn_infer64_8.dll", "onnxruntime_providers_qnn.dll"]),
    }
    report = dll_closure(binaries, target_python="3.11", provided=["cudnn_ops_infer64_8.dll"])
    assert report.problems == (
        "gpu/cudnn64_8.dll loads at run time zlibwapi.dll, which the bundle does not provide: add it to [gpu].",
    )
    assert {d.dll for d in report.dependencies if d.how == "runtime"} == {
        *sub_libraries, "cudnn_cnn_infer64_8.dll", "onnxruntime_providers_qnn.dll"}


def test_closure_report_json():
    report = ClosureReport(dependencies=(), problems=("p",))
    full = dll_closure({"a.dll": pe_info(imports=["KERNEL32.dll"])}, target_python="3.11")
    assert report.to_json() == {"dependencies": [], "problems": ["p"]}
    assert full.to_json()["dependencies"] == [
        {"importer": "a.dll", "dll": "KERNEL32.dll", "kind": "system", "how": "import"}]


# ---- VC++ runtime ------------------------------------------------------------------------------

def test_vc_runtime_minimum_uses_the_newest_msvc_linker():
    assert vc_runtime_minimum([(14, 29), (14, 40), (2, 40)]) == "14.40.33810"
    assert vc_runtime_minimum([(14, 29)]) == "14.29.30133"
    assert vc_runtime_minimum([(14, 38), (14, 0)]) == "14.38.33130"
    assert vc_runtime_minimum([(14, 42)]) == "14.42.34433"
    assert vc_runtime_minimum([(14, 44)]) == "14.44.35208"
    # a minor between two toolsets takes the next newer one
    assert vc_runtime_minimum([(14, 17)]) == "14.20.27508"


def test_vc_runtime_minimum_ignores_non_msvc_linkers():
    assert vc_runtime_minimum([(2, 40), (6, 0)]) is None
    assert vc_runtime_minimum([]) is None


def test_vc_runtime_minimum_refuses_a_linker_newer_than_the_table():
    with pytest.raises(BuildError, match=r"MSVC 14\.50.*extend VC_REDIST_FIRST_BUILD"):
        vc_runtime_minimum([(14, 40), (14, 50)])


def test_version_at_least():
    assert version_at_least("14.40.33810", "14.40.33810")
    assert version_at_least("v14.42.34433.0", "14.40.33810")
    assert version_at_least("14.40.33810.0", "14.40.33810")
    assert not version_at_least("14.38.33135", "14.40.33810")
    assert not version_at_least("14.9.1", "14.40")
    with pytest.raises(BuildError, match="'14.x' is not a dotted numeric version"):
        version_at_least("14.x", "14.40")


# ---- CUDA / cuDNN majors -----------------------------------------------------------------------

def test_cuda_majors_from_import_names():
    assert cuda_majors(["cudart64_110.dll", "cublas64_11.dll", "cudnn64_8.dll", "KERNEL32.dll"]) == {
        "cuda": 11, "cudnn": 8}
    assert cuda_majors(["cudart64_12.dll", "cudnn64_9.dll", "nvinfer_10.dll"]) == {
        "cuda": 12, "cudnn": 9, "tensorrt": 10}
    assert cuda_majors(["cublasLt64_11.dll"]) == {"cuda": 11}
    assert cuda_majors(["cufft64_10.dll"]) == {}


def test_check_gpu_versions_accepts_matching_majors():
    imports = ["cudart64_110.dll", "cublas64_11.dll", "cudnn64_8.dll"]
    assert check_gpu_versions(imports, cuda="11.8", cudnn="8.6", ort_version="1.17.1") == []


def test_check_gpu_versions_explains_a_cuda12_provider_against_cuda118():
    imports = ["cublasLt64_12.dll", "cudart64_12.dll", "cudnn64_9.dll", "KERNEL32.dll"]
    problems = check_gpu_versions(imports, cuda="11.8", cudnn="8.6", ort_version="1.23.1")
    assert len(problems) == 2
    cuda, cudnn = problems
    assert "ONNX Runtime 1.23.1 imports cublasLt64_12.dll, cudart64_12.dll (CUDA 12)" in cuda
    assert "[gpu] provides CUDA 11.8" in cuda
    assert "1.15-1.18 on the package index" in cuda and "1.19-1.21 only on a separate Microsoft feed" in cuda
    assert "cudnn64_9.dll (cuDNN 9)" in cudnn and "cuDNN 8.6" in cudnn


# ---- the real ORT 1.23.1 CPU wheel -------------------------------------------------------------

@pytest.fixture(scope="module")
def ort_binaries(ort_win_wheel, tmp_path_factory) -> dict[str, PeInfo]:
    capi = extract_capi_binaries(ort_win_wheel, tmp_path_factory.mktemp("ort-win"))
    return {f"onnxruntime/capi/{p.name}": inspect_pe(p) for p in sorted(capi.iterdir())}


@pytest.mark.integration
def test_real_wheel_closure_for_its_own_python(ort_binaries):
    report = dll_closure(ort_binaries, target_python="3.11")
    assert report.problems == ()
    kinds = {d.dll: d.kind for d in report.dependencies if d.how == "import"}
    assert kinds["VCRUNTIME140.dll"] is DepKind.VC_RUNTIME
    assert kinds["MSVCP140_1.dll"] is DepKind.VC_RUNTIME
    assert kinds["python311.dll"] is DepKind.PYTHON
    assert kinds["dxgi.dll"] is DepKind.SYSTEM
    crt = [kind for dll, kind in kinds.items() if dll.startswith("api-ms-win-crt-")]
    assert crt and set(crt) == {DepKind.SYSTEM}


@pytest.mark.integration
def test_real_wheel_closure_for_another_python(ort_binaries):
    problems = dll_closure(ort_binaries, target_python="3.12").problems
    assert problems == (
        "onnxruntime/capi/onnxruntime_pybind11_state.pyd imports python311.dll, which belongs to Python 3.11, "
        "but the target Python is 3.12: use the binary built for Python 3.12.",)


@pytest.mark.integration
def test_real_wheel_needs_vc_runtime_14_40(ort_binaries):
    assert vc_runtime_minimum(info.linker_version for info in ort_binaries.values()) == "14.40.33810"


# ---- real GPU providers (bigger downloads: 149 MB and 245 MB wheels) ---------------------------

def extract_member(wheel: Path, member: str, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        return Path(zf.extract(member, dest))


@pytest.mark.integration
def test_cuda118_provider_with_only_cudart_provided(tmp_path):
    gpu_wheel = pip_download("onnxruntime-gpu==1.17.1", "win_amd64")
    cudart_wheel = pip_download("nvidia-cuda-runtime-cu11==11.8.89", "win_amd64")
    provider = extract_member(gpu_wheel, "onnxruntime/capi/onnxruntime_providers_cuda.dll", tmp_path)
    shared = extract_member(gpu_wheel, "onnxruntime/capi/onnxruntime_providers_shared.dll", tmp_path)
    cudart = extract_member(cudart_wheel, "nvidia/cuda_runtime/bin/cudart64_110.dll", tmp_path)
    binaries = {
        "capi/onnxruntime_providers_cuda.dll": inspect_pe(provider),
        "capi/onnxruntime_providers_shared.dll": inspect_pe(shared),
        "gpu/cudart64_110.dll": inspect_pe(cudart),
    }
    report = dll_closure(binaries, target_python="3.11")
    missing = sorted(p.split(" imports ")[1].split(",")[0] for p in report.problems)
    assert missing == ["cublas64_11.dll", "cublasLt64_11.dll", "cudnn64_8.dll", "cufft64_10.dll"]
    assert all(p.startswith("capi/onnxruntime_providers_cuda.dll imports ") for p in report.problems)
    assert all(p.endswith("which the bundle does not provide: add it to [gpu].") for p in report.problems)
    assert cuda_majors(binaries["capi/onnxruntime_providers_cuda.dll"].imports) == {"cuda": 11, "cudnn": 8}
    assert check_gpu_versions(binaries["capi/onnxruntime_providers_cuda.dll"].imports,
                              cuda="11.8", cudnn="8.6", ort_version="1.17.1") == []


@pytest.mark.integration
def test_cuda12_provider_against_cuda118_is_explained(tmp_path):
    # onnxruntime-gpu 1.23.1 was never published to the package index (1.23.0 and 1.23.2 were);
    # 1.23.2 is the same CUDA 12 / cuDNN 9 build line.
    gpu_wheel = pip_download("onnxruntime-gpu==1.23.2", "win_amd64")
    provider = inspect_pe(extract_member(gpu_wheel, "onnxruntime/capi/onnxruntime_providers_cuda.dll", tmp_path))
    problems = check_gpu_versions(provider.imports, cuda="11.8", cudnn="8.6", ort_version="1.23.2")
    assert len(problems) == 2
    assert "cudart64_12.dll" in problems[0] and "1.18" in problems[0]
    assert "cudnn64_9.dll" in problems[1] and "1.18" in problems[1]
