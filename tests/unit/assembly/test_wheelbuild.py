"""The ORT wheel: built from a capi tree, and official wheels verified.

Fast tests build small capi trees around a real extension module of the host's own Python (its
`lib-dynload` holds `*.cpython-3XY-x86_64-linux-gnu.so` files); integration tests use the real
onnxruntime 1.23.1 wheels from conftest, both as capi sources and as official wheels.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import struct
import subprocess
import sys
import sysconfig
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from fixtures.cli import REPO
from fixtures.models import make_identity_model
from installer.sources import WheelFile as InstallerWheelFile
from packaging.metadata import Metadata
from wheel.wheelfile import WheelFile

from bundler.assembly.wheelbuild import (
    MARKER_FIELD,
    PROVENANCE_FILE,
    build_wheel,
    capi_wheel,
    requires_python,
)
from bundler.derived import Derived, DerivedCache
from bundler.errors import BuildError, UnsafeArchiveError
from bundler.hashing import file_sha256
from bundler.readers.archives import SafeArchive
from bundler.readers.capi import CapiTree, derive_tag, read_capi
from bundler.readers.pe_source import PackedPe
from bundler.readers.wheel_binaries import wheel_binaries
from bundler.readers.wheels import verify_official_wheel
from bundler.target_platform import LINUX, TARGETS, WINDOWS

EPOCH = 1700000000
ORT_REQUIRES = ("coloredlogs", "flatbuffers", "numpy>=1.21.6", "packaging", "protobuf", "sympy")
HOST_TAG = f"cp3{sys.version_info.minor}"
LINUX_MANYLINUX_TAG = "cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64"

# A second build in a fresh interpreter with another umask and time zone: both must not leak into the wheel.
BUILD_SCRIPT = """
import os, sys
from pathlib import Path
os.umask(0o077)
from bundler.assembly.wheelbuild import build_wheel
from bundler.readers.capi import read_capi
from bundler.target_platform import TARGETS
source, work, platform, epoch = sys.argv[1:5]
tree = read_capi(Path(source), work_dir=Path(work), target=TARGETS[platform], label="ort.capi")
print(build_wheel(tree, expected_version="1.23.1", out_dir=Path(work) / "out", source_date_epoch=int(epoch)))
"""


@pytest.fixture(scope="session")
def host_extension() -> Path:
    """A real CPython extension module of the interpreter running the tests (in a venv, of its base
    installation: `platstdlib` names the venv, which holds no lib-dynload)."""
    base = {"platbase": sys.base_exec_prefix, "installed_platbase": sys.base_exec_prefix,
            "base": sys.base_prefix, "installed_base": sys.base_prefix}
    platstdlib = sysconfig.get_path("platstdlib", vars=base)
    found = sorted(Path(platstdlib, "lib-dynload").glob("_json.cpython-3*-x86_64-linux-gnu.so"))
    if not found:
        pytest.skip("the host Python has no _json extension module in lib-dynload (not CPython on Linux x86_64)")
    return found[0]


def make_tree(root: Path, *, version: str = "1.23.1", extensions: dict[str, Path] | None = None,
              capi_files: dict[str, str] | None = None) -> Path:
    """A small capi tree: onnxruntime/__init__.py with a version, capi/ with the given files."""
    capi = root / "onnxruntime" / "capi"
    capi.mkdir(parents=True)
    (root / "onnxruntime" / "__init__.py").write_text(f'"""ORT."""\n__version__ = "{version}"\n', encoding="utf-8")
    (capi / "__init__.py").write_text("", encoding="utf-8")
    for name, text in (capi_files or {}).items():
        (capi / name).write_text(text, encoding="utf-8")
    for name, source in (extensions or {}).items():
        shutil.copyfile(source, capi / name)
    return root


def zip_folder(folder: Path, dest: Path, *, prefix: str = "") -> Path:
    with zipfile.ZipFile(dest, "w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, prefix + path.relative_to(folder).as_posix())
    return dest


def state_module_name(host_extension: Path) -> str:
    """ORT's extension module name with the host's ABI suffix: the host module stands in for it."""
    return "onnxruntime_pybind11_state" + host_extension.name.removeprefix("_json")


def host_tree(root: Path, host_extension: Path, **kwargs) -> Path:
    return make_tree(root, extensions={state_module_name(host_extension): host_extension}, **kwargs)


def unpack(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(dest)
    return dest


# --- fast: capi trees around the host's extension module ----------------------------------------


def test_folder_source_without_dist_info_gets_plain_linux_tag(tmp_path: Path, host_extension: Path) -> None:
    root = host_tree(tmp_path / "src", host_extension)
    tree = read_capi(root, work_dir=tmp_path / "work", target=LINUX, label="ort.capi")
    assert tree == CapiTree(root=root, package="onnxruntime", version="1.23.1", requires=(), dist_info=None,
                            tag=f"{HOST_TAG}-{HOST_TAG}-linux_x86_64")


def test_zip_source_nested_in_a_build_folder_reads_like_the_folder(tmp_path: Path, host_extension: Path) -> None:
    root = host_tree(tmp_path / "src", host_extension)
    source = zip_folder(root, tmp_path / "build-output.zip", prefix="build/Release/")
    tree = read_capi(source, work_dir=tmp_path / "work", target=LINUX, label="ort.capi")
    assert tree.root == tmp_path / "work" / "build-output.zip.capi" / "build" / "Release"
    assert (tree.package, tree.version, tree.tag) == ("onnxruntime", "1.23.1", f"{HOST_TAG}-{HOST_TAG}-linux_x86_64")


def test_package_name_comes_from_build_info_then_from_use_cuda(tmp_path: Path, host_extension: Path) -> None:
    declared = host_tree(tmp_path / "declared", host_extension,
                         capi_files={"build_and_package_info.py": "package_name = 'onnxruntime-directml'\n"})
    cuda = host_tree(tmp_path / "cuda", host_extension, capi_files={"version_info.py": "use_cuda = True\n"})
    cpu = host_tree(tmp_path / "cpu", host_extension, capi_files={"version_info.py": "use_cuda = False\n"})
    names = [read_capi(root, work_dir=tmp_path, target=LINUX, label="ort.capi").package
             for root in (declared, cuda, cpu)]
    assert names == ["onnxruntime_directml", "onnxruntime_gpu", "onnxruntime"]


def test_tree_disagreeing_about_its_version_is_refused(tmp_path: Path, host_extension: Path) -> None:
    root = host_tree(tmp_path / "src", host_extension,
                     capi_files={"build_and_package_info.py": "__version__ = '1.23.2'\n"})
    with pytest.raises(BuildError, match=r"1\.23\.1.*1\.23\.2"):
        read_capi(root, work_dir=tmp_path, target=LINUX, label="ort.capi")


def test_tree_without_extension_module_is_refused(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src", capi_files={"onnxruntime_inference_collection.py": "x = 1\n"})
    with pytest.raises(BuildError, match="no Python extension module for linux_x86_64.*py3-none"):
        read_capi(root, work_dir=tmp_path, target=LINUX, label="ort.capi")


def test_linux_tree_for_a_windows_target_is_refused(tmp_path: Path, host_extension: Path) -> None:
    root = host_tree(tmp_path / "src", host_extension)
    with pytest.raises(BuildError, match="no Python extension module for win_amd64"):
        derive_tag(root, target=WINDOWS)


def test_extension_modules_for_two_pythons_are_refused(tmp_path: Path, host_extension: Path) -> None:
    # A stand-in: the host module copied under a second Python's name; the tag only reads the name on Linux.
    root = make_tree(tmp_path / "src", extensions={"a.cpython-311-x86_64-linux-gnu.so": host_extension,
                                                   "b.cpython-310-x86_64-linux-gnu.so": host_extension})
    with pytest.raises(BuildError, match=r"disagree about the Python version.*(cp310.*cp311|cp311.*cp310)"):
        derive_tag(root, target=LINUX)


def test_stable_abi_module_takes_the_lowest_python_of_the_source_tags(tmp_path: Path, host_extension: Path) -> None:
    # A stand-in: the host module named as a stable-ABI module.
    root = make_tree(tmp_path / "src", extensions={"onnxruntime_pybind11_state.abi3.so": host_extension})
    tags = ("cp39-abi3-manylinux_2_28_x86_64", "cp38-abi3-manylinux_2_28_x86_64")
    assert derive_tag(root, target=LINUX, source_tags=tags) == "cp38-abi3-manylinux_2_28_x86_64"
    with pytest.raises(BuildError, match="stable-ABI.*cannot be read from the binary"):
        derive_tag(root, target=LINUX)


def test_binaries_disagreeing_with_source_wheel_tags_are_refused(tmp_path: Path, host_extension: Path) -> None:
    root = host_tree(tmp_path / "src", host_extension)
    with pytest.raises(BuildError, match="WHEEL file says cp38-cp38-manylinux_2_28_x86_64"):
        derive_tag(root, target=LINUX, source_tags=("cp38-cp38-manylinux_2_28_x86_64",))


def test_malformed_source_tag_is_reported_not_raised_raw(tmp_path: Path, host_extension: Path) -> None:
    root = host_tree(tmp_path / "src", host_extension)
    with pytest.raises(BuildError, match="has the tags cp311-linux_x86_64, expected tags of the form"):
        derive_tag(root, target=LINUX, source_tags=("cp311-linux_x86_64",))


def test_unsafe_zip_source_is_refused(tmp_path: Path, host_extension: Path) -> None:
    source = zip_folder(host_tree(tmp_path / "src", host_extension), tmp_path / "capi.zip")
    with zipfile.ZipFile(source, "a") as archive:
        archive.writestr("../escaped.txt", "outside")
    with pytest.raises(UnsafeArchiveError, match=r"\.\./escaped\.txt"):
        read_capi(source, work_dir=tmp_path / "work", target=LINUX, label="ort.capi")
    assert not (tmp_path / "escaped.txt").exists()


def zipped_tree(tmp_path: Path, host_extension: Path, *, compression: dict[str, int]) -> Path:
    """A capi zip of a small tree plus onnxruntime/tools/notes.txt, each member compressed as `compression`
    says (deflated by default)."""
    root = host_tree(tmp_path / "src", host_extension, capi_files={"_pybind_state.py": "# ORT's loader\n" * 50})
    (root / "onnxruntime" / "tools").mkdir()
    (root / "onnxruntime" / "tools" / "notes.txt").write_text("left in the zip\n" * 100, encoding="utf-8")
    source = tmp_path / "capi.zip"
    with zipfile.ZipFile(source, "w") as archive:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            name = path.relative_to(root).as_posix()
            archive.write(path, name, compress_type=compression.get(name, zipfile.ZIP_DEFLATED))
    return source


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED, zipfile.ZIP_BZIP2])
def test_files_a_zip_source_leaves_unextracted_reach_the_wheel_with_their_record(tmp_path, host_extension, method):
    """Only what is read as a file is extracted; the rest is copied from the zip as compressed there, or (a
    method a wheel may not hold) inflated and deflated again, and RECORD hashes what the zip holds."""
    source = zipped_tree(tmp_path, host_extension, compression={"onnxruntime/tools/notes.txt": method})
    tree = read_capi(source, work_dir=tmp_path / "work", target=LINUX, label="ort.capi")
    assert tree.in_archive == ("onnxruntime/capi/__init__.py", "onnxruntime/capi/_pybind_state.py",
                               "onnxruntime/tools/notes.txt")
    assert not (tree.root / "onnxruntime" / "tools" / "notes.txt").exists()
    wheel = build_wheel(tree, expected_version="1.23.1", requires=ORT_REQUIRES, out_dir=tmp_path / "out",
                        source_date_epoch=EPOCH)
    with InstallerWheelFile.open(wheel) as built:
        built.validate_record()  # installer's own check: every file's hash and size against RECORD
    with zipfile.ZipFile(wheel) as built, zipfile.ZipFile(source) as original:
        for name in ("onnxruntime/tools/notes.txt", "onnxruntime/capi/_pybind_state.py", "onnxruntime/__init__.py"):
            assert built.read(name) == original.read(name)
            assert built.getinfo(name).compress_type in (zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED)


def test_a_corrupt_member_left_in_the_zip_is_named_when_the_wheel_is_built(tmp_path, host_extension):
    source = zipped_tree(tmp_path, host_extension, compression={"onnxruntime/tools/notes.txt": zipfile.ZIP_STORED})
    data = bytearray(source.read_bytes())
    at = data.index(b"left in the zip")
    data[at:at + 4] = b"LEFT"  # the stored bytes no longer match the member's CRC
    source.write_bytes(bytes(data))
    tree = read_capi(source, work_dir=tmp_path / "work", target=LINUX, label="ort.capi")
    with pytest.raises(UnsafeArchiveError, match=r"capi\.zip: entry 'onnxruntime/tools/notes\.txt' .*corrupt"):
        build_wheel(tree, expected_version="1.23.1", requires=ORT_REQUIRES, out_dir=tmp_path / "out",
                    source_date_epoch=EPOCH)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def declare_size(source: Path, name: str, size: int) -> None:
    """Make the zip's local header and central directory entry for `name` declare `size` uncompressed bytes."""
    with zipfile.ZipFile(source) as archive:
        offset = archive.getinfo(name).header_offset
    data = bytearray(source.read_bytes())
    data[offset + 22:offset + 26] = struct.pack("<I", size)
    central = data.index(b"PK\x01\x02")  # the first central directory entry
    while data[central + 46:central + 46 + len(name)] != name.encode():
        central = data.index(b"PK\x01\x02", central + 4)
    data[central + 24:central + 28] = struct.pack("<I", size)
    source.write_bytes(bytes(data))


