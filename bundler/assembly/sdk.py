"""The ONNX Runtime C/C++ release archive: inspected for agreement, shipped as `payload/sdk/`.

C/C++ users fail in three ways: "cannot open include file", LNK2019 against `onnxruntime.lib`, and
"onnxruntime.dll was not found" at run time. So the bundle carries the archive's `include/` and `lib/`
byte for byte, plus a relocatable CMake package, an MSBuild property sheet that also copies the DLLs next
to the built program, and a small sample. Upstream's own `lib/cmake/onnxruntime` files (Linux archives) name
`lib64/` and `include/onnxruntime/`, which the archive does not have (onnxruntime #23642, #24003, #25242),
so ours replace them.

The archive is checked before anything is shipped: one top folder, `VERSION_NUMBER`, `GIT_COMMIT_ID`, the
headers and the main library; and the facts must agree with each other and with `[ort] version` (a DLL's
FileVersion ends with the short commit, docs/facts.md §1; the library's build-info string names the commit).

Linux archives hold the `libonnxruntime.so -> .so.1 -> .so.1.23.1` symlink chain, which `SafeArchive`
refuses. The deliberate policy here: a symlink is accepted only inside `lib/` and only when it names a
sibling file; the archive is then re-packed without links (each accepted link becomes an empty placeholder,
so `SafeArchive` still checks its name) and the link is shipped as a regular copy of the file it resolves to.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

from bundler.assembly.assembly import Assembly, BuildInputs
from bundler.assembly.facts import SdkFact
from bundler.assembly.render import make_environment, platform_template
from bundler.errors import BuildError
from bundler.hashing import file_sha256
from bundler.readers.ortarchive import (
    OrtArchive,
    _is_binary,
    _Layout,
    extract_ort_archive,
)
from bundler.target_platform import TargetPlatform

SDK_BUNDLE_DIR = "payload/sdk"
SDK_INSTALL_DIR = "sdk"
CMAKE_DIR = "lib/cmake/onnxruntime"
PROPS_PATH = "build/native/onnxruntime.props"
SAMPLE_DIR = "sample"

# Names that end up inside CMake, MSBuild XML and C strings: kept to characters none of them treat specially.
_PLAIN_PATH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*(/[A-Za-z0-9][A-Za-z0-9._+-]*)*$")


# -- the symlink policy ------------------------------------------------------------------------------------


# -- the SDK in the bundle ---------------------------------------------------------------------------------


def add_sdk(assembly: Assembly, build: BuildInputs) -> None:
    """payload/sdk/: the archive's files unchanged, plus CMake, MSBuild (Windows) and sample files.

    Runs after the GPU part (so the property sheet can copy GPU DLLs) and before the Windows checks (so
    the SDK's DLLs join the DLL closure and the VC++ runtime minimum).
    """
    manifest = build.manifest
    source = manifest.ort.archive
    if source is None:
        assembly.facts.sdk = None
        return
    identity_model, gpu_dlls = assembly.facts.selfcheck.identity_model, _gpu_dlls(assembly)
    path = build.files[source.key]
    target = build.target
    archive, root = extract_ort_archive(path, label=f"{source.key} ({path.name})", target=target,
                                        dest=build.work / "ort-archive", expected_version=manifest.ort.version)
    replaced = _add_archive_files(assembly, archive, root)
    generated = render_sdk_files(archive, target=target, gpu_dlls=gpu_dlls,
                                 model=identity_model)
    for rel, data in sorted(generated.items()):
        _ship_bytes(assembly, rel, data)
    assembly.facts.sdk = SdkFact(ort_archive=archive.to_json(), sdk=_sdk_record(archive, target=target, replaced=replaced))


def _add_archive_files(assembly: Assembly, archive: OrtArchive, root: Path) -> list[str]:
    """Every file of the archive, byte for byte, except upstream CMake files that ours replace."""
    replaced = [rel for rel in archive.files if rel.startswith(f"{CMAKE_DIR}/")]
    sources = {rel: rel for rel in archive.files if rel not in replaced} | archive.links
    hashes = {target: file_sha256(root / target) for target in set(sources.values())}
    for rel, target in sorted(sources.items()):
        bundle_path = f"{SDK_BUNDLE_DIR}/{rel}"
        assembly.add_file(bundle_path, root / target, hashes[target])
        assembly.plan_copy(bundle_path, f"{SDK_INSTALL_DIR}/{rel}")
    return replaced


def _ship_bytes(assembly: Assembly, rel: str, data: bytes) -> None:
    bundle_path = f"{SDK_BUNDLE_DIR}/{rel}"
    assembly.add_bytes(bundle_path, data)
    assembly.plan_copy(bundle_path, f"{SDK_INSTALL_DIR}/{rel}")


def _gpu_dlls(assembly: Assembly) -> list[str]:
    """Install paths of the GPU DLLs the GPU part placed, for the property sheet to copy."""
    gpu = assembly.facts.gpu
    folders = [folder.rstrip("/") + "/" for folder in (gpu.dll_dirs if gpu else ())]
    return sorted(copy.target for copy in assembly.copies
                  if copy.target.lower().endswith(".dll") and any(copy.target.startswith(f) for f in folders))


def _sdk_record(archive: OrtArchive, *, target: TargetPlatform, replaced: list[str]) -> dict[str, Any]:
    layout = _Layout.of(target, archive.version)
    return {
        "root": SDK_INSTALL_DIR,
        "include_dir": f"{SDK_INSTALL_DIR}/include",
        "lib_dir": f"{SDK_INSTALL_DIR}/lib",
        "cmake_dir": f"{SDK_INSTALL_DIR}/{CMAKE_DIR}",
        "props": f"{SDK_INSTALL_DIR}/{PROPS_PATH}" if layout.import_library else None,
        "sample": f"{SDK_INSTALL_DIR}/{SAMPLE_DIR}",
        "library": f"{SDK_INSTALL_DIR}/{layout.library}",
        "import_library": f"{SDK_INSTALL_DIR}/{layout.import_library}" if layout.import_library else None,
        "runtime_files": [f"{SDK_INSTALL_DIR}/{rel}" for rel in _runtime_files(archive, target)],
        "licenses": [f"{SDK_INSTALL_DIR}/{rel}" for rel in archive.files if rel in ("LICENSE", "ThirdPartyNotices.txt")],
        "replaced_upstream_cmake": [f"{SDK_INSTALL_DIR}/{rel}" for rel in replaced],
    }


def _runtime_files(archive: OrtArchive, target: TargetPlatform) -> list[str]:
    """What a program needs beside it at run time: every DLL where a program links an import library (Windows);
    else the shared objects by the names the loader asks for (libonnxruntime.so.1, not the development link or
    the fully versioned file)."""
    layout = _Layout.of(target, archive.version)
    if layout.import_library:
        return sorted(archive.binaries)
    library = layout.library
    soname = f"lib/{_soname(library)}"
    main = {library, soname, "lib/libonnxruntime.so"}
    others = [rel for rel in [*archive.binaries, *archive.links] if rel not in main and _is_binary(rel, target)]
    return sorted({soname, *others})


# -- generated files ---------------------------------------------------------------------------------------


def render_sdk_files(archive: OrtArchive, *, target: TargetPlatform, gpu_dlls: list[str], model: str | None) -> dict[str, bytes]:
    """SDK-relative path -> bytes of the CMake package, the property sheet (Windows) and the sample.

    `gpu_dlls` are install-relative paths that the property sheet and the CMake helper copy next to a built
    program too; `model` is the install-relative identity model the sample runs when given no argument.
    Both come from other parts of the bundle and end up in CMake, XML and C text, so they must be plain.
    """
    for value in (*gpu_dlls, *([model] if model else [])):
        if not _PLAIN_PATH.match(value):
            msg = (f"install path {value!r} cannot be written into the SDK's CMake and MSBuild files; expected "
                   f"'/'-separated names of letters, digits and . _ + -")
            raise BuildError(msg)
    layout = _Layout.of(target, archive.version)
    # An import library is what a program links on Windows; without one it links the shared object by its soname.
    implib = layout.import_library is not None
    major, minor, _ = archive.version.split(".")
    values = {
        "version": archive.version, "major": major, "minor": minor, "commit": archive.commit,
        "library": layout.library, "import_library": layout.import_library,
        "soname": None if implib else _soname(layout.library),
        "runtime_files": _runtime_files(archive, target), "gpu_dlls": gpu_dlls, "model": model,
    }
    env = make_environment()
    outputs = {
        f"{CMAKE_DIR}/onnxruntimeConfig.cmake": platform_template(target, "onnxruntimeConfig.cmake.j2"),
        f"{CMAKE_DIR}/onnxruntimeConfigVersion.cmake": "onnxruntimeConfigVersion.cmake.j2",
        f"{SAMPLE_DIR}/CMakeLists.txt": "sdk_sample_CMakeLists.txt.j2",
        f"{SAMPLE_DIR}/main.c": "sdk_sample_main.c.j2",
    }
    if implib:  # an MSBuild property sheet, for Visual Studio's linker
        outputs[PROPS_PATH] = "onnxruntime.props.j2"
    newline = target.newline
    return {rel: _encode(env.get_template(template).render(values), newline=newline)
            for rel, template in sorted(outputs.items())}


def _soname(library: str) -> str:
    """libonnxruntime.so.1.23.1 -> libonnxruntime.so.1, the name the dynamic loader looks for."""
    stem, _, numbers = PurePosixPath(library).name.partition(".so.")
    return f"{stem}.so.{numbers.split('.')[0]}"


def _encode(text: str, *, newline: str) -> bytes:
    """The target's line ending (CRLF in Windows bundles, as Visual Studio writes its own files); UTF-8 without BOM."""
    return text.replace("\r\n", "\n").replace("\n", newline).encode("utf-8")
