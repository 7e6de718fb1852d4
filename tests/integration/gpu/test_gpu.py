"""The GPU component: real PE files throughout.

Fast tests use tiny DLLs cross-compiled with mingw whose import tables and embedded names mimic the CUDA
stack (a provider importing cudart/cublas/cudnn, a cudnn64_8.dll naming its sub-library and zlibwapi.dll, as
cuDNN 8.9.5 does for a diagnostic);
the integration tests use the real CUDA providers of onnxruntime-gpu 1.17.1 (CUDA 11.8 / cuDNN 8) and
1.23.2 (CUDA 12 / cuDNN 9) and NVIDIA's CUDA 11.8 runtime wheel; the last tests fetch the whole CUDA 11.8
quickstart (about 1.5 GB of inputs, checking the free space first) and build it, on every run (issue 36).
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

import pytest
from fixtures.cli import MANIFESTS, run_cli
from fixtures.parts import part_inputs
from fixtures.wheels import cache_root, fetched_inputs, pip_download
from fixtures.wine import mingw_gcc  # noqa: F401  (fixture)

from bundler.assembly.assembly import Assembly, Copy
from bundler.errors import BuildError, UnsupportedError
from bundler.hashing import file_sha256
from bundler.manifest import Gpu, load, parse
from bundler.platforms.windows.gpu import add_gpu
from bundler.platforms.windows.gpu_cuda import (
    GpuDll,
    check_gpu,
    declared_version_problems,
    gpu_record,
    load_order,
)
from bundler.readers.member_scan import ArchiveFile
from bundler.readers.pe import PeInfo, inspect_pe

NO_HASH = "0" * 64  # add_gpu reads the files it is given; hashes are checked when inputs enter the cache


# ---- tiny real DLLs --------------------------------------------------------------------------------

# name -> (C source, DLLs it links against). Each exports one function so others can import it.
FAKE_DLLS = {
    "cudart64_110.dll": ("__declspec(dllexport) int cudart(void) { return 1; }", ()),
    "cublasLt64_11.dll": ("__declspec(dllexport) int cublaslt(void) { return 2; }", ()),
    "cublas64_11.dll": ("int cublaslt(void);\n__declspec(dllexport) int cublas(void) { return cublaslt(); }",
                        ("cublasLt64_11.dll",)),
    "zlibwapi.dll": ("__declspec(dllexport) int zlib(void) { return 3; }", ()),
    # Names it loads with LoadLibrary, as cuDNN 8 does, plus what cuDNN 8.9.5 names without loading it:
    # zlibwapi.dll (a diagnostic), a system name glued to the byte before it, a profiling-injection hook.
    "cudnn64_8.dll": ('__declspec(dllexport) const char *loads[] = {"cudnn_ops_infer64_8.dll", "zlibwapi.dll", '
                      '"Akernel32.dll", "cask_profile_interface.dll"};\n'
                      '__declspec(dllexport) int cudnn(void) { return 4; }', ()),
    "cudnn_ops_infer64_8.dll": ("int cudnn(void);\n__declspec(dllexport) int ops(void) { return cudnn(); }",
                                ("cudnn64_8.dll",)),
    "onnxruntime_providers_shared.dll": ("__declspec(dllexport) int shared(void) { return 5; }", ()),
    "onnxruntime_providers_cuda.dll": (
        "int cudart(void); int cublas(void); int cudnn(void); int shared(void);\n"
        "__declspec(dllexport) int provider(void) { return cudart() + cublas() + cudnn() + shared(); }",
        ("cudart64_110.dll", "cublas64_11.dll", "cudnn64_8.dll", "onnxruntime_providers_shared.dll")),
}


@pytest.fixture(scope="module")
def dlls(tmp_path_factory, mingw_gcc) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("fake-dlls")
    for name, (source, links) in FAKE_DLLS.items():
        c_file = folder / f"{name}.c"
        c_file.write_text(source + "\n", encoding="utf-8")
        subprocess.run([mingw_gcc, "-shared", "-O2", "-o", str(folder / name), str(c_file),
                        *(str(folder / dep) for dep in links)], check=True, capture_output=True)
    return {name: folder / name for name in FAKE_DLLS}


def make_zip(path: Path, members: dict[str, Path | bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, content in members.items():
            zf.writestr(name, content if isinstance(content, bytes) else content.read_bytes())
    return path


def make_tgz(path: Path, members: dict[str, Path]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, source in members.items():
            tf.add(source, arcname=name)
    return path


def gpu_manifest(tmp_path: Path, sources: list[dict], *, cuda: str = "11.8", cudnn: str = "8.9",
                 ort_version: str = "1.17.1"):
    data = {
        "bundle": {"name": "gpu-test", "version": "1.0.0", "platform": "win_amd64", "python": "3.11"},
        "ort": {"version": ort_version,
                "capi": {"path": f"onnxruntime_gpu-{ort_version}-cp311-cp311-win_amd64.whl", "sha256": NO_HASH}},
    }
    if sources:
        data["gpu"] = {"cuda": cuda, "cudnn": cudnn,
                       "sources": [{"path": "unused", "sha256": NO_HASH, **s} for s in sources]}
    return parse(data, path=tmp_path / "manifest.toml")


def run_gpu(tmp_path: Path, ort_wheel: Path, sources: list[tuple[Path, list[str] | None]], **kwargs) -> Assembly:
    """add_gpu on a fresh Assembly, the way the build calls it, with the python part's record in place."""
    manifest = gpu_manifest(tmp_path, [{"include": inc} if inc else {} for _, inc in sources], **kwargs)
    files = {"ort.capi": ort_wheel, **{f"gpu.sources[{i}]": path for i, (path, _) in enumerate(sources)}}
    assembly = Assembly()
    add_gpu(assembly, part_inputs(manifest, files=files, work=tmp_path / "work"))
    return assembly


