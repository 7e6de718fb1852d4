"""The CUDA 12 / cuDNN 9 route on linux_x86_64: onnxruntime-gpu 1.23.2's manylinux wheel with NVIDIA's *-cu12 wheels.

The fast tests build small real ELF shared libraries with gcc (stand-ins for NVIDIA's: a library with the soname and
DT_NEEDED entries, and strings naming what the real one dlopens, as measured on the wheels) and run the closure on
them. The last tests fetch manifests/gpu-linux-cuda12.toml's inputs (about 2.3 GB, checking the free space
first), on every run.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS
from fixtures.memory import PEAK_MIB
from fixtures.parts import part_inputs
from fixtures.wheels import fetched_inputs

from bundler.assembly.assembly import Assembly
from bundler.errors import BuildError, HashMismatchError, UnsafeArchiveError
from bundler.hashing import CHUNK
from bundler.manifest import load, parse
from bundler.operations.build import _rooted
from bundler.platforms.linux.gpu import (
    _SO_NAME,
    PROVIDER,
    NameScan,
    ReadLibrary,
    _library,
    add_gpu,
    closure_problems,
    where_from,
)
from bundler.readers.archives import SafeArchive
from bundler.readers.elf import read_elf
from bundler.readers.member_scan import read_files
from bundler.sources.cache import Cache
from bundler.writer.members import MemberCache
from bundler.writer.zipwriter import write_zip

LINUX_CUDA12 = MANIFESTS / "gpu-linux-cuda12.toml"


@pytest.fixture
def gcc() -> str:
    found = shutil.which("gcc")
    if found is None:
        pytest.skip("no gcc on this machine")
    return found


def shared_library(folder: Path, name: str, gcc: str, *, needed: tuple[Path, ...] = (),
                   strings: tuple[str, ...] = (), padding: int = 0) -> Path:
    """A real ELF shared library with soname `name`, DT_NEEDED on `needed`, `strings` in its data and `padding`
    bytes of read-only data (between its string table and its dynamic section)."""
    source = folder / f"{name}.c"
    pad = ""
    if padding:  # random bytes (zeros would look like a zip bomb in a wheel), laid in by the assembler
        (folder / f"{name}.pad").write_bytes(os.urandom(padding))
        pad = f'__asm__(".pushsection .rodata\\n.incbin \\"{folder / f"{name}.pad"}\\"\\n.popsection");\n'
    source.write_text("".join(f'const char *s{i} = "{s}";\n' for i, s in enumerate(strings)) + pad
                      + "int f(void) {return 0;}\n", encoding="utf-8")
    out = folder / name
    links = [f"-l:{lib.name}" for lib in needed]
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(out), str(source), f"-Wl,-soname,{name}", f"-L{folder}",
                    "-Wl,--no-as-needed", *links], check=True, capture_output=True)
    return out


def in_wheel(path: Path, *, method: int = zipfile.ZIP_DEFLATED) -> tuple[Path, str]:
    """`path` as the one member of a wheel beside it, under NVIDIA's layout."""
    member = f"nvidia/x/lib/{path.name}"
    wheel = path.parent / f"{path.name}.whl"
    with zipfile.ZipFile(wheel, "w", method) as archive:
        archive.write(path, member)
    return wheel, member


def read_member(wheel: Path, member: str, work: Path):
    """The member read as a build reads it: (its ArchiveFile, the names found in its bytes)."""
    scan = NameScan()
    with SafeArchive.open(wheel, label=wheel.name) as archive:
        [file] = read_files(archive, wheel, [member], label=wheel.name, work=work, observe=lambda _: scan.feed,
                            parse_elf=True)
    return file, scan.found()


def library(path: Path):
    wheel, member = in_wheel(path)
    file, named = read_member(wheel, member, path.parent / "work")
    read = ReadLibrary(file=file, elf=file.elf, named=frozenset(named))
    return _library(read, source="gpu.sources[0]", origin=f"gpu.sources[0] (x.whl)!{member}", version="1")