@pytest.mark.parametrize(("declared", "found"), [
    (100, r"expands beyond the 100 bytes its header declares"),
    (1700, r"ends after 1600 bytes but its header declares 1700"),
])
def test_a_member_left_in_the_zip_that_is_not_the_size_it_declares_is_named(tmp_path, host_extension, declared,
                                                                               found):
    """A member copied as it is is inflated on its way through, and held to its entry as extracting would be."""
    source = zipped_tree(tmp_path, host_extension, compression={})
    declare_size(source, "onnxruntime/tools/notes.txt", declared)
    tree = read_capi(source, work_dir=tmp_path / "work", target=LINUX, label="ort.capi")
    with pytest.raises(UnsafeArchiveError, match=rf"capi\.zip: entry 'onnxruntime/tools/notes\.txt' {found}"):
        build_wheel(tree, expected_version="1.23.1", requires=ORT_REQUIRES, out_dir=tmp_path / "out",
                    source_date_epoch=EPOCH)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_second_tree_of_only_files_left_in_the_zip_is_still_found(tmp_path: Path, host_extension: Path) -> None:
    """Files that are not extracted still have their folders made, so two trees are two trees, as before."""
    source = zip_folder(host_tree(tmp_path / "src", host_extension), tmp_path / "capi.zip", prefix="build/")
    with zipfile.ZipFile(source, "a") as archive:
        archive.writestr("other/onnxruntime/capi/_pybind_state.py", "# a second package tree, with no binary\n")
    with pytest.raises(BuildError, match=r"found 2 onnxruntime/capi/ folders"):
        read_capi(source, work_dir=tmp_path / "work", target=LINUX, label="ort.capi")