@pytest.fixture
def ort_wheel(tmp_path, dlls) -> Path:
    return make_zip(tmp_path / "onnxruntime_gpu-1.17.1-cp311-cp311-win_amd64.whl", {
        "onnxruntime/__init__.py": b"__version__ = '1.17.1'\n",
        "onnxruntime/capi/onnxruntime_providers_cuda.dll": dlls["onnxruntime_providers_cuda.dll"],
        "onnxruntime/capi/onnxruntime_providers_shared.dll": dlls["onnxruntime_providers_shared.dll"],
    })


@pytest.fixture
def complete_sources(tmp_path, dlls) -> list[tuple[Path, list[str] | None]]:
    """cuBLAS and the runtime from a zip (with a pattern), cuDNN from a tgz (default: every DLL), zlib alone."""
    cuda_zip = make_zip(tmp_path / "cuda.zip", {
        "cuda/bin/cudart64_110.dll": dlls["cudart64_110.dll"],
        "cuda/bin/cublas64_11.dll": dlls["cublas64_11.dll"],
        "cuda/bin/cublasLt64_11.dll": dlls["cublasLt64_11.dll"],
        "cuda/lib/cudart.lib": b"not selected",
    })
    cudnn_tgz = make_tgz(tmp_path / "cudnn.tgz", {
        "cudnn/bin/cudnn64_8.dll": dlls["cudnn64_8.dll"],
        "cudnn/bin/cudnn_ops_infer64_8.dll": dlls["cudnn_ops_infer64_8.dll"],
    })
    return [(cuda_zip, ["*/bin/*.DLL"]), (cudnn_tgz, None), (dlls["zlibwapi.dll"], None)]


# ---- add_gpu on tiny real DLLs -----------------------------------------------------------------------

def test_without_gpu_section_nothing_is_added(tmp_path, ort_wheel):
    assembly = Assembly()
    add_gpu(assembly, part_inputs(gpu_manifest(tmp_path, []), files={"ort.capi": ort_wheel}, work=tmp_path / "w"))
    assert assembly.members == {} and assembly.facts.gpu is None and assembly.copies == []