@pytest.fixture
def stand_ins(tmp_path, gcc):
    """cudart, cuDNN's loader library (naming its sub-library unversioned, as cuDNN 9.10 does) and the sub-library,
    and a provider needing cudart and cuDNN."""
    cudart = shared_library(tmp_path, "libcudart.so.12", gcc, strings=("libcuda.so.1",))
    ops = shared_library(tmp_path, "libcudnn_ops.so.9", gcc, strings=("libz.so.1",))
    cudnn = shared_library(tmp_path, "libcudnn.so.9", gcc, strings=("libcudnn_ops.so",))
    provider = shared_library(tmp_path, "libonnxruntime_providers_cuda.so", gcc, needed=(cudart, cudnn))
    return {"provider": {provider.name: read_elf(provider, label=provider.name)},
            "libraries": [library(p) for p in (cudart, cudnn, ops)], "folder": tmp_path}


def test_the_complete_stand_in_closure_has_no_problems(stand_ins):
    assert closure_problems(stand_ins["provider"], stand_ins["libraries"]) == ([], [])


def test_a_library_in_dt_needed_that_is_not_shipped_is_named(stand_ins):
    without_cudart = [lib for lib in stand_ins["libraries"] if lib.name != "libcudart.so.12"]
    problems, missing = closure_problems(stand_ins["provider"], without_cudart)
    assert problems == ["onnxruntime/capi/libonnxruntime_providers_cuda.so needs libcudart.so.12 (DT_NEEDED), which "
                        "the bundle does not provide."]
    assert missing == ["libcudart.so.12"]
    assert where_from(missing, cuda="12.8") == ("Where to get them: libcudart.so.12: NVIDIA's nvidia-cuda-runtime-cu12 "
                                                "wheel (nvidia/cuda_runtime/lib/).")


def test_a_sub_library_cudnn_loads_by_its_unversioned_name_is_required(stand_ins):
    without_ops = [lib for lib in stand_ins["libraries"] if lib.name != "libcudnn_ops.so.9"]
    problems, missing = closure_problems(stand_ins["provider"], without_ops)
    assert problems == ["gpu/libcudnn.so.9 loads libcudnn_ops.so at run time (by name), which the bundle does not "
                        "provide."]
    assert "libcudnn_ops.so" in missing


def test_an_unknown_library_name_in_the_strings_fails(stand_ins, gcc):
    plugin = shared_library(stand_ins["folder"], "libcufft.so.11", gcc, strings=("libcufft_plugin.so.3",))
    problems, _ = closure_problems(stand_ins["provider"], [*stand_ins["libraries"], library(plugin)])
    assert problems == ["gpu/libcufft.so.11 names libcufft_plugin.so.3 in its strings, which is neither in the bundle "
                        "nor a system library: add it to [gpu], or, if it is not loaded, say why in NOT_LOADS "
                        "(bundler/platforms/linux/gpu.py)."]


def test_a_file_whose_soname_differs_is_refused(tmp_path, gcc):
    built = shared_library(tmp_path, "libcudart.so.12", gcc)
    renamed = tmp_path / "libcudart.so"
    built.rename(renamed)
    with pytest.raises(BuildError) as caught:
        library(renamed)
    assert "its soname is libcudart.so.12, expected its file name libcudart.so" in str(caught.value)