def test_version_other_than_the_manifest_is_refused(tmp_path: Path, host_extension: Path) -> None:
    root = host_tree(tmp_path / "src", host_extension, version="1.22.0")
    tree = read_capi(root, work_dir=tmp_path, target=LINUX, label="ort.capi")
    out = tmp_path / "out"
    with pytest.raises(BuildError, match=r"found ONNX Runtime version 1\.22\.0, expected 1\.23\.1"):
        build_wheel(tree, expected_version="1.23.1", requires=ORT_REQUIRES, out_dir=out, source_date_epoch=EPOCH)
    assert not out.exists() or not any(out.iterdir())


def test_unknown_dependencies_are_refused_with_the_manifest_key(tmp_path: Path, host_extension: Path) -> None:
    tree = read_capi(host_tree(tmp_path / "src", host_extension), work_dir=tmp_path, target=LINUX,
                     label="ort.capi")
    with pytest.raises(BuildError, match=r"\[ort\] dependencies"):
        build_wheel(tree, expected_version="1.23.1", out_dir=tmp_path / "out", source_date_epoch=EPOCH)


def test_given_dependencies_land_in_metadata_and_bytecode_stays_out(tmp_path: Path, host_extension: Path) -> None:
    root = host_tree(tmp_path / "src", host_extension)
    (root / "onnxruntime" / "__pycache__").mkdir()
    (root / "onnxruntime" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"host bytecode")
    tree = read_capi(root, work_dir=tmp_path, target=LINUX, label="ort.capi")
    wheel = build_wheel(tree, expected_version="1.23.1", requires=ORT_REQUIRES, out_dir=tmp_path / "out",
                        source_date_epoch=EPOCH)
    assert wheel.name == f"onnxruntime-1.23.1-{HOST_TAG}-{HOST_TAG}-linux_x86_64.whl"
    with WheelFile(wheel) as archive:
        names = archive.namelist()
        metadata = Parser().parsestr(archive.read("onnxruntime-1.23.1.dist-info/METADATA").decode())
        infos = archive.infolist()
        extension = archive.getinfo("onnxruntime/capi/" + state_module_name(host_extension))
    assert metadata.get_all("Requires-Dist") == list(ORT_REQUIRES)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert extension.external_attr >> 16 == 0o100755
    assert names[-1] == "onnxruntime-1.23.1.dist-info/RECORD"
    assert {info.date_time for info in infos} == {(2023, 11, 14, 22, 13, 20)}  # EPOCH in UTC, RECORD included


