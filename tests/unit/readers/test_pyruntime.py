"""The pinned interpreter's reader (`bundler.readers.pyruntime`): what it accepts, and every way it refuses.

The interpreters are STAND-INS (see tests/fixtures/runtime.py): a relocatable CPython made from this
machine's own, in python-build-standalone's install_only layout, and mingw-built PE files in the Windows
embeddable package's layout. Nothing here downloads either real archive, and nothing here starts a Windows Python:
the Windows stand-in stays for these readers because it can be what python.org's package cannot (an x86 build, a
Python 3.12 one). Tests that start a Windows Python run python.org's own (tests/fixtures/windows_python.py).
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from fixtures.crafted_archives import chop, tar_member, write_tar
from fixtures.runtime import (
    EMBED_VERSION,
    MINOR,
    build_embed_files,
    embed_files,  # noqa: F401
    embed_standin,  # noqa: F401
    make_pbs_tree,
    mini_pbs,
    pack_tar,
    pack_zip,
    pbs_standin,  # noqa: F401
    relocatable_interpreter,
    set_elf_machine,
    set_pe_machine,
)
from fixtures.wine import mingw_gcc  # noqa: F401

from bundler.assembly.runtime import pth_text
from bundler.errors import BuildError, ManifestError, UnsafeArchiveError
from bundler.readers.dllclosure import DepKind, dll_closure
from bundler.readers.elf import read_elf
from bundler.readers.pe import inspect_pe
from bundler.readers.pyruntime import read_runtime

THIS_VERSION = "{}.{}.{}".format(*sys.version_info[:3])


def linux(path: Path, tmp_path: Path, *, python: str = MINOR):
    return read_runtime(path, label="python.runtime", layout="standalone", python=python, dest=tmp_path / "out")


def windows(path: Path, tmp_path: Path, *, python: str = "3.11"):
    return read_runtime(path, label="python.runtime", layout="embeddable", python=python, dest=tmp_path / "out")


# -- Linux --------------------------------------------------------------------------------------------------


def test_the_linux_stand_in_runs_from_wherever_it_is_unpacked(pbs_standin: Path, tmp_path: Path) -> None:
    """The stand-in must be what it claims: relocatable, so the bundle's copy runs on a machine without ours."""
    runtime = linux(pbs_standin, tmp_path)
    python = runtime.root / runtime.interpreter
    assert read_elf(python, label="python").search_path == ("$ORIGIN/../lib",)
    proc = subprocess.run([str(python), "-I", "-c", "import sys, ssl, sqlite3; print(sys.prefix)"],
                          capture_output=True, text=True, env={"PATH": "/nonexistent"})
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == runtime.root
    ldd = subprocess.run(["ldd", str(python)], capture_output=True, text=True, check=True).stdout
    assert f"{runtime.root}/bin/../lib/libpython{MINOR}.so.1.0" in ldd


def test_the_linux_runtime_is_read_from_its_files(pbs_standin: Path, tmp_path: Path) -> None:
    runtime = linux(pbs_standin, tmp_path)
    assert runtime.kind == "python-build-standalone"
    assert runtime.version == THIS_VERSION  # PY_VERSION of patchlevel.h, not the archive's name
    assert runtime.interpreter == f"bin/python{MINOR}" and runtime.interpreter in runtime.executables
    assert runtime.links == {"bin/python3": f"python{MINOR}", f"lib/libpython{MINOR}.so": f"libpython{MINOR}.so.1.0"}
    assert not set(runtime.links) & set(runtime.files), "links are recorded, not shipped"
    assert runtime.licenses == (f"lib/python{MINOR}/LICENSE.txt",)
    assert "PSF" in (runtime.root / runtime.licenses[0]).read_text()


def test_an_interpreter_that_names_its_build_prefix_is_not_relocatable(tmp_path: Path) -> None:
    """This machine's CPython as it is (RUNPATH = its absolute prefix) would load another libpython, or none."""
    tree = make_pbs_tree(tmp_path / "tree")
    original = Path(sys.base_prefix) / "bin" / f"python{MINOR}"
    (tree / "bin" / f"python{MINOR}").write_bytes(original.read_bytes())
    with pytest.raises(BuildError, match=rf"not relocatable: .*RUNPATH names {sys.base_prefix}/lib"):
        linux(pack_tar(tree, tmp_path / "cpython.tar.gz"), tmp_path)