def test_names_cut_by_a_piece_s_end_are_found_whole_as_a_whole_file_search_finds_them(tmp_path):
    """The scan sees 1 MiB pieces: a name that a piece's end cuts (at every offset around the first boundaries) is
    found once, whole, and never as the piece either side of the cut. Read from a wheel, the names are the same and
    the digest is sha256sum's of the file."""
    names = ["libcudnn_engines_precompiled.so.9", "libnvrtc-builtins.so.12.8", "libxlibz.so.1", "libcuda.so.1"]
    data = bytearray(os.urandom(3 * CHUNK + 5000).replace(b"lib", b"LIB"))
    for boundary in (CHUNK, 2 * CHUNK, 3 * CHUNK):
        for shift, name in enumerate(names):
            at = boundary - 3 - 9 * shift - 64 * shift  # cut 3, 12, 21, 30 bytes after its start
            data[at:at + len(name) + 2] = b"\0" + name.encode() + b"\0"
    whole = {m.group().decode() for m in _SO_NAME.finditer(bytes(data))}
    scan = NameScan()
    for start in range(0, len(data), CHUNK):
        scan.feed(bytes(data[start:start + CHUNK]))
    assert scan.found() == set(names) == whole
    path = tmp_path / "libbig.so.1"
    path.write_bytes(b"\x7fELF\x02\x01" + bytes(58) + bytes(data))  # an ELF header naming no segments
    wheel, member = in_wheel(path)
    file, named = read_member(wheel, member, tmp_path / "work")
    assert named == set(names)
    check = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True)
    assert check.stdout.split()[0] == file.sha256


def test_a_library_s_elf_facts_from_its_wheel_are_those_of_the_file(tmp_path, gcc):
    """The ELF parse served from the member as it streams past (gcc puts .dynstr before .dynamic, so the string
    table is read by a second, shorter pass) gives what reading the mapped file gives; nothing is extracted."""
    cudart = shared_library(tmp_path, "libcudart.so.12", gcc)
    lib = shared_library(tmp_path, "libcudnn.so.9", gcc, needed=(cudart,), strings=("libcudnn_ops.so",),
                         padding=3 * CHUNK)
    listing = subprocess.run(["readelf", "-SW", str(lib)], capture_output=True, text=True, check=True).stdout
    sections = {m.group(1): int(m.group(2), 16) for m in re.finditer(r"\]\s+(\.\S+)\s+\S+\s+\S+\s+([0-9a-f]+)", listing)}
    assert sections[".dynstr"] < CHUNK < 3 * CHUNK < sections[".dynamic"]  # the strings pass before they are asked for
    wheel, member = in_wheel(lib)
    file, _ = read_member(wheel, member, tmp_path / "work")
    assert file.elf == read_elf(lib, label="x") and file.elf.values("needed")[0] == "libcudart.so.12"
    assert file.elf.values("soname") == ("libcudnn.so.9",)
    assert file.extracted is None and not (tmp_path / "work").exists()
    with zipfile.ZipFile(wheel) as archive:
        info = archive.getinfo(member)
    assert file.packed.csize == info.compress_size and file.packed.crc == info.CRC


def test_a_library_from_a_tar_is_extracted_and_read_the_same(tmp_path, gcc):
    """A tar (NVIDIA's redistributable archives) has no one member's compressed bytes to copy: it is extracted."""
    lib = shared_library(tmp_path, "libcudart.so.12", gcc, strings=("libcuda.so.1",))
    archive_path = tmp_path / "redist.tar.gz"
    with tarfile.open(archive_path, "w:gz") as tar:
        tar.add(lib, "redist/lib/libcudart.so.12")
    scan = NameScan()
    with SafeArchive.open(archive_path, label="redist.tar.gz") as archive:
        [file] = read_files(archive, archive_path, ["redist/lib/libcudart.so.12"], label="redist.tar.gz",
                            work=tmp_path / "work", observe=lambda _: scan.feed, parse_elf=True)
    assert file.extracted is not None and file.extracted.read_bytes() == lib.read_bytes()
    assert file.elf == read_elf(lib, label="x") and "libcuda.so.1" in scan.found()
    assert file.sha256 == hashlib.sha256(lib.read_bytes()).hexdigest()


