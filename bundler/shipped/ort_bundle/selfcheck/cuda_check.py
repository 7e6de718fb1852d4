"""The CUDA part of the self-check: does a CUDA session really start, and if not, which of driver, CUDA runtime
or cuDNN is missing or too old, read from what ORT's native log names (it names a provider's missing library
only there)."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterator, List

from ..records import Check
from .check_context import Context

CUDA = "CUDAExecutionProvider"
# The self-check's exit code when a GPU bundle finds no NVIDIA driver (nvcuda.dll / libcuda.so.1): its own, so a
# script tells "this machine has no GPU driver" from any other failure; never a CPU fallback reported as a pass.
EXIT_NO_GPU_DRIVER = 3


MISSING_LIBRARY = (
    re.compile(r'depends on "([^"]+)" which is missing'),
    re.compile(r"([\w.+-]+\.so[\w.]*): cannot open shared object file"),
    re.compile(r"([\w.+-]+\.dll)\b[^.]*?(?:not found|missing|could not be found)", re.IGNORECASE),
)


def session_options(ort: Any, *, log_level: int = 3) -> Any:
    options = ort.SessionOptions()
    options.log_severity_level = log_level
    return options


@contextlib.contextmanager
def native_stderr(sink: List[str]) -> Iterator[None]:
    """Capture what native code writes to stderr: ORT names a provider's missing library only in its log."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            sink.append(capture.read().decode("utf-8", errors="replace"))


def cuda_session_problem(ctx: Context, ort: Any) -> tuple[str | None, str]:
    """Why a session asking for CUDA alone does not run on CUDA (None when it does), and ORT's evidence."""
    available = ort.get_available_providers()
    if CUDA not in available:
        return f"the installed onnxruntime offers only {available}", ""
    identity = ctx.root / ctx.bundle["selfcheck"]["identity_model"]
    captured: list[str] = []
    with warnings.catch_warnings(record=True) as caught, native_stderr(captured):
        warnings.simplefilter("always")
        try:
            session = ort.InferenceSession(str(identity), session_options(ort, log_level=2), providers=[CUDA])
        except Exception as exc:  # ORT's pybind error classes carry the reason as text
            evidence = " ".join([str(exc), *captured, *(str(w.message) for w in caught)])
            return "a session requesting only CUDA failed", evidence
    evidence = " ".join([*captured, *(str(w.message) for w in caught)])
    if CUDA not in session.get_providers():
        return f"a session requesting only CUDA fell back to {session.get_providers()}", evidence
    return None, evidence


def load_library(name: str) -> Any:
    import ctypes

    loader = getattr(ctypes, "WinDLL") if sys.platform == "win32" else ctypes.CDLL  # noqa: B009  (Windows only)
    return loader(name)


def driver_cuda_version(driver: Any) -> tuple[int, int] | None:
    """The newest CUDA the installed driver supports, from cuDriverGetVersion (e.g. 11080 is 11.8)."""
    import ctypes

    version = ctypes.c_int(0)
    try:
        if driver.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except AttributeError:
        return None
    return version.value // 1000, (version.value % 1000) // 10