def test_complete_component_is_shipped_installed_and_recorded(tmp_path, ort_wheel, complete_sources, dlls):
    assembly = run_gpu(tmp_path, ort_wheel, complete_sources)
    names = ["cublas64_11.dll", "cublasLt64_11.dll", "cudart64_110.dll", "cudnn64_8.dll", "cudnn_ops_infer64_8.dll",
             "zlibwapi.dll"]
    assert sorted(assembly.members) == sorted(f"payload/gpu/{n}" for n in names)
    for name in names:
        member = assembly.members[f"payload/gpu/{name}"]
        assert member.sha256 == file_sha256(dlls[name])
        assert not member.executable
        # from the zip, its compressed bytes go into the bundle as they are, and it was read as it streamed past, never
        # written out (bundler/readers/pe_stream.py); from the tgz and the loose DLL, the file is deflated as every
        # file is
        from_zip = name.startswith(("cudart", "cublas"))
        assert (member.packed is not None) == from_zip and (member.source is None) == from_zip, name
        assert member.source is None or file_sha256(member.source) == member.sha256
    assert sorted(assembly.copies, key=lambda c: c.target) == [
        Copy(source=f"payload/gpu/{n}", target=f"gpu/{n}") for n in names]
    record = assembly.facts.gpu.record
    assert record["cuda"] == "11.8" and record["cudnn"] == "8.9" and record["min_driver"] == "452.39"
    assert record["dlls"] == [f"gpu/{n}" for n in names]
    assert [f["source"] for f in record["files"]] == ["gpu.sources[0]"] * 3 + ["gpu.sources[1]"] * 2 + ["gpu.sources[2]"]
    assert {"cudart64_110.dll", "cublas64_11.dll", "cudnn64_8.dll", "onnxruntime_providers_shared.dll",
            "KERNEL32.dll"} <= set(record["provider_imports"])
    assert assembly.facts.gpu.dll_dirs == ("gpu",)
    # dependencies first (cublasLt before cublas, cudnn64_8 before its importer), then by family
    assert assembly.facts.gpu.preload == ("gpu/cudart64_110.dll", "gpu/cublasLt64_11.dll", "gpu/cublas64_11.dll",
                                          "gpu/zlibwapi.dll", "gpu/cudnn64_8.dll", "gpu/cudnn_ops_infer64_8.dll")
    assert str(tmp_path) not in repr(assembly.facts.gpu.record)


def test_missing_dlls_are_all_named_with_their_importer(tmp_path, ort_wheel, complete_sources):
    cuda_zip, _ = complete_sources[0]
    with pytest.raises(BuildError) as caught:
        run_gpu(tmp_path, ort_wheel, [(cuda_zip, ["cuda/bin/cudart64_110.dll"]), complete_sources[1]])
    message = str(caught.value)
    assert "onnxruntime/capi/onnxruntime_providers_cuda.dll imports cublas64_11.dll, which the bundle does not provide" in message
    assert "cublas64_11.dll: NVIDIA's nvidia-cublas-cu11 wheel" in message
    # cuDNN 8.9.5 names zlibwapi.dll only for its load-failure diagnostic: not a load
    # (tests/integration/gpu/test_gpu_zlibwapi.py)
    assert "zlibwapi.dll" not in message
    assert "in its strings" not in message  # the names cudnn64_8.dll holds without loading them are known
    assert "cudart64_110.dll, which" not in message  # shipped


def test_provider_shared_dll_must_be_in_the_ort_source(tmp_path, dlls, complete_sources):
    wheel = make_zip(tmp_path / "ort.whl", {
        "onnxruntime/capi/onnxruntime_providers_cuda.dll": dlls["onnxruntime_providers_cuda.dll"]})
    with pytest.raises(BuildError, match="imports onnxruntime_providers_shared.dll, which is not in the payload"):
        run_gpu(tmp_path, wheel, complete_sources)


def test_a_cpu_ort_source_has_no_cuda_provider(tmp_path, dlls, complete_sources):
    wheel = make_zip(tmp_path / "onnxruntime-1.17.1-cp311-cp311-win_amd64.whl", {
        "onnxruntime/capi/onnxruntime_providers_shared.dll": dlls["onnxruntime_providers_shared.dll"]})
    with pytest.raises(BuildError, match=r"ort.capi \(onnxruntime-1.17.1-cp311-cp311-win_amd64.whl\): found no "
                                         r"onnxruntime_providers_cuda.dll, expected the GPU build.*onnxruntime-gpu"):
        run_gpu(tmp_path, wheel, complete_sources)


