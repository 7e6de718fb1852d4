"""Does every DLL the payload needs come from somewhere on the target machine?

"DLL load failed" on an air-gapped machine is the failure this module exists to move to build time:
each import is classified as payload, Windows, VC++ runtime, Python, GPU runtime or driver, and what
nothing provides becomes a problem naming the importer and the missing DLL. Pure logic over `PeInfo`
records; `bundler.pe` reads the files.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from bundler.errors import BuildError
from bundler.readers.pe import X64_MACHINE, PeInfo

# Windows system DLLs that real ORT, CUDA, cuDNN and TensorRT binaries import or load by name.
SYSTEM_DLLS = frozenset({
    "advapi32.dll", "bcrypt.dll", "cfgmgr32.dll", "comctl32.dll", "comdlg32.dll", "crypt32.dll",
    "d3d11.dll", "d3d12.dll", "dbghelp.dll", "dwmapi.dll", "dxcore.dll", "dxgi.dll", "gdi32.dll",
    "imagehlp.dll", "iphlpapi.dll", "kernel32.dll", "kernelbase.dll", "mscoree.dll", "msvcrt.dll",
    "ncrypt.dll", "netapi32.dll", "ntdll.dll", "ole32.dll", "oleaut32.dll", "opengl32.dll",
    "powrprof.dll", "psapi.dll", "rpcrt4.dll", "secur32.dll", "setupapi.dll", "shell32.dll",
    "shlwapi.dll", "ucrtbase.dll", "user32.dll", "userenv.dll", "uxtheme.dll", "version.dll",
    "winmm.dll", "wintrust.dll", "ws2_32.dll", "wsock32.dll", "wtsapi32.dll",
    # what the embeddable package's _msi.pyd imports (CPython 3.7-3.12, PC/_msi.c), for [python] runtime
    "cabinet.dll", "msi.dll",
    # named in the strings of cuBLAS, cuFFT, NVRTC and cuDNN (Windows wheels, measured 2026-12-06)
    "combase.dll", "cryptbase.dll", "cryptnet.dll", "devobj.dll", "drvstore.dll", "msasn1.dll", "wldp.dll",
})
API_SET_PREFIXES = ("api-ms-win-", "ext-ms-")
VC_RUNTIME = re.compile(r"^(msvcp140(_\w+)?|vcruntime140(_\w+)?|concrt140|vcomp140)\.dll$")
PYTHON_DLL = re.compile(r"^python3(\d*)\.dll$")
GPU_RUNTIME = re.compile(
    r"^(cudart|cublaslt|cublas|cufft|curand|cusparse|cusolver|nvrtc|nvjitlink|cudnn|nvinfer|nvonnxparser"
    r"|nvparsers|zlibwapi)[\w.-]*\.dll$")
# Installed with the NVIDIA display driver, never redistributable.
DRIVER_DLLS = frozenset({"nvcuda.dll", "nvml.dll", "nvldumd.dll", "nvldumdx.dll"})


class DepKind(enum.StrEnum):
    PAYLOAD = "payload"
    SYSTEM = "system"
    VC_RUNTIME = "vc_runtime"
    PYTHON = "python"
    GPU_RUNTIME = "gpu_runtime"
    DRIVER = "driver"
    UNKNOWN = "unknown"


@dataclass(frozen=True, kw_only=True)
class Dependency:
    importer: str
    dll: str
    kind: DepKind
    how: str  # "import" | "delay" | "runtime"


@dataclass(frozen=True, kw_only=True)
class ClosureReport:
    dependencies: tuple[Dependency, ...]
    problems: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "dependencies": [
                {"importer": d.importer, "dll": d.dll, "kind": str(d.kind), "how": d.how} for d in self.dependencies
            ],
            "problems": list(self.problems),
        }


def classify(dll: str, *, payload: Collection[str], target_python: str, interpreter: Collection[str] = ()) -> DepKind:
    """Where `dll` comes from on the target. `payload` holds the DLL names the bundle ships.

    PYTHON means the target Python provides it: python3.dll or its own python3XY.dll. Another
    Python's DLL is UNKNOWN, because nothing on the target provides it. `interpreter` names the DLLs beside a
    bundled python.exe (python311.dll, vcruntime140.dll, ...): loaded into every process it runs, from the
    application folder, they come from the payload.
    """
    name = dll.lower()
    if name in {i.lower() for i in interpreter}:
        return DepKind.PAYLOAD
    if name in DRIVER_DLLS:
        return DepKind.DRIVER
    if name in SYSTEM_DLLS or name.startswith(API_SET_PREFIXES):
        return DepKind.SYSTEM
    if VC_RUNTIME.match(name):
        return DepKind.VC_RUNTIME
    python = PYTHON_DLL.match(name)
    if python and python.group(1) in ("", _minor(target_python)):
        return DepKind.PYTHON
    if GPU_RUNTIME.match(name):
        return DepKind.GPU_RUNTIME
    if name in {p.lower() for p in payload}:
        return DepKind.PAYLOAD
    return DepKind.UNKNOWN


def dll_closure(binaries: Mapping[str, PeInfo], *, target_python: str, provided: Collection[str] = (),
                interpreter: Collection[str] = ()) -> ClosureReport:
    """Check every binary's imports against what the bundle and the target provide.

    `binaries` maps payload-relative paths to their PeInfo; `provided` names further DLLs the bundle
    ships (the GPU DLLs). Names a binary may load at run time count as required only for GPU
    libraries: cuDNN 8 loads its sub-libraries that way, while ORT merely probes for optional
    providers. `interpreter`: see `classify`.
    """
    available = {PurePosixPath(path).name.lower() for path in binaries} | {p.lower() for p in provided}
    dependencies: list[Dependency] = []
    problems: list[str] = []
    for importer, info in sorted(binaries.items()):
        if info.machine != X64_MACHINE:
            problems.append(f"{importer} is a {info.machine_name} binary, but the bundle targets x64 (win_amd64).")
        is_gpu_lib = GPU_RUNTIME.match(PurePosixPath(importer).name.lower()) is not None
        for how, names in (("import", info.imports), ("delay", info.delay_imports), ("runtime", info.runtime_names)):
            for dll in names:
                kind = classify(dll, payload=available, target_python=target_python, interpreter=interpreter)
                dependencies.append(Dependency(importer=importer, dll=dll, kind=kind, how=how))
                if how != "runtime" or is_gpu_lib:
                    problems.extend(_problem(importer, dll, kind, how=how, target_python=target_python,
                                             available=available))
    return ClosureReport(dependencies=tuple(dependencies), problems=tuple(problems))


def _problem(importer: str, dll: str, kind: DepKind, *, how: str, target_python: str,
             available: set[str]) -> list[str]:
    verb = "loads at run time" if how == "runtime" else "imports"
    if kind is DepKind.GPU_RUNTIME and dll.lower() not in available:
        return [f"{importer} {verb} {dll}, which the bundle does not provide: add it to [gpu]."]
    if kind is not DepKind.UNKNOWN or how == "runtime":
        return []
    python = PYTHON_DLL.match(dll.lower())
    if python:
        return [f"{importer} imports {dll}, which belongs to Python 3.{python.group(1)}, "
                f"but the target Python is {target_python}: use the binary built for Python {target_python}."]
    return [f"{importer} imports {dll}, which is not in the payload and is neither a Windows system DLL, "
            "the VC++ runtime nor the target Python's DLL: add it to the bundle."]


def _minor(python_version: str) -> str:
    """"3.11" -> "11", as in python311.dll."""
    return python_version.split(".")[1]


# First redistributable build of each MSVC toolset: the runtime that binaries linked by that
# toolset need at least (docs/facts.md §2; Visual Studio release notes). Linker 14.0 is VS 2015,
# 14.1x VS 2017, 14.2x VS 2019, 14.3x-14.4x VS 2022.
VC_REDIST_FIRST_BUILD = {
    0: "14.0.23026", 10: "14.10.25008", 11: "14.11.25325", 12: "14.12.25810", 13: "14.13.26020",
    14: "14.14.26405", 15: "14.15.26706", 16: "14.16.27012", 20: "14.20.27508", 21: "14.21.27702",
    22: "14.22.27821", 23: "14.23.27820", 24: "14.24.28127", 25: "14.25.28508", 26: "14.26.28720",
    27: "14.27.29016", 28: "14.28.29325", 29: "14.29.30133", 30: "14.30.30704", 31: "14.31.31103",
    32: "14.32.31326", 33: "14.33.31629", 34: "14.34.31931", 35: "14.35.32215", 36: "14.36.32532",
    37: "14.37.32822", 38: "14.38.33130", 39: "14.39.33519", 40: "14.40.33810", 41: "14.41.34120",
    42: "14.42.34433", 43: "14.43.34808", 44: "14.44.35208",
}


def vc_runtime_minimum(linker_versions: Iterable[tuple[int, int]]) -> str | None:
    """The oldest msvcp140.dll that every MSVC-linked binary given can run with; None if none is MSVC.

    Linkers other than MSVC 14.x (GNU ld reports 2.x) do not depend on the VC++ runtime's version.
    A minor version between two known toolsets maps to the next newer one, which is safe.
    """
    minors = [minor for major, minor in linker_versions if major == 14]
    if not minors:
        return None
    newest = max(minors)
    known = [m for m in VC_REDIST_FIRST_BUILD if m >= newest]
    if not known:
        msg = (f"A binary was linked by MSVC 14.{newest}, newer than the newest toolset this tool knows "
               f"(14.{max(VC_REDIST_FIRST_BUILD)}): extend VC_REDIST_FIRST_BUILD in bundler/dllclosure.py "
               "with that toolset's first VC++ redistributable build.")
        raise BuildError(msg)
    return VC_REDIST_FIRST_BUILD[min(known)]


def version_at_least(have: str, need: str) -> bool:
    """Dotted numeric comparison, so that 14.40.33810 > 14.9.1 and "v14.40.33810" (registry style) reads."""
    return _numbers(have) >= _numbers(need)


def _numbers(version: str) -> tuple[int, ...]:
    parts = version.strip().lstrip("vV").split(".")
    if not all(p.isdigit() for p in parts):
        msg = f"Version {version!r} is not a dotted numeric version such as 14.40.33810."
        raise BuildError(msg)
    numbers = [int(p) for p in parts]
    while numbers and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


# ---- CUDA and cuDNN major versions -------------------------------------------------------------

# The library's number in its DLL name follows the CUDA major for these; cuFFT, cuRAND and others
# have their own numbering. cudart64_110.dll is CUDA 11.0's ABI name, cudart64_12.dll CUDA 12's.
_CUDA_NAMED = re.compile(r"^(cudart|cublas|cublaslt)64_(\d+)\.dll$")
_CUDNN = re.compile(r"^cudnn64_(\d+)\.dll$")
_TENSORRT = re.compile(r"^nvinfer_(\d+)\.dll$")

# Where ONNX Runtime builds for each CUDA / cuDNN major exist (docs/facts.md §4).
ORT_BUILDS_FOR_CUDA = {
    11: "1.15-1.18 on the package index (onnxruntime-gpu) and 1.19-1.21 only on a separate Microsoft feed",
    12: "1.19 and later on the package index (from 1.22 only CUDA 12 builds are released)",
}
ORT_BUILDS_FOR_CUDNN = {8: ORT_BUILDS_FOR_CUDA[11], 9: ORT_BUILDS_FOR_CUDA[12]}


def cuda_majors(imports: Iterable[str]) -> dict[str, int]:
    """The CUDA, cuDNN and TensorRT majors a GPU binary was linked against, read from its import names."""
    majors: dict[str, int] = {}
    for dll in imports:
        name = dll.lower()
        if match := _CUDA_NAMED.match(name):
            digits = match.group(2)
            majors.setdefault("cuda", int(digits[:-1]) if len(digits) >= 3 else int(digits))
        elif match := _CUDNN.match(name):
            majors.setdefault("cudnn", int(match.group(1)))
        elif match := _TENSORRT.match(name):
            majors.setdefault("tensorrt", int(match.group(1)))
    return majors


def check_gpu_versions(provider_imports: Iterable[str], *, cuda: str, cudnn: str, ort_version: str) -> list[str]:
    """Explain a CUDA provider linked against other CUDA/cuDNN majors than the manifest provides.

    Such a provider fails to load on the target and ORT silently falls back to CPU, so the build
    must stop and say which ORT versions do match the requested CUDA stack.
    """
    imports = list(provider_imports)
    majors = cuda_majors(imports)
    problems = []
    for library, wanted, table in (("CUDA", cuda, ORT_BUILDS_FOR_CUDA), ("cuDNN", cudnn, ORT_BUILDS_FOR_CUDNN)):
        linked = majors.get(library.lower())
        wanted_major = int(wanted.split(".")[0])
        if linked is None or linked == wanted_major:
            continue
        names = [d for d in imports if _names_library(d, library)]
        where = table.get(wanted_major, f"no ONNX Runtime release known to ort-bundler for {library} {wanted_major}")
        problems.append(
            f"The CUDA provider of ONNX Runtime {ort_version} imports {', '.join(names)} ({library} {linked}), "
            f"but [gpu] provides {library} {wanted}: ONNX Runtime builds for {library} {wanted_major} are "
            f"{where}; pin such a version or provide {library} {linked}.x.")
    return problems


def _names_library(dll: str, library: str) -> bool:
    name = dll.lower()
    return bool(_CUDNN.match(name) if library == "cuDNN" else _CUDA_NAMED.match(name))
