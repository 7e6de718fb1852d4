"""Stand-ins for the two interpreters a bundle can carry; the real archives cannot be downloaded here.

- `pbs_standin`: a STAND-IN for a python-build-standalone `install_only` archive, made from this machine's own
  CPython (`sys.base_prefix`, a shared-library build): `python/bin/python3.X`, `python/lib/libpython3.X.so.1.0`,
  `python/lib/python3.X/` (without site-packages, tests, bytecode caches and the static library),
  `python/include/python3.X/`, and python-build-standalone's sibling links (`bin/python3`,
  `lib/libpython3.X.so`). This CPython names its own absolute prefix in RUNPATH; the stand-in rewrites that
  to `$ORIGIN/../lib` in place (as `chrpath` does: a shorter string over the old one), which is what makes
  python-build-standalone relocatable. It is a real, running interpreter.
- `embed_standin`: a STAND-IN for python.org's Windows embeddable package, with its exact file layout and
  real x64 PE files built with mingw: `python311.dll` exports every name the real ORT `.pyd` imports from it
  (read from the wheel) plus `Py_Main`, which does nothing. `_ctypes.pyd` imports `python311.dll` and
  `libffi-8.dll`, as the real one does; the VC++ DLLs are empty mingw DLLs under the real names. None of it is
  CPython, and nothing starts it: it stays only for the package readers in test_runtime.py, which start no
  interpreter, and some of which need what python.org's package cannot be (an x86 variant, a Python 3.12 one).
  Whatever starts a Windows Python runs python.org's own (tests/windows_python.py).
"""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pefile
import pytest

from bundler.readers.elf import read_elf

MINOR = f"{sys.version_info.major}.{sys.version_info.minor}"
EMBED_VERSION = "3.11.9"
_SKIP_DIRS = {"site-packages", "test", "__pycache__", "idle_test", f"config-{MINOR}-x86_64-linux-gnu"}
_EMBED_PTH = "python311.zip\r\n.\r\n\r\n# Uncomment to run site.main() automatically\r\n#import site\r\n"


# -- Linux: python-build-standalone's install_only layout --------------------------------------------------


def set_runpath(path: Path, value: str) -> None:
    """Overwrite the RUNPATH (or RPATH) string in place with a shorter one, padded with NULs."""
    info = read_elf(path, label=str(path))
    entries = [s for s in info.strings if s.kind in ("runpath", "rpath")]
    if not entries:
        return
    data = bytearray(path.read_bytes())
    for entry in entries:
        old = len(entry.value.encode())
        new = value.encode()
        assert len(new) <= old, f"{path}: {value!r} does not fit over {entry.value!r}"
        data[entry.offset:entry.offset + old] = new + b"\0" * (old - len(new))
    path.write_bytes(bytes(data))


def _copy_tree(source: Path, dest: Path) -> None:
    for root, dirs, files in os.walk(source):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        out = dest / Path(root).relative_to(source)
        out.mkdir(parents=True, exist_ok=True)
        for name in sorted(files):
            if not Path(root, name).is_symlink():
                shutil.copy2(Path(root, name), out / name)


def make_pbs_tree(dest: Path) -> Path:
    """The `python/` folder of the stand-in, made from this machine's CPython; returns it."""
    base = Path(sys.base_prefix)
    soname = f"libpython{MINOR}.so.1.0"
    assert (base / "lib" / soname).is_file(), f"{base} is not a shared-library CPython build (Py_ENABLE_SHARED)"
    top = dest / "python"
    (top / "bin").mkdir(parents=True)
    (top / "lib").mkdir()
    shutil.copy2(base / "bin" / f"python{MINOR}", top / "bin" / f"python{MINOR}")
    shutil.copy2(base / "lib" / soname, top / "lib" / soname)
    _copy_tree(base / "lib" / f"python{MINOR}", top / "lib" / f"python{MINOR}")
    (top / "lib" / f"python{MINOR}" / "site-packages").mkdir()
    _copy_tree(base / "include" / f"python{MINOR}", top / "include" / f"python{MINOR}")
    set_runpath(top / "bin" / f"python{MINOR}", "$ORIGIN/../lib")
    for library in [top / "lib" / soname, *(top / "lib" / f"python{MINOR}" / "lib-dynload").glob("*.so")]:
        set_runpath(library, "$ORIGIN")
    (top / "bin" / "python3").symlink_to(f"python{MINOR}")
    (top / "lib" / f"libpython{MINOR}.so").symlink_to(soname)
    return top


def pack_tar(tree: Path, archive: Path, *, top: str = "python") -> Path:
    """A tar.gz of `tree` under `top/`, in sorted order, links kept as links (as python-build-standalone)."""
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        tar.add(tree, arcname=top, recursive=False)
        for path in sorted(tree.rglob("*")):
            tar.add(path, arcname=f"{top}/{path.relative_to(tree).as_posix()}", recursive=False)
    return archive


