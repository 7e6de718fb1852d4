"""zlibwapi.dll built from Debian's static zlib for mingw-w64: it exports zlib's names, needs only Windows itself,
and compresses and inflates through GetProcAddress under Wine; and the GPU component requires it exactly when a
cuDNN DLL imports it (cuDNN 8.9.5's DLLs do not, measured in tests/integration/gpu/test_gpu.py's big test)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pefile
import pytest
from fixtures.wine import MINGW_GCC, compile_windows_exe, mingw_gcc, wine  # noqa: F401  (fixtures)
from fixtures.zlibwapi import build_zlibwapi, def_exports, libz_functions, zlib_h_functions
from integration.gpu.test_gpu import dlls, make_tgz, make_zip, run_gpu  # noqa: F401  (dlls: the fake CUDA stack, a fixture)

from bundler.errors import BuildError
from bundler.readers.dllclosure import DepKind, classify
from bundler.readers.pe import X64_MACHINE, inspect_pe

NM = MINGW_GCC.replace("-gcc", "-nm")

ROUND_TRIP = r"""
#include <windows.h>
#include <stdio.h>
#include <string.h>
typedef int (*pack_t)(unsigned char *, unsigned long *, const unsigned char *, unsigned long);
typedef const char *(*version_t)(void);
int main(void) {
    const char *text = "cuDNN 8 asks for zlibwapi.dll";
    unsigned char packed[256], back[256];
    unsigned long packed_len = sizeof packed, back_len = sizeof back;
    HMODULE zlib = LoadLibraryA("zlibwapi.dll");
    if (!zlib) { printf("LoadLibrary failed: %lu\n", GetLastError()); return 2; }
    pack_t compress = (pack_t)GetProcAddress(zlib, "compress");
    pack_t uncompress = (pack_t)GetProcAddress(zlib, "uncompress");
    version_t version = (version_t)GetProcAddress(zlib, "zlibVersion");
    if (!compress || !uncompress || !version) { printf("GetProcAddress failed\n"); return 3; }
    if (compress(packed, &packed_len, (const unsigned char *)text, (unsigned long)strlen(text) + 1) != 0) return 4;
    if (uncompress(back, &back_len, packed, packed_len) != 0) return 5;
    printf("zlib %s: %s\n", version(), back);
    return strcmp((const char *)back, text) != 0;
}
"""


@pytest.fixture(scope="module")
def zlibwapi(tmp_path_factory, mingw_gcc) -> Path:
    return build_zlibwapi(mingw_gcc, tmp_path_factory.mktemp("zlibwapi"))


def exports(path: Path) -> list[str]:
    pe = pefile.PE(str(path), fast_load=True)
    pe.parse_data_directories(directories=[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_EXPORT"]])
    return sorted(s.name.decode() for s in pe.DIRECTORY_ENTRY_EXPORT.symbols if s.name)


def test_the_def_exports_every_zlib_function_the_static_library_defines():
    assert set(def_exports()) == zlib_h_functions() & libz_functions(NM)
    assert {"compress", "uncompress", "inflate", "deflate", "zlibVersion", "crc32", "adler32"} <= set(def_exports())


def test_zlibwapi_exports_zlibs_names_and_needs_only_windows(zlibwapi):
    assert exports(zlibwapi) == sorted(def_exports())
    info = inspect_pe(zlibwapi)
    assert info.machine == X64_MACHINE and info.is_dll
    assert info.imports and {classify(dll, payload=(), target_python="3.11") for dll in info.imports} == {DepKind.SYSTEM}


def test_zlibwapi_round_trips_data_through_getprocaddress_under_wine(zlibwapi, mingw_gcc, wine, tmp_path):
    folder = zlibwapi.parent
    source = tmp_path / "round_trip.c"
    source.write_text(ROUND_TRIP, encoding="utf-8")
    exe = compile_windows_exe(mingw_gcc, source, folder / "round_trip.exe")
    done = wine.run([wine.to_windows(exe)], cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "zlib 1.2.13: cuDNN 8 asks for zlibwapi.dll"


@pytest.fixture(scope="module")
def old_cudnn(tmp_path_factory, mingw_gcc, zlibwapi) -> Path:
    """A cuDNN 8 sub-library that imports zlibwapi.dll, as NVIDIA's guide says older cuDNN 8 builds do (a
    stand-in: no such cuDNN is on the package index; 8.9.5 links zlib in)."""
    folder = tmp_path_factory.mktemp("old-cudnn")
    source = folder / "cnn.c"
    source.write_text('const char *zlibVersion(void);\n'
                      '__declspec(dllexport) const char *cnn(void) { return zlibVersion(); }\n', encoding="utf-8")
    out = folder / "cudnn_cnn_infer64_8.dll"
    subprocess.run([mingw_gcc, "-shared", "-O2", "-o", str(out), str(source), str(zlibwapi)], check=True,
                   capture_output=True)
    assert "zlibwapi.dll" in inspect_pe(out).imports
    return out


@pytest.fixture
def fake_stack(tmp_path, dlls) -> tuple[Path, list]:
    ort_wheel = make_zip(tmp_path / "onnxruntime_gpu-1.17.1-cp311-cp311-win_amd64.whl", {
        "onnxruntime/capi/onnxruntime_providers_cuda.dll": dlls["onnxruntime_providers_cuda.dll"],
        "onnxruntime/capi/onnxruntime_providers_shared.dll": dlls["onnxruntime_providers_shared.dll"],
    })
    cuda = make_zip(tmp_path / "cuda.zip", {f"bin/{n}": dlls[n] for n in
                                            ("cudart64_110.dll", "cublas64_11.dll", "cublasLt64_11.dll")})
    return ort_wheel, [(cuda, None)]


def test_a_cudnn_that_names_zlibwapi_only_in_strings_does_not_need_it(tmp_path, dlls, fake_stack):
    ort_wheel, sources = fake_stack
    assert "zlibwapi.dll" in inspect_pe(dlls["cudnn64_8.dll"]).runtime_names  # cuDNN 8.9.5's diagnostic list
    cudnn = make_tgz(tmp_path / "cudnn.tgz", {f"bin/{n}": dlls[n] for n in ("cudnn64_8.dll", "cudnn_ops_infer64_8.dll")})
    assembly = run_gpu(tmp_path, ort_wheel, [*sources, (cudnn, None)])
    assert "gpu/zlibwapi.dll" not in assembly.facts.gpu.record["dlls"]


def test_a_cudnn_that_imports_zlibwapi_needs_it_and_takes_the_one_built_from_zlib(tmp_path, dlls, fake_stack,
                                                                                  old_cudnn, zlibwapi):
    ort_wheel, sources = fake_stack
    cudnn = make_tgz(tmp_path / "cudnn.tgz", {"bin/cudnn64_8.dll": dlls["cudnn64_8.dll"],
                                              "bin/cudnn_ops_infer64_8.dll": dlls["cudnn_ops_infer64_8.dll"],
                                              "bin/cudnn_cnn_infer64_8.dll": old_cudnn})
    with pytest.raises(BuildError) as caught:
        run_gpu(tmp_path / "a", ort_wheel, [*sources, (cudnn, None)])
    message = str(caught.value)
    assert "gpu/cudnn_cnn_infer64_8.dll imports zlibwapi.dll, which the bundle does not provide: add it to [gpu]" in message
    assert "zlibwapi.dll: no NVIDIA wheel" in message
    assembly = run_gpu(tmp_path / "b", ort_wheel, [*sources, (cudnn, None), (zlibwapi, None)])
    assert "gpu/zlibwapi.dll" in assembly.facts.gpu.record["dlls"]
    preload = assembly.facts.gpu.preload
    assert preload.index("gpu/zlibwapi.dll") < preload.index("gpu/cudnn_cnn_infer64_8.dll")