def test_a_library_compressed_another_way_in_a_zip_is_extracted_and_read_the_same(tmp_path, gcc):
    """A bzip2 member (zip allows it; a wheel would not) cannot be copied into a deflate zip: it is extracted, as a
    tar's is, rather than refused."""
    lib = shared_library(tmp_path, "libcudart.so.12", gcc, strings=("libcuda.so.1",))
    wheel, member = in_wheel(lib, method=zipfile.ZIP_BZIP2)
    file, named = read_member(wheel, member, tmp_path / "work")
    assert file.packed is None and file.extracted is not None and file.extracted.read_bytes() == lib.read_bytes()
    assert file.elf == read_elf(lib, label="x") and "libcuda.so.1" in named


def test_a_large_library_is_read_in_pieces_not_whole(tmp_path, gcc):
    """cuBLASLt is 717 MB: read whole for its names and its ELF headers, it took a build to 775 MiB. A real ELF
    library padded to 512 MiB, stored in a wheel (deflated, the zip-bomb check refuses that much padding), is read in
    a child process, whose peak memory the kernel reports."""
    lib = shared_library(tmp_path, "libpadded.so.1", gcc, strings=("libcuda.so.1",))
    with lib.open("r+b") as handle:
        handle.truncate(512 << 20)
    wheel, member = in_wheel(lib, method=zipfile.ZIP_STORED)
    lib.unlink()
    child = (f"from pathlib import Path; from bundler.platforms.linux.gpu import NameScan; "
             f"from bundler.readers.archives import SafeArchive; from bundler.readers.member_scan import read_files; "
             f"scan = NameScan(); wheel = Path({str(wheel)!r}); archive = SafeArchive.open(wheel, label='w'); "
             f"[file] = read_files(archive, wheel, [{member!r}], label='w', work=wheel.parent / 'work', "
             f"observe=lambda _: scan.feed, parse_elf=True); "
             f"print(' '.join(scan.found()), file.elf.values('soname')[0], {PEAK_MIB})")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout.split()
    assert "libcuda.so.1" in out[:-2] and out[-2] == "libpadded.so.1"
    assert int(out[-1]) < 200, f"peak RSS {out[-1]} MiB reading a 512 MiB library"


def test_a_gpu_component_is_accepted_for_linux():
    """It was refused ("the GPU component is supported for win_amd64 only") before the Linux route existed."""
    manifest = parse(tomllib.loads(LINUX_CUDA12.read_text(encoding="utf-8")), path=LINUX_CUDA12)
    assert manifest.bundle.platform == "linux_x86_64" and manifest.gpu is not None
    assert manifest.gpu.cuda == "12.8" and len(manifest.gpu.sources) == 7


# ---- the real wheels ------------------------------------------------------------------------------------------

def test_a_later_build_of_the_same_wheels_reads_none_of_their_libraries(tmp_path, linux_stand_in_files):
    """What reading the libraries found is kept by each wheel's sha256 in the cache (bundler/readers/scan_store.py).
    Proof that a later build reads no library: after the first, each library's compressed bytes in its wheel are
    overwritten with others of the same length, and the part still gives the same record and members without
    reading them; writing the zip, which copies those bytes, names the change."""
    inputs = tmp_path / "inputs"  # as the input cache lays files out: a folder named by the sha256
    files = {}
    for key, wheel in linux_stand_in_files.items():
        folder = inputs / hashlib.sha256(wheel.read_bytes()).hexdigest()
        folder.mkdir(parents=True)
        files[key] = shutil.move(wheel, folder / wheel.name)
    cache = Cache(tmp_path / "cache")
    first = Assembly()
    add_gpu(first, part_inputs(load(LINUX_CUDA12), files=files, work=tmp_path / "one", cache=cache))
    for wheel in files.values():
        with zipfile.ZipFile(wheel) as archive:
            spans = [(info.header_offset, info.compress_size, info.filename) for info in archive.infolist()]
        with open(wheel, "r+b") as raw:
            for offset, size, name in spans:
                raw.seek(offset + 30 + len(name.encode()))  # past the local header (no extra field: zipfile wrote it)
                raw.write(bytes(size))
    again = Assembly()
    add_gpu(again, part_inputs(load(LINUX_CUDA12), files=files, work=tmp_path / "two", cache=cache))
    assert again.facts.gpu == first.facts.gpu and again.members == first.members
    member = again.members["payload/gpu/libcudart.so.12"]
    with pytest.raises(HashMismatchError, match="changed after the build read them"):
        write_zip([_rooted("b", member)], tmp_path / "bundle.zip", epoch=0, member_cache=MemberCache(tmp_path / "mc"))
    with pytest.raises(UnsafeArchiveError, match="corrupt zip compressed data"):  # read again without the kept scans
        add_gpu(Assembly(), part_inputs(load(LINUX_CUDA12), files=files, work=tmp_path / "three",
                                        cache=Cache(tmp_path / "other-cache")))