def test_a_runtime_of_another_python_version_is_a_manifest_error(tmp_path: Path) -> None:
    archive = mini_pbs(tmp_path / "cpython-3.12.tar.gz", relocatable_interpreter(tmp_path), python="3.12")
    with pytest.raises(ManifestError, match=r"holds Python 3\.12 .*but \[bundle\] python is 3\.11") as caught:
        linux(archive, tmp_path, python="3.11")
    assert caught.value.return_code == 3


def test_patchlevel_decides_the_version_not_the_folder_name(tmp_path: Path) -> None:
    archive = mini_pbs(tmp_path / "odd.tar.gz", relocatable_interpreter(tmp_path), version="3.10.4")
    with pytest.raises(ManifestError, match=r"holds Python 3\.10\.4 \(python/include/.*patchlevel\.h\)"):
        linux(archive, tmp_path)


def test_an_interpreter_for_another_machine_is_refused(tmp_path: Path) -> None:
    aarch64 = set_elf_machine(relocatable_interpreter(tmp_path), 183)
    with pytest.raises(BuildError, match=r"ELF binary for machine 183, but the bundle targets x86-64") as caught:
        linux(mini_pbs(tmp_path / "arm.tar.gz", aarch64), tmp_path)
    assert caught.value.return_code == 7


def test_a_truncated_runtime_archive_is_unsafe(pbs_standin: Path, tmp_path: Path) -> None:
    cut = tmp_path / pbs_standin.name
    cut.write_bytes(pbs_standin.read_bytes())
    with pytest.raises(UnsafeArchiveError, match="truncated") as caught:
        linux(chop(cut, keep=0.5), tmp_path)
    assert caught.value.return_code == 6
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize(("name", "problem"), [
    ("python/../../etc/cron.d/evil", "path traversal"),
    ("evil/lib.so", "outside the top folder 'python/'"),
    ("/python/bin/evil", "absolute path"),
])
def test_a_path_leaving_python_is_unsafe(name: str, problem: str, tmp_path: Path) -> None:
    archive = mini_pbs(tmp_path / "bad.tar.gz", relocatable_interpreter(tmp_path), extra=[tar_member(name, b"x")])
    with pytest.raises(UnsafeArchiveError, match=problem):
        linux(archive, tmp_path)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("target", ["/usr/bin/python3", "../../usr/bin/python3", "../lib/libpython3.11.so.1.0"])
def test_a_link_out_of_its_folder_is_unsafe(target: str, tmp_path: Path) -> None:
    link = tar_member("python/bin/python3", kind=tarfile.SYMTYPE, linkname=target)
    archive = mini_pbs(tmp_path / "link.tar.gz", relocatable_interpreter(tmp_path), extra=[link])
    with pytest.raises(UnsafeArchiveError, match=r"'python/bin/python3' is a symbolic link to .*same folder"):
        linux(archive, tmp_path)


def test_a_windows_package_for_a_linux_bundle_says_so(embed_standin: Path, tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"is a Windows Python .* but \[bundle\] platform is linux_x86_64"):
        linux(embed_standin, tmp_path, python="3.11")


def test_a_linux_archive_without_a_licence_is_refused(tmp_path: Path) -> None:
    members = [tar_member(f"python/bin/python{MINOR}", relocatable_interpreter(tmp_path), mode=0o755),
               tar_member(f"python/include/python{MINOR}/patchlevel.h", f'#define PY_VERSION "{MINOR}.7"'.encode()),
               tar_member(f"python/lib/python{MINOR}/os.py", b"")]
    with pytest.raises(BuildError, match="carries no licence text"):
        linux(write_tar(tmp_path / "nolicence.tar.gz", members), tmp_path)


# -- Windows ------------------------------------------------------------------------------------------------


def test_the_embeddable_package_is_read_from_its_files(embed_standin: Path, tmp_path: Path) -> None:
    runtime = windows(embed_standin, tmp_path)
    assert (runtime.kind, runtime.version, runtime.interpreter) == ("embeddable", EMBED_VERSION, "python.exe")
    assert (runtime.pth, runtime.stdlib_zip, runtime.licenses) == ("python311._pth", "python311.zip", ("LICENSE.txt",))
    assert {"python311.dll", "vcruntime140.dll", "vcruntime140_1.dll", "_ctypes.pyd"} <= set(runtime.files)