def pbs_name(version: str) -> str:
    return f"cpython-{version}+20260101-x86_64-unknown-linux-gnu-install_only.tar.gz"


def make_pbs_standin(dest: Path) -> Path:
    """The stand-in archive, named as python-build-standalone names its releases."""
    tree = make_pbs_tree(dest / "tree")
    version = "{}.{}.{}".format(*sys.version_info[:3])
    return pack_tar(tree, dest / pbs_name(version))


# -- Windows: python.org's embeddable package -----------------------------------------------------------------

_PY_MAIN = "__declspec(dllexport) int Py_Main(int argc, char **argv) { return 0; }\n"
_PYTHON_EXE = "int Py_Main(int, char **);\nint main(int argc, char **argv) { return Py_Main(argc, argv); }\n"
_VERSION_RC = """1 VERSIONINFO
FILEVERSION {major},{minor},{micro}150,1013
PRODUCTVERSION {major},{minor},{micro}150,1013
FILEOS 0x40004
FILETYPE 0x2
BEGIN
  BLOCK "StringFileInfo"
  BEGIN
    BLOCK "000004b0"
    BEGIN
      VALUE "CompanyName", "ort-bundler tests: a stand-in, not the Python Software Foundation's build"
      VALUE "FileDescription", "Stand-in for the Python Core DLL"
      VALUE "FileVersion", "{version}"
      VALUE "ProductVersion", "{version}"
      VALUE "OriginalFilename", "{dll}"
    END
  END
  BLOCK "VarFileInfo"
  BEGIN
    VALUE "Translation", 0x0, 1200
  END
END
"""