def test_the_provider_of_the_c_api_archive_is_used_without_a_python_binding(tmp_path, dlls, complete_sources):
    top = "onnxruntime-win-x64-gpu-1.17.1/lib"
    archive = make_zip(tmp_path / "onnxruntime-win-x64-gpu-1.17.1.zip", {
        f"{top}/onnxruntime_providers_cuda.dll": dlls["onnxruntime_providers_cuda.dll"],
        f"{top}/onnxruntime_providers_shared.dll": dlls["onnxruntime_providers_shared.dll"]})
    manifest = parse({
        "bundle": {"name": "sdk", "version": "1.0.0", "platform": "win_amd64", "python": "3.11"},
        "ort": {"version": "1.17.1", "archive": {"path": archive.name, "sha256": NO_HASH}},
        "gpu": {"cuda": "11.8", "cudnn": "8.9", "sources": [{"path": "cudnn.tgz", "sha256": NO_HASH}]},
    }, path=tmp_path / "manifest.toml")
    with pytest.raises(BuildError) as caught:
        add_gpu(Assembly(), part_inputs(manifest, files={"ort.archive": archive, "gpu.sources[0]": complete_sources[1][0]}, work=tmp_path / "work"))
    assert f"{top}/onnxruntime_providers_cuda.dll imports cudart64_110.dll, which the bundle does not provide" in str(caught.value)


def test_the_same_dll_from_two_sources_names_both(tmp_path, ort_wheel, complete_sources, dlls):
    extra = make_zip(tmp_path / "other.zip", {"x/cudart64_110.dll": dlls["cudart64_110.dll"]})
    with pytest.raises(BuildError) as caught:
        run_gpu(tmp_path, ort_wheel, [*complete_sources, (extra, None)])
    assert str(caught.value).startswith(
        "gpu.sources[0] (cuda.zip)!cuda/bin/cudart64_110.dll and gpu.sources[3] (other.zip)!x/cudart64_110.dll "
        "both provide cudart64_110.dll")


def test_the_same_name_twice_in_one_source_is_refused(tmp_path, ort_wheel, dlls):
    both = make_zip(tmp_path / "both.zip", {"a/cudart64_110.dll": dlls["cudart64_110.dll"],
                                             "b/CUDART64_110.DLL": dlls["cudart64_110.dll"]})
    with pytest.raises(BuildError, match=r"both.zip\)!a/cudart64_110.dll and .*both.zip\)!b/CUDART64_110.DLL both provide"):
        run_gpu(tmp_path, ort_wheel, [(both, None)])


def test_an_include_pattern_that_matches_nothing_is_an_error(tmp_path, ort_wheel, complete_sources):
    cuda_zip, _ = complete_sources[0]
    with pytest.raises(BuildError, match=r"gpu.sources\[0\] \(cuda.zip\): include pattern\(s\) 'nvidia/\*/bin/\*.dll' "
                                         r"matched nothing, expected each to select a DLL such as 'cuda/bin/"):
        run_gpu(tmp_path, ort_wheel, [(cuda_zip, ["cuda/bin/*.dll", "nvidia/*/bin/*.dll"])])


def test_include_must_select_only_dlls(tmp_path, ort_wheel, complete_sources):
    cuda_zip, _ = complete_sources[0]
    with pytest.raises(BuildError, match=r"include selects cuda/lib/cudart.lib, expected only .dll files"):
        run_gpu(tmp_path, ort_wheel, [(cuda_zip, ["cuda/*"])])


def test_a_source_that_is_neither_archive_nor_dll(tmp_path, ort_wheel):
    text = tmp_path / "notes.txt"
    text.write_text("not a DLL\n", encoding="utf-8")
    with pytest.raises(BuildError, match=r"gpu.sources\[0\] \(notes.txt\): found neither an archive nor a DLL"):
        run_gpu(tmp_path, ort_wheel, [(text, None)])


def test_a_provider_linked_against_another_cudnn_major_is_refused(tmp_path, ort_wheel, complete_sources):
    with pytest.raises(BuildError, match=r"^The CUDA provider of ONNX Runtime 1.17.1 imports cudnn64_8.dll \(cuDNN 8\), "
                                         r"but \[gpu\] provides cuDNN 9.1: ONNX Runtime builds for cuDNN 9 are 1.19"):
        run_gpu(tmp_path, ort_wheel, complete_sources, cudnn="9.1")


# ---- the checks as pure logic ---------------------------------------------------------------------------

def pe_info(*, imports=(), runtime=(), version=None) -> PeInfo:
    return PeInfo(machine=0x8664, is_dll=True, linker_version=(14, 29), file_version=version, product_version=None,
                  imports=tuple(imports), delay_imports=(), runtime_names=tuple(runtime), has_signature=False)


def gpu_dll(name: str, **info) -> GpuDll:
    return GpuDll(name=name, file=ArchiveFile(name=name, sha256=NO_HASH, elf=None, extracted=Path(name)),
                  source="gpu.sources[0]", origin=f"x!{name}", info=pe_info(**info))


