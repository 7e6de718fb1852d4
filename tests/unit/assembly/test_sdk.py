"""The ORT release archive and the C/C++ SDK in the bundle (issue 3 §2, issue 6).

Fast tests use small archives whose "library" is a fake ELF header with ORT's build-info string; the
integration tests build archives in the official layout around the REAL 1.23.1 libraries (tests/fixtures/sdk.py),
install the SDK the way the installer does (bundler.shipped.ort_bundle.engine.image.copy_entries), and compile and run C programs
against it with CMake and gcc.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import shutil
import subprocess
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from fixtures.parts import part_inputs
from fixtures.sdk import (
    LINUX_TOP,
    ORT_COMMIT,
    ORT_VERSION,
    STANDIN_HEADER_MINIMAL,
    STANDIN_HEADER_SAMPLE,
    WIN_TOP,
    import_library,
    linux_release_archive,
    wheel_member,
    windows_release_archive,
)
from fixtures.wine import mingw_gcc, require, wine  # noqa: F401

from bundler.assembly.assembly import Assembly
from bundler.assembly.facts import GpuFact
from bundler.assembly.models import add_selfcheck
from bundler.assembly.sdk import add_sdk
from bundler.assembly.shipped_package import add_shipped_package
from bundler.errors import BuildError, UnsafeArchiveError
from bundler.integrations import tools
from bundler.manifest import Manifest, load
from bundler.readers.ortarchive import inspect_ort_archive
from bundler.shipped.ort_bundle.engine.image import copy_entries
from bundler.target_platform import TARGETS

LINUX = "linux_x86_64"
WINDOWS = "win_amd64"
FILE_VERSION = "1.23.20251002.1.d9b2048"


# -- helpers ----------------------------------------------------------------------------------------------


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fake_elf(path: Path, *, commit: str = ORT_COMMIT[:10]) -> Path:
    """An x86-64 ELF header plus ORT's build-info string: enough for the archive checks, not for loading."""
    header = b"\x7fELF\x02\x01\x01" + bytes(11) + (62).to_bytes(2, "little") + bytes(44)
    path.write_bytes(header + f"ORT Build Info: git-branch=HEAD, git-commit-id={commit}, build type=Release\0".encode())
    return path


def write_manifest(folder: Path, archive: Path, *, platform: str, version: str = ORT_VERSION) -> Manifest:
    (folder / "bundle.toml").write_text(
        f'[bundle]\nname = "sdk-test"\nversion = "1.0.0"\nplatform = "{platform}"\npython = "3.11"\n\n'
        f'[ort]\nversion = "{version}"\narchive = {{ path = "{archive.name}", sha256 = "{sha256(archive)}" }}\n',
        encoding="utf-8")
    return load(folder / "bundle.toml")


def sdk_assembly(archive: Path, folder: Path, *, platform: str, prepare=None) -> Assembly:
    manifest = write_manifest(archive.parent, archive, platform=platform)
    assembly = Assembly()
    add_shipped_package(assembly, part_inputs(manifest, work=folder / "work"))  # the identity model is its data
    add_selfcheck(assembly, part_inputs(manifest, work=folder / "work"))
    if prepare:
        prepare(assembly)
    else:
        assembly.facts.gpu = None
    add_sdk(assembly, part_inputs(manifest, files={"ort.archive": archive}, work=folder / "work"))
    return assembly


def install(assembly: Assembly, folder: Path) -> Path:
    """Lay the bundle out on disk and copy the plan's files as install.sh does; returns the install root."""
    bundle, root = folder / "bundle", folder / "install"
    for name, member in assembly.members.items():
        target = bundle / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(member.data if member.data is not None else member.source.read_bytes())
    copy_entries([(c.source, c.target) for c in assembly.copies], bundle, root)
    return root