def test_small_tree_builds_byte_identical_despite_mtimes_modes_and_order(tmp_path: Path, host_extension: Path) -> None:
    first = host_tree(tmp_path / "a", host_extension, capi_files={f"m{i}.py": f"x = {i}\n" for i in range(20)})
    second = tmp_path / "b"
    files = sorted(p for p in first.rglob("*") if p.is_file())
    random.Random(7).shuffle(files)  # create in another order, with other mtimes and modes
    for index, path in enumerate(files):
        target = second / path.relative_to(first)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        os.utime(target, (EPOCH + index * 3607, EPOCH + index * 3607))
        target.chmod(0o600 if index % 2 else 0o775)
    wheels = [build_wheel(read_capi(root, work_dir=tmp_path, target=LINUX, label="ort.capi"),
                          expected_version="1.23.1", requires=ORT_REQUIRES, out_dir=tmp_path / f"out-{root.name}",
                          source_date_epoch=EPOCH) for root in (first, second)]
    assert wheels[0].read_bytes() == wheels[1].read_bytes()
    later = build_wheel(read_capi(first, work_dir=tmp_path, target=LINUX, label="ort.capi"),
                        expected_version="1.23.1", requires=ORT_REQUIRES, out_dir=tmp_path / "out-later",
                        source_date_epoch=EPOCH + 86400)
    assert later.read_bytes() != wheels[0].read_bytes()  # the epoch, and only it, sets the timestamps


# --- integration: the real ORT 1.23.1 wheels -------------------------------------------------------


@pytest.mark.integration
def test_windows_wheel_as_capi_source(ort_win_wheel: Path, tmp_path: Path) -> None:
    tree = read_capi(ort_win_wheel, work_dir=tmp_path, target=WINDOWS, label="ort.capi")
    assert (tree.package, tree.version, tree.requires, tree.tag) == (
        "onnxruntime", "1.23.1", ORT_REQUIRES, "cp311-cp311-win_amd64")


