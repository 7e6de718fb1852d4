"""A Windows bundle that carries its interpreter: laid out by its own install engine, started by run.cmd under Wine.

The interpreter is python.org's CPython 3.11.9 in its embeddable layout (fixtures/windows_python.py), pinned as the
manifest's `[python] runtime`. The bundle, the install engine (run here by this machine's Python, as install.cmd
runs it by the bundled one on Windows), the real ORT wheels and `run.cmd` under `wine64 cmd` are real. No
environment-creation step is needed: with a runtime the engine copies the interpreter instead of running
`python -m venv`.

One named replacement: the installed `app/infer.py` and `installer/ort_bundle/selfcheck/selfcheck.py` import
NumPy 2, which aborts under Wine 8 (ucrtbase's crealf is not implemented), so once installed both are replaced
by fixtures/windows_reporter.py, which records how the bundled interpreter was started (its command line, sys.executable, the python311.dll it
loaded, -I, sys.path). test_windows_install.py runs the real ones on a `numpy<2` bundle.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fixtures.windows_python import WindowsPython, copy_interpreter, place_reporter, read_report, windows_python  # noqa: F401
from fixtures.wine import Wine, wine  # noqa: F401
from integration.real_wheels.test_runtime_build import build_windows_runtime_zip

from bundler.shipped.ort_bundle.engine import engine
from bundler.shipped.ort_bundle.launch_config import RUN_SCRIPT

pytestmark = pytest.mark.integration
HOSTILE_PARENT = "ort apps & tools"


@pytest.fixture(scope="module")
def installed(windows_python: WindowsPython, bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("win-runtime")
    zip_path = build_windows_runtime_zip(windows_python.embed_zip, bundler_cache, tmp_path_factory.getbasetemp())
    subprocess.run(["unzip", "-q", str(zip_path), "-d", str(work / "unpacked")], check=True)
    [bundle] = (work / "unpacked").iterdir()
    root = work / HOSTILE_PARENT / "quickstart"
    options = engine.Options(bundle=bundle, install_dir=root, self_check=False)
    assert engine.install(options, engine.Log(None)) == "installed"
    return root


def test_the_engine_lays_out_the_interpreter_as_the_environment(installed: Path, windows_python: WindowsPython) -> None:
    python = installed / "python"
    assert {p.name for p in windows_python.embeddable.iterdir()} <= {p.name for p in python.iterdir()}
    assert (python / "python.exe").read_bytes() == (windows_python.embeddable / "python.exe").read_bytes()
    assert (python / "python311._pth").read_bytes() == b"python311.zip\r\n.\r\nLib\\site-packages\r\n..\\app\r\nimport site\r\n"
    assert (python / "Lib" / "site-packages" / "onnxruntime" / "capi" / "onnxruntime_pybind11_state.pyd").is_file()
    assert (python / "Lib" / "site-packages" / "ort_bundle_hook.pth").is_file()
    assert not (installed / "venv").exists()
    receipt = json.loads((installed / "receipt.json").read_text())
    assert receipt["python_executable"] == str(python / "python.exe")
    assert "python/python.exe" in {f["path"] for f in receipt["files"]}


@pytest.fixture(scope="module")
def reporting_install(installed: Path) -> Path:
    """The install with REPORTER in the place of infer.py and the self-check's module (NumPy 2 aborts under Wine 8)."""
    for program in ("app/infer.py", "installer/ort_bundle/selfcheck/selfcheck.py"):
        assert (installed / program).is_file(), program
        place_reporter(installed / program)
    return installed


def test_run_cmd_starts_the_bundled_python_not_one_on_path(reporting_install: Path, wine: Wine,
                                                           windows_python: WindowsPython, tmp_path: Path) -> None:
    """A decoy copy of the same interpreter is first on PATH and named by PYTHONPATH and PYTHONHOME: run.cmd still
    starts the bundled one, isolated, with its own sys.path."""
    installed = reporting_install
    decoy = copy_interpreter(windows_python.embeddable, tmp_path / "decoy python").parent
    report = tmp_path / "report.json"
    result = wine.cmd(installed / "run.cmd", '"first arg"', "second",
                      env={"PATH": f"{wine.to_windows(decoy)};C:\\windows\\system32;C:\\windows",
                           "PYTHONPATH": wine.to_windows(decoy), "PYTHONHOME": wine.to_windows(decoy),
                           "REPORTER_OUT": wine.to_windows(report), "REPORTER_EXIT": "0"})
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    started = read_report(report)
    python = installed / "python"
    assert started["executable"] == wine.to_windows(python / "python.exe")
    assert started["dll"] == wine.to_windows(python / "python311.dll")
    assert started["isolated"] == 1
    args = started["orig_argv"][1:]
    assert args[:2] == ["-I", "-B"] and started["dont_write_bytecode"] == 1  # no bytecode folder named (issue 27 §5)
    assert args[2:] == ["-c", RUN_SCRIPT, wine.to_windows(installed / "app" / "infer.py"), "first arg", "second"]
    win_python, app = wine.to_windows(python), wine.to_windows(installed / "app")
    # The script's folder first (as `python script.py` puts it), then the installed ._pth, nothing of the decoy's.
    assert started["path"] == [app, f"{win_python}\\python311.zip", win_python, f"{win_python}\\Lib\\site-packages", app]


def test_run_cmd_self_check_runs_the_bundled_python_isolated(reporting_install: Path, wine: Wine,
                                                             tmp_path: Path) -> None:
    installed = reporting_install
    report = tmp_path / "report.json"
    result = wine.cmd(installed / "run.cmd", "--self-check",
                      env={"REPORTER_OUT": wine.to_windows(report), "REPORTER_EXIT": "5"})
    assert result.returncode == 5, result.stdout + result.stderr[-2000:]
    started = read_report(report)
    args = started["orig_argv"][1:]
    assert started["executable"] == wine.to_windows(installed / "python" / "python.exe") and started["isolated"] == 1
    assert args[:2] == ["-I", "-B"] and args[2:] == [wine.to_windows(installed / "installer" / "ort_bundle" / "__main__.py"), "selfcheck"]
