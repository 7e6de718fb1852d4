"""The runtime part: the pinned interpreter (`[python] runtime`), shipped in `payload/python/`, installed as `python/`.

The bundle's files are the archive's, byte for byte, so the interpreter also runs straight from an unpacked
bundle (the installer starts the install engine with it, `-I`, before anything is installed). What the target
gains is a generated path file: on Windows `python3XY._pth` (`pth_text`) in place of the embeddable package's
own, which keeps `import site` commented out; on Linux a `.pth` in site-packages naming the app folder
(`app_pth_text`). The launchers start the interpreter with `-I`.

Runs before the Windows checks, which resolve `python3XY.dll` and the VC++ DLLs the embeddable package ships
from its folder, and compute the closure of the interpreter's own DLLs and `.pyd` files with everything else.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from bundler.assembly.assembly import Assembly, BuildInputs, Copy
from bundler.assembly.facts import RuntimeFact
from bundler.hashing import file_sha256
from bundler.readers.pyruntime import PythonRuntime, read_runtime
from bundler.spdx import LicenseFinding
from bundler.target_platform import TargetPlatform
from bundler.writer.members import Member

RUNTIME_BUNDLE_DIR = "payload/python"
RUNTIME_INSTALL_DIR = "python"
#: The generated path file, kept apart from the archive's own so the bundle still holds the archive unchanged.
PTH_BUNDLE_DIR = "payload/python-pth"
#: Install-relative folders the installed interpreter puts on sys.path besides its standard library.
APP_DIR = "app"
APP_PTH = "ort_bundle_app.pth"
PSF_LICENSE = "PSF-2.0"
PSF_FINDING = LicenseFinding(expression=PSF_LICENSE, declared=None, source="ort-bundler")
LICENSE_COMPONENT = "cpython"


def runtime_site_packages(target: TargetPlatform, python: str) -> str:
    """Where the wheels go when the bundle carries its interpreter: its own site-packages (no venv: the
    embeddable package has no venv module, and a venv made in a staging folder would name that folder)."""
    return f"{RUNTIME_INSTALL_DIR}/{target.venv_site_packages(python)}"


def pth_text(runtime: PythonRuntime) -> str:
    """The installed Windows `python3XY._pth`: the standard library, the interpreter's folder, site-packages and
    the app folder, then `import site` (so site-packages' .pth hooks run). Its presence puts CPython in isolated
    mode: PYTHONPATH and PYTHONHOME are ignored and the script's folder is not on sys.path. It does NOT turn off
    the user site (measured on 3.11.7: `import site` still adds it), so the launchers also pass `-I`. Paths are
    relative to the file's folder."""
    assert runtime.stdlib_zip is not None
    lines = [runtime.stdlib_zip, ".", "Lib\\site-packages", f"..\\{APP_DIR}", "import site"]
    return "\r\n".join(lines) + "\r\n"


def app_pth_text(python: str) -> str:
    """Linux: a .pth file in site-packages naming the app folder, which `-I` keeps off sys.path otherwise.
    (A `._pth` beside bin/python3.X would make bin/ the interpreter's prefix, hiding site-packages' hooks.)"""
    return f"../../../../{APP_DIR}\n"


def add_runtime(assembly: Assembly, build: BuildInputs) -> None:
    """payload/python/: the interpreter's files; the installer copies them to python/."""
    manifest, target = build.manifest, build.target
    source = manifest.python.runtime
    if source is None:
        assembly.facts.runtime = None
        return
    path = build.files[source.key]
    runtime = read_runtime(path, label=f"python.runtime ({path.name})", layout=target.runtime_layout,
                           python=manifest.bundle.python, dest=build.work / "python-runtime")
    size = _add_files(assembly, runtime)
    licenses = _licenses(runtime)
    pth = _add_path_file(assembly, runtime, target=target, python=manifest.bundle.python)
    sha256 = source.sha256[0]
    interpreter = f"{RUNTIME_INSTALL_DIR}/{runtime.interpreter}"
    record = {**runtime.to_json(), "file": path.name, "sha256": sha256, "interpreter": interpreter,
              "pth": pth,
              "machine": target.machine, "size": size,
              "licenses": sorted(licenses)}
    dlls = tuple(sorted(name for name in runtime.files if "/" not in name and name.lower().endswith(".dll")))
    assembly.facts.runtime = RuntimeFact(
        record=record, version=runtime.version, interpreter=interpreter,
        bundle_interpreter=f"{RUNTIME_BUNDLE_DIR}/{runtime.interpreter}",
        site_packages=runtime_site_packages(target, manifest.bundle.python), dlls=dlls,
        licenses=licenses, sha256=sha256)


def _add_path_file(assembly: Assembly, runtime: PythonRuntime, *, target: TargetPlatform, python: str) -> str:
    """The file that puts site-packages and the app folder on the installed interpreter's sys.path; returns
    its install path."""
    if runtime.pth is not None:
        generated = f"{PTH_BUNDLE_DIR}/{runtime.pth}"
        assembly.add_bytes(generated, pth_text(runtime).encode("ascii"))
        assembly.plan_copy(generated, f"{RUNTIME_INSTALL_DIR}/{runtime.pth}")
        return f"{RUNTIME_INSTALL_DIR}/{runtime.pth}"
    generated = f"{PTH_BUNDLE_DIR}/{APP_PTH}"
    assembly.add_bytes(generated, app_pth_text(python).encode("ascii"))
    assembly.site_packages_files.append(Copy(source=generated, target=APP_PTH))
    return f"{runtime_site_packages(target, python)}/{APP_PTH}"


def _add_files(assembly: Assembly, runtime: PythonRuntime) -> int:
    """Every file of the interpreter, in the bundle and in the install plan; returns their total size."""
    size = 0
    for rel in runtime.files:
        file = runtime.root / rel
        bundle_path = f"{RUNTIME_BUNDLE_DIR}/{rel}"
        assembly.add_file(bundle_path, file, file_sha256(file), executable=rel in runtime.executables)
        if rel != runtime.pth:
            assembly.plan_copy(bundle_path, f"{RUNTIME_INSTALL_DIR}/{rel}")
        size += file.stat().st_size
    return size


def _licenses(runtime: PythonRuntime) -> dict[str, Member]:
    """licenses/cpython/<file>: the PSF licence (with the notices of OpenSSL, libffi, ... it bundles) and any
    other licence text the interpreter ships, by its name; a clash keeps the path below the runtime."""
    texts: dict[str, Member] = {}
    names = [PurePosixPath(rel).name for rel in runtime.licenses]
    for rel, name in zip(runtime.licenses, names):
        target = name if names.count(name) == 1 else rel
        file: Path = runtime.root / rel
        texts[f"licenses/{LICENSE_COMPONENT}/{target}"] = Member(name=target, source=file, sha256=file_sha256(file))
    return texts
