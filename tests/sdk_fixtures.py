"""Stand-ins for the ONNX Runtime release archives, built from the real libraries of the real wheels.

The official `onnxruntime-linux-x64-<ver>.tgz` and `onnxruntime-win-x64-<ver>.zip` cannot be downloaded
here, so the tests assemble archives in the official layout (docs/facts.md §1) around the REAL
`libonnxruntime.so.1.23.1` and `onnxruntime.dll` taken from the 1.23.1 wheels. Three pieces are stand-ins
and named so: the headers (written here, declaring only what the test programs call), the Windows import
library (made with mingw's dlltool; the real zip's `.lib` is MSVC's) and, for one test, an upstream CMake
file. Everything else (version files, commit, library bytes, symlink chain) is what the real archives hold.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import zipfile
from pathlib import Path

ORT_VERSION = "1.23.1"
# The commit ORT 1.23.1 was built from; its DLLs' FileVersion is 1.23.20251002.1.d9b2048 (docs/facts.md §1).
ORT_COMMIT = "d9b2048791efb5804fe3d53a04b4971256addebf"
LINUX_TOP = f"onnxruntime-linux-x64-{ORT_VERSION}"
WIN_TOP = f"onnxruntime-win-x64-{ORT_VERSION}"

# STAND-IN for onnxruntime_c_api.h: declares only OrtGetApiBase and the two OrtApiBase members.
STANDIN_HEADER_MINIMAL = """\
/* STAND-IN for ONNX Runtime's onnxruntime_c_api.h (ort-bundler tests): only OrtGetApiBase. */
#pragma once
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
typedef struct OrtApi OrtApi;
typedef struct OrtApiBase {
    const OrtApi *(*GetApi)(uint32_t version);
    const char *(*GetVersionString)(void);
} OrtApiBase;
const OrtApiBase *OrtGetApiBase(void);
#ifdef __cplusplus
}
#endif
"""

# The functions of the real OrtApi table the SDK sample calls, by slot (docs/facts.md §7; tests/native/ortprobe.c).
_SAMPLE_SLOTS = {
    2: "const char *(*GetErrorMessage)(const OrtStatus *status)",
    3: "OrtStatus *(*CreateEnv)(OrtLoggingLevel level, const char *logid, OrtEnv **out)",
    7: "OrtStatus *(*CreateSession)(const OrtEnv *env, const ORTCHAR_T *path, const OrtSessionOptions *options, "
       "OrtSession **out)",
    9: "OrtStatus *(*Run)(OrtSession *session, const OrtRunOptions *run_options, const char *const *input_names, "
       "const OrtValue *const *inputs, size_t input_len, const char *const *output_names, size_t output_len, "
       "OrtValue **outputs)",
    10: "OrtStatus *(*CreateSessionOptions)(OrtSessionOptions **options)",
    30: "OrtStatus *(*SessionGetInputCount)(const OrtSession *session, size_t *out)",
    31: "OrtStatus *(*SessionGetOutputCount)(const OrtSession *session, size_t *out)",
    33: "OrtStatus *(*SessionGetInputTypeInfo)(const OrtSession *session, size_t index, OrtTypeInfo **out)",
    36: "OrtStatus *(*SessionGetInputName)(const OrtSession *session, size_t index, OrtAllocator *allocator, "
        "char **value)",
    37: "OrtStatus *(*SessionGetOutputName)(const OrtSession *session, size_t index, OrtAllocator *allocator, "
        "char **value)",
    49: "OrtStatus *(*CreateTensorWithDataAsOrtValue)(const OrtMemoryInfo *info, void *data, size_t data_len, "
        "const int64_t *shape, size_t shape_len, ONNXTensorElementDataType type, OrtValue **out)",
    51: "OrtStatus *(*GetTensorMutableData)(OrtValue *value, void **out)",
    55: "OrtStatus *(*CastTypeInfoToTensorInfo)(const OrtTypeInfo *type_info, const OrtTensorTypeAndShapeInfo **out)",
    60: "OrtStatus *(*GetTensorElementType)(const OrtTensorTypeAndShapeInfo *info, ONNXTensorElementDataType *out)",
    61: "OrtStatus *(*GetDimensionsCount)(const OrtTensorTypeAndShapeInfo *info, size_t *out)",
    62: "OrtStatus *(*GetDimensions)(const OrtTensorTypeAndShapeInfo *info, int64_t *values, size_t length)",
    69: "OrtStatus *(*CreateCpuMemoryInfo)(OrtAllocatorType type, OrtMemType mem_type, OrtMemoryInfo **out)",
    76: "OrtStatus *(*AllocatorFree)(OrtAllocator *allocator, void *p)",
    78: "OrtStatus *(*GetAllocatorWithDefaultOptions)(OrtAllocator **out)",
    92: "void (*ReleaseEnv)(OrtEnv *value)",
    93: "void (*ReleaseStatus)(OrtStatus *value)",
    94: "void (*ReleaseMemoryInfo)(OrtMemoryInfo *value)",
    95: "void (*ReleaseSession)(OrtSession *value)",
    96: "void (*ReleaseValue)(OrtValue *value)",
    98: "void (*ReleaseTypeInfo)(OrtTypeInfo *value)",
    100: "void (*ReleaseSessionOptions)(OrtSessionOptions *value)",
}


def _api_struct() -> str:
    """struct OrtApi with the sample's functions at their real slots and opaque pointers in between."""
    lines, slot = [], 0
    for index, declaration in sorted(_SAMPLE_SLOTS.items()):
        if index > slot:
            lines.append(f"    void *unused_{slot}_{index - 1}[{index - slot}];")
        lines.append(f"    {declaration};")
        slot = index + 1
    return "struct OrtApi {\n" + "\n".join(lines) + "\n};\n"