@pytest.mark.integration
def test_windows_built_wheel_is_valid_and_reproducible(ort_win_wheel: Path, tmp_path: Path) -> None:
    tree = read_capi(ort_win_wheel, work_dir=tmp_path / "a", target=WINDOWS, label="ort.capi")
    before = {p: p.stat().st_mtime_ns for p in tree.root.rglob("*")}
    wheel = build_wheel(tree, expected_version="1.23.1", out_dir=tmp_path / "a" / "out", source_date_epoch=EPOCH)
    assert wheel.name == "onnxruntime-1.23.1-cp311-cp311-win_amd64.whl"
    assert {p: p.stat().st_mtime_ns for p in tree.root.rglob("*")} == before  # the tree is only read

    with WheelFile(wheel) as archive:  # reading every member checks it against RECORD
        for name in archive.namelist():
            archive.read(name)
        wheel_text = archive.read("onnxruntime-1.23.1.dist-info/WHEEL").decode()
    assert "Root-Is-Purelib: false\nTag: cp311-cp311-win_amd64\n" in wheel_text
    with InstallerWheelFile.open(wheel) as source:
        source.validate_record()
        assert Parser().parsestr(source.read_dist_info("METADATA")).get_all("Requires-Dist") == list(ORT_REQUIRES)

    # Again from the same files as a folder (the zip unpacked: its build read most of them from the zip)
    # with shuffled mtimes, in a fresh interpreter with another umask and TZ: the same files and bytes, and
    # the same wheel as a build of that folder here. Only the modes differ: a zip source's are upstream's,
    # a folder's (which follow the umask it was unpacked under) the fixed ones.
    assert tree.in_archive and not any((tree.root / name).exists() for name in tree.in_archive)
    copy = tmp_path / "b" / "tree"
    with zipfile.ZipFile(ort_win_wheel) as archive:
        archive.extractall(copy)
    for index, path in enumerate(sorted(p for p in copy.rglob("*") if p.is_file())):
        os.utime(path, (EPOCH - index * 7919, EPOCH - index * 7919))
        path.chmod(0o600)  # as extracted under umask 077
    env = {**os.environ, "TZ": "Pacific/Chatham", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", BUILD_SCRIPT, str(copy), str(tmp_path / "b"), "win_amd64",
                           str(EPOCH)], env=env, capture_output=True, text=True, check=True)
    from_folder = Path(done.stdout.strip())
    here = build_wheel(read_capi(copy, work_dir=tmp_path / "c", target=WINDOWS, label="ort.capi"),
                       expected_version="1.23.1", out_dir=tmp_path / "c" / "out", source_date_epoch=EPOCH)
    assert from_folder.read_bytes() == here.read_bytes()
    with zipfile.ZipFile(from_folder) as folder_zip, zipfile.ZipFile(wheel) as zip_zip:
        assert folder_zip.namelist() == zip_zip.namelist()
        assert all(folder_zip.read(n) == zip_zip.read(n) for n in zip_zip.namelist())
        assert {i.external_attr >> 16 for i in folder_zip.infolist()} == {0o100644, 0o100755}
        assert {i.external_attr >> 16 for i in zip_zip.infolist()
                if not i.filename.endswith(("RECORD", "WHEEL", PROVENANCE_FILE))} == {0o100666}  # upstream's


