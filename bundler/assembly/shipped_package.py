"""The shipped package part: `ort_bundle`, the one package of code that runs on the target.

bundler/shipped/ort_bundle is copied byte for byte, every .py of the folder and its data (PACKAGE_DATA), to
payload/ort_bundle/ in the bundle; the installer copies it on to installer/ort_bundle/ (the engine's copy, for
`run --verify`, the uninstaller, the MSI's custom action and the task after a reboot) and to the environment's
site-packages/ort_bundle/ (the launcher, `--tune`, `--profile`, `--support-bundle`, the default entry point
`ort_bundle.infer`, the start-up hook, `ort_bundle.session_options(name)`). Nothing decides module by module
what ships, so a module split off another cannot be forgotten; the tracebacks on a target name the files of
this repository. What runs before the bundle folder is checked starts through the package's own start file,
`ort_bundle/__main__.py`, which reads only the .py sources of its folder.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # render names the start file from here, and assembly's facts import render
    from bundler.assembly.assembly import Assembly, BuildInputs

PACKAGE = "ort_bundle"
#: The package's folder in the bundle, and in the install (the engine's copy).
BUNDLE_DIR = f"payload/{PACKAGE}"
INSTALL_DIR = f"installer/{PACKAGE}"
#: The start file, a module of the package: `python -I -B <folder>/ort_bundle/__main__.py PROGRAM ...`.
START = "__main__.py"
START_FILE = f"{BUNDLE_DIR}/{START}"
INSTALLED_START_FILE = f"{INSTALL_DIR}/{START}"
#: The files besides the .py sources that ship with the package (package-relative).
PACKAGE_DATA = ("selfcheck/identity.onnx",)


def package_files() -> dict[str, bytes]:
    """`ort_bundle/<relative path>` -> its bytes: every .py under bundler/shipped/ort_bundle, and PACKAGE_DATA."""
    root = resources.files("bundler.shipped.ort_bundle")
    files = {f"{PACKAGE}/{relative}": root.joinpath(*relative.split("/")).read_bytes() for relative in _sources(root, "")}
    files |= {f"{PACKAGE}/{relative}": root.joinpath(*relative.split("/")).read_bytes() for relative in PACKAGE_DATA}
    return dict(sorted(files.items()))


def identity_model_bytes() -> bytes:
    """The self-check's identity model (ort_bundle/selfcheck/identity.onnx), the same bytes on every build.

    Shipped as a file of the package: making it with onnx's helpers would import onnx (and NumPy and
    ml_dtypes, over a second) in every build; tests/test_modelgate.py makes it with them and compares.
    """
    return resources.files("bundler.shipped.ort_bundle").joinpath("selfcheck", "identity.onnx").read_bytes()


def write_package(folder: Path) -> Path:
    """The package as shipped, written under `folder` (folder/ort_bundle/...); its start file."""
    for relative, data in package_files().items():
        path = folder.joinpath(*relative.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder / PACKAGE / START


def _sources(folder: Traversable, prefix: str) -> list[str]:
    """The .py files under `folder`, `prefix`-relative, sub-folders too (bytecode caches aside)."""
    found: list[str] = []
    for entry in folder.iterdir():
        if entry.is_dir() and entry.name != "__pycache__":
            found += _sources(entry, f"{prefix}{entry.name}/")
        elif entry.is_file() and entry.name.endswith(".py"):
            found.append(f"{prefix}{entry.name}")
    return found


def add_shipped_package(assembly: Assembly, build: BuildInputs) -> None:
    """payload/ort_bundle/**, copied by the installer to installer/ort_bundle/ and site-packages/ort_bundle/."""
    from bundler.assembly.assembly import Copy

    for relative, data in package_files().items():
        path = f"payload/{relative}"
        assembly.add_bytes(path, data)
        assembly.plan_copy(path, f"installer/{relative}")
        assembly.site_packages_files.append(Copy(source=path, target=relative))