GPU = Gpu(cuda="11.8", cudnn="8.6", sources=())


def test_declared_versions_are_checked_against_the_dlls_version_resources():
    assert declared_version_problems([gpu_dll("cudart64_110.dll", version="6,14,11,11080"),
                                      gpu_dll("cudnn64_8.dll", version="8.6.0.163"),
                                      gpu_dll("cublas64_11.dll", version="6,14,11,11113")], gpu=GPU) == []
    problems = declared_version_problems([gpu_dll("cudart64_110.dll", version="6,14,11,11070"),
                                          gpu_dll("cudnn64_8.dll", version="8.9.5.29")], gpu=GPU)
    assert problems == [
        'gpu.sources[0]: cudart64_110.dll is CUDA 11.7 (its file version), but [gpu] cuda = "11.8"; expected CUDA '
        '11.8.x, or set [gpu] cuda = "11.7".',
        'gpu.sources[0]: cudnn64_8.dll is cuDNN 8.9.5.29 (its file version), but [gpu] cudnn = "8.6"; expected cuDNN '
        '8.6.x, or set [gpu] cudnn = "8.9".',
    ]


def test_declared_majors_are_checked_against_dll_names():
    problems = declared_version_problems([gpu_dll("cudart64_12.dll"), gpu_dll("cudnn64_9.dll")], gpu=GPU)
    assert len(problems) == 2
    assert problems[0].startswith('gpu.sources[0]: cudart64_12.dll belongs to CUDA 12, but [gpu] cuda = "11.8"')
    assert problems[1].startswith('gpu.sources[0]: cudnn64_9.dll belongs to cuDNN 9, but [gpu] cudnn = "8.6"')


def test_a_cuda12_provider_is_explained_before_any_missing_dll():
    provider = {"onnxruntime/capi/onnxruntime_providers_cuda.dll": pe_info(imports=["cudart64_12.dll", "cudnn64_9.dll"])}
    with pytest.raises(BuildError, match=r"^The CUDA provider of ONNX Runtime 1.23.1 imports cudart64_12.dll \(CUDA 12\)"):
        check_gpu(provider, [], gpu=GPU, ort_version="1.23.1", target_python="3.11")


def test_min_driver_per_cuda_major():
    assert gpu_record(Gpu(cuda="12.4", cudnn="9.1", sources=()), [], provider_imports=[])["min_driver"] == "527.41"
    with pytest.raises(UnsupportedError, match=r'cuda = "13.0": ort-bundler knows the minimum NVIDIA driver only for CUDA 11, 12'):
        gpu_record(Gpu(cuda="13.0", cudnn="9.1", sources=()), [], provider_imports=[])


def test_load_order_refuses_an_import_cycle():
    with pytest.raises(BuildError, match=r"cublas64_11.dll, cublasLt64_11.dll import each other in a cycle"):
        load_order([gpu_dll("cublas64_11.dll", imports=["cublasLt64_11.dll"]),
                    gpu_dll("cublasLt64_11.dll", imports=["cublas64_11.dll"]), gpu_dll("cudart64_110.dll")])


# ---- real GPU providers and NVIDIA's CUDA 11.8 runtime wheel -------------------------------------------

CUDART = "nvidia/cuda_runtime/bin/cudart64_110.dll"


@pytest.fixture(scope="module")
def cudart_wheel() -> Path:
    return pip_download("nvidia-cuda-runtime-cu11==11.8.89", "win_amd64")


@pytest.mark.integration
def test_real_cuda118_provider_with_only_the_runtime_names_every_missing_dll(tmp_path, cudart_wheel):
    gpu_wheel = pip_download("onnxruntime-gpu==1.17.1", "win_amd64")
    with pytest.raises(BuildError) as caught:
        run_gpu(tmp_path, gpu_wheel, [(cudart_wheel, [CUDART])], cudnn="8.6")
    message = str(caught.value)
    assert message.startswith("[gpu]: the CUDA provider of ONNX Runtime 1.17.1 cannot load with the DLLs the bundle ships")
    for dll, wheel in (("cudnn64_8.dll", "nvidia-cudnn-cu11"), ("cublas64_11.dll", "nvidia-cublas-cu11"),
                       ("cublasLt64_11.dll", "nvidia-cublas-cu11"), ("cufft64_10.dll", "nvidia-cufft-cu11")):
        assert f"onnxruntime/capi/onnxruntime_providers_cuda.dll imports {dll}, which the bundle does not provide" in message
        assert f"{dll}: NVIDIA's {wheel} wheel" in message
    assert message.count("which the bundle does not provide") == 4