@pytest.fixture(scope="module")
def linux_files() -> dict[str, Path]:
    return fetched_inputs(LINUX_CUDA12, needs_gib=3.0)


EXPECTED = ("libcublas.so.12", "libcublasLt.so.12", "libcudart.so.12", "libcudnn.so.9", "libcudnn_adv.so.9",
            "libcudnn_cnn.so.9", "libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9",
            "libcudnn_graph.so.9", "libcudnn_heuristic.so.9", "libcudnn_ops.so.9", "libcufft.so.11",
            "libcurand.so.10", "libnvJitLink.so.12", "libnvrtc-builtins.so.12.8", "libnvrtc.so.12")


@pytest.mark.integration
def test_linux_cuda12_closure_is_complete_from_nvidias_wheels(tmp_path, linux_files):
    assembly = Assembly()
    add_gpu(assembly, part_inputs(load(LINUX_CUDA12), files=linux_files, work=tmp_path / "a"))
    gpu = assembly.facts.gpu
    assert gpu.record["dlls"] == [f"gpu/{n}" for n in EXPECTED]
    assert {"libcudart.so.12", "libcudnn.so.9", "libcurand.so.10", "libcufft.so.11"} <= set(
        gpu.record["provider_imports"])
    assert gpu.record["min_driver"] == "525.60.13"
    assert gpu.dll_dirs == ("gpu",)
    order = list(gpu.preload)
    assert order.index("gpu/libcublasLt.so.12") < order.index("gpu/libcublas.so.12")
    assert order.index("gpu/libcudnn_graph.so.9") < order.index("gpu/libcudnn_ops.so.9") < order.index(
        "gpu/libcudnn_adv.so.9")
    versions = {f["file"]: f["version"] for f in gpu.record["files"]}
    assert versions["gpu/libcudnn.so.9"] == "9.10.2.21" and versions["gpu/libcudart.so.12"] == "12.8.90"


def without_source(manifest, files, needle: str):
    index = next(i for i, s in enumerate(manifest.gpu.sources) if needle in s.source.location)
    sources = tuple(s for i, s in enumerate(manifest.gpu.sources) if i != index)
    kept = {k: v for k, v in files.items() if not k.startswith("gpu.sources[")}
    kept |= {f"gpu.sources[{i}]": files[s.source.key] for i, s in enumerate(sources)}
    renumbered = tuple(replace(s, source=replace(s.source, key=f"gpu.sources[{i}]")) for i, s in enumerate(sources))
    return replace(manifest, gpu=replace(manifest.gpu, sources=renumbered)), kept