def pyd_python_imports(ort_win_wheel: Path) -> list[str]:
    """What the real ORT `.pyd` imports from python311.dll (about 170 names)."""
    with zipfile.ZipFile(ort_win_wheel) as wheel:
        data = wheel.read("onnxruntime/capi/onnxruntime_pybind11_state.pyd")
    pe = pefile.PE(data=data, fast_load=True)
    pe.parse_data_directories(directories=[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"]])
    names = [i.name.decode() for e in pe.DIRECTORY_ENTRY_IMPORT if e.dll.lower() == b"python311.dll"
             for i in e.imports if i.name]
    assert names, "the ORT .pyd imports nothing from python311.dll: the stand-in would prove nothing"
    return sorted(set(names) - {"Py_Main"})


def _gcc(gcc: str, out: Path, *sources_and_flags: str) -> Path:
    proc = subprocess.run([gcc, "-O1", "-o", str(out), *sources_and_flags], capture_output=True, text=True)
    assert proc.returncode == 0, f"{gcc} failed for {out.name}:\n{proc.stderr}"
    return out


def _dll(gcc: str, work: Path, name: str, code: str, *links: Path, resource: Path | None = None) -> Path:
    source = work / f"{name}.c"
    source.write_text(code)
    extra = [str(resource)] if resource else []
    return _gcc(gcc, work / name, "-shared", str(source), *extra, *(str(link) for link in links))


def _version_resource(gcc: str, work: Path, *, version: str, dll: str) -> Path:
    major, minor, micro = version.split(".")
    rc = work / "version.rc"
    rc.write_text(_VERSION_RC.format(major=major, minor=minor, micro=micro, version=version, dll=dll))
    windres = gcc.replace("-gcc", "-windres")
    obj = work / "version.o"
    subprocess.run([windres, str(rc), "-O", "coff", "-o", str(obj)], check=True, capture_output=True)
    return obj


@dataclass(frozen=True, kw_only=True)
class EmbedFiles:
    """The built stand-in files by their name in the package."""

    folder: Path
    version: str

    def names(self) -> list[str]:
        return sorted(p.name for p in self.folder.iterdir())


def build_embed_files(gcc: str, work: Path, *, pyd_imports: list[str], version: str = EMBED_VERSION) -> EmbedFiles:
    """Every file of the embeddable package's layout, built or written in `work/files/`."""
    minor = version.split(".")[1]
    dll_name = f"python3{minor}.dll"
    out = work / "files"
    out.mkdir(parents=True)
    exports = "".join(f"__declspec(dllexport) void {name}(void) {{}}\n" for name in pyd_imports)
    resource = _version_resource(gcc, work, version=version, dll=dll_name)
    python_dll = _dll(gcc, work, dll_name, _PY_MAIN + exports, resource=resource)
    libffi = _dll(gcc, work, "libffi-8.dll", "__declspec(dllexport) void ffi_call(void) {}\n")
    for name in (dll_name, "libffi-8.dll"):
        shutil.copy2(work / name, out / name)
    _dll(gcc, out, "python3.dll", "__declspec(dllexport) void Py_Initialize(void) {}\n")
    for vc in ("vcruntime140.dll", "vcruntime140_1.dll"):
        _dll(gcc, out, vc, "__declspec(dllexport) void __std_terminate(void) {}\n")
    ctypes_code = ("void ffi_call(void); void PyLong_AsLong(void);\n"
                   "__declspec(dllexport) void PyInit__ctypes(void) { ffi_call(); PyLong_AsLong(); }\n")
    _dll(gcc, out, "_ctypes.pyd", ctypes_code, python_dll, libffi)
    (work / "python.c").write_text(_PYTHON_EXE)
    for exe in ("python.exe", "pythonw.exe"):
        _gcc(gcc, out / exe, str(work / "python.c"), str(python_dll))
    for c in out.glob("*.c"):
        c.unlink()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as stdlib:
        stdlib.writestr("README.txt", "stand-in for the standard library zip of the embeddable package\n")
    (out / f"python3{minor}.zip").write_bytes(buffer.getvalue())
    (out / f"python3{minor}._pth").write_bytes(_EMBED_PTH.replace("python311", f"python3{minor}").encode())
    shutil.copy2(Path(sys.base_prefix) / "lib" / f"python{MINOR}" / "LICENSE.txt", out / "LICENSE.txt")
    return EmbedFiles(folder=out, version=version)


def pack_zip(folder: Path, archive: Path, *, extra: dict[str, bytes] | None = None) -> Path:
    """The files at the zip's root, as python.org packs the embeddable package."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.iterdir()):
            zf.write(path, path.name)
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return archive


def embed_name(version: str) -> str:
    return f"python-{version}-embed-amd64.zip"


def set_pe_machine(path: Path, machine: int) -> None:
    """Rewrite a PE file's Machine field (e.g. to 0x014C, x86): a wrong-machine binary with real headers."""
    data = bytearray(path.read_bytes())
    offset = struct.unpack_from("<I", data, 0x3C)[0] + 4
    struct.pack_into("<H", data, offset, machine)
    path.write_bytes(bytes(data))


# -- pytest fixtures: import them into a test module with `wine.mingw_gcc` (the embeddable stand-in needs it) --


@pytest.fixture(scope="session")
def pbs_standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python-build-standalone STAND-IN archive (see the module docstring), built once per session."""
    return make_pbs_standin(tmp_path_factory.mktemp("pbs-standin"))


@pytest.fixture(scope="session")
def embed_files(mingw_gcc: str, ort_win_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> EmbedFiles:
    """The embeddable package STAND-IN's files, built with mingw once per session."""
    return build_embed_files(mingw_gcc, tmp_path_factory.mktemp("embed-standin"),
                             pyd_imports=pyd_python_imports(ort_win_wheel))


@pytest.fixture(scope="session")
def embed_standin(embed_files: EmbedFiles) -> Path:
    """The embeddable package STAND-IN as python.org ships it: a zip named python-3.11.9-embed-amd64.zip."""
    return pack_zip(embed_files.folder, embed_files.folder.parent / embed_name(embed_files.version))


def mini_pbs(path: Path, interpreter: bytes, *, python: str = MINOR, version: str | None = None,
             extra: list[tuple[tarfile.TarInfo, bytes]] | None = None) -> Path:
    """A small archive with python-build-standalone's layout around a given interpreter binary, for bad input:
    the checks it exercises read the layout, the version and the interpreter before anything else."""
    from crafted_archives import tar_member, write_tar

    version = version or f"{python}.7"
    members = [
        tar_member(f"python/bin/python{python}", interpreter, mode=0o755),
        tar_member(f"python/include/python{python}/patchlevel.h", f'#define PY_VERSION "{version}"\n'.encode()),
        tar_member(f"python/lib/python{python}/os.py", b"# stand-in\n"),
        tar_member(f"python/lib/python{python}/LICENSE.txt", b"PSF LICENSE AGREEMENT (stand-in)\n"),
        *(extra or []),
    ]
    return write_tar(path, members)


def relocatable_interpreter(work: Path) -> bytes:
    """This machine's `bin/python3.X`, with RUNPATH $ORIGIN/../lib as the stand-in has it."""
    copy = work / f"python{MINOR}"
    shutil.copy2(Path(sys.base_prefix) / "bin" / f"python{MINOR}", copy)
    set_runpath(copy, "$ORIGIN/../lib")
    return copy.read_bytes()


def set_elf_machine(data: bytes, machine: int) -> bytes:
    """The same ELF binary claiming another machine (183 is AArch64): real headers, the wrong target."""
    return data[:18] + struct.pack("<H", machine) + data[20:]