def cmake(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["cmake", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def cmake_tool() -> str:
    return require(tools.CMAKE)


# -- fast: the archive checks ------------------------------------------------------------------------------


def test_a_consistent_archive_is_read_with_its_link_chain(tmp_path: Path) -> None:
    archive = linux_release_archive(tmp_path, fake_elf(tmp_path / "lib.so"), header=STANDIN_HEADER_MINIMAL)
    found = inspect_ort_archive(archive, label="ort.archive", target=TARGETS[LINUX], expected_version=ORT_VERSION)
    assert (found.top, found.version, found.commit) == (LINUX_TOP, ORT_VERSION, ORT_COMMIT)
    assert found.binaries == {"lib/libonnxruntime.so.1.23.1": None}
    assert found.links == {"lib/libonnxruntime.so": "lib/libonnxruntime.so.1.23.1",
                           "lib/libonnxruntime.so.1": "lib/libonnxruntime.so.1.23.1"}
    assert "include/onnxruntime_c_api.h" in found.files and "lib/libonnxruntime.so" not in found.files
    assert json.loads(json.dumps(found.to_json()))["links"] == found.links


def test_a_short_commit_id_is_accepted(tmp_path: Path) -> None:
    archive = linux_release_archive(tmp_path, fake_elf(tmp_path / "lib.so"), header=STANDIN_HEADER_MINIMAL,
                                    commit=ORT_COMMIT[:7])
    assert inspect_ort_archive(archive, label="ort.archive", target=TARGETS[LINUX]).commit == "d9b2048"


def test_version_number_disagreeing_with_the_manifest_names_both(tmp_path: Path) -> None:
    archive = linux_release_archive(tmp_path, fake_elf(tmp_path / "lib.so"), header=STANDIN_HEADER_MINIMAL)
    with pytest.raises(BuildError, match=r"VERSION_NUMBER says 1\.23\.1 but \[ort\] version is 1\.22\.0"):
        inspect_ort_archive(archive, label="ort.archive", target=TARGETS[LINUX], expected_version="1.22.0")


def test_a_library_built_from_another_commit_is_refused(tmp_path: Path) -> None:
    archive = linux_release_archive(tmp_path, fake_elf(tmp_path / "lib.so", commit="0123456789"),
                                    header=STANDIN_HEADER_MINIMAL)
    with pytest.raises(BuildError, match=r"lib/libonnxruntime\.so\.1\.23\.1 was built from commit 0123456789 but "
                                         r"GIT_COMMIT_ID is d9b2048791"):
        inspect_ort_archive(archive, label="ort.archive", target=TARGETS[LINUX])


def test_the_linux_archive_for_a_windows_target_is_refused(tmp_path: Path) -> None:
    archive = linux_release_archive(tmp_path, fake_elf(tmp_path / "lib.so"), header=STANDIN_HEADER_MINIMAL)
    with pytest.raises(BuildError, match=r"no lib/onnxruntime\.dll, expected for win_amd64"):
        inspect_ort_archive(archive, label="ort.archive", target=TARGETS[WINDOWS])


def test_missing_version_files_and_a_second_top_folder_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "two-tops.tgz"
    with tarfile.open(path, "w:gz") as tar:
        for name in ("a/VERSION_NUMBER", "b/VERSION_NUMBER"):
            tar.addfile(tarfile.TarInfo(name))
    with pytest.raises(BuildError, match=r"top-level entries \['a', 'b'\]"):
        inspect_ort_archive(path, label="ort.archive", target=TARGETS[LINUX])
    alone = tmp_path / "alone.tgz"
    with tarfile.open(alone, "w:gz") as tar:
        tar.add(fake_elf(tmp_path / "lib.so"), arcname="top/lib/libonnxruntime.so.1.23.1")
    with pytest.raises(BuildError, match="has no VERSION_NUMBER in its top folder"):
        inspect_ort_archive(alone, label="ort.archive", target=TARGETS[LINUX])


@pytest.mark.parametrize("links", [
    {"lib/libonnxruntime.so": "../../../etc/passwd"},
    {"lib/libonnxruntime.so": "/usr/lib/libonnxruntime.so.1.23.1"},
    {"lib/libonnxruntime.so": "libmissing.so.1"},
    {"lib/libonnxruntime.so": "libonnxruntime.so.1", "lib/libonnxruntime.so.1": "libonnxruntime.so"},
    {"include/alias.h": "onnxruntime_c_api.h"},
    {"lib": "include"},
])
def test_links_outside_the_policy_are_refused_by_name(tmp_path: Path, links: dict[str, str]) -> None:
    archive = linux_release_archive(tmp_path, fake_elf(tmp_path / "lib.so"), header=STANDIN_HEADER_MINIMAL,
                                    links=links)
    first = sorted(links)[0]
    with pytest.raises(UnsafeArchiveError, match=rf"entry '{re.escape(LINUX_TOP)}/{re.escape(first)}' is a "
                                                 rf"symbolic link to '{re.escape(links[first])}'"):
        inspect_ort_archive(archive, label="ort.archive", target=TARGETS[LINUX])


def test_a_truncated_archive_is_reported_as_such(tmp_path: Path) -> None:
    archive = linux_release_archive(tmp_path, fake_elf(tmp_path / "lib.so"), header=STANDIN_HEADER_MINIMAL)
    archive.write_bytes(archive.read_bytes()[:-200])
    with pytest.raises(UnsafeArchiveError, match="ort.archive"):
        inspect_ort_archive(archive, label="ort.archive", target=TARGETS[LINUX])


def test_no_archive_means_no_sdk(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text('[bundle]\nname = "x"\nversion = "1"\nplatform = "linux_x86_64"\n'
                                     'python = "3.11"\n[ort]\nversion = "1.23.1"\n'
                                     f'wheel = {{ path = "onnxruntime-1.23.1-cp311-cp311-manylinux_2_28_x86_64.whl", sha256 = "{"0" * 64}" }}\n')
    assembly = Assembly()
    add_sdk(assembly, part_inputs(load(tmp_path / "m.toml"), files={}, work=tmp_path))
    assert assembly.members == {} and assembly.facts.sdk is None and assembly.copies == []


# -- Linux, for real: the real libonnxruntime.so.1.23.1 -----------------------------------------------------


@pytest.fixture(scope="module")
def linux_library(ort_linux_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wheel_member(ort_linux_wheel, f"onnxruntime/capi/libonnxruntime.so.{ORT_VERSION}",
                        tmp_path_factory.mktemp("linux-wheel"))


@pytest.fixture(scope="module")
def linux_sdk(linux_library: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Assembly, Path]:
    """(archive, assembly, install root) for the archive with the minimal stand-in header."""
    folder = tmp_path_factory.mktemp("linux-sdk")
    archive = linux_release_archive(folder, linux_library, header=STANDIN_HEADER_MINIMAL, upstream_cmake=True)
    assembly = sdk_assembly(archive, folder, platform=LINUX)
    return archive, assembly, install(assembly, folder)


@pytest.mark.integration
def test_the_sdk_holds_the_archive_unchanged_and_the_links_as_copies(linux_sdk, linux_library: Path) -> None:
    archive, assembly, root = linux_sdk
    with tarfile.open(archive) as tar:
        originals = {m.name.split("/", 1)[1]: hashlib.sha256(tar.extractfile(m).read()).hexdigest()
                     for m in tar if m.isreg()}
    upstream = "lib/cmake/onnxruntime/onnxruntimeTargets.cmake"
    for rel, digest in originals.items():
        if rel != upstream:
            assert assembly.members[f"payload/sdk/{rel}"].sha256 == digest == sha256(root / "sdk" / rel), rel
    real = sha256(linux_library)
    for link in ("libonnxruntime.so", "libonnxruntime.so.1", "libonnxruntime.so.1.23.1"):
        path = root / "sdk" / "lib" / link
        assert path.is_file() and not path.is_symlink() and sha256(path) == real
    assert not (root / "sdk" / upstream).exists()
    record = assembly.facts.sdk.sdk
    assert record["replaced_upstream_cmake"] == [f"sdk/{upstream}"]
    assert record["cmake_dir"] == "sdk/lib/cmake/onnxruntime" and record["props"] is None
    assert record["runtime_files"] == ["sdk/lib/libonnxruntime.so.1"]
    assert assembly.facts.sdk.ort_archive["commit"] == ORT_COMMIT
    installed = {c.target for c in assembly.copies}
    assert {"sdk/lib/cmake/onnxruntime/onnxruntimeConfig.cmake", "sdk/sample/CMakeLists.txt", "sdk/sample/main.c",
            "sdk/LICENSE", "sdk/ThirdPartyNotices.txt"} <= installed


VERSION_PROGRAM = """\
#include <stdio.h>
#include "onnxruntime_c_api.h"
int main(void) {
    printf("%s\\n", OrtGetApiBase()->GetVersionString());
    return 0;
}
"""


def consumer_project(folder: Path, requirement: str, *, languages: str = "C") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "main.c").write_text(VERSION_PROGRAM)
    body = ["cmake_minimum_required(VERSION 3.16)", f"project(consumer LANGUAGES {languages})",
            f"find_package(onnxruntime {requirement} CONFIG REQUIRED)",
            'message(STATUS "found onnxruntime ${onnxruntime_VERSION}")']
    if languages != "NONE":
        body += ["add_executable(consumer main.c)", "target_link_libraries(consumer PRIVATE onnxruntime::onnxruntime)"]
    (folder / "CMakeLists.txt").write_text("\n".join(body) + "\n")
    return folder


@pytest.mark.integration
def test_a_cmake_program_links_the_installed_sdk_and_prints_the_pinned_version(
        linux_sdk, cmake_tool: str, tmp_path: Path) -> None:
    _, _, root = linux_sdk
    moved = tmp_path / "moved install"
    shutil.copytree(root, moved)  # relocatable: nothing may point back to where it was installed
    project = consumer_project(tmp_path / "consumer", "1.23")
    build = tmp_path / "build"
    configure = cmake("-S", str(project), "-B", str(build), f"-Donnxruntime_DIR={moved}/sdk/lib/cmake/onnxruntime")
    assert configure.returncode == 0, configure.stdout + configure.stderr
    assert "found onnxruntime 1.23.1" in configure.stdout
    compiled = cmake("--build", str(build))
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    run = subprocess.run([str(build / "consumer")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == ORT_VERSION


@pytest.mark.integration
@pytest.mark.parametrize(("requirement", "accepted"), [
    ("1.23", True), ("1.23.1 EXACT", True), ("1.20", True), ("1.20...<2", True),
    ("1.24", False), ("2.0", False), ("1.23.2", False), ("1.20...<1.23", False), ("0.9", False),
])
def test_find_package_version_checks(linux_sdk, cmake_tool: str, tmp_path: Path, requirement: str,
                                     accepted: bool) -> None:
    _, _, root = linux_sdk
    project = consumer_project(tmp_path / "project", requirement, languages="NONE")
    configure = cmake("-S", str(project), "-B", str(tmp_path / "build"),
                      f"-Donnxruntime_DIR={root}/sdk/lib/cmake/onnxruntime")
    output = configure.stdout + configure.stderr
    assert (configure.returncode == 0) is accepted, output
    if not accepted:
        assert re.search(r"compatible with\s+requested version", output) and "version: 1.23.1" in output, output


@pytest.mark.integration
def test_the_shipped_sample_builds_and_runs_the_bundled_identity_model(
        linux_library: Path, cmake_tool: str, tmp_path: Path) -> None:
    """The sample compiles unchanged (against a stand-in header with the real OrtApi layout) and runs on ORT."""
    archive = linux_release_archive(tmp_path, linux_library, header=STANDIN_HEADER_SAMPLE)
    assembly = sdk_assembly(archive, tmp_path, platform=LINUX)
    root = install(assembly, tmp_path)
    build = tmp_path / "sample-build"
    configure = cmake("-S", str(root / "sdk" / "sample"), "-B", str(build))
    assert configure.returncode == 0, configure.stdout + configure.stderr
    compiled = cmake("--build", str(build))
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    assert (build / "libonnxruntime.so.1").is_file()  # onnxruntime_copy_runtime_files ran after the build
    run = subprocess.run([str(build / "ort_sample")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[0] == f"ONNX Runtime {ORT_VERSION}"
    assert f"model: {root / 'installer' / 'ort_bundle' / 'selfcheck' / 'identity.onnx'}" in run.stdout
    assert "input 0: x\n" in run.stdout and "output 0: y\n" in run.stdout
    assert "ran x -> y on 16 values: 0 0.5 1 1.5 2 2.5 3 3.5 ..." in run.stdout
    assert "identity: output equals input" in run.stdout
    missing = subprocess.run([str(build / "ort_sample"), str(tmp_path / "absent.onnx")], capture_output=True,
                             text=True, timeout=60)
    assert missing.returncode == 1 and "CreateSession failed" in missing.stderr


# -- Windows: the real DLLs of the win_amd64 wheel -----------------------------------------------------------


@pytest.fixture(scope="module")
def win_dlls(ort_win_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("win-wheel")
    return [wheel_member(ort_win_wheel, f"onnxruntime/capi/{name}", folder)
            for name in ("onnxruntime.dll", "onnxruntime_providers_shared.dll")]


@pytest.fixture(scope="module")
def win_implib(win_dlls: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    dlltool = require(tools.MINGW_DLLTOOL)
    return import_library(win_dlls[0], tmp_path_factory.mktemp("implib"), dlltool)


@pytest.mark.integration
def test_the_windows_archive_agrees_with_its_dlls(win_dlls: list[Path], win_implib: Path, tmp_path: Path) -> None:
    archive = windows_release_archive(tmp_path, win_dlls, win_implib, header=STANDIN_HEADER_MINIMAL)
    found = inspect_ort_archive(archive, label="ort.archive", target=TARGETS[WINDOWS], expected_version=ORT_VERSION)
    assert (found.top, found.version, found.commit) == (WIN_TOP, ORT_VERSION, ORT_COMMIT)
    assert found.binaries == {"lib/onnxruntime.dll": FILE_VERSION, "lib/onnxruntime_providers_shared.dll": FILE_VERSION}


@pytest.mark.integration
def test_a_windows_version_number_of_another_release_names_both(win_dlls: list[Path], win_implib: Path,
                                                                tmp_path: Path) -> None:
    archive = windows_release_archive(tmp_path, win_dlls, win_implib, header=STANDIN_HEADER_MINIMAL,
                                      version_number="1.22.0", top="onnxruntime-win-x64-1.22.0")
    with pytest.raises(BuildError) as caught:
        inspect_ort_archive(archive, label="ort.archive", target=TARGETS[WINDOWS])
    message = str(caught.value)
    assert f"lib/onnxruntime.dll has FileVersion {FILE_VERSION} but VERSION_NUMBER says 1.22.0" in message
    with pytest.raises(BuildError, match=r"VERSION_NUMBER says 1\.22\.0 but \[ort\] version is 1\.23\.1"):
        inspect_ort_archive(archive, label="ort.archive", target=TARGETS[WINDOWS], expected_version=ORT_VERSION)


@pytest.mark.integration
def test_a_windows_commit_that_is_not_the_dlls_is_refused(win_dlls: list[Path], win_implib: Path,
                                                           tmp_path: Path) -> None:
    archive = windows_release_archive(tmp_path, win_dlls, win_implib, header=STANDIN_HEADER_MINIMAL,
                                      commit="a83fc4d58cb48eb68890dd689f94f28288cf2278")
    with pytest.raises(BuildError, match=r"whose commit d9b2048 is not GIT_COMMIT_ID a83fc4d58"):
        inspect_ort_archive(archive, label="ort.archive", target=TARGETS[WINDOWS])


def add_gpu_stand_in(assembly: Assembly) -> None:
    """What a GPU part leaves behind: a DLL installed under a GPU DLL folder."""
    assembly.add_bytes("payload/gpu/bin/cudart64_110.dll", b"MZ stand-in")
    assembly.plan_copy("payload/gpu/bin/cudart64_110.dll", "gpu/bin/cudart64_110.dll")
    assembly.facts.gpu = GpuFact(record={}, dlls=("gpu/bin/cudart64_110.dll",), origins={}, dll_dirs=("gpu/bin",),
                                 preload=("gpu/bin/cudart64_110.dll",))


@pytest.fixture(scope="module")
def win_sdk(win_dlls: list[Path], win_implib: Path, tmp_path_factory: pytest.TempPathFactory) -> Assembly:
    folder = tmp_path_factory.mktemp("win-sdk")
    archive = windows_release_archive(folder, win_dlls, win_implib, header=STANDIN_HEADER_MINIMAL)
    return sdk_assembly(archive, folder, platform=WINDOWS, prepare=add_gpu_stand_in)


def installed_files(assembly: Assembly) -> set[str]:
    return {c.target for c in assembly.copies}


def msbuild_path(value: str, properties: dict[str, str]) -> str:
    """Expand the $(...) properties the sheet uses and normalise to an install-relative '/' path."""
    for name, replacement in properties.items():
        value = value.replace(f"$({name})", replacement)
    assert "$(" not in value, value
    return posixpath.normpath(value.replace("\\", "/"))


@pytest.mark.integration
def test_the_props_file_is_msbuild_xml_whose_items_exist(win_sdk: Assembly) -> None:
    data = win_sdk.members["payload/sdk/build/native/onnxruntime.props"].data
    assert data.startswith(b"<?xml") and b"\r\n" in data
    ns = {"m": "http://schemas.microsoft.com/developer/msbuild/2003"}
    project = ET.fromstring(data)
    assert project.tag == "{http://schemas.microsoft.com/developer/msbuild/2003}Project"
    here = "sdk/build/native/"  # $(MSBuildThisFileDirectory), install-relative
    properties = {"MSBuildThisFileDirectory": here}
    for name in ("OnnxRuntimeSdkDir", "OnnxRuntimeInstallDir"):
        text = project.find(f"m:PropertyGroup/m:{name}", ns).text
        inner = re.fullmatch(r"\$\(\[System\.IO\.Path\]::GetFullPath\('(.*)'\)\)", text).group(1)
        properties[name] = msbuild_path(inner, properties) + "/"
    assert properties["OnnxRuntimeSdkDir"] == "sdk/" and properties["OnnxRuntimeInstallDir"] == "./"
    installed = installed_files(win_sdk)
    folders = {posixpath.dirname(p) for p in installed}
    include = project.find("m:ItemDefinitionGroup/m:ClCompile/m:AdditionalIncludeDirectories", ns).text.split(";")
    assert msbuild_path(include[0], properties) == "sdk/include" and "sdk/include" in folders
    libdirs = project.find("m:ItemDefinitionGroup/m:Link/m:AdditionalLibraryDirectories", ns).text.split(";")
    libs = project.find("m:ItemDefinitionGroup/m:Link/m:AdditionalDependencies", ns).text.split(";")
    assert f"{msbuild_path(libdirs[0], properties)}/{libs[0]}" == "sdk/lib/onnxruntime.lib"
    assert "sdk/lib/onnxruntime.lib" in installed
    copied = [msbuild_path(item.get("Include"), properties)
              for item in project.findall("m:ItemGroup/m:OnnxRuntimeRuntimeFile", ns)]
    assert copied == ["sdk/lib/onnxruntime.dll", "sdk/lib/onnxruntime_providers_shared.dll",
                      "gpu/bin/cudart64_110.dll"]
    assert set(copied) <= installed
    copy = project.find("m:Target[@Name='OnnxRuntimeCopyRuntimeFiles']/m:Copy", ns)
    assert copy.get("SourceFiles") == "@(OnnxRuntimeRuntimeFile)" and copy.get("DestinationFolder") == "$(OutDir)"
    assert project.find("m:Target[@Name='OnnxRuntimeCopyRuntimeFiles']", ns).get("AfterTargets") == "Build"


@pytest.mark.integration
def test_the_windows_cmake_config_names_the_dll_and_lib_that_exist(win_sdk: Assembly) -> None:
    config = win_sdk.members["payload/sdk/lib/cmake/onnxruntime/onnxruntimeConfig.cmake"].data.decode().replace("\r\n", "\n")
    prefix = "sdk"  # ${_onnxruntime_prefix}: three folders up from sdk/lib/cmake/onnxruntime
    assert 'get_filename_component(_onnxruntime_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)' in config
    location = re.search(r'IMPORTED_LOCATION "\$\{_onnxruntime_prefix\}/([^"]+)"', config).group(1)
    implib = re.search(r'IMPORTED_IMPLIB "\$\{_onnxruntime_prefix\}/([^"]+)"', config).group(1)
    assert (location, implib) == ("lib/onnxruntime.dll", "lib/onnxruntime.lib")
    installed = installed_files(win_sdk)
    assert {f"{prefix}/{location}", f"{prefix}/{implib}"} <= installed
    runtime = re.findall(r'^  "\$\{_onnxruntime_prefix\}/(.+)"$', config, flags=re.M)
    assert [posixpath.normpath(f"{prefix}/{r}") for r in runtime] == [
        "sdk/lib/onnxruntime.dll", "sdk/lib/onnxruntime_providers_shared.dll", "gpu/bin/cudart64_110.dll"]
    assert "if(NOT WIN32)" in config
    version = win_sdk.members["payload/sdk/lib/cmake/onnxruntime/onnxruntimeConfigVersion.cmake"].data.decode()
    assert 'set(PACKAGE_VERSION "1.23.1")' in version
    record = win_sdk.facts.sdk.sdk
    assert record["props"] == "sdk/build/native/onnxruntime.props" and record["import_library"] == "sdk/lib/onnxruntime.lib"
    sample = win_sdk.members["payload/sdk/sample/CMakeLists.txt"].data.decode()
    assert "../../installer/ort_bundle/selfcheck/identity.onnx" in sample and "onnxruntime_copy_runtime_files(ort_sample)" in sample


@pytest.mark.integration
@pytest.mark.wine
def test_the_windows_sample_built_with_the_cmake_package_runs_beside_its_copied_dlls(
        win_dlls: list[Path], win_implib: Path, cmake_tool: str, mingw_gcc: str, wine, tmp_path: Path) -> None:
    """Cross-compiled with mingw through find_package: linked by IMPORTED_IMPLIB, the DLLs copied after the build.

    Run under Wine with no PATH change: the program starts only because the real onnxruntime.dll sits beside it.
    """
    archive = windows_release_archive(tmp_path, win_dlls, win_implib, header=STANDIN_HEADER_SAMPLE)
    assembly = sdk_assembly(archive, tmp_path, platform=WINDOWS, prepare=add_gpu_stand_in)
    root = install(assembly, tmp_path)
    build = tmp_path / "sample-build"
    configure = cmake("-S", str(root / "sdk" / "sample"), "-B", str(build), "-DCMAKE_SYSTEM_NAME=Windows",
                      f"-DCMAKE_C_COMPILER={mingw_gcc}")
    assert configure.returncode == 0, configure.stdout + configure.stderr
    compiled = cmake("--build", str(build))
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    for dll in ("onnxruntime.dll", "onnxruntime_providers_shared.dll", "cudart64_110.dll"):
        assert (build / dll).is_file(), dll
    assert sha256(build / "onnxruntime.dll") == sha256(win_dlls[0])
    model = wine.to_windows(root / "installer" / "ort_bundle" / "selfcheck" / "identity.onnx")
    run = wine.run([wine.to_windows(build / "ort_sample.exe"), model], cwd=build)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"ONNX Runtime {ORT_VERSION}" in run.stdout
    assert "identity: output equals input" in run.stdout