@pytest.mark.integration
@pytest.mark.parametrize(("needle", "expected"), [
    ("nvidia-curand", ["onnxruntime/capi/libonnxruntime_providers_cuda.so needs libcurand.so.10 (DT_NEEDED), which "
                       "the bundle does not provide.",
                       "libcurand.so.10: NVIDIA's nvidia-curand-cu12 wheel"]),
    ("nvidia-nvjitlink", ["gpu/libcufft.so.11 loads libnvJitLink.so.12 at run time (by name), which the bundle does "
                          "not provide.", "libnvJitLink.so.12: NVIDIA's nvidia-nvjitlink-cu12 wheel"]),
])
def test_linux_cuda12_without_a_library_is_refused_naming_it(tmp_path, linux_files, needle, expected):
    manifest, files = without_source(load(LINUX_CUDA12), linux_files, needle)
    with pytest.raises(BuildError) as caught:
        add_gpu(Assembly(), part_inputs(manifest, files=files, work=tmp_path / "a"))
    for text in expected:
        assert text in str(caught.value)


def stand_in_wheel(folder: Path, name: str, libraries: dict[str, Path]) -> Path:
    """A wheel named `name` holding each library at its member path, deflated as NVIDIA's are."""
    wheel = folder / name
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, path in libraries.items():
            archive.write(path, member)
    return wheel


@pytest.fixture
def linux_stand_in_files(tmp_path, gcc) -> dict[str, Path]:
    """manifests/gpu-linux-cuda12.toml's inputs as small real ELF libraries in wheels of the same layout: each one
    with the soname, DT_NEEDED and names in its strings the real one has for the closure to be complete."""
    libs = tmp_path / "libs"
    libs.mkdir()

    def lib(name: str, *, needed: tuple[Path, ...] = (), strings: tuple[str, ...] = (), padding: int = 0) -> Path:
        return shared_library(libs, name, gcc, needed=needed, strings=strings, padding=padding)

    cudart = lib("libcudart.so.12", strings=("libcuda.so.1",))
    lt = lib("libcublasLt.so.12", needed=(cudart,), strings=("libnvrtc.so.12",), padding=3 * CHUNK)
    cublas = lib("libcublas.so.12", needed=(lt, cudart))
    cufft = lib("libcufft.so.11", strings=("libnvJitLink.so.12",))
    curand = lib("libcurand.so.10")
    nvrtc = lib("libnvrtc.so.12", strings=("libnvrtc-builtins.so.12.8",))
    builtins = lib("libnvrtc-builtins.so.12.8")
    jitlink = lib("libnvJitLink.so.12")
    cudnn = lib("libcudnn.so.9", strings=("libcudnn_ops.so",))
    ops = lib("libcudnn_ops.so.9", strings=("libz.so.1",))
    provider = lib(PROVIDER, needed=(lt, cublas, curand, cufft, cudart, cudnn))
    shared = lib("libonnxruntime_providers_shared.so")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    capi = "onnxruntime/capi"
    sources = [("nvidia_cuda_runtime_cu12-12.8.90", "cuda_runtime", [cudart]),
               ("nvidia_cublas_cu12-12.8.4.1", "cublas", [cublas, lt]),
               ("nvidia_cufft_cu12-11.3.3.83", "cufft", [cufft]),
               ("nvidia_curand_cu12-10.3.10.19", "curand", [curand]),
               ("nvidia_cuda_nvrtc_cu12-12.8.93", "cuda_nvrtc", [nvrtc, builtins]),
               ("nvidia_nvjitlink_cu12-12.8.93", "nvjitlink", [jitlink]),
               ("nvidia_cudnn_cu12-9.10.2.21", "cudnn", [cudnn, ops])]
    files = {f"gpu.sources[{i}]": stand_in_wheel(wheels, f"{name}-py3-none-manylinux_2_27_x86_64.whl",
                                                  {f"nvidia/{folder}/lib/{p.name}": p for p in paths})
             for i, (name, folder, paths) in enumerate(sources)}
    files["ort.capi"] = stand_in_wheel(wheels, "onnxruntime_gpu-1.23.2-cp311-cp311-manylinux_2_27_x86_64.whl",
                                       {f"{capi}/{PROVIDER}": provider, f"{capi}/{shared.name}": shared})
    return files