# STAND-IN for onnxruntime_c_api.h with the real layout of the OrtApi slots the SDK sample uses, so the
# shipped sample compiles unchanged and runs against the real library.
STANDIN_HEADER_SAMPLE = (
    "/* STAND-IN for ONNX Runtime's onnxruntime_c_api.h (ort-bundler tests): the OrtApi slots the sample uses. */\n"
    "#pragma once\n#include <stddef.h>\n#include <stdint.h>\n"
    "#define ORT_API_VERSION 23\n"
    "#ifdef _WIN32\ntypedef wchar_t ORTCHAR_T;\n#else\ntypedef char ORTCHAR_T;\n#endif\n"
    + "".join(f"typedef struct {name} {name};\n" for name in (
        "OrtStatus", "OrtEnv", "OrtSession", "OrtSessionOptions", "OrtRunOptions", "OrtValue", "OrtMemoryInfo",
        "OrtAllocator", "OrtTypeInfo", "OrtTensorTypeAndShapeInfo"))
    + "typedef enum OrtLoggingLevel { ORT_LOGGING_LEVEL_VERBOSE, ORT_LOGGING_LEVEL_INFO, ORT_LOGGING_LEVEL_WARNING,"
      " ORT_LOGGING_LEVEL_ERROR, ORT_LOGGING_LEVEL_FATAL } OrtLoggingLevel;\n"
      "typedef enum ONNXTensorElementDataType { ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED,"
      " ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT } ONNXTensorElementDataType;\n"
      "typedef enum OrtAllocatorType { OrtInvalidAllocator = -1, OrtDeviceAllocator = 0, OrtArenaAllocator = 1 }"
      " OrtAllocatorType;\n"
      "typedef enum OrtMemType { OrtMemTypeCPUInput = -2, OrtMemTypeCPUOutput = -1, OrtMemTypeDefault = 0 }"
      " OrtMemType;\n"
    + _api_struct()
    + "typedef struct OrtApi OrtApi;\n"
      "typedef struct OrtApiBase {\n    const OrtApi *(*GetApi)(uint32_t version);\n"
      "    const char *(*GetVersionString)(void);\n} OrtApiBase;\n"
      "const OrtApiBase *OrtGetApiBase(void);\n"
)

