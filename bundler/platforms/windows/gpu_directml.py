"""The DirectML route of the GPU component: `[gpu] providers = ["DmlExecutionProvider"]`.

onnxruntime-directml carries its one GPU library itself: `onnxruntime/capi/DirectML.dll` beside the binding
`onnxruntime_pybind11_state.pyd`, which delay-loads it by name. A delay load searches the process's default
DLL path, where Windows 10's System32 holds an older inbox DirectML.dll (1.1.0 on 1903; the provider needs the
wheel's own, 1.15.4 in onnxruntime-directml 1.24.4), so the bundle loads the wheel's copy by full path at
interpreter start (the start-up hook's preload), before onnxruntime is imported; the self-check then names the
DirectML.dll the process really mapped. Nothing is added to the bundle: the file is shipped in the ORT wheel.
This part proves, at build time, that the wheel holds exactly one DirectML.dll where the binding looks for it,
that the binding loads it, and that DirectML.dll's own imports and the names in its strings are Windows'
(docs/facts.md §10; the strings' PIX names are explained in gpu_strings.NOT_LOADS).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from bundler.assembly.assembly import Assembly, BuildInputs
from bundler.assembly.facts import GpuFact, Published
from bundler.assembly.python_env import site_packages
from bundler.errors import BuildError
from bundler.hashing import file_sha256
from bundler.platforms.windows.gpu_strings import unexplained_names
from bundler.readers.archives import SafeArchive, is_archive
from bundler.readers.dllclosure import dll_closure
from bundler.readers.pe import PeInfo, inspect_pe

DML = "DmlExecutionProvider"
DIRECTML = "DirectML.dll"
BINDING = "onnxruntime_pybind11_state.pyd"
CAPI = "onnxruntime/capi"
# What the target needs besides the bundle: DirectML runs on Direct3D 12, part of Windows since Windows 10
# 1903 (Microsoft's DirectML version history).
REQUIRES = "a DirectX 12 capable GPU and its driver (Windows 10 1903 or later ships the Direct3D 12 runtime)"


def add_gpu_directml(assembly: Assembly, build: BuildInputs) -> None:
    """Record the wheel's DirectML.dll as the GPU library to preload, once the wheel is known to work with it."""
    manifest = build.manifest
    source = manifest.ort.python_source
    assert source is not None  # the parser refuses DirectML without [ort] wheel or capi
    path = build.files[source.key]
    label = f"{source.key} ({path.name})"
    binaries = read_binaries(path, label=label, work=build.work / "gpu-directml")
    check_directml(binaries, label=label, target_python=manifest.bundle.python)
    install_path = f"{site_packages(manifest)}/{CAPI}/{DIRECTML}"
    dll = binaries[f"{CAPI}/{DIRECTML}"]
    record: Published = {
        "provider": DML,
        "dlls": [install_path],
        "files": [{"file": install_path, "sha256": dll.sha256, "source": f"{label}!{CAPI}/{DIRECTML}",
                   "version": dll.info.file_version}],
        "requires": REQUIRES,
    }
    assembly.facts.gpu = GpuFact(record=record, dlls=(install_path,), origins={}, dll_dirs=(),
                                 preload=(install_path,))


@dataclass(frozen=True, kw_only=True)
class _Binary:
    """One binary of the wheel, extracted: its PE facts and its hash."""

    info: PeInfo
    sha256: str


def read_binaries(path: Path, *, label: str, work: Path) -> dict[str, _Binary]:
    """The binding and DirectML.dll of the wheel, each required exactly once and in onnxruntime/capi/."""
    if not is_archive(path):
        msg = f"{label}: found no archive, expected the onnxruntime-directml wheel holding {CAPI}/{DIRECTML}"
        raise BuildError(msg)
    with SafeArchive.open(path, label=label) as archive:
        names = [e.name for e in archive.entries if not e.is_dir]
        wanted = []
        for file_name in (DIRECTML, BINDING):
            found = [n for n in names if PurePosixPath(n).name.lower() == file_name.lower()]
            if found != [f"{CAPI}/{file_name}"]:
                where = ", ".join(sorted(found)) if found else "nothing"
                msg = (f"{label}: found {where} for {file_name}, expected exactly {CAPI}/{file_name} "
                       f"(the onnxruntime-directml wheel keeps DirectML.dll beside the binding that loads it)")
                raise BuildError(msg)
            wanted.append(found[0])
        archive.extract(work, members=wanted)
    binaries = {}
    for name in wanted:
        file = work.joinpath(*name.split("/"))
        binaries[name] = _Binary(info=inspect_pe(file, label=f"{label}!{name}"), sha256=file_sha256(file))
    return binaries


def check_directml(binaries: dict[str, _Binary], *, label: str, target_python: str) -> None:
    """The binding loads DirectML.dll; DirectML.dll needs nothing but Windows (imports and strings)."""
    binding, dll = binaries[f"{CAPI}/{BINDING}"].info, binaries[f"{CAPI}/{DIRECTML}"].info
    loads = {n.lower() for n in (*binding.imports, *binding.delay_imports)}
    if DIRECTML.lower() not in loads:
        msg = (f"{label}: {CAPI}/{BINDING} neither imports nor delay-loads {DIRECTML}, so this ONNX Runtime has "
               f"no DirectML provider to load it; expected the onnxruntime-directml wheel")
        raise BuildError(msg)
    shipped = {DIRECTML.lower(), BINDING.lower()}
    report = dll_closure({f"{CAPI}/{DIRECTML}": replace(dll, runtime_names=())}, target_python=target_python,
                         provided=shipped)
    unexplained = unexplained_names(f"{CAPI}/{DIRECTML}", dll.runtime_names, shipped=shipped,
                                    target_python=target_python)
    problems = [*report.problems, *unexplained]
    if problems:
        msg = f"[gpu]: the DirectML provider of {label} cannot load with what the bundle ships: {' '.join(problems)}"
        raise BuildError(msg)