@pytest.mark.integration
def test_real_runtime_wheel_default_include_takes_its_x86_dll(tmp_path, cudart_wheel):
    gpu_wheel = pip_download("onnxruntime-gpu==1.17.1", "win_amd64")
    with pytest.raises(BuildError, match=r"gpu/cudart32_110.dll is a x86 binary, but the bundle targets x64"):
        run_gpu(tmp_path, gpu_wheel, [(cudart_wheel, None)], cudnn="8.6")


@pytest.mark.integration
def test_real_cuda12_provider_with_cuda118_is_explained(tmp_path, cudart_wheel):
    # onnxruntime-gpu 1.23.1 was never published to the package index; 1.23.2 is the same CUDA 12 line.
    gpu_wheel = pip_download("onnxruntime-gpu==1.23.2", "win_amd64")
    with pytest.raises(BuildError) as caught:
        run_gpu(tmp_path, gpu_wheel, [(cudart_wheel, [CUDART])], cudnn="8.6", ort_version="1.23.2")
    cuda, cudnn = str(caught.value).split(". The CUDA provider")
    assert cuda.startswith("The CUDA provider of ONNX Runtime 1.23.2 imports ")
    assert "cudart64_12.dll" in cuda and "(CUDA 12), but [gpu] provides CUDA 11.8" in cuda
    assert "cudnn64_9.dll (cuDNN 9), but [gpu] provides cuDNN 8.6" in cudnn
    for part in (cuda, cudnn):
        assert "1.15-1.18 on the package index (onnxruntime-gpu)" in part
        assert "1.19-1.21 only on a separate Microsoft feed" in part


# ---- the CUDA 11.8 quickstart (about 1.5 GB of inputs) --------------------------------------------------

QUICKSTART = MANIFESTS / "quickstart-win-cuda11.8.toml"


CUDNN_WHEEL = "nvidia_cudnn_cu11-8.9.5.29-py3-none-win_amd64.whl"
# What any use of zlib through zlibwapi.dll would GetProcAddress: the (de)compression entry points.
ZLIB_ENTRY_POINTS = ("inflate", "inflateInit_", "inflateInit2_", "inflateEnd", "uncompress", "uncompress2",
                     "deflate", "deflateInit_", "deflateInit2_", "deflateEnd", "compress", "compress2", "zlibVersion")


@pytest.fixture(scope="module")
def quickstart_files() -> dict[str, Path]:
    return fetched_inputs(QUICKSTART, needs_gib=2.0)


@pytest.mark.integration
def test_cuda118_quickstart_closure_is_complete_from_nvidias_wheels(tmp_path, quickstart_files):
    manifest = load(QUICKSTART)
    assembly = Assembly()
    add_gpu(assembly, part_inputs(manifest, files=quickstart_files, work=tmp_path / "a"))
    assert assembly.facts.gpu.record["dlls"] == [f"gpu/{n}" for n in (
        "cublas64_11.dll", "cublasLt64_11.dll", "cudart64_110.dll", "cudnn64_8.dll", "cudnn_adv_infer64_8.dll",
        "cudnn_adv_train64_8.dll", "cudnn_cnn_infer64_8.dll", "cudnn_cnn_train64_8.dll", "cudnn_ops_infer64_8.dll",
        "cudnn_ops_train64_8.dll", "cufft64_10.dll", "nvrtc-builtins64_118.dll", "nvrtc64_112_0.dll")]
    assert list(assembly.facts.gpu.preload[:5]) == ["gpu/cudart64_110.dll", "gpu/nvrtc-builtins64_118.dll",
                                                  "gpu/nvrtc64_112_0.dll", "gpu/cublasLt64_11.dll", "gpu/cublas64_11.dll"]
    versions = {f["file"]: f["version"] for f in assembly.facts.gpu.record["files"]}
    assert versions["gpu/cudnn64_8.dll"] == "8.9.5.29" and versions["gpu/cudart64_110.dll"] == "6,14,11,11080"