def bundled_cudnn_major(ctx: Context) -> int | None:
    """cudnnGetVersion of the bundle's cuDNN: 8600 is 8.6.0 (cuDNN 8), 90100 is 9.1.0 (cuDNN 9)."""
    import ctypes

    for relative in ctx.gpu.get("dlls", []):
        if re.match(r"^(lib)?cudnn(64_\d+\.dll|\.so)", Path(relative).name):
            try:
                library = load_library(str(ctx.root / relative))
            except OSError:
                return None
            library.cudnnGetVersion.restype = ctypes.c_size_t
            version = library.cudnnGetVersion()
            return int(version // 10000 if version >= 10000 else version // 1000)
    return None


def missing_library(evidence: str) -> str | None:
    for pattern in MISSING_LIBRARY:
        found = pattern.search(evidence)
        if found:
            return Path(found.group(1)).name
    return None


def driver_library() -> str:
    """The NVIDIA driver's CUDA library, installed with the driver and never bundled."""
    return "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"


def diagnose_cuda(ctx: Context, problem: str, evidence: str) -> tuple[str, str]:
    """The cause, most fundamental first: no driver, an old driver, a CPU-only wheel, a missing DLL, cuDNN."""
    min_driver = ctx.gpu.get("min_driver") or "the version the bundle's CUDA requires"
    driver_name = driver_library()
    try:
        driver = load_library(driver_name)
    except OSError as exc:
        return (f"no NVIDIA driver: {driver_name} cannot be loaded ({exc})",
                f"Install the NVIDIA driver {min_driver} or newer on this machine (it is never bundled).")
    needed = tuple(int(part) for part in str(ctx.gpu.get("cuda", "0.0")).split(".")[:2])
    supported = driver_cuda_version(driver)
    if supported is not None and supported < needed:
        return (f"driver too old: it supports CUDA {supported[0]}.{supported[1]}, the bundle needs CUDA "
                f"{'.'.join(map(str, needed))}", f"Update the NVIDIA driver to {min_driver} or newer.")
    if problem.startswith("the installed onnxruntime offers only"):
        return ("the installed onnxruntime is a build without the CUDA provider",
                "Rebuild the bundle with the GPU build of onnxruntime, or install the CPU bundle.")
    missing = missing_library(evidence)
    if missing:
        return (f"{missing} not found",
                f"Check that {ctx.root / 'gpu'} holds {missing} and run through the installation's launcher, "
                "which puts the bundle's GPU folders on the DLL search path.")
    cudnn = bundled_cudnn_major(ctx)
    wanted_cudnn = int(str(ctx.gpu.get("cudnn", "0")).split(".")[0])
    if cudnn is not None and wanted_cudnn and cudnn != wanted_cudnn:
        return (f"wrong cuDNN: the bundled cuDNN is major version {cudnn}, this onnxruntime needs cuDNN {wanted_cudnn}",
                "Rebuild the bundle with the cuDNN major version the GPU provider was built against.")
    return (f"ORT says: {' '.join(evidence.split())[:600] or 'nothing'}",
            "Run with --json and compare the loaded CUDA libraries below with the bundle's gpu folder.")


def check_cuda(ctx: Context, ort: Any) -> Check:
    """A GPU bundle must not quietly run on the CPU: ask for CUDA alone and explain any refusal."""
    problem, evidence = cuda_session_problem(ctx, ort)
    if problem is None:
        return Check(id="cuda", status="pass", message="a session requesting only CUDA runs on CUDAExecutionProvider")
    cause, fix = diagnose_cuda(ctx, problem, evidence)
    details = {"problem": problem, "evidence": " ".join(evidence.split())[:2000]}
    if cause.startswith("no NVIDIA driver"):
        details["missing_driver"] = driver_library()
    if ctx.allow_cpu_fallback:
        return Check(id="cuda", status="warn", details=details, fix=fix,
                     message=f"CUDA is unavailable ({problem}): {cause}; running on the CPU (--allow-cpu-fallback)")
    return Check(id="cuda", status="fail", details=details, fix=fix,
                 message=f"CUDA is expected but unavailable ({problem}): {cause}")


def failure_exit_code(checks: List[Check]) -> int:
    """EXIT_NO_GPU_DRIVER when the CUDA or DirectML check failed for want of the driver or device (the root cause
    of whatever else failed with it), otherwise 1."""
    for check in checks:
        if check.id in ("cuda", "directml") and check.status == "fail" and check.details.get("missing_driver"):
            return EXIT_NO_GPU_DRIVER
    return 1


# ---------------------------------------------------------------- DirectML

DML = "DmlExecutionProvider"
# What ORT says when Direct3D 12 has no device for it: dxcore.dll missing (older Windows, Wine), no DXGI factory,
# no adapter (measured under Wine with onnxruntime-directml 1.24.4: "Failed to load dxcore.dll").
NO_D3D12_DEVICE = re.compile(r"dxcore|DXGI|D3D12CreateDevice|adapter|DXGI_ERROR_UNSUPPORTED|0x887A0004",
                             re.IGNORECASE)


def dml_session_problem(ctx: Context, ort: Any) -> tuple[str | None, str]:
    """Why a session asking for DirectML alone does not run on it (None when it does), and ORT's evidence.

    onnxruntime's Python layer catches the provider's error, prints it to stdout and retries on the CPU (its
    documented fallback), so both streams are captured and the session's providers are read back."""
    import io

    available = ort.get_available_providers()
    if DML not in available:
        return f"the installed onnxruntime offers only {available}", ""
    identity = ctx.root / ctx.bundle["selfcheck"]["identity_model"]
    captured: list[str] = []
    printed = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, native_stderr(captured), \
            contextlib.redirect_stdout(printed):
        warnings.simplefilter("always")
        try:
            session = ort.InferenceSession(str(identity), session_options(ort, log_level=2), providers=[DML])
        except Exception as exc:  # ORT's pybind error classes carry the reason as text
            evidence = " ".join([str(exc), printed.getvalue(), *captured, *(str(w.message) for w in caught)])
            return "a session requesting only DirectML failed", evidence
    evidence = " ".join([printed.getvalue(), *captured, *(str(w.message) for w in caught)])
    if DML not in session.get_providers():
        return f"a session requesting only DirectML ran on {session.get_providers()}", evidence
    return None, evidence


def check_directml(ctx: Context, ort: Any) -> Check:
    """A DirectML bundle must not quietly run on the CPU: ask for DirectML alone and say which provider ran."""
    problem, evidence = dml_session_problem(ctx, ort)
    if problem is None:
        return Check(id="directml", status="pass", message=f"a session requesting only DirectML runs on {DML}")
    details = {"problem": problem, "evidence": " ".join(evidence.split())[:2000]}
    if problem.startswith("the installed onnxruntime offers only"):
        cause, fix = ("the installed onnxruntime is a build without DirectML",
                      "Rebuild the bundle with the onnxruntime-directml wheel.")
    elif NO_D3D12_DEVICE.search(evidence):
        details["missing_driver"] = "a DirectX 12 device"
        found = NO_D3D12_DEVICE.search(evidence)
        cause = (f"no DirectX 12 device: ORT could not create one ({found.group(0) if found else ''} named in "
                 f"its log: {' '.join(evidence.split())[:300]})")
        fix = ("Run on Windows 10 1903 or later with a DirectX 12 capable GPU and its vendor's driver "
               "(under Wine, or in a session without a GPU, DirectML has no device).")
    else:
        cause = f"ORT says: {' '.join(evidence.split())[:600] or 'nothing'}"
        fix = "Run with --json and compare the loaded DirectML.dll below with the bundle's."
    if ctx.allow_cpu_fallback:
        return Check(id="directml", status="warn", details=details, fix=fix,
                     message=f"DirectML is unavailable ({problem}): {cause}; the models run on "
                             f"CPUExecutionProvider, which --allow-cpu-fallback allows")
    return Check(id="directml", status="fail", details=details, fix=fix,
                 message=f"DirectML is expected but unavailable ({problem}): {cause}; the bundle's [gpu] "
                         f"requires {DML}, so a CPU run is not a pass (--allow-cpu-fallback allows it)")