def test_the_linux_gpu_part_reads_the_wheels_in_place_and_the_zip_holds_their_bytes(tmp_path, linux_stand_in_files):
    """The whole Linux GPU part on stand-in wheels (the real ones are 2.3 GB): nothing is extracted (the build wrote
    every library out to read it, 3 GB for the real wheels), every library goes into the zip compressed as its wheel
    has it, and unzip gives back the library's bytes with the sha256 the GPU record publishes."""
    assembly = Assembly()
    work = tmp_path / "work"
    add_gpu(assembly, part_inputs(load(LINUX_CUDA12), files=linux_stand_in_files, work=work))
    gpu = assembly.facts.gpu
    assert gpu.record["dlls"] == [f"gpu/{n}" for n in sorted(
        ("libcudart.so.12", "libcublasLt.so.12", "libcublas.so.12", "libcufft.so.11", "libcurand.so.10",
         "libnvrtc.so.12", "libnvrtc-builtins.so.12.8", "libnvJitLink.so.12", "libcudnn.so.9", "libcudnn_ops.so.9"))]
    assert list(gpu.preload).index("gpu/libcublasLt.so.12") < list(gpu.preload).index("gpu/libcublas.so.12")
    assert not [p for p in work.rglob("*") if p.is_file()], "a library was written out to be read"
    members = {name: member for name, member in assembly.members.items() if name.startswith("payload/gpu/")}
    assert all(member.packed is not None and member.source is None for member in members.values())
    dest = tmp_path / "bundle.zip"
    write_zip([_rooted("b", member) for member in members.values()], dest, epoch=0,
              member_cache=MemberCache(tmp_path / "mc"))
    assert subprocess.run(["unzip", "-tq", str(dest)], capture_output=True).returncode == 0
    published = {f"payload/{f['file']}": f["sha256"] for f in gpu.record["files"]}
    with zipfile.ZipFile(dest) as archive:
        for name in members:
            data = archive.read(f"b/{name}")
            assert data == (tmp_path / "libs" / name.rsplit("/", 1)[1]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == published[name] == members[name].sha256
    assert not (tmp_path / "mc").exists()  # copied, never deflated again


def test_the_install_plan_puts_the_gpu_folder_first():
    """The installer's self-check sets LD_LIBRARY_PATH from the plan's dll_dirs: without gpu/ there, a GPU bundle's
    self-check found the bundle's CUDA only through the start-up hook's preload (and gpu/ was not guarded)."""
    from bundler.assembly.facts import GpuFact, PythonEnvFact
    from bundler.assembly.records import plan_dll_dirs

    capi = "venv/lib/python3.11/site-packages/onnxruntime/capi"
    for gpu, expected in ((GpuFact(record={}, dlls=(), origins={}, dll_dirs=("gpu",), preload=()), ("gpu", capi)),
                          (None, (capi,))):
        assembly = Assembly()
        assembly.facts.gpu = gpu
        assembly.facts.python_env = PythonEnvFact(ort=None, wheels=(), dll_dirs=(capi,))  # type: ignore[arg-type]
        assert plan_dll_dirs(assembly) == expected


def test_a_provider_built_for_another_cuda_major_is_named_first(stand_ins):
    from bundler.manifest import Gpu
    from bundler.platforms.linux.gpu import check_gpu_linux

    gpu = Gpu(cuda="11.8", cudnn="9.10", sources=())
    with pytest.raises(BuildError) as caught:
        check_gpu_linux(stand_ins["provider"], stand_ins["libraries"], gpu=gpu, ort_version="1.23.2")
    assert str(caught.value) == ('[gpu] cuda = "11.8", but libonnxruntime_providers_cuda.so of ONNX Runtime 1.23.2 '
                                 'needs libcudart.so.12 (CUDA 12); use the GPU libraries that build was made for.')
