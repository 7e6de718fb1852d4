"""The target-side interpreter check (`bundler.shipped.ort_bundle.selfcheck.interpreter`), run by real interpreters.

The bundled one is the python-build-standalone STAND-IN (tests/fixtures/runtime.py) laid out as an install
would lay it out (`<root>/python/`); "another interpreter" is this machine's CPython and, to show the module
runs on the oldest supported target, a Python 3.8 when one is installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.runtime import MINOR, pbs_standin  # noqa: F401

from bundler.readers.pyruntime import read_runtime
from bundler.shipped.ort_bundle.selfcheck import interpreter

# A real 3.8 binary, never pyenv's shim (which needs PATH and answers even when no 3.8 is active).
PY38 = next(iter(sorted(Path.home().glob(".pyenv/versions/3.8*/bin/python3.8"))), None)
RUNTIME = {"interpreter": f"python/bin/python{MINOR}", "version": "{}.{}.{}".format(*sys.version_info[:3])}
CHECK = ("import json, sys; sys.path.insert(0, sys.argv[1]); import interpreter; from pathlib import Path; "
         "r = interpreter.check_interpreter(Path(sys.argv[2]), json.loads(sys.argv[3])); print(json.dumps(r.to_json()))")


@pytest.fixture(scope="module")
def installed(pbs_standin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An install root with spaces holding the bundled interpreter as python/ and the check in selfcheck/."""
    root = tmp_path_factory.mktemp("install") / "my app"
    runtime = read_runtime(pbs_standin, label="runtime", layout="standalone", python=MINOR, dest=root / "unpacked")
    runtime.root.rename(root / "python")
    (root / "selfcheck").mkdir()
    shutil.copy2(interpreter.__file__, root / "selfcheck" / "interpreter.py")
    return root


def run_check(python: str, root: Path, runtime: object, *flags: str, env: dict[str, str] | None = None) -> dict:
    proc = subprocess.run([python, *flags, "-c", CHECK, str(root / "selfcheck"), str(root), json.dumps(runtime)],
                          capture_output=True, text=True, env={"PATH": "/nonexistent", **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_bundled_interpreter_is_reported_as_bundled(installed: Path) -> None:
    report = run_check(str(installed / "python" / "bin" / f"python{MINOR}"), installed, RUNTIME, "-I")
    assert report["origin"] == "bundled" and report["ok"], report["problems"]
    assert report["base_prefix"] == str(installed / "python") == report["expected"]
    assert report["isolated"] and not report["user_site"]


def test_another_interpreter_running_the_installed_code_fails(installed: Path) -> None:
    report = run_check(sys.executable, installed, RUNTIME, "-I")
    assert report["origin"] == "other" and not report["ok"]
    assert f"not on the bundled interpreter in {installed / 'python'}" in report["problems"][0]


def test_pythonpath_reaching_outside_the_install_fails(installed: Path, tmp_path: Path) -> None:
    """Without -I (what the launchers pass) PYTHONPATH adds a folder from elsewhere: the check names it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    report = run_check(str(installed / "python" / "bin" / f"python{MINOR}"), installed, RUNTIME,
                       env={"PYTHONPATH": str(elsewhere)})
    assert report["origin"] == "bundled" and not report["ok"]
    assert f"sys.path holds {elsewhere} from outside the install" in report["problems"][0]


def test_a_user_site_is_reported_and_fails(installed: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".local" / "lib" / f"python{MINOR}" / "site-packages").mkdir(parents=True)
    report = run_check(str(installed / "python" / "bin" / f"python{MINOR}"), installed, RUNTIME, env={"HOME": str(home)})
    assert report["user_site"] and not report["ok"]
    quiet = run_check(str(installed / "python" / "bin" / f"python{MINOR}"), installed, RUNTIME, "-I",
                      env={"HOME": str(home)})
    assert not quiet["user_site"] and quiet["ok"]


@pytest.mark.skipif(PY38 is None, reason="no Python 3.8 on this machine")
def test_without_a_runtime_the_target_python_is_reported_on_python_3_8(installed: Path) -> None:
    report = run_check(str(PY38), installed, None, "-I")
    assert report["origin"] == "target" and report["ok"] and report["version"].startswith("3.8.")
    assert report["expected"] is None and report["base_prefix"] == os.path.realpath(
        subprocess.run([str(PY38), "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True,
                       check=True).stdout.strip())
    other = run_check(str(PY38), installed, RUNTIME, "-I")
    assert other["origin"] == "other" and any("Python 3.8" in p for p in other["problems"])