@pytest.mark.integration
def test_windows_pyd_importing_python310_gets_cp310(ort_win_wheel: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(ort_win_wheel) as archive:
        pyd = archive.read("onnxruntime/capi/onnxruntime_pybind11_state.pyd")
    assert pyd.count(b"python311.dll") == 1
    # A stand-in: the real .pyd with its import of python311.dll renamed in place.
    capi = tmp_path / "onnxruntime" / "capi"
    capi.mkdir(parents=True)
    (capi / "onnxruntime_pybind11_state.pyd").write_bytes(pyd.replace(b"python311.dll", b"python310.dll"))
    assert derive_tag(tmp_path, target=WINDOWS) == "cp310-cp310-win_amd64"
    with pytest.raises(BuildError, match="cp310-cp310.*WHEEL file says cp311-cp311-win_amd64"):
        derive_tag(tmp_path, target=WINDOWS, source_tags=("cp311-cp311-win_amd64",))
    (capi / "second.pyd").write_bytes(pyd)
    with pytest.raises(BuildError, match="disagree about the Python version"):
        derive_tag(tmp_path, target=WINDOWS)


@pytest.mark.integration
def test_linux_capi_keeps_the_manylinux_tags_of_its_source(ort_linux_wheel: Path, tmp_path: Path) -> None:
    folder = unpack(ort_linux_wheel, tmp_path / "unpacked")
    tree = read_capi(folder, work_dir=tmp_path, target=LINUX, label="ort.capi")
    assert (tree.package, tree.version, tree.requires, tree.tag) == (
        "onnxruntime", "1.23.1", ORT_REQUIRES, LINUX_MANYLINUX_TAG)
    shutil.rmtree(folder / "onnxruntime-1.23.1.dist-info")  # a bare tree: no tags to carry
    assert derive_tag(folder, target=LINUX) == "cp311-cp311-linux_x86_64"


@pytest.mark.integration
def test_linux_built_wheel_installs_and_runs_a_model(ort_linux_wheel: Path, tmp_path: Path) -> None:
    tree = read_capi(ort_linux_wheel, work_dir=tmp_path, target=LINUX, label="ort.capi")
    wheels = tmp_path / "wheels"
    wheel = build_wheel(tree, expected_version="1.23.1", out_dir=wheels, source_date_epoch=EPOCH)
    assert wheel.name == f"onnxruntime-1.23.1-{LINUX_MANYLINUX_TAG}.whl"
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--find-links", str(wheels),
                    "--target", str(target), "--disable-pip-version-check", "onnxruntime==1.23.1"],
                   check=True, capture_output=True)
    model = make_identity_model(tmp_path / "identity.onnx")
    # Only our wheel is on PYTHONPATH; numpy (a dependency we did not install) comes from the host.
    script = (
        "import sys, numpy as np, onnxruntime as ort\n"
        "assert ort.__file__.startswith(sys.argv[2]), ort.__file__\n"
        "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n"
        "x = np.arange(4, dtype=np.float32).reshape(1, 4)\n"
        "print(ort.__version__, s.run(None, {'x': x})[0].tolist())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    done = subprocess.run([sys.executable, "-c", script, str(model), str(target)], env=env,
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "1.23.1 [[0.0, 1.0, 2.0, 3.0]]"
    assert (target / "bin" / "onnxruntime_test").is_file(), "the upstream console script must survive the rebuild"


# --- the rebuilt wheel's metadata against upstream's, and the derived-artifact cache ----------------


def dist_info_files(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {n.split("/", 1)[1]: archive.read(n) for n in archive.namelist()
                if n.split("/")[0].endswith(".dist-info") and not n.endswith("/")}


def rebuilt(upstream: Path, platform: str, work: Path, *, cache: DerivedCache | None = None) -> Derived:
    return capi_wheel(upstream, source_sha256=file_sha256(upstream), target=TARGETS[platform], target_python="3.11",
                      expected_version="1.23.1", requires=None, source_date_epoch=EPOCH, work=work, cache=cache)


@pytest.mark.integration
@pytest.mark.parametrize(("fixture", "platform"), [("ort_win_wheel", "win_amd64"), ("ort_linux_wheel", "linux_x86_64")])
def test_rebuilt_wheel_keeps_upstream_metadata_and_modes_and_names_its_source_in_a_file_of_its_own(
        fixture: str, platform: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Issue 26: packaging's strict reader refused the rebuilt METADATA ("unrecognized field: 'rebuilt-by'"),
    and the rebuild set 0755 on the extension modules and DLLs where upstream has 0664/0666."""
    upstream: Path = request.getfixturevalue(fixture)
    built = rebuilt(upstream, platform, tmp_path)
    ours, theirs = dist_info_files(built.path), dist_info_files(upstream)
    assert set(ours) == set(theirs) | {PROVENANCE_FILE}, "every dist-info file is kept; RECORD and WHEEL anew"
    for name in set(theirs) - {"RECORD", "WHEEL"}:
        assert ours[name] == theirs[name], name  # METADATA included: byte for byte as upstream wrote it
    assert b"[console_scripts]\r\nonnxruntime_test = " in ours["entry_points.txt"] or \
        b"[console_scripts]\nonnxruntime_test = " in ours["entry_points.txt"]
    marker = f"{MARKER_FIELD}: ort-bundler from {upstream.name} sha256:{file_sha256(upstream)}\n".encode()
    assert ours[PROVENANCE_FILE] == marker
    metadata = Metadata.from_email(ours["METADATA"], validate=True)  # raises on any field it does not accept
    assert (metadata.metadata_version, str(metadata.requires_python), metadata.license) == ("2.4", ">=3.10", "MIT License")
    with zipfile.ZipFile(upstream) as theirs_zip, zipfile.ZipFile(built.path) as ours_zip:
        upstream_modes = {i.filename: i.external_attr >> 16 for i in theirs_zip.infolist() if not i.is_dir()}
        our_modes = {i.filename: i.external_attr >> 16 for i in ours_zip.infolist()}
    binaries = [n for n in upstream_modes if n.endswith((".so", ".pyd", ".dll"))]
    assert binaries and {our_modes[n] for n in binaries} <= {0o100664, 0o100666, 0o100775}
    kept = {n for n in upstream_modes if not n.endswith(("/RECORD", "/WHEEL"))}
    assert {n: our_modes[n] for n in kept} == {n: upstream_modes[n] for n in kept}


@pytest.mark.integration
def test_check_wheel_contents_finds_nothing_new_in_the_rebuilt_wheel(ort_win_wheel: Path, tmp_path: Path) -> None:
    """check-wheel-contents flags upstream's own duplicate __init__.py files (W002); the rebuild adds nothing."""
    built = rebuilt(ort_win_wheel, "win_amd64", tmp_path)
    reports = []
    for wheel in (built.path, ort_win_wheel):
        done = subprocess.run([sys.executable, "-m", "check_wheel_contents", str(wheel)], check=False,
                              capture_output=True, text=True)  # exits 1 on findings, which upstream has
        reports.append(done.stdout.replace(str(wheel), "WHEEL"))
    assert reports[0] == reports[1]
    assert "W002" in reports[1]  # the check ran and found upstream's duplicates: the comparison is not vacuous


def test_tree_without_dist_info_gets_metadata_2_4(tmp_path: Path, host_extension: Path) -> None:
    tree = read_capi(host_tree(tmp_path / "src", host_extension), work_dir=tmp_path, target=LINUX,
                     label="ort.capi")
    wheel = build_wheel(tree, expected_version="1.23.1", requires=ORT_REQUIRES, out_dir=tmp_path / "out",
                        source_date_epoch=EPOCH, target_python="3.11", source_label="build.zip sha256:" + "a" * 64)
    files = dist_info_files(wheel)
    parsed = Metadata.from_email(files["METADATA"], validate=True)
    assert (parsed.metadata_version, str(parsed.requires_python), parsed.license_expression) == ("2.4", ">=3.10", "MIT")
    assert files[PROVENANCE_FILE] == f"{MARKER_FIELD}: ort-bundler from build.zip sha256:{'a' * 64}\n".encode()
    assert requires_python("1.25.0", target_python="3.12", tag="cp312-cp312-linux_x86_64") == ">=3.11"
    assert requires_python("1.16.3", target_python="3.11", tag="cp311-cp311-linux_x86_64") == ">=3.11"
    assert requires_python("1.16.3", target_python=None, tag="cp39-abi3-linux_x86_64") == ">=3.9"


def test_manifest_dependencies_replace_requires_dist_in_place(tmp_path: Path, host_extension: Path) -> None:
    root = host_tree(tmp_path / "src", host_extension)
    dist_info = root / "onnxruntime-1.23.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_bytes(b"Metadata-Version: 2.1\nName: onnxruntime\nVersion: 1.23.1\n"
                                         b"Requires-Dist: numpy\nRequires-Dist: sympy\nAuthor: someone\n"
                                         b"Rebuilt-By: ort-bundler from an older build\n\nThe description.\n")
    for name in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json"):  # an installed tree's files
        (dist_info / name).write_text("installed\n", encoding="utf-8")
    (dist_info / "entry_points.txt").write_text("[console_scripts]\nx = onnxruntime:main\n", encoding="utf-8")
    tree = read_capi(root, work_dir=tmp_path, target=LINUX, label="ort.capi")
    wheel = build_wheel(tree, expected_version="1.23.1", requires=("numpy>=2", "packaging"), out_dir=tmp_path / "out",
                        source_date_epoch=EPOCH, source_label="tree.zip")
    files = dist_info_files(wheel)
    assert files["METADATA"] == (b"Metadata-Version: 2.1\nName: onnxruntime\nVersion: 1.23.1\n"
                                 b"Requires-Dist: numpy>=2\nRequires-Dist: packaging\nAuthor: someone\n"
                                 b"\nThe description.\n")
    assert files[PROVENANCE_FILE] == b"Rebuilt-By: ort-bundler from tree.zip\n"
    assert sorted(files) == sorted(["METADATA", "RECORD", "WHEEL", "entry_points.txt", PROVENANCE_FILE])
    assert files["RECORD"] != b"installed\n"


@pytest.mark.integration
def test_the_built_wheel_is_cached_by_its_inputs_and_a_damaged_entry_is_rebuilt(ort_linux_wheel: Path,
                                                                                tmp_path: Path) -> None:
    cache = DerivedCache(tmp_path / "derived")
    first = rebuilt(ort_linux_wheel, "linux_x86_64", tmp_path / "w1", cache=cache)
    assert first.path.is_relative_to(cache.root) and first.sha256 == file_sha256(first.path)
    again = rebuilt(ort_linux_wheel, "linux_x86_64", tmp_path / "w2", cache=cache)
    assert again == first
    assert not (tmp_path / "w2" / "capi").exists(), "a hit must not extract the source again"
    other_epoch = capi_wheel(ort_linux_wheel, source_sha256=file_sha256(ort_linux_wheel),
                             target=LINUX, target_python="3.11", expected_version="1.23.1", requires=None,
                             source_date_epoch=EPOCH + 1, work=tmp_path / "w3", cache=cache)
    assert other_epoch.path != first.path
    data = bytearray(first.path.read_bytes())
    data[1000] ^= 0xFF
    first.path.write_bytes(bytes(data))
    repaired = rebuilt(ort_linux_wheel, "linux_x86_64", tmp_path / "w4", cache=cache)
    assert (tmp_path / "w4" / "capi").exists(), "a damaged entry is built again, not shipped"
    assert repaired.sha256 == first.sha256 == file_sha256(repaired.path)


@pytest.mark.integration
@pytest.mark.parametrize(("fixture", "platform"), [("ort_win_wheel", "win_amd64"), ("ort_linux_wheel", "linux_x86_64")])
def test_official_wheels_verify(fixture: str, platform: str, request: pytest.FixtureRequest) -> None:
    wheel = request.getfixturevalue(fixture)
    verify_official_wheel(wheel, expected_name="onnxruntime", expected_version="1.23.1", target=TARGETS[platform],
                          target_python="3.11", label="ort.wheel")
    with pytest.raises(BuildError, match=r"version 1\.23\.1, expected 1\.22\.0"):
        verify_official_wheel(wheel, expected_name="onnxruntime", expected_version="1.22.0",
                              target=TARGETS[platform], target_python="3.11", label="ort.wheel")
    with pytest.raises(BuildError, match=r"expected one that serves CPython 3\.12"):
        verify_official_wheel(wheel, expected_name="onnxruntime", expected_version="1.23.1",
                              target=TARGETS[platform], target_python="3.12", label="ort.wheel")
    with pytest.raises(BuildError, match="'onnxruntime', expected 'onnxruntime-gpu'"):
        verify_official_wheel(wheel, expected_name="onnxruntime-gpu", expected_version="1.23.1",
                              target=TARGETS[platform], target_python="3.11", label="ort.wheel")


@pytest.mark.integration
def test_windows_wheel_does_not_serve_linux(ort_win_wheel: Path) -> None:
    with pytest.raises(BuildError, match="cp311-cp311-win_amd64, expected one that serves CPython 3.11 on linux_x86_64"):
        verify_official_wheel(ort_win_wheel, expected_name="onnxruntime", expected_version="1.23.1",
                              target=LINUX, target_python="3.11", label="ort.wheel")


@pytest.mark.integration
def test_tampered_official_wheel_names_the_changed_file(ort_win_wheel: Path, tmp_path: Path) -> None:
    tampered = tmp_path / ort_win_wheel.name
    changed = "onnxruntime/capi/_ld_preload.py"
    with zipfile.ZipFile(ort_win_wheel) as source, zipfile.ZipFile(tampered, "w", zipfile.ZIP_STORED) as dest:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == changed:
                data = data[:-1] + bytes([data[-1] ^ 0x01])  # one byte, same size
            dest.writestr(info.filename, data)
    with pytest.raises(BuildError, match=f"{changed} does not match its RECORD entry"):
        verify_official_wheel(tampered, expected_name="onnxruntime", expected_version="1.23.1",
                              target=WINDOWS, target_python="3.11", label="ort.wheel")


def test_a_zip_source_lends_its_compressed_members_unchanged(tmp_path: Path, host_extension: Path) -> None:
    """Members are copied as the source zip compressed them (here: stored), not inflated and deflated again;
    RECORD still hashes their content, and a folder source of the same tree is deflated."""
    root = host_tree(tmp_path / "src", host_extension, capi_files={"big.py": "x = 1\n" * 5000})
    source = tmp_path / "build.zip"
    with zipfile.ZipFile(source, "w", zipfile.ZIP_STORED) as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                archive.write(path, "build/Release/" + path.relative_to(root).as_posix())
    tree = read_capi(source, work_dir=tmp_path / "work", target=LINUX, label="ort.capi")
    assert (tree.archive, tree.archive_root) == (source, "build/Release")
    wheel = build_wheel(tree, expected_version="1.23.1", requires=ORT_REQUIRES, out_dir=tmp_path / "out",
                        source_date_epoch=EPOCH)
    with zipfile.ZipFile(wheel) as archive:
        methods = {i.filename: i.compress_type for i in archive.infolist()}
    assert methods["onnxruntime/capi/big.py"] == zipfile.ZIP_STORED
    assert methods["onnxruntime-1.23.1.dist-info/METADATA"] == zipfile.ZIP_DEFLATED
    with InstallerWheelFile.open(wheel) as checked:
        checked.validate_record()  # every copied member hashes to what RECORD says
    folder = build_wheel(read_capi(root, work_dir=tmp_path / "w2", target=LINUX, label="ort.capi"),
                         expected_version="1.23.1", requires=ORT_REQUIRES, out_dir=tmp_path / "out2",
                         source_date_epoch=EPOCH)
    with zipfile.ZipFile(folder) as archive:
        assert archive.getinfo("onnxruntime/capi/big.py").compress_type == zipfile.ZIP_DEFLATED


@pytest.mark.integration
def test_the_dlls_of_a_windows_capi_wheel_stay_in_its_zip_and_are_read_in_the_built_wheel(ort_win_wheel: Path,
                                                                                         tmp_path: Path) -> None:
    """No binary is written out: the tag comes from the extension module's imports read where it lies, the DLLs
    and the module go into the built wheel compressed as the source holds them, and the DLL closure reads them
    there (issue 37)."""
    cache = DerivedCache(tmp_path / "derived")
    built = rebuilt(ort_win_wheel, "win_amd64", tmp_path / "w", cache=cache)
    capi = tmp_path / "w" / "capi" / f"{ort_win_wheel.name}.capi" / "onnxruntime" / "capi"
    assert built.path.name.endswith("-cp311-cp311-win_amd64.whl")
    assert not [p.name for p in capi.iterdir() if p.suffix in {".dll", ".pyd"}]
    found = wheel_binaries("payload/wheels/ort.whl", built.path, built.sha256, store=cache.root)
    assert "payload/wheels/ort.whl!onnxruntime/capi/onnxruntime.dll" in found
    index = cache.root / "wheel-binaries" / built.sha256
    assert [p.name for p in index.iterdir()] == ["INDEX.json"], "nothing written out: each DLL is read in the wheel"
    with zipfile.ZipFile(built.path) as archive, zipfile.ZipFile(ort_win_wheel) as source:
        for label, pe in found.items():
            member = label.split("!", 1)[1]
            assert isinstance(pe, PackedPe), label
            assert pe.sha256 == hashlib.sha256(archive.read(member)).hexdigest(), label
            # copied as compressed in the source, not deflated again
            assert archive.getinfo(member).compress_size == source.getinfo(member).compress_size, label


def test_only_a_pyd_that_cannot_be_read_where_it_lies_is_written_out(tmp_path: Path) -> None:
    """A deflated or stored `.pyd` is read in the zip for the tag; a bzip2 one (no wheel holds one, but a zip
    may) is extracted, as every Windows binary used to be."""
    from bundler.readers.capi import _on_disk

    source = tmp_path / "capi.zip"
    with zipfile.ZipFile(source, "w") as archive:
        for name, method in {"deflated.pyd": zipfile.ZIP_DEFLATED, "stored.pyd": zipfile.ZIP_STORED,
                             "bzip2.pyd": zipfile.ZIP_BZIP2, "lib.dll": zipfile.ZIP_DEFLATED}.items():
            archive.writestr(f"onnxruntime/capi/{name}", b"MZ" + bytes(100), compress_type=method)
    with SafeArchive.open(source, label="ort.capi") as archive:
        assert [n for n in archive.names() if _on_disk(archive, n)] == ["onnxruntime/capi/bzip2.pyd"]
