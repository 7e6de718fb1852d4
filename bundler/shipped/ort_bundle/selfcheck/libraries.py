"""The loaded-libraries part of the self-check: which ONNX Runtime, VC++ runtime, CUDA, cuDNN and DirectML files this
process really mapped, with their versions, and which onnxruntime.dll a native program would load."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Dict

from ..records import Check
from .check_context import Context, is_below
from .dllsearch import choose, file_version, search_folders

# Loaded libraries worth reporting, by family; the driver's own library is never bundled.
LIBRARY_FAMILIES = (
    ("onnxruntime", re.compile(r"^(lib)?onnxruntime", re.IGNORECASE)),
    ("msvcp140", re.compile(r"^msvcp140", re.IGNORECASE)),
    ("vcruntime140", re.compile(r"^vcruntime140", re.IGNORECASE)),
    ("driver", re.compile(r"^(nvcuda\.dll|libcuda\.so)", re.IGNORECASE)),
    ("directml", re.compile(r"^directml\.dll$", re.IGNORECASE)),
    ("cudnn", re.compile(r"^(lib)?cudnn", re.IGNORECASE)),
    ("cuda", re.compile(r"^(lib)?(cudart|cublas|cufft|curand|cusparse|cusolver|nvrtc|nvinfer|nvonnxparser)",
                        re.IGNORECASE)),
)


def loaded_library_paths() -> list[str]:
    if sys.platform == "win32":
        return windows_module_paths()
    paths = set()
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/"):
                paths.add(parts[5].strip())
    return sorted(paths)


def windows_module_paths() -> list[str]:
    """Every module the Windows loader has mapped into this process (EnumProcessModules)."""
    import ctypes
    from ctypes import wintypes

    kernel32 = getattr(ctypes, "WinDLL")("kernel32", use_last_error=True)  # noqa: B009  (Windows only)
    kernel32.GetCurrentProcess.restype = wintypes.HANDLE
    kernel32.K32EnumProcessModules.argtypes = [wintypes.HANDLE, ctypes.POINTER(wintypes.HMODULE), wintypes.DWORD,
                                               ctypes.POINTER(wintypes.DWORD)]
    kernel32.K32EnumProcessModules.restype = wintypes.BOOL
    kernel32.GetModuleFileNameW.argtypes = [wintypes.HMODULE, wintypes.LPWSTR, wintypes.DWORD]
    kernel32.GetModuleFileNameW.restype = wintypes.DWORD
    process = kernel32.GetCurrentProcess()
    count = 512
    while True:
        modules = (wintypes.HMODULE * count)()
        needed = wintypes.DWORD(0)
        if not kernel32.K32EnumProcessModules(process, modules, ctypes.sizeof(modules), ctypes.byref(needed)):
            raise getattr(ctypes, "WinError")(getattr(ctypes, "get_last_error")())  # noqa: B009  (Windows only)
        if needed.value <= ctypes.sizeof(modules):
            break
        count = needed.value // ctypes.sizeof(wintypes.HMODULE) + 64
    buffer = ctypes.create_unicode_buffer(32768)
    paths = []
    for handle in modules[: needed.value // ctypes.sizeof(wintypes.HMODULE)]:
        length = kernel32.GetModuleFileNameW(handle, buffer, len(buffer))
        if length:
            paths.append(buffer.value)
    return sorted(paths)


def windows_file_version(path: str) -> str | None:
    """FileVersion from the version resource's VS_FIXEDFILEINFO, as a.b.c.d."""
    import ctypes
    from ctypes import wintypes

    version = getattr(ctypes, "WinDLL")("version", use_last_error=True)  # noqa: B009  (Windows only)
    version.GetFileVersionInfoSizeW.argtypes = [wintypes.LPCWSTR, ctypes.POINTER(wintypes.DWORD)]
    version.GetFileVersionInfoW.argtypes = [wintypes.LPCWSTR, wintypes.DWORD, wintypes.DWORD, ctypes.c_void_p]
    version.VerQueryValueW.argtypes = [ctypes.c_void_p, wintypes.LPCWSTR, ctypes.POINTER(ctypes.c_void_p),
                                       ctypes.POINTER(wintypes.UINT)]
    size = version.GetFileVersionInfoSizeW(path, None)
    if not size:
        return None
    data = ctypes.create_string_buffer(size)
    if not version.GetFileVersionInfoW(path, 0, size, data):
        return None
    pointer = ctypes.c_void_p()
    length = wintypes.UINT()
    if not version.VerQueryValueW(data, "\\", ctypes.byref(pointer), ctypes.byref(length)) or length.value < 52:
        return None
    fixed = ctypes.cast(pointer, ctypes.POINTER(wintypes.DWORD * 13)).contents  # VS_FIXEDFILEINFO
    high, low = fixed[2], fixed[3]  # dwFileVersionMS, dwFileVersionLS
    return f"{high >> 16}.{high & 0xFFFF}.{low >> 16}.{low & 0xFFFF}"