# STAND-IN for the broken upstream CMake file of the Linux archives (onnxruntime #24003): it names lib64/.
STANDIN_UPSTREAM_CMAKE = (
    "# STAND-IN for upstream's onnxruntimeTargets.cmake: it names lib64/, which the archive lacks.\n"
    'set(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../..")\n'
    'message(FATAL_ERROR "upstream CMake file used: ${_IMPORT_PREFIX}/lib64/libonnxruntime.so.1.23.1")\n'
)

NOTICE_FILES = {"LICENSE": "MIT License\n\nCopyright (c) Microsoft Corporation\n",
                "ThirdPartyNotices.txt": "Third party notices (stand-in text)\n"}


def wheel_member(wheel: Path, name: str, dest: Path) -> Path:
    """One file of a (trusted, pip-downloaded) wheel, written under dest."""
    target = dest / Path(name).name
    if not target.exists():
        dest.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as archive:
            target.write_bytes(archive.read(name))
    return target


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, *, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _add_symlink(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
    tar.addfile(info)


def linux_release_archive(dest: Path, library: Path, *, header: str, version: str = ORT_VERSION,
                          commit: str = ORT_COMMIT, links: dict[str, str] | None = None,
                          upstream_cmake: bool = False) -> Path:
    """onnxruntime-linux-x64-<ver>.tgz in the official layout around the real libonnxruntime.so.<ver>.

    `links` (path below the top folder -> link text) replaces the official symlink chain.
    """
    top = f"onnxruntime-linux-x64-{version}"
    chain = links if links is not None else {"lib/libonnxruntime.so.1": f"libonnxruntime.so.{version}",
                                             "lib/libonnxruntime.so": "libonnxruntime.so.1"}
    path = dest / f"{top}.tgz"
    with tarfile.open(path, "w:gz", compresslevel=1, format=tarfile.PAX_FORMAT) as tar:
        for folder in (top, f"{top}/include", f"{top}/lib"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        _add_bytes(tar, f"{top}/include/onnxruntime_c_api.h", header.encode())
        tar.add(library, arcname=f"{top}/lib/libonnxruntime.so.{version}")
        for name, target in chain.items():
            _add_symlink(tar, f"{top}/{name}", target)
        if upstream_cmake:
            _add_bytes(tar, f"{top}/lib/cmake/onnxruntime/onnxruntimeTargets.cmake", STANDIN_UPSTREAM_CMAKE.encode())
        _add_bytes(tar, f"{top}/VERSION_NUMBER", f"{version}\n".encode())
        _add_bytes(tar, f"{top}/GIT_COMMIT_ID", f"{commit}\n".encode())
        for name, text in NOTICE_FILES.items():
            _add_bytes(tar, f"{top}/{name}", text.encode())
    return path


def import_library(dll: Path, dest: Path, dlltool: str) -> Path:
    """STAND-IN for onnxruntime.lib: a mingw import library for the DLL's C API export."""
    definition = dest / "onnxruntime.def"
    definition.write_text("LIBRARY onnxruntime.dll\nEXPORTS\n    OrtGetApiBase\n    OrtSessionOptionsAppendExecutionProvider_CPU\n")
    output = dest / "onnxruntime.lib"
    subprocess.run([dlltool, "-d", str(definition), "-l", str(output), "-D", dll.name], check=True,
                   capture_output=True)
    return output


def windows_release_archive(dest: Path, dlls: list[Path], implib: Path, *, header: str,
                            version_number: str = ORT_VERSION, commit: str = ORT_COMMIT,
                            top: str = WIN_TOP) -> Path:
    """onnxruntime-win-x64-<ver>.zip in the official layout around the real DLLs of the win_amd64 wheel."""
    path = dest / f"{top}.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        archive.writestr(f"{top}/include/onnxruntime_c_api.h", header)
        for dll in dlls:
            archive.write(dll, f"{top}/lib/{dll.name}")
        archive.write(implib, f"{top}/lib/onnxruntime.lib")
        archive.writestr(f"{top}/VERSION_NUMBER", f"{version_number}\n")
        archive.writestr(f"{top}/GIT_COMMIT_ID", f"{commit}\n")
        for name, text in NOTICE_FILES.items():
            archive.writestr(f"{top}/{name}", text)
    return path
