"""Windows payload checks: the DLL closure, the VC++ runtime minimum, and the pinned redistributable.

Every PE file the bundle ships, loose or inside a wheel, is inspected once. Its imports must be provided
by the payload, Windows, the VC++ runtime, the target Python or the GPU component; the newest MSVC linker
among them sets the minimum VC++ runtime (docs/facts.md §2), which the manifest may raise but never lower, and
which the bundled `VC_redist.x64.exe` must meet.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

from bundler.assembly.assembly import Assembly, BuildInputs
from bundler.assembly.facts import ClosureFact, VcRedistFact
from bundler.errors import BuildError, ManifestError
from bundler.manifest import Manifest
from bundler.readers.archives import SafeArchive
from bundler.readers.dllclosure import dll_closure, vc_runtime_minimum, version_at_least
from bundler.readers.pe import PeInfo, inspect_pe
from bundler.readers.wheel_binaries import wheel_binaries
from bundler.sources.cache import cached_sha256

PE_SUFFIXES = (".dll", ".pyd")
# Execution-provider plug-ins ORT loads on demand; `_shared` is loaded by every plug-in and is required.
OPTIONAL_PROVIDER = re.compile(r"^onnxruntime_providers_(?!shared\.dll$)\w+\.dll$")


def payload_binaries(assembly: Assembly, work: Path, *, store: Path | None = None) -> dict[str, Path]:
    """Every DLL/PYD of the bundle (label → file on disk); each wheel is opened and extracted only once.

    Labels are bundle paths, or `<wheel bundle path>!<member>` for a binary inside a wheel. What was
    extracted is remembered per member on the assembly, so later checks (signatures) reuse it, and a
    member added after an earlier call is still found. With a `store` (the cache's derived folder) a
    wheel's binaries are extracted once per wheel hash and kept for later builds (`wheel_binaries`).
    """
    found: dict[str, Path] = {}
    if store is not None:  # wheels inflate on threads of their own: ISA-L and the file system let go of the GIL
        wheels = {name: (member.source, member.digest) for name, member in assembly.members.items()
                  if name not in assembly.binaries and name.endswith(".whl") and member.source is not None}
        with ThreadPoolExecutor(max_workers=min(4, len(wheels)) or 1) as pool:
            extracted = {name: pool.submit(wheel_binaries, name, source, digest, store=store)
                         for name, (source, digest) in wheels.items()}
            assembly.binaries.update({name: done.result() for name, done in sorted(extracted.items())})
    for name, member in sorted(assembly.members.items()):
        if name not in assembly.binaries:
            if name.lower().endswith(PE_SUFFIXES):
                assembly.binaries[name] = {name: member.source or _written(member.data, work / "pe" / name)}
            elif member.source is None:
                assembly.binaries[name] = {}
            elif name.endswith(".whl"):
                assembly.binaries[name] = _wheel_binaries(name, member.source, work / "pe" / PurePosixPath(name).name)
            else:
                assembly.binaries[name] = {}
        found.update(assembly.binaries[name])
    return found


def _written(data: bytes | None, path: Path) -> Path:
    """A generated binary, written out so it can be inspected like any other file."""
    assert data is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _wheel_binaries(name: str, wheel: Path, dest: Path) -> dict[str, Path]:
    with SafeArchive.open(wheel, label=name) as archive:
        wanted = [e.name for e in archive.entries if not e.is_dir and e.name.lower().endswith(PE_SUFFIXES)]
        if not wanted:
            return {}
        archive.extract(dest, members=wanted)
    return {f"{name}!{member}": dest / member for member in wanted}


def check_windows(assembly: Assembly, build: BuildInputs) -> None:
    """DLL closure and VC++ minimum for a win_amd64 bundle; both land in bundle.json.

    Execution-provider plug-ins (`onnxruntime_providers_tensorrt.dll`, the CUDA provider without `[gpu]`)
    are loaded only when a session asks for them, so what they lack is recorded, not fatal; the GPU part
    has already checked the CUDA provider and `payload/gpu/` against `[gpu]`.
    """
    manifest, work = build.manifest, build.work
    store = build.cache.work_dir("derived")
    binaries = payload_binaries(assembly, work, store=store)
    infos: dict[str, PeInfo] = {label: inspect_pe(path, label=label, store=store) for label, path in binaries.items()}
    optional = {label for label in infos if _optional(label)}
    names = [PurePosixPath(label).name for label in optional]
    gpu_fact = assembly.facts.gpu
    gpu = [PurePosixPath(p).name for p in (gpu_fact.dlls if gpu_fact else ())]
    interpreter = assembly.facts.runtime.dlls if assembly.facts.runtime else ()
    required = dll_closure({k: v for k, v in infos.items() if k not in optional}, target_python=manifest.bundle.python,
                           provided=[*gpu, *names], interpreter=interpreter)
    everything = dll_closure(infos, target_python=manifest.bundle.python, provided=gpu, interpreter=interpreter)
    closure = {**everything.to_json(), "problems": list(required.problems),
               "optional_unavailable": sorted(set(everything.problems) - set(required.problems))}
    if required.problems:
        msg = "the DLL closure is incomplete: " + "; ".join(required.problems)
        raise BuildError(msg)
    program = _program_binaries(assembly, infos)
    if program:
        beside = dll_closure(program, target_python=manifest.bundle.python)
        closure["program"] = beside.to_json()
        if beside.problems:
            msg = ("the native program's DLL closure, resolved from its own folder as Windows does first, is "
                   "incomplete: " + "; ".join(beside.problems))
            raise BuildError(msg)
    computed = vc_runtime_minimum(info.linker_version for info in [*infos.values(), *program.values()])
    assembly.facts.closure = ClosureFact(dll_closure=closure, vc_runtime_min=_raise_minimum(computed, manifest),
                                         vc_runtime_min_computed=computed)


def _program_binaries(assembly: Assembly, infos: Mapping[str, PeInfo]) -> dict[str, PeInfo]:
    """A native program and the runtime placed beside it, by install path: the folder Windows searches first."""
    entry = assembly.facts.entry_point
    if entry is None or entry.kind != "program":
        return {}
    source_of = {copy.target: copy.source for copy in assembly.copies}
    member = assembly.members[source_of[entry.value]]
    assert member.source is not None  # the entry point is a pinned input, never generated bytes
    laid_out = {entry.value: inspect_pe(member.source, label=entry.value)}
    for target in assembly.facts.app_local:
        laid_out[target] = infos[source_of[target]]
    return laid_out


def _optional(label: str) -> bool:
    name = PurePosixPath(label).name.lower()
    return label.startswith("payload/gpu/") or (OPTIONAL_PROVIDER.match(name) is not None)


def _raise_minimum(computed: str | None, manifest: Manifest) -> str | None:
    wanted = manifest.vc_redist.min_version if manifest.vc_redist else None
    if wanted is None:
        return computed
    if computed and not version_at_least(wanted, computed):
        msg = (f"{manifest.path.name}: vc_redist.min_version: found {wanted}, expected at least {computed}: the "
               f"payload's binaries were linked by MSVC {'.'.join(computed.split('.')[:2])}, and an older "
               "msvcp140.dll crashes them (the STL's constexpr mutex, microsoft/STL#4730), so the minimum can be "
               "raised, never lowered")
        raise ManifestError(msg)
    return wanted


def add_vc_redist(assembly: Assembly, build: BuildInputs) -> None:
    """The pinned VC_redist.x64.exe, whose own version must meet the bundle's minimum."""
    manifest, closure = build.manifest, assembly.facts.closure
    if manifest.vc_redist is None:
        assembly.facts.vc_redist = None
        return
    path = build.files[manifest.vc_redist.source.key]
    info = inspect_pe(path, label="vc_redist")
    version = info.product_version or info.file_version
    minimum = closure.vc_runtime_min if closure else None
    if version is None:
        msg = f"vc_redist ({path.name}): no version resource, expected a Visual C++ redistributable"
        raise BuildError(msg)
    if minimum and not version_at_least(version.replace(",", "."), minimum):
        msg = (f"vc_redist ({path.name}): version {version} is older than the runtime this bundle needs "
               f"({minimum}); pin a newer VC_redist.x64.exe")
        raise BuildError(msg)
    bundle_path = "payload/vc_redist/VC_redist.x64.exe"
    assembly.add_file(bundle_path, path, cached_sha256(path))
    assembly.facts.vc_redist = VcRedistFact(file=bundle_path, version=version, sha256=cached_sha256(path))