def library_version(path: str) -> str | None:
    if sys.platform == "win32":
        return windows_file_version(path)
    found = re.search(r"\.so\.([\d.]+)$", path)
    return found.group(1) if found else None


def library_family(path: str) -> str | None:
    name = Path(path).name
    return next((family for family, pattern in LIBRARY_FAMILIES if pattern.match(name)), None)


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def library_problem(ctx: Context, library: Dict[str, Any]) -> str | None:
    """An old msvcp140 or a runtime library from outside the install when the bundle ships its own."""
    family, path, version = library["family"], library["path"], library["version"]
    minimum = ctx.bundle.get("vc_runtime_min")
    if family == "msvcp140" and minimum and version and version_tuple(version) < version_tuple(minimum):
        return f"{path} is version {version}, older than the VC++ runtime {minimum} the bundle needs"
    bundled = family == "onnxruntime" or (family in ("cuda", "cudnn", "directml") and ctx.gpu.get("dlls"))
    if bundled and not is_below(Path(path).resolve(), ctx.root.resolve()):
        return f"{path} was loaded from outside the installation, which ships its own {family} libraries"
    return None


def check_libraries(ctx: Context) -> Check:
    try:
        paths = loaded_library_paths()
    except OSError as exc:
        return Check(id="libraries", status="skip", message=f"cannot list the loaded libraries: {exc}")
    libraries = [{"family": family, "path": path, "version": library_version(path)}
                 for path in paths if (family := library_family(path))]
    problems = [problem for library in libraries if (problem := library_problem(ctx, library))]
    details = {"libraries": libraries}
    if problems:
        return Check(id="libraries", status="fail", details=details, message="; ".join(problems),
                     fix="Remove or rename the stray copies (or take their folders off PATH), install the VC++ runtime "
                         "from the bundle's payload/vc_redist, and start through the installation's launcher.")
    return Check(id="libraries", status="pass", details=details,
                 message=f"{len(libraries)} runtime libraries loaded, all from the expected places")


def check_native_runtime(ctx: Context) -> Check:
    """Which onnxruntime.dll a native program entry point would load, searched from its own folder as Windows
    does, and whether System32 holds Windows ML's older copy (reported even when the bundle's wins)."""
    program = (ctx.bundle.get("entry_point") or {}).get("program")
    if not program or ctx.bundle.get("platform") != "win_amd64":
        return Check(id="native_runtime", status="skip", message="the entry point is not a native Windows program")
    folder = (ctx.root / program).parent
    system_root = Path(os.environ.get("SystemRoot") or os.environ.get("windir") or "C:\\Windows")
    folders = search_folders(folder, system_root=system_root, cwd=Path.cwd(), path=os.environ.get("PATH", ""))
    choice = choose("onnxruntime.dll", folders)
    ours, inbox = folder / "onnxruntime.dll", system_root / "System32" / "onnxruntime.dll"
    details = {"loads": str(choice.loaded) if choice.loaded else None,
               "candidates": [str(c) for c in choice.candidates],
               "system32_version": file_version(inbox) if inbox.is_file() else None}
    if choice.loaded != ours:
        found = f"{choice.loaded} (version {file_version(choice.loaded)})" if choice.loaded else "no onnxruntime.dll"
        return Check(id="native_runtime", status="fail", details=details, fix=ctx.reinstall(),
                     message=f"{program} would load {found}, not the bundle's {ours}")
    if inbox.is_file():
        return Check(id="native_runtime", status="warn", details=details,
                     message=(f"{program} loads the bundle's onnxruntime.dll {file_version(ours)} from its own folder; "
                              f"System32 also holds onnxruntime.dll {details['system32_version']} (Windows ML), which "
                              "a program without its own copy would load"))
    return Check(id="native_runtime", status="pass", details=details,
                 message=f"{program} loads the bundle's onnxruntime.dll {file_version(ours)} from its own folder")
