"""The cross-check of the GPU libraries' strings: every library name found there must be shipped, be part of
Windows, or be known (and said here why) not to be a library the bundle must provide.

`gpu_cuda.py` requires the names in RUNTIME_LOADED because the libraries load them by name. That table is written
from measurements, so a new cuDNN or CUDA that loads a library the table does not know would pass unnoticed;
this check makes such a name fail the build instead, until it is shipped or explained below.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

from bundler.readers.dllclosure import DepKind, classify

# Names found in the strings of NVIDIA's libraries that no bundle needs, each with the reason (measured on the
# Windows wheels of cuDNN 8.9.5 and 9.10.2.21, cuBLAS 11.11 and 12.8, cuFFT 10.9 and 11.3, NVRTC 11.8 and 12.8,
# nvJitLink 12.8, and DirectML 1.15.4 of onnxruntime-directml 1.24.4; 2026-12-06).
NOT_LOADS = {
    "zlibwapi.dll": "cuDNN 8.9.5 and 9.10 name it only in the list their load-failure diagnostic probes "
                    "('Successfully loaded zlib independently. Unknown dll missing.'); zlib is linked into cuDNN",
    "cask_profile_interface.dll": "a profiling-injection library cuDNN names beside CASK_INJECTION64_PATH and "
                                  "InitializeInjectionCask; no NVIDIA wheel ships it",
    "nvrtc-builtins.dll": "NVRTC's unversioned name in its own strings; NVRTC loads nvrtc-builtins64_NNN.dll",
    "winpixeventruntime.dll": "PIX's event runtime (Microsoft's GPU debugger): DirectML 1.15.4 names it in its UTF-16 "
                              "strings beside 'directml.wpix' for PIX captures; no ONNX Runtime package ships it "
                              "(onnxruntime-directml 1.24.4 carries DirectML.dll alone), so DirectML runs without it",
    "winpixeventruntime_uap.dll": "the UWP build of PIX's event runtime, named beside WinPixEventRuntime.dll (above)",
    "cuda.dll": "nvJitLink 12.8 names it beside cuInit, probing for a driver ('no cuInit so no …'): a driver "
                "library, never bundled (Windows' is nvcuda.dll)",
}
# A printf template read only up to its `%d`: cuDNN loads NVRTC as "nvrtc64_%d_0.dll"; the scan sees "d_0.dll".
TEMPLATES = {"d_0.dll": ("nvrtc64_%d_0.dll", re.compile(r"^nvrtc64_\d+_0\.dll$"))}


def unexplained_names(importer: str, names: Iterable[str], *, shipped: Collection[str],
                      target_python: str) -> list[str]:
    """One sentence per name in `importer`'s strings that is neither shipped, part of Windows, nor known."""
    problems = []
    for name in names:
        low = name.lower()
        if low in shipped or low in NOT_LOADS or _is_windows(low, target_python=target_python):
            continue
        if low in TEMPLATES:
            template, pattern = TEMPLATES[low]
            if not any(pattern.match(s) for s in shipped):
                problems.append(f"{importer} loads {template} at run time, and the bundle ships no such DLL: "
                                f"add NVIDIA's NVRTC to [gpu].")
            continue
        problems.append(f"{importer} names {name} in its strings, which is neither in the bundle nor a Windows "
                        f"library: add it to [gpu], or, if it is not loaded, say why in NOT_LOADS "
                        f"(bundler/platforms/windows/gpu_strings.py).")
    return problems


def _is_windows(name: str, *, target_python: str) -> bool:
    """A Windows system DLL, or one glued to a letter before it in the binary ("Akernel32.dll", "mntdll.dll")."""
    system = (DepKind.SYSTEM, DepKind.DRIVER, DepKind.VC_RUNTIME)
    if classify(name, payload=(), target_python=target_python) in system:
        return True
    return name[:1].isalpha() and classify(name[1:], payload=(), target_python=target_python) in system