@pytest.mark.integration
def test_cudnn_895_links_zlib_in_and_loads_no_zlibwapi(tmp_path, quickstart_files):
    """Why the quickstart ships no zlibwapi.dll: the name is in cuDNN 8.9.5 only for its load-failure diagnostic."""
    wheel = next(p for p in quickstart_files.values() if p.name == CUDNN_WHEEL)
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(".dll")]
        archive.extractall(tmp_path, members=names)
    assert len(names) == 7
    naming = []
    for name in names:
        path = tmp_path / name
        info = inspect_pe(path)
        assert "zlibwapi.dll" not in {i.lower() for i in (*info.imports, *info.delay_imports)}, name
        data = path.read_bytes()
        assert [f for f in ZLIB_ENTRY_POINTS if b"\0" + f.encode() + b"\0" in data] == [], name
        if b"zlibwapi.dll" in data:
            naming.append(PurePosixPath(name).name)
            assert b"Successfully loaded zlib independently. Unknown dll missing." in data, name
        if name.endswith("cudnn_cnn_infer64_8.dll"):
            assert b" inflate 1.2.13 Copyright 1995-2022 Mark Adler " in data
    assert sorted(naming) == ["cudnn64_8.dll", "cudnn_cnn_infer64_8.dll", "cudnn_ops_infer64_8.dll"]


def own_cache(root: Path) -> Path:
    """A cache of its own (no derived facts, no kept zips) over the shared inputs and ORT environments: a build in
    it is a first build, as on a user's machine, and what it keeps is deleted with it."""
    shared = cache_root() / "bundler-cache"
    root.mkdir()
    for name in ("sha256", "ort-envs"):
        (root / name).symlink_to(shared / name)
    return root


def built(cache: Path, out: Path) -> tuple[subprocess.CompletedProcess[str], int]:
    """`build --json --no-reuse` of the quickstart, and the bytes its processes wrote by the kernel's count."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock
    proc = run_cli("build", "--json", "--no-reuse", "--cache", str(cache), "-o", str(out), str(QUICKSTART), check=False)
    return proc, (resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock - before) * 512


@pytest.mark.integration
def test_cuda118_quickstart_builds_from_a_fresh_clone(tmp_path, quickstart_files):
    cache = own_cache(tmp_path / "cache")
    out = tmp_path / "out"
    proc, first_written = built(cache, out)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["reused"] is False  # assembled on every run, never a kept zip published
    (bundle,) = out.glob("*.zip")
    root = bundle.name.removesuffix(".zip")
    with zipfile.ZipFile(bundle) as archive:
        record = json.loads(archive.read(f"{root}/bundle.json"))
        shipped = set(archive.namelist())
    assert len(record["gpu"]["dlls"]) == 13
    assert {f"{root}/payload/{d}" for d in record["gpu"]["dlls"]} <= shipped
    allowed = {PurePosixPath(s["path"]).name for s in record["signatures"]
               if s["signer"] == "Code Sign Test (DO NOT TRUST)" and s["allowed_by_manifest"]}
    assert allowed == {"onnxruntime_providers_cuda.dll", "onnxruntime_providers_shared.dll",
                       "onnxruntime_providers_tensorrt.dll", "onnxruntime_pybind11_state.pyd"}
    # A first build reads each GPU DLL as it streams past in its wheel (bundler/readers/pe_stream.py) and writes none
    # out: the zip, the copy the cache keeps and the rebuilt ORT wheel, where it wrote every DLL out before (2.5 GiB).
    assert first_written < 2.2 * bundle.stat().st_size, f"wrote {first_written} for a {bundle.stat().st_size}-byte zip"
    assert not list((cache / "tmp").rglob("*.dll")), "no DLL written out under the build's work folder"
    # Assembled again (a new model or app version does the same): the GPU DLLs' facts and signature evidence are kept
    # by their sha256 (bundler/readers/pe_members.py), so none is read again.
    again, written = built(cache, tmp_path / "again")
    assert again.returncode == 0, again.stderr
    rebuilt = Path(json.loads(again.stdout)["zip"])
    assert json.loads(again.stdout)["sha256"] == json.loads(proc.stdout)["sha256"]  # the same bytes, byte for byte
    assert written < 2.2 * rebuilt.stat().st_size, f"wrote {written} bytes for a {rebuilt.stat().st_size}-byte zip"
    for folder in (cache, out, tmp_path / "again"):  # the symbolic links to the shared inputs, not what they name
        shutil.rmtree(folder)
