"""The app-local runtime part: ONNX Runtime's DLLs next to a native program entry point (Windows).

Windows 10 21H1+ and 11 ship an older `onnxruntime.dll` in System32 (docs/facts.md §8), and an unpackaged
program searches its own folder, then System32, and `PATH` only last: a program that found the bundle's
runtime through `PATH` got System32's copy instead. ORT's C API deployment guidance is to put the DLLs
beside the executable, so the plan copies them there: from the C/C++ archive when the bundle ships one (the
files a program built against the SDK linked), else from the ORT wheel; with `[gpu]`, the CUDA provider and
the GPU DLLs too. The Windows checks then resolve the program's imports from that folder alone.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from bundler.assembly.assembly import Assembly, BuildInputs
from bundler.assembly.binaries import payload_binaries
from bundler.errors import BuildError, HashMismatchError
from bundler.hashing import file_sha256
from bundler.readers.archives import SafeArchive
from bundler.readers.member_scan import read_files
from bundler.readers.pe_source import PackedPe

#: What ORT itself needs beside a program; with [gpu] the CUDA provider joins them.
ORT_RUNTIME = ("onnxruntime.dll", "onnxruntime_providers_shared.dll")
GPU_PROVIDER = "onnxruntime_providers_cuda.dll"


def add_app_local_runtime(assembly: Assembly, build: BuildInputs) -> None:
    entry, sdk, gpu, python_env = (assembly.facts.entry_point, assembly.facts.sdk, assembly.facts.gpu,
                                   assembly.facts.python_env)
    if entry is None or entry.kind != "program":
        assembly.facts.app_local = ()
        return
    folder = PurePosixPath(entry.value).parent
    wanted = {*ORT_RUNTIME, *([GPU_PROVIDER] if gpu else [])}
    if sdk is not None:
        sources = {PurePosixPath(path).name: f"payload/{path}" for path in sdk.sdk["runtime_files"]}
    elif python_env is not None:
        sources = _from_wheel(assembly, build, f"payload/wheels/{python_env.ort.wheel}", wanted)
    else:
        msg = f"[launch] program {entry.value}: the bundle has no ONNX Runtime DLLs to place beside it"
        raise BuildError(msg)
    missing = sorted(wanted - {name.lower() for name in sources})
    if missing:
        msg = (f"[launch] program {entry.value}: the bundle's ONNX Runtime lacks {', '.join(missing)}, which must sit "
               "beside the program so that Windows does not load System32's older copy")
        raise BuildError(msg)
    gpu_files = {PurePosixPath(path).name: f"payload/{path}" for path in (gpu.dlls if gpu else ())}
    placed = []
    for name, bundle_path in sorted({**sources, **gpu_files}.items()):
        target = f"{folder}/{name}"
        assembly.plan_copy(bundle_path, target)
        placed.append(target)
    assembly.facts.app_local = tuple(placed)


def _from_wheel(assembly: Assembly, build: BuildInputs, wheel: str, wanted: set[str]) -> dict[str, str]:
    """The ORT DLLs of the wheel, shipped once as their own members (a wheel member cannot be copied by name):
    a DLL read where it lies in the wheel is copied into the bundle compressed as it is there."""
    found: dict[str, str] = {}
    packed: dict[str, tuple[PackedPe, str]] = {}
    for label, source in payload_binaries(assembly, build.work, store=build.cache.work_dir("derived")).items():
        container, _, member = label.partition("!")
        name = PurePosixPath(member).name
        if container == wheel and name.lower() in wanted:
            bundle_path = f"payload/app-runtime/{name}"
            if isinstance(source, PackedPe):
                packed[source.name] = (source, bundle_path)
            else:
                assembly.add_file(bundle_path, source, file_sha256(source))
            found[name] = bundle_path
    if packed:
        archive_path = next(iter(packed.values()))[0].archive
        with SafeArchive.open(archive_path, label=wheel) as archive:
            files = read_files(archive, archive_path, sorted(packed), label=wheel, work=build.work / "app-runtime")
        for file in files:
            source, bundle_path = packed[file.name]
            if file.sha256 != source.sha256:
                msg = f"{wheel}!{file.name}: its bytes have sha256 {file.sha256}, expected {source.sha256}"
                raise HashMismatchError(msg)
            assembly.add_archive_file(bundle_path, file)
    return found