def test_the_installed_pth_puts_site_packages_and_the_app_on_sys_path(embed_standin: Path, tmp_path: Path) -> None:
    runtime = windows(embed_standin, tmp_path)
    assert pth_text(runtime) == "python311.zip\r\n.\r\nLib\\site-packages\r\n..\\app\r\nimport site\r\n"
    shipped = (runtime.root / "python311._pth").read_text()
    assert "#import site" in shipped, "the package's own file keeps site off: the installed one must differ"


def test_an_x86_embeddable_package_is_refused(embed_files, tmp_path: Path) -> None:
    folder = tmp_path / "x86"
    folder.mkdir()
    for path in embed_files.folder.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    set_pe_machine(folder / "python.exe", 0x014C)
    assert inspect_pe(folder / "python.exe").machine_name == "x86"
    with pytest.raises(BuildError, match=r"python\.exe is a x86 binary, but the bundle targets x64"):
        windows(pack_zip(folder, tmp_path / "python-3.11.9-embed-win32.zip"), tmp_path)


def test_an_embeddable_package_of_another_python_is_a_manifest_error(mingw_gcc: str, tmp_path: Path) -> None:
    files = build_embed_files(mingw_gcc, tmp_path / "py312", pyd_imports=["PyLong_AsLong"], version="3.12.4")
    archive = pack_zip(files.folder, tmp_path / "python-3.12.4-embed-amd64.zip")
    with pytest.raises(ManifestError, match=r"holds python312\.dll \(Python 3\.12\), but \[bundle\] python is 3\.11"):
        windows(archive, tmp_path)


def test_a_truncated_embeddable_package_is_unsafe(embed_standin: Path, tmp_path: Path) -> None:
    cut = tmp_path / embed_standin.name
    cut.write_bytes(embed_standin.read_bytes())
    with pytest.raises(UnsafeArchiveError, match="truncated"):
        windows(chop(cut, keep=0.6), tmp_path)


def test_a_linux_archive_for_a_windows_bundle_says_so(tmp_path: Path) -> None:
    archive = write_tar(tmp_path / "pbs.tar.gz", [tar_member("python/bin/python3.11", b"\x7fELF")])
    with pytest.raises(ManifestError, match=r"is a Linux Python .* but \[bundle\] platform is win_amd64"):
        windows(archive, tmp_path)


def test_the_closure_resolves_python311_and_vc_dlls_from_the_interpreter(embed_files, ort_win_wheel: Path,
                                                                        tmp_path: Path) -> None:
    """The real ORT .pyd against the stand-in's DLLs: python311.dll and vcruntime140*.dll come from the payload."""
    import zipfile

    with zipfile.ZipFile(ort_win_wheel) as wheel:
        pyd = tmp_path / "onnxruntime_pybind11_state.pyd"
        pyd.write_bytes(wheel.read("onnxruntime/capi/onnxruntime_pybind11_state.pyd"))
    infos = {"venv/onnxruntime_pybind11_state.pyd": inspect_pe(pyd)}
    for name in ("_ctypes.pyd", "libffi-8.dll", "python311.dll"):
        infos[f"payload/python/{name}"] = inspect_pe(embed_files.folder / name)
    interpreter = ["python311.dll", "python3.dll", "vcruntime140.dll", "vcruntime140_1.dll", "libffi-8.dll"]
    report = dll_closure(infos, target_python="3.11", interpreter=interpreter)
    kinds = {(d.importer.rsplit("/", 1)[-1], d.dll.lower()): d.kind for d in report.dependencies}
    assert kinds["onnxruntime_pybind11_state.pyd", "python311.dll"] is DepKind.PAYLOAD
    assert kinds["onnxruntime_pybind11_state.pyd", "vcruntime140.dll"] is DepKind.PAYLOAD
    assert kinds["onnxruntime_pybind11_state.pyd", "msvcp140.dll"] is DepKind.VC_RUNTIME  # not in the package
    assert kinds["_ctypes.pyd", "libffi-8.dll"] is DepKind.PAYLOAD
    assert report.problems == ()
    without = dll_closure(infos, target_python="3.11")
    assert {(d.importer.rsplit("/", 1)[-1], d.dll.lower()): d.kind for d in without.dependencies}[
        "onnxruntime_pybind11_state.pyd", "python311.dll"] is DepKind.PYTHON
