"""The GPU component: CUDA and cuDNN DLLs for ONNX Runtime's CUDA execution provider.

When the provider cannot load, ONNX Runtime quietly falls back to the CPU, so a GPU bundle that is
missing one DLL, or ships the wrong CUDA major, looks fine until someone measures it. This part moves
that failure to build time: it reads the provider DLL from the ORT source, extracts the DLLs the
`[[gpu.sources]]` select, and refuses to build unless the provider was linked against the CUDA and
cuDNN the manifest names and every DLL the provider and those libraries import, or load by name at
run time, is shipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

from bundler.assembly.assembly import Assembly, BuildInputs
from bundler.assembly.facts import GpuFact, Published
from bundler.assembly.load_order import dependency_order
from bundler.derived import content_sha256
from bundler.errors import BuildError, UnsupportedError
from bundler.manifest import Gpu, GpuSource, Input, Manifest
from bundler.platforms.windows.gpu_strings import unexplained_names
from bundler.readers.archives import SafeArchive, is_archive
from bundler.readers.dllclosure import (
    DepKind,
    check_gpu_versions,
    cuda_majors,
    dll_closure,
)
from bundler.readers.member_scan import ArchiveFile
from bundler.readers.pe import PeInfo, inspect_pe, is_pe
from bundler.readers.pe_members import read_pe_members

PROVIDER = "onnxruntime_providers_cuda.dll"
PROVIDER_SHARED = "onnxruntime_providers_shared.dll"
INSTALL_DIR = "gpu"
DEFAULT_INCLUDE = ("*.dll",)

# Oldest Windows display driver each CUDA major runs on (CUDA Toolkit release notes, table 3, and the
# cuDNN support matrix): CUDA 11.x >= 452.39, CUDA 12.x >= 527.41. The driver's nvcuda.dll is never bundled.
MIN_DRIVER_WINDOWS = {11: "452.39", 12: "527.41"}

# Names a GPU library loads with LoadLibrary rather than imports, measured on cuDNN 8.9.5 and 9.10 (their
# sub-libraries), cuBLASLt 11.11 (nvrtc64_112_0.dll), NVRTC 11.8 / 12.8 (nvrtc-builtins64_118.dll / _128.dll) and
# cuFFT 11.3 of CUDA 12.8 (nvJitLink_120_0.dll, for its JIT-linked callbacks). Other strings in those binaries
# that merely end in ".dll" (their own generic names, fragments) are not loads.
# zlibwapi.dll is not among them: cuDNN 8.9.5 names it only in the list its load-failure diagnostic probes
# ("Successfully loaded zlib independently. Unknown dll missing."), none of its seven DLLs imports it or names
# a zlib function for GetProcAddress, and cudnn_cnn_infer64_8.dll carries zlib 1.2.13 linked in (" inflate 1.2.13
# Copyright 1995-2022 Mark Adler"); measured 2026-12-06. An older cuDNN 8 that imports zlibwapi.dll is still
# held to it by its import table (GPU_RUNTIME in bundler/readers/dllclosure.py).
RUNTIME_LOADED = re.compile(
    r"^(cudnn(_[a-z]+)*64_\d+|cublas(lt)?64_\d+|nvrtc64_\d+_\d+|nvrtc-builtins64_\d+|nvjitlink_\d+_\d+)\.dll$")

# Preload order among DLLs that do not import each other: the runtime first, then the libraries that
# others load by name (so those loads find them already in memory), cuDNN last.
LOAD_RANK = (
    re.compile(r"^cudart"), re.compile(r"^nvrtc-builtins"), re.compile(r"^nvrtc"), re.compile(r"^cublaslt"),
    re.compile(r"^cublas"), re.compile(r"^cufft"), re.compile(r"^curand"), re.compile(r"^cusparse"),
    re.compile(r"^cusolver"), re.compile(r"^nvjitlink"), re.compile(r"^zlibwapi"), re.compile(r"^cudnn64_"),
    re.compile(r"^cudnn_ops_"), re.compile(r"^cudnn_cnn_"), re.compile(r"^cudnn_adv_"), re.compile(r"^cudnn"),
)

# Where a missing DLL comes from, keyed by its family; `{cuda}` is the CUDA major of [gpu].
WHERE_FROM = (
    (re.compile(r"^cudart64_"), "NVIDIA's nvidia-cuda-runtime-cu{cuda} wheel"),
    (re.compile(r"^cublas(lt)?64_"), "NVIDIA's nvidia-cublas-cu{cuda} wheel"),
    (re.compile(r"^cufft64_"), "NVIDIA's nvidia-cufft-cu{cuda} wheel"),
    (re.compile(r"^curand64_"), "NVIDIA's nvidia-curand-cu{cuda} wheel"),
    (re.compile(r"^nvrtc"), "NVIDIA's nvidia-cuda-nvrtc-cu{cuda} wheel"),
    (re.compile(r"^nvjitlink"), "NVIDIA's nvidia-nvjitlink-cu{cuda} wheel"),
    (re.compile(r"^cudnn"), "NVIDIA's nvidia-cudnn-cu{cuda} wheel or cuDNN archive"),
    (re.compile(r"^zlibwapi"), "no NVIDIA wheel: the zlib step of NVIDIA's cuDNN 8 guide for Windows (or build "
                               "it from zlib with a .def exporting zlib's names); add the x64 zlibwapi.dll as a "
                               "[[gpu.sources]] path with its sha256"),
)


@dataclass(frozen=True, kw_only=True)
class GpuDll:
    """One DLL the GPU component ships; from a wheel or zip, the bundle copies its compressed bytes as they are
    there (never deflated again), and its facts are kept by its sha256 for later builds (`read_pe_members`)."""

    name: str  # the file name, as installed under gpu/
    file: ArchiveFile
    source: str  # the manifest key of its source, e.g. "gpu.sources[1]"
    origin: str  # the source and, for an archive, the member: "gpu.sources[1] (x.whl)!nvidia/cublas/bin/x.dll"
    info: PeInfo

    @property
    def sha256(self) -> str:
        return self.file.sha256

    @property
    def install_path(self) -> str:
        return f"{INSTALL_DIR}/{self.name}"


def add_gpu_cuda(assembly: Assembly, build: BuildInputs) -> None:
    """Ship the [gpu] DLLs under payload/gpu/ once the CUDA provider is known to load with them."""
    manifest, files, work = build.manifest, build.files, build.work
    gpu = manifest.gpu
    assert gpu is not None  # bundler/platforms/windows/gpu.py add_gpu chose this route for a [gpu] table
    store = build.cache.work_dir("derived")
    provider = read_provider(manifest, files, work / "gpu-provider", store=store)
    dlls = collect_dlls(gpu.sources, files, work / "gpu", store=store)
    check_gpu(provider, dlls, gpu=gpu, ort_version=manifest.ort.version, target_python=manifest.bundle.python)
    record = gpu_record(gpu, dlls, provider_imports=provider_info(provider).imports)
    preload = [dll.install_path for dll in load_order(dlls)]
    for dll in dlls:
        bundle_path = f"payload/{dll.install_path}"
        assembly.add_archive_file(bundle_path, dll.file)
        assembly.plan_copy(bundle_path, dll.install_path)
    origins = {f"payload/{entry['file']}": entry for entry in record["files"]}
    assembly.facts.gpu = GpuFact(record=record, dlls=tuple(record["dlls"]), origins=origins, dll_dirs=(INSTALL_DIR,),
                                 preload=tuple(preload))


# -- the provider ---------------------------------------------------------------------------------------


def read_provider(manifest: Manifest, files: Mapping[str, Path], work: Path, *,
                  store: Path | None = None) -> dict[str, PeInfo]:
    """The CUDA provider (and the shared-provider DLL it imports) from the ORT wheel, capi zip or archive.

    Keys are the paths inside the source (`onnxruntime/capi/<name>` in a wheel), so messages say which file.
    """
    source = ort_source(manifest)
    path = files[source.key]
    label = f"{source.key} ({path.name})"
    if not is_archive(path):
        msg = f"{label}: found no archive, expected a wheel or zip holding {PROVIDER} for [gpu]"
        raise BuildError(msg)
    with SafeArchive.open(path, label=label) as archive:
        found = {name: _unique_entry(archive, name, label=label) for name in (PROVIDER, PROVIDER_SHARED)}
        if found[PROVIDER] is None:
            msg = (f"{label}: found no {PROVIDER}, expected the GPU build of ONNX Runtime for [gpu] "
                   f"(the onnxruntime-gpu wheel or the onnxruntime-win-x64-gpu archive)")
            raise BuildError(msg)
        wanted = [entry for _, entry in sorted(found.items()) if entry is not None]
        read = read_pe_members(archive, path, wanted, label=label, work=work, store=store, shipped=False)
    return {member.file.name: member.info for member in read}


def provider_info(provider: Mapping[str, PeInfo]) -> PeInfo:
    return next(info for path, info in provider.items() if PurePosixPath(path).name.lower() == PROVIDER)


def ort_source(manifest: Manifest) -> Input:
    """The Python binding carries the provider the bundle will load; the C/C++ archive is the fallback."""
    source = manifest.ort.python_source or manifest.ort.archive
    if source is None:
        msg = f"{manifest.path.name}: [gpu] needs an ONNX Runtime source in [ort] that holds {PROVIDER}"
        raise BuildError(msg)
    return source


def _unique_entry(archive: SafeArchive, file_name: str, *, label: str) -> str | None:
    names = [e.name for e in archive.entries if not e.is_dir and PurePosixPath(e.name).name.lower() == file_name]
    if len(names) > 1:
        msg = f"{label}: found {file_name} {len(names)} times ({', '.join(sorted(names))}), expected one"
        raise BuildError(msg)
    return names[0] if names else None


# -- the GPU DLLs -----------------------------------------------------------------------------------------


def collect_dlls(sources: Sequence[GpuSource], files: Mapping[str, Path], work: Path, *,
                 store: Path | None = None) -> list[GpuDll]:
    """Every selected DLL of every source, sorted by name; a name shipped twice is an error."""
    dlls: dict[str, GpuDll] = {}
    for index, source in enumerate(sources):
        for dll in source_dlls(source, files[source.source.key], work / str(index), store=store):
            other = dlls.get(dll.name.lower())
            if other is not None:
                msg = (f"{other.origin} and {dll.origin} both provide {dll.name}, expected each DLL from exactly "
                       f"one place; narrow the include patterns of [[gpu.sources]]")
                raise BuildError(msg)
            dlls[dll.name.lower()] = dll
    return sorted(dlls.values(), key=lambda d: d.name.lower())


def source_dlls(source: GpuSource, path: Path, work: Path, *, store: Path | None = None) -> list[GpuDll]:
    """The DLLs one [[gpu.sources]] entry selects: members of an archive, or the single DLL it names."""
    key = source.source.key
    label = f"{key} ({path.name})"
    patterns = source.include or DEFAULT_INCLUDE
    if is_pe(path):
        matching(patterns, [path.name], label=label)
        loose = ArchiveFile(name=path.name, sha256=content_sha256(path), elf=None, extracted=path)
        info = inspect_pe(path, label=label, store=store)
        return [GpuDll(name=path.name, file=loose, source=key, origin=label, info=info)]
    if not is_archive(path):
        msg = f"{label}: found neither an archive nor a DLL, expected a wheel, zip, tar or .dll"
        raise BuildError(msg)
    with SafeArchive.open(path, label=label) as archive:
        names = matching(patterns, [e.name for e in archive.entries if not e.is_dir], label=label)
        read = read_pe_members(archive, path, names, label=label, work=work, store=store, shipped=True)
    return [GpuDll(name=PurePosixPath(member.file.name).name, file=member.file, source=key,
                   origin=f"{label}!{member.file.name}", info=member.info) for member in read]


def matching(patterns: Sequence[str], names: Iterable[str], *, label: str) -> list[str]:
    """Names matched by any pattern (case-insensitive, as Windows is); a pattern matching nothing is an error."""
    names = list(names)
    lowered = [p.lower() for p in patterns]
    chosen = [n for n in names if any(fnmatchcase(n.lower(), p) for p in lowered)]
    unused = [p for p, low in zip(patterns, lowered) if not any(fnmatchcase(n.lower(), low) for n in names)]
    if unused:
        msg = (f"{label}: include pattern(s) {', '.join(repr(p) for p in unused)} matched nothing, expected "
               f"each to select a DLL such as {_example(names)}")
        raise BuildError(msg)
    not_dll = [n for n in chosen if not n.lower().endswith(".dll")]
    if not_dll:
        msg = f"{label}: include selects {', '.join(not_dll[:5])}, expected only .dll files; narrow the patterns"
        raise BuildError(msg)
    return chosen


def _example(names: Sequence[str]) -> str:
    dlls = [n for n in names if n.lower().endswith(".dll")]
    return repr(dlls[0]) if dlls else "'…/bin/name.dll' (the source holds no DLL at all)"


# -- the checks -------------------------------------------------------------------------------------------


def check_gpu(provider: Mapping[str, PeInfo], dlls: Sequence[GpuDll], *, gpu: Gpu, ort_version: str,
              target_python: str) -> None:
    """Root causes first: a provider built for another CUDA, then [gpu] misdescribing its DLLs, then gaps."""
    provider_imports = provider_info(provider).imports
    mismatch = check_gpu_versions(provider_imports, cuda=gpu.cuda, cudnn=gpu.cudnn, ort_version=ort_version)
    if mismatch:
        raise BuildError(" ".join(mismatch))
    declared = declared_version_problems(dlls, gpu=gpu)
    if declared:
        raise BuildError(" ".join(declared))
    problems, missing = closure_problems(provider, dlls, target_python=target_python)
    if problems:
        msg = (f"[gpu]: the CUDA provider of ONNX Runtime {ort_version} cannot load with the DLLs the bundle "
               f"ships: {' '.join(problems)} {where_from(missing, cuda=gpu.cuda)}")
        raise BuildError(msg)


def closure_problems(provider: Mapping[str, PeInfo], dlls: Sequence[GpuDll], *,
                     target_python: str) -> tuple[list[str], list[str]]:
    """Problems of the provider + GPU DLL closure, and the GPU DLL names missing from it."""
    binaries = {label: replace(info, runtime_names=()) for label, info in provider.items()}
    for dll in dlls:
        loaded = tuple(n for n in dll.info.runtime_names if RUNTIME_LOADED.match(n.lower()))
        binaries[dll.install_path] = replace(dll.info, runtime_names=loaded)
    report = dll_closure(binaries, target_python=target_python)
    shipped = {PurePosixPath(label).name.lower() for label in binaries}
    missing = {d.dll.lower(): d.dll for d in report.dependencies
               if d.kind is DepKind.GPU_RUNTIME and d.dll.lower() not in shipped}
    unexplained = [problem for dll in dlls for problem in unexplained_names(
        dll.install_path, [n for n in dll.info.runtime_names if not RUNTIME_LOADED.match(n.lower())],
        shipped=shipped, target_python=target_python)]
    return [*report.problems, *unexplained], [missing[name] for name in sorted(missing)]


def where_from(missing: Sequence[str], *, cuda: str) -> str:
    major = cuda.split(".")[0]
    hints = []
    for name in missing:
        hint = next((text for family, text in WHERE_FROM if family.match(name.lower())), None)
        if hint:
            hints.append(f"{name}: {hint.format(cuda=major)}")
    return f"Where to get them: {'; '.join(hints)}." if hints else ""


def declared_version_problems(dlls: Sequence[GpuDll], *, gpu: Gpu) -> list[str]:
    """[gpu] cuda/cudnn are recorded in bundle.json as facts, so the shipped runtime and cuDNN must agree."""
    problems = []
    for dll in dlls:
        majors = cuda_majors([dll.name])
        for library, wanted in (("cuda", gpu.cuda), ("cudnn", gpu.cudnn)):
            if library in majors and majors[library] != int(wanted.split(".")[0]):
                problems.append(f"{dll.source}: {dll.name} belongs to {_library_name(library)} {majors[library]}, "
                                f"but [gpu] {library} = \"{wanted}\"; ship the {_library_name(library)} "
                                f"{wanted} DLLs or set [gpu] {library} to what is shipped.")
        shipped = shipped_version(dll)
        if shipped is None:
            continue
        library, version = shipped
        wanted = gpu.cuda if library == "cuda" else gpu.cudnn
        if _parts(version)[:len(_parts(wanted))] != _parts(wanted):
            problems.append(f"{dll.source}: {dll.name} is {_library_name(library)} {version} (its file version), "
                            f"but [gpu] {library} = \"{wanted}\"; expected {_library_name(library)} {wanted}.x, "
                            f"or set [gpu] {library} = \"{'.'.join(version.split('.')[:2])}\".")
    return problems


def shipped_version(dll: GpuDll) -> tuple[str, str] | None:
    """The CUDA version of the CUDA runtime, or the cuDNN version of cuDNN, from the DLL's version resource.

    cudart's FileVersion ends in CUDA's version as one number (`6,14,11,11080` is 11.8); cuDNN's is its own
    version (`8.9.5.29`). Other DLLs carry their library's own numbering, which says nothing about [gpu].
    """
    name, version = dll.name.lower(), dll.info.file_version
    if not version:
        return None
    fields = re.split(r"[.,]\s*", version.strip())
    if name.startswith("cudart64_") and fields[-1].isdigit():
        number = int(fields[-1])
        return "cuda", f"{number // 1000}.{number % 1000 // 10}"
    if re.match(r"^cudnn64_\d+\.dll$", name) and all(f.isdigit() for f in fields):
        return "cudnn", ".".join(fields)
    return None


def _library_name(library: str) -> str:
    return "CUDA" if library == "cuda" else "cuDNN"


def _parts(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


# -- records ------------------------------------------------------------------------------------------------


def gpu_record(gpu: Gpu, dlls: Sequence[GpuDll], *, provider_imports: Sequence[str]) -> Published:
    major = int(gpu.cuda.split(".")[0])
    if major not in MIN_DRIVER_WINDOWS:
        msg = (f"[gpu] cuda = \"{gpu.cuda}\": ort-bundler knows the minimum NVIDIA driver only for CUDA "
               f"{', '.join(str(m) for m in MIN_DRIVER_WINDOWS)}, so it cannot tell the target what it needs")
        raise UnsupportedError(msg)
    return {
        "cuda": gpu.cuda,
        "cudnn": gpu.cudnn,
        "dlls": [dll.install_path for dll in dlls],
        "files": [{"file": dll.install_path, "sha256": dll.sha256, "source": dll.source,
                   "version": dll.info.file_version} for dll in dlls],
        "provider_imports": list(provider_imports),
        "min_driver": MIN_DRIVER_WINDOWS[major],
    }


def load_order(dlls: Sequence[GpuDll]) -> list[GpuDll]:
    """Dependencies before their importers; otherwise by LOAD_RANK, then name, so the order is stable."""
    by_name = {dll.name.lower(): dll for dll in dlls}
    needs = {name: {i.lower() for i in (*dll.info.imports, *dll.info.delay_imports)} for name, dll in by_name.items()}
    order, cycle = dependency_order(needs, LOAD_RANK)
    if cycle:
        names = ", ".join(sorted(by_name[name].name for name in cycle))
        msg = f"[gpu]: {names} import each other in a cycle, expected DLLs that can be loaded one by one"
        raise BuildError(msg)
    return [by_name[name] for name in order]
