"""The GPU component on linux_x86_64: the CUDA provider of onnxruntime-gpu's manylinux wheel with NVIDIA's `*-cu12`
shared libraries, closure-checked from their ELF `DT_NEEDED` entries and their strings.

On Linux a missing CUDA library is as quiet as on Windows: the provider fails to dlopen and ONNX Runtime runs on
the CPU. So the build reads every library's `DT_NEEDED` (bundler/readers/elf.py) and the library names in its
strings (what it dlopens by name at run time), and refuses a bundle where one of them is neither shipped under
gpu/ nor a system library. The install puts gpu/ first on LD_LIBRARY_PATH (the launcher and the installer's
self-check, from the plan's dll_dirs) and the start-up hook dlopens each library by absolute path, dependencies
first, so the loader finds the bundle's copies (glibc matches a later `DT_NEEDED` or dlopen by soname against
what is already loaded) and no system CUDA is needed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

from bundler.assembly.assembly import Assembly, BuildInputs
from bundler.assembly.facts import GpuFact, Published
from bundler.assembly.load_order import dependency_order
from bundler.errors import BuildError, UnsupportedError
from bundler.manifest import Gpu, GpuSource, Manifest
from bundler.readers.archives import SafeArchive, is_archive
from bundler.readers.elf import DynamicString, ElfInfo
from bundler.readers.member_scan import ArchiveFile, read_files
from bundler.readers.scan_store import Scanned, keep_scans, stored_scans

PROVIDER = "libonnxruntime_providers_cuda.so"
PROVIDER_SHARED = "libonnxruntime_providers_shared.so"
INSTALL_DIR = "gpu"
DEFAULT_INCLUDE = ("*.so*",)

# Oldest Linux driver each CUDA major runs on (CUDA Toolkit release notes, table 3, "minor version
# compatibility"): CUDA 11.x >= 450.80.02, CUDA 12.x >= 525.60.13. The driver's libcuda.so.1 is never bundled.
MIN_DRIVER_LINUX = {11: "450.80.02", 12: "525.60.13"}

# Libraries of the system, never bundled: glibc's (libc, libm, libdl, libpthread, librt, the loader), GCC's
# run-time (libgcc_s, libstdc++), which manylinux wheels take from the system by its policy (PEP 600), and the
# driver's libcuda.so.1 (cudart dlopens it; cuDNN's libcudnn_graph.so.9 and nvJitLink also name the unversioned
# libcuda.so the driver package installs). libz.so.1 is counted as the system's too: cuDNN 9.10's sub-libraries
# list it in DT_NEEDED (measured), NVIDIA's wheel does not ship it, and zlib is a required package of every
# glibc distribution a manylinux_2_27 wheel runs on (Debian/Ubuntu zlib1g "Priority: required"; RHEL's rpm
# needs it); a target without it fails the strict self-check, never silently.
SYSTEM = re.compile(r"^(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libutil|libresolv|libz)\.so(\.\d+)*$"
                    r"|^ld-linux-x86-64\.so\.2$")
DRIVER = frozenset({"libcuda.so.1", "libcuda.so"})
ORT_OWN = frozenset({PROVIDER_SHARED, "libonnxruntime.so.1"})

# Names a GPU library dlopens by name rather than lists in DT_NEEDED (the per-route run-time table, linux_x86_64,
# CUDA 12 + cuDNN 9), measured 2026-12-06 as strings of the wheels in manifests/gpu-linux-cuda12.toml:
# cuDNN 9.10's libcudnn.so.9 names libcudnn_{graph,ops,cnn,adv}.so and libcudnn_graph.so.9 names
# libcudnn_{heuristic,engines_precompiled,engines_runtime_compiled}.so (the major is appended at run time: the
# wheel ships them as .so.9); cuBLASLt 12.8 and cuDNN's engines name libnvrtc.so.12 / libnvrtc.so (NVRTC, which
# names libnvrtc-builtins.so.12.8); cuFFT 11.3 names libnvJitLink.so.12 (and libnvrtc.so.12). Sources beside the
# measurement: NVIDIA's cuDNN 9 API overview ("the cuDNN library is split into sub-libraries ... loaded
# dynamically"), the cuBLAS 12 docs (cuBLASLt's runtime-fused kernels use NVRTC), the cuFFT 11.3 release notes (LTO
# callbacks need nvJitLink). An unversioned name ("libcudnn_ops.so") is satisfied by a shipped "libcudnn_ops.so.N".
RUNTIME_LOADED = re.compile(r"^(libcudnn(_[a-z_]+)?\.so|libcublas(Lt)?\.so|libnvrtc\.so|libnvrtc-builtins\.so"
                            r"|libnvJitLink\.so)(\.\d+)*$")

# Names found in the strings of NVIDIA's Linux libraries that no bundle ships, each with the reason.
NOT_LOADS = {
    "libcask_profile_interface.so": "a profiling-injection library cuDNN 9's libcudnn_engines_precompiled.so.9 names "
                                    "beside CASK_INJECTION64_PATH (as on Windows); no NVIDIA wheel ships it",
}

# Where a missing library comes from; `{cuda}` is the CUDA major of [gpu].
WHERE_FROM = (
    (re.compile(r"^libcudart\."), "NVIDIA's nvidia-cuda-runtime-cu{cuda} wheel (nvidia/cuda_runtime/lib/)"),
    (re.compile(r"^libcublas(Lt)?\."), "NVIDIA's nvidia-cublas-cu{cuda} wheel (nvidia/cublas/lib/)"),
    (re.compile(r"^libcufft"), "NVIDIA's nvidia-cufft-cu{cuda} wheel (nvidia/cufft/lib/)"),
    (re.compile(r"^libcurand\."), "NVIDIA's nvidia-curand-cu{cuda} wheel (nvidia/curand/lib/)"),
    (re.compile(r"^libnvrtc"), "NVIDIA's nvidia-cuda-nvrtc-cu{cuda} wheel (nvidia/cuda_nvrtc/lib/)"),
    (re.compile(r"^libnvJitLink\."), "NVIDIA's nvidia-nvjitlink-cu{cuda} wheel (nvidia/nvjitlink/lib/)"),
    (re.compile(r"^libcudnn"), "NVIDIA's nvidia-cudnn-cu{cuda} wheel (nvidia/cudnn/lib/)"),
)

LOAD_RANK = tuple(re.compile(p) for p in (
    r"^libcudart", r"^libnvrtc-builtins", r"^libnvrtc", r"^libnvJitLink", r"^libcublasLt", r"^libcublas",
    r"^libcufft", r"^libcurand", r"^libcudnn\.", r"^libcudnn_graph", r"^libcudnn_engines_precompiled",
    r"^libcudnn_engines_runtime", r"^libcudnn_heuristic", r"^libcudnn_ops", r"^libcudnn_cnn", r"^libcudnn_adv",
    r"^libcudnn"))

# A library file name in a binary's bytes (the scan the loader-name cross-check reads).
_SO_NAME = re.compile(rb"lib[A-Za-z0-9_+\-]+\.so(?:\.\d+)*")
_MAJOR = {"cuda": re.compile(r"^libcudart\.so\.(\d+)$"), "cudnn": re.compile(r"^libcudnn\.so\.(\d+)$")}


@dataclass(frozen=True, kw_only=True)
class GpuLibrary:
    """One shared library the Linux GPU component ships, read where it lies in its source (never extracted from a
    wheel: the bundle copies the wheel's compressed bytes)."""

    name: str  # the file name, which the loader matches against DT_NEEDED: checked equal to its soname
    file: ArchiveFile
    source: str
    origin: str
    version: str | None  # the source wheel's version (ELF files carry none the loader reads)
    needed: tuple[str, ...]
    named: tuple[str, ...]  # library names in its strings

    @property
    def sha256(self) -> str:
        return self.file.sha256

    @property
    def install_path(self) -> str:
        return f"{INSTALL_DIR}/{self.name}"


def add_gpu(assembly: Assembly, build: BuildInputs) -> None:
    """Ship the [gpu] libraries under payload/gpu/ once the CUDA provider is known to load with them."""
    manifest, gpu = build.manifest, build.manifest.gpu
    if gpu is None:
        assembly.facts.gpu = None
        return
    store = build.cache.work_dir("derived")
    provider = read_provider(manifest, build.files, build.work / "gpu-provider", store=store)
    libraries = collect_libraries(gpu.sources, build.files, build.work / "gpu", store=store)
    check_gpu_linux(provider, libraries, gpu=gpu, ort_version=manifest.ort.version)
    record = gpu_record(gpu, libraries, provider_needed=provider[PROVIDER].values("needed"))
    for library in libraries:
        bundle_path = f"payload/{library.install_path}"
        assembly.add_archive_file(bundle_path, library.file)
        assembly.plan_copy(bundle_path, library.install_path)
    origins = {f"payload/{entry['file']}": entry for entry in record["files"]}
    preload = tuple(lib.install_path for lib in load_order(libraries))
    assembly.facts.gpu = GpuFact(record=record, dlls=tuple(record["dlls"]), origins=origins, dll_dirs=(INSTALL_DIR,),
                                 preload=preload)


def read_provider(manifest: Manifest, files: Mapping[str, Path], work: Path, *,
                  store: Path | None = None) -> dict[str, ElfInfo]:
    """The CUDA provider and the shared-provider library from the ORT wheel's capi/, keyed by file name."""
    source = manifest.ort.python_source or manifest.ort.archive
    if source is None:
        msg = f"{manifest.path.name}: [gpu] needs an ONNX Runtime source in [ort] that holds {PROVIDER}"
        raise BuildError(msg)
    path = files[source.key]
    label = f"{source.key} ({path.name})"
    if not is_archive(path):
        msg = f"{label}: found no archive, expected a wheel or archive holding {PROVIDER} for [gpu]"
        raise BuildError(msg)
    with SafeArchive.open(path, label=label) as archive:
        found = {}
        for wanted in (PROVIDER, PROVIDER_SHARED):
            names = [e.name for e in archive.entries if not e.is_dir and PurePosixPath(e.name).name == wanted]
            if len(names) != 1:
                msg = (f"{label}: found {wanted} {len(names)} times, expected it once (the GPU build of ONNX "
                       f"Runtime for linux_x86_64: the onnxruntime-gpu manylinux wheel)")
                raise BuildError(msg)
            found[wanted] = names[0]
        read = read_libraries(archive, path, list(found.values()), label=label, work=work, store=store, names=False)
    return {name: library.elf for name, library in zip(found, read)}


def collect_libraries(sources: Sequence[GpuSource], files: Mapping[str, Path], work: Path, *,
                      store: Path | None = None) -> list[GpuLibrary]:
    """Every selected shared library of every source, sorted by name; a name shipped twice is an error."""
    found: dict[str, GpuLibrary] = {}
    for index, source in enumerate(sources):
        for library in source_libraries(source, files[source.source.key], work / str(index), store=store):
            other = found.get(library.name)
            if other is not None:
                msg = (f"{other.origin} and {library.origin} both provide {library.name}, expected each library "
                       f"from exactly one place; narrow the include patterns of [[gpu.sources]]")
                raise BuildError(msg)
            found[library.name] = library
    return sorted(found.values(), key=lambda lib: lib.name)


def source_libraries(source: GpuSource, path: Path, work: Path, *, store: Path | None = None) -> list[GpuLibrary]:
    key = source.source.key
    label = f"{key} ({path.name})"
    if not is_archive(path):
        msg = f"{label}: found no archive, expected a wheel or archive holding shared libraries (.so)"
        raise BuildError(msg)
    patterns = source.include or DEFAULT_INCLUDE
    with SafeArchive.open(path, label=label) as archive:
        names = [e.name for e in archive.entries if not e.is_dir]
        chosen = [n for n in names if any(fnmatchcase(n, p) for p in patterns)]
        unused = [p for p in patterns if not any(fnmatchcase(n, p) for n in names)]
        if unused:
            msg = (f"{label}: include pattern(s) {', '.join(repr(p) for p in unused)} matched nothing, expected each "
                   f"to select a shared library such as 'nvidia/<name>/lib/lib<name>.so.<major>'")
            raise BuildError(msg)
        not_so = [n for n in chosen if ".so" not in PurePosixPath(n).name]
        if not_so:
            msg = f"{label}: include selects {', '.join(not_so[:5])}, expected only shared libraries (.so)"
            raise BuildError(msg)
        read = read_libraries(archive, path, chosen, label=label, work=work, store=store, names=True)
    version = _wheel_version(path.name)
    return [_library(library, source=key, origin=f"{label}!{library.file.name}", version=version) for library in read]


@dataclass(frozen=True, kw_only=True)
class ReadLibrary:
    file: ArchiveFile
    elf: ElfInfo
    named: frozenset[str] | None  # the library names in its bytes, when asked for


#: What the kept scans' facts were made by (the ELF parse, the name scan here).
_MODULES = ("bundler.readers.elf", "bundler.platforms.linux.gpu")


def read_libraries(archive: SafeArchive, path: Path, members: Sequence[str], *, label: str, work: Path,
                   store: Path | None, names: bool) -> list[ReadLibrary]:
    """The ELF facts (and with `names` the library names in the bytes) of `members`, in order: each read once where
    it lies, or not at all when a build before kept them for this archive's hash (`scan_store`)."""
    known = {}
    for member, scan in stored_scans(store, path, members, modules=_MODULES).items():
        try:
            library = ReadLibrary(file=scan.file, elf=_elf_from_json(scan.facts["elf"]),
                                  named=None if scan.facts["named"] is None else frozenset(scan.facts["named"]))
        except (KeyError, TypeError, ValueError):
            continue  # an entry of another shape: read again
        if library.named is not None or not names:
            known[member] = library
    scans: dict[str, NameScan] = {}

    def observe(name: str) -> Callable[[bytes], None]:
        scans[name] = NameScan()
        return scans[name].feed

    files = read_files(archive, path, [m for m in members if m not in known], label=label, work=work,
                       observe=observe if names else None, parse_elf=True)
    read = {file.name: ReadLibrary(file=file, elf=_elf(file),
                                   named=frozenset(scans[file.name].found()) if names else None) for file in files}
    kept = {member: Scanned(file=library.file, facts=_facts_json(library)) for member, library in read.items()}
    keep_scans(store, path, kept, modules=_MODULES)
    return [known.get(member) or read[member] for member in members]


def _facts_json(library: ReadLibrary) -> dict[str, object]:
    strings = [[s.kind, s.value, s.offset] for s in library.elf.strings]
    return {"elf": {"machine": library.elf.machine, "strings": strings},
            "named": None if library.named is None else sorted(library.named)}


def _elf_from_json(data: dict[str, object]) -> ElfInfo:
    strings = data["strings"]
    if not isinstance(strings, list):
        raise TypeError("strings")
    return ElfInfo(machine=int(str(data["machine"])), strings=tuple(
        DynamicString(kind=str(kind), value=str(value), offset=int(offset)) for kind, value, offset in strings))


def _wheel_version(file_name: str) -> str | None:
    parts = file_name.split("-")
    return parts[1] if file_name.endswith(".whl") and len(parts) >= 3 else None


def _elf(file: ArchiveFile) -> ElfInfo:
    assert file.elf is not None, "read with parse_elf"
    return file.elf


def _library(library: ReadLibrary, *, source: str, origin: str, version: str | None) -> GpuLibrary:
    file, info, named = library.file, library.elf, library.named or frozenset()
    name = PurePosixPath(file.name).name
    soname = info.values("soname")
    if soname and soname[0] != name:
        msg = (f"{origin}: its soname is {soname[0]}, expected its file name {name} (the loader finds a "
               f"library by the name in DT_NEEDED, which is the soname); select the file named after it")
        raise BuildError(msg)
    return GpuLibrary(name=name, file=file, source=source, origin=origin, version=version,
                      needed=info.values("needed"), named=tuple(sorted(named - {name})))


#: More than any library name is long: the bytes a piece leaves at its end are scanned again with the next piece,
#: so a name cut there is found whole.
_NAME_WINDOW = 4096


class NameScan:
    """The library file names in a binary's bytes, fed piece by piece as they are read (cuBLASLt is 717 MB: a build
    that held it whole peaked at 775 MiB)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self._tail, self._resume = b"", 0

    def feed(self, piece: bytes) -> None:
        data = self._tail + piece
        limit = len(data) - (min(len(data), _NAME_WINDOW) if piece else 0)
        end = 0
        for match in _SO_NAME.finditer(data, self._resume):
            if match.start() >= limit:
                break  # found again, whole, with the next piece
            self.names.add(match.group().decode("ascii"))
            end = match.end()
        self._tail, self._resume = data[limit:], max(0, end - limit)

    def found(self) -> set[str]:
        """Every name, once the last piece is in (the bytes kept back are scanned now)."""
        self.feed(b"")
        return self.names


# -- the checks -------------------------------------------------------------------------------------------


def check_gpu_linux(provider: Mapping[str, ElfInfo], libraries: Sequence[GpuLibrary], *, gpu: Gpu,
                    ort_version: str) -> None:
    """Root causes first: a provider built for another CUDA or cuDNN major than [gpu], then the gaps."""
    mismatch = version_problems(provider[PROVIDER].values("needed"), gpu=gpu, ort_version=ort_version)
    if mismatch:
        raise BuildError(" ".join(mismatch))
    problems, missing = closure_problems(provider, libraries)
    if problems:
        msg = (f"[gpu]: the CUDA provider of ONNX Runtime {ort_version} cannot load with the libraries the bundle "
               f"ships: {' '.join(problems)} {where_from(missing, cuda=gpu.cuda)}")
        raise BuildError(msg)


def version_problems(needed: Sequence[str], *, gpu: Gpu, ort_version: str) -> list[str]:
    problems = []
    for library, pattern in _MAJOR.items():
        wanted = getattr(gpu, library)
        for name in needed:
            match = pattern.match(name)
            if match and match.group(1) != wanted.split(".")[0]:
                problems.append(f"[gpu] {library} = \"{wanted}\", but {PROVIDER} of ONNX Runtime {ort_version} "
                                f"needs {name} ({'CUDA' if library == 'cuda' else 'cuDNN'} {match.group(1)}); "
                                f"use the GPU libraries that build was made for.")
    return problems


def is_system(name: str) -> bool:
    return bool(SYSTEM.match(name)) or name in DRIVER


def closure_problems(provider: Mapping[str, ElfInfo],
                     libraries: Sequence[GpuLibrary]) -> tuple[list[str], list[str]]:
    """One sentence per library a binary needs (DT_NEEDED) or loads by name (its strings) that nothing provides,
    and the names missing, for the where-from hint."""
    shipped = {lib.name for lib in libraries} | set(provider)
    problems: list[str] = []
    missing: set[str] = set()
    binaries: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
        (f"onnxruntime/capi/{name}", info.values("needed"), ()) for name, info in sorted(provider.items())]
    binaries += [(lib.install_path, lib.needed, lib.named) for lib in libraries]
    for label, needed, named in binaries:
        for name in needed:
            if name not in shipped and name not in ORT_OWN and not is_system(name):
                problems.append(f"{label} needs {name} (DT_NEEDED), which the bundle does not provide.")
                missing.add(name)
        problems += unexplained_names(label, named, shipped=shipped, missing=missing)
    return problems, sorted(missing)


def unexplained_names(label: str, names: Sequence[str], *, shipped: Collection[str], missing: set[str]) -> list[str]:
    """A name in the run-time table must be shipped; any other name must be shipped, the system's or explained."""
    problems = []
    for name in names:
        if name in shipped or name in ORT_OWN or is_system(name) or name in NOT_LOADS or _versioned_in(name, shipped):
            continue
        if RUNTIME_LOADED.match(name):
            problems.append(f"{label} loads {name} at run time (by name), which the bundle does not provide.")
            missing.add(name)
            continue
        problems.append(f"{label} names {name} in its strings, which is neither in the bundle nor a system library: "
                        f"add it to [gpu], or, if it is not loaded, say why in NOT_LOADS "
                        f"(bundler/platforms/linux/gpu.py).")
    return problems


def _versioned_in(name: str, shipped: Collection[str]) -> bool:
    """An unversioned name ("libcudnn_ops.so") that the library completes with a major at run time."""
    return name.endswith(".so") and any(re.fullmatch(re.escape(name) + r"(\.\d+)+", s) for s in shipped)


def where_from(missing: Sequence[str], *, cuda: str) -> str:
    major = cuda.split(".")[0]
    hints = [f"{name}: {text.format(cuda=major)}" for name in missing
             for family, text in WHERE_FROM if family.match(name)]
    return f"Where to get them: {'; '.join(hints)}." if hints else ""


# -- records ------------------------------------------------------------------------------------------------


def gpu_record(gpu: Gpu, libraries: Sequence[GpuLibrary], *, provider_needed: Sequence[str]) -> Published:
    major = int(gpu.cuda.split(".")[0])
    if major not in MIN_DRIVER_LINUX:
        msg = (f"[gpu] cuda = \"{gpu.cuda}\": ort-bundler knows the minimum NVIDIA Linux driver only for CUDA "
               f"{', '.join(str(m) for m in MIN_DRIVER_LINUX)}, so it cannot tell the target what it needs")
        raise UnsupportedError(msg)
    return {
        "cuda": gpu.cuda,
        "cudnn": gpu.cudnn,
        "dlls": [lib.install_path for lib in libraries],
        "files": [{"file": lib.install_path, "sha256": lib.sha256, "source": lib.source, "version": lib.version}
                  for lib in libraries],
        "provider_imports": list(provider_needed),
        "min_driver": MIN_DRIVER_LINUX[major],
    }


def load_order(libraries: Sequence[GpuLibrary]) -> list[GpuLibrary]:
    """Dependencies (DT_NEEDED) before their users; otherwise by LOAD_RANK, then name, so the order is stable."""
    by_name = {lib.name: lib for lib in libraries}
    order, cycle = dependency_order({name: set(lib.needed) for name, lib in by_name.items()}, LOAD_RANK)
    if cycle:
        msg = f"[gpu]: {', '.join(cycle)} need each other in a cycle, expected libraries that load one by one"
        raise BuildError(msg)
    return [by_name[name] for name in order]
