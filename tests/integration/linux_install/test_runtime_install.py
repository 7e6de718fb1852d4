"""A Linux bundle that carries its interpreter, installed for real on a machine path with no Python on PATH.

The interpreter is the python-build-standalone STAND-IN (tests/fixtures/runtime.py: this machine's CPython,
made relocatable); the bundle, install.sh, the install engine, the wheels, run.sh, the self-check and
uninstall.sh are the real ones. `PATH` holds every program of /usr/bin and /bin except `python*`.
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
from integration.real_wheels.test_runtime_build import build, runtime_manifest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def no_python_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PATH of links to everything in /usr/bin and /bin except python*: what a machine without Python has."""
    folder = tmp_path_factory.mktemp("bin-without-python")
    for source in (Path("/usr/bin"), Path("/bin")):
        for program in sorted(source.iterdir()):
            if not program.name.startswith("python") and not (folder / program.name).exists():
                (folder / program.name).symlink_to(program)
    assert shutil.which("python3", path=str(folder)) is None and shutil.which("sh", path=str(folder))
    return str(folder)


@pytest.fixture(scope="module")
def unpacked(pbs_standin: Path, bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("runtime-bundle")
    zip_path = Path(json.loads(build(runtime_manifest(work, "quickstart-linux.toml", pbs_standin), bundler_cache,
                                     work / "dist").stdout)["zip"])
    subprocess.run(["unzip", "-q", str(zip_path), "-d", str(work / "unpacked")], check=True)
    [root] = (work / "unpacked").iterdir()
    return root


def sh(script: Path, *args: str, path: str, home: Path, extra: dict[str, str] | None = None,
       check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", **(extra or {})}
    proc = subprocess.run(["sh", str(script), *args], capture_output=True, text=True, env=env)
    if check:
        assert proc.returncode == 0, f"{script.name} {args} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(unpacked: Path, no_python_path: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """install.sh into a path with spaces, self-check included (the install fails if it fails)."""
    root = tmp_path_factory.mktemp("machine") / "opt with spaces" / "quickstart"
    sh(unpacked / "install.sh", "--install-dir", str(root), path=no_python_path, home=root.parent)
    return root


def test_the_install_uses_the_bundled_interpreter_and_no_venv(installed: Path, unpacked: Path) -> None:
    receipt = json.loads((installed / "receipt.json").read_text())
    interpreter = installed / "python" / "bin" / f"python{MINOR}"
    assert receipt["python_executable"] == str(interpreter) and os.access(interpreter, os.X_OK)
    assert not (installed / "venv").exists()
    site = installed / "python" / "lib" / f"python{MINOR}" / "site-packages"
    assert (site / "onnxruntime" / "capi").is_dir() and (site / "ort_bundle_app.pth").is_file()
    assert not list(site.glob("pip*")), "the environment holds only the pinned wheels"
    assert receipt["selfcheck"]["ran"] and receipt["selfcheck"]["passed"]


def test_the_entry_point_runs_on_the_bundled_interpreter(installed: Path, no_python_path: str) -> None:
    proc = sh(installed / "run.sh", path=no_python_path, home=installed.parent)
    assert f"onnxruntime 1.23.1 from {installed}/python/lib/python{MINOR}/site-packages/onnxruntime" in proc.stdout


def test_the_self_check_reports_the_bundled_interpreter(installed: Path, no_python_path: str) -> None:
    proc = sh(installed / "run.sh", "--self-check", "--json", path=no_python_path, home=installed.parent)
    checks = {check["id"]: check for check in json.loads(proc.stdout)["checks"]}
    interpreter = checks["interpreter"]
    assert interpreter["status"] == "pass" and interpreter["details"]["origin"] == "bundled"
    assert interpreter["details"]["executable"] == str(installed / "python" / "bin" / f"python{MINOR}")
    assert interpreter["details"]["isolated"] is True


def test_pythonpath_pythonhome_and_the_user_site_cannot_change_what_runs(installed: Path, no_python_path: str,
                                                                         tmp_path: Path) -> None:
    decoy = tmp_path / "decoy"
    (decoy / "onnxruntime").mkdir(parents=True)
    (decoy / "onnxruntime" / "__init__.py").write_text("raise SystemExit('the decoy onnxruntime was imported')\n")
    home = tmp_path / "home"
    user_site = home / ".local" / "lib" / f"python{MINOR}" / "site-packages"
    user_site.mkdir(parents=True)
    (user_site / "evil.pth").write_text("import sys; sys.stderr.write('USER SITE RAN\\n')\n")
    extra = {"PYTHONPATH": str(decoy), "PYTHONHOME": str(tmp_path / "nowhere"), "PYTHONSTARTUP": str(decoy)}
    proc = sh(installed / "run.sh", path=no_python_path, home=home, extra=extra)
    assert "onnxruntime 1.23.1 from" in proc.stdout and "USER SITE RAN" not in proc.stderr
    check = sh(installed / "run.sh", "--self-check", "--json", path=no_python_path, home=home, extra=extra)
    report = json.loads(check.stdout)
    assert report["ok"], [c for c in report["checks"] if c["status"] == "fail"]


def test_another_interpreter_running_the_installed_code_fails_the_self_check(installed: Path) -> None:
    """This machine's CPython pointed at the installed code: the self-check says so and fails."""
    site = installed / "python" / "lib" / f"python{MINOR}" / "site-packages"
    proc = subprocess.run([sys.executable, "-I", str(installed / "installer" / "ort_bundle" / "__main__.py"), "selfcheck", "--json",
                           "--root", str(installed)], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "PYTHONPATH": str(site)})
    assert proc.returncode != 0
    checks = {check["id"]: check for check in json.loads(proc.stdout)["checks"]}
    assert checks["interpreter"]["status"] == "fail" and checks["interpreter"]["details"]["origin"] == "other"
    assert f"not on the bundled interpreter in {installed / 'python'}" in checks["interpreter"]["message"]


def test_python_switch_is_refused_for_a_bundle_with_a_runtime(unpacked: Path, no_python_path: str,
                                                              tmp_path: Path) -> None:
    proc = sh(unpacked / "install.sh", "--install-dir", str(tmp_path / "x"), "--python", sys.executable,
              path=no_python_path, home=tmp_path, check=False)
    assert proc.returncode == 10 and "--python applies only to bundles without a bundled Python" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_uninstall_removes_the_interpreter_too(unpacked: Path, no_python_path: str, tmp_path: Path) -> None:
    root = tmp_path / "with spaces" / "app"
    sh(unpacked / "install.sh", "--install-dir", str(root), "--no-self-check", path=no_python_path, home=tmp_path)
    assert (root / "python" / "bin" / f"python{MINOR}").is_file()
    sh(unpacked / "uninstall.sh", "--install-dir", str(root), path=no_python_path, home=tmp_path)
    assert not root.exists()


def test_the_installed_uninstall_sh_runs_a_copy_of_the_bundled_interpreter(unpacked: Path, no_python_path: str,
                                                                           tmp_path: Path) -> None:
    """Issue 38 §6 with a bundled interpreter: no Python on PATH, no bundle; the interpreter it removes runs the
    removal from a private copy, which goes too."""
    root = tmp_path / "with spaces" / "app"
    sh(unpacked / "install.sh", "--install-dir", str(root), "--no-self-check", path=no_python_path, home=tmp_path)
    temp = tmp_path / "temp"
    temp.mkdir()
    refused = sh(root / "uninstall.sh", "--python", sys.executable, path=no_python_path, home=tmp_path,
                 extra={"TMPDIR": str(temp)}, check=False)
    assert refused.returncode == 10 and "--python applies only to bundles without a bundled Python" in refused.stderr
    sh(root / "uninstall.sh", path=no_python_path, home=tmp_path, extra={"TMPDIR": str(temp)})
    assert not root.exists() and list(temp.iterdir()) == []


def test_the_start_up_hook_runs_in_the_bundled_interpreter(installed: Path) -> None:
    """The hook (DLL folders, GPU preloads, tuning, the cache's free space) serves a bundle without a venv too: a
    bundled interpreter's sys.prefix is its base prefix, which once made the hook return before doing anything."""
    interpreter = installed / "python" / "bin" / f"python{MINOR}"
    env = {"PATH": "/usr/bin:/bin", "ORT_BUNDLE_CACHE_DIR": str(installed), "ORT_BUNDLE_CACHE_MIN_FREE_MB": str(10**12)}
    proc = subprocess.run([str(interpreter), "-I", "-c", "import sys; print(sys.prefix == sys.base_prefix)"],
                          capture_output=True, text=True, env=env, check=True)
    assert proc.stdout.strip() == "True"
    assert f"ort_bundle_hook: cache directory {installed} has" in proc.stderr, proc.stderr
