"""A Windows bundle that carries its interpreter: laid out by its own install engine, started by run.cmd under Wine.

The interpreter is the embeddable package STAND-IN (tests/runtime_fixtures.py): mingw-built `python.exe` and
`python311.dll` in the package's exact layout; the stand-in's `Py_Main` prints the path of the executable that
runs, of the DLL it loaded and its arguments, so `run.cmd` shows which Python it started. The bundle, the
install engine (run here by this machine's Python, as install.ps1 runs it by the bundled one on Windows), the
real ORT wheels and `run.cmd` under `wine64 cmd` are real. No environment-creation stand-in is needed: with a
runtime the engine copies the interpreter instead of running `python -m venv`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from runtime_fixtures import STANDIN_MARK, embed_files, embed_standin  # noqa: F401
from test_runtime_build import build, runtime_manifest
from wine import Wine, mingw_gcc, wine  # noqa: F401

from bundler.target import engine

pytestmark = pytest.mark.integration
HOSTILE_PARENT = "ort apps & tools"


@pytest.fixture(scope="module")
def installed(embed_standin: Path, bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("win-runtime")
    zip_path = Path(json.loads(build(runtime_manifest(work, "quickstart-win.toml", embed_standin), bundler_cache,
                                     work / "dist").stdout)["zip"])
    subprocess.run(["unzip", "-q", str(zip_path), "-d", str(work / "unpacked")], check=True)
    [bundle] = (work / "unpacked").iterdir()
    root = work / HOSTILE_PARENT / "quickstart"
    options = engine.Options(bundle=bundle, install_dir=root, self_check=False)
    assert engine.install(options, engine.Log(None)) == "installed"
    return root


def test_the_engine_lays_out_the_interpreter_as_the_environment(installed: Path, embed_files) -> None:
    python = installed / "python"
    assert {p.name for p in embed_files.folder.iterdir()} <= {p.name for p in python.iterdir()}
    assert (python / "python.exe").read_bytes() == (embed_files.folder / "python.exe").read_bytes()
    assert (python / "python311._pth").read_bytes() == b"python311.zip\r\n.\r\nLib\\site-packages\r\n..\\app\r\nimport site\r\n"
    assert (python / "Lib" / "site-packages" / "onnxruntime" / "capi" / "onnxruntime_pybind11_state.pyd").is_file()
    assert (python / "Lib" / "site-packages" / "ort_bundle_hook.pth").is_file()
    assert not (installed / "venv").exists()
    receipt = json.loads((installed / "receipt.json").read_text())
    assert receipt["python_executable"] == str(python / "python.exe")
    assert "python/python.exe" in {f["path"] for f in receipt["files"]}


def test_run_cmd_starts_the_bundled_python_not_one_on_path(installed: Path, wine: Wine, embed_files,
                                                           tmp_path: Path) -> None:
    decoy = tmp_path / "decoy python"
    shutil.copytree(embed_files.folder, decoy)  # the same stand-in elsewhere: it would print its own path
    result = wine.cmd(installed / "run.cmd", '"first arg"', "second",
                      env={"PATH": f"{wine.to_windows(decoy)};C:\\windows\\system32;C:\\windows",
                           "PYTHONPATH": wine.to_windows(decoy), "PYTHONHOME": wine.to_windows(decoy)})
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line.removeprefix(f"{STANDIN_MARK}: ") for line in result.stdout.splitlines() if line.startswith(STANDIN_MARK)]
    python = wine.to_windows(installed / "python" / "python.exe")
    assert lines[0] == f"executable={python}" and lines[1] == f"dll={wine.to_windows(installed / 'python' / 'python311.dll')}"
    args = [line.removeprefix("arg=") for line in lines[2:]]
    assert args[:2] == ["-I", "-B"]  # no bytecode folder named (issue 27 §5)
    assert args[2:] == [wine.to_windows(installed / "app" / "infer.py"), "first arg", "second"]


def test_run_cmd_self_check_runs_the_bundled_python_isolated(installed: Path, wine: Wine) -> None:
    result = wine.cmd(installed / "run.cmd", "--self-check")
    args = [line.split("arg=", 1)[1] for line in result.stdout.splitlines() if line.startswith(f"{STANDIN_MARK}: arg=")]
    assert args[:2] == ["-I", "-B"] and args[2:] == [wine.to_windows(installed / "selfcheck" / "selfcheck.py"),
                                                     "--self-check"]
