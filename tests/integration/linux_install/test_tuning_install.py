"""Tuning, profiling and the support bundle through the launcher of a real Linux install: the quickstart
with `[launch] apply_tuning = true` and an entry point that reports the options of the session it
creates (as ORT reports them, inside the process), built, installed with install.sh, then run."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli

from bundler.shipped.ort_bundle.records import log_file_name
from bundler.shipped.ort_bundle.tuning_file import TUNING_FILE, TuningFile

pytestmark = pytest.mark.integration

STEM = "quickstart-linux-1.0.0-linux_x86_64"
INSTALL_ID = "quickstart-linux-1.0.0"
PROBE = '''"""Runs the bundled model once and prints the options its session runs with, as JSON."""
import json, sys
from pathlib import Path
import numpy as np
import onnxruntime as ort

root = Path(__file__).resolve().parents[1]
options = None
if sys.argv[1:2] == ["--own-threads"]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(sys.argv[2])
session = ort.InferenceSession(str(root / "models" / "tiny-mlp.onnx"), options, providers=["CPUExecutionProvider"])
session.run(None, {"x": np.ones((2, 4), np.float32)})
used = session.get_session_options()
print(json.dumps({"intra_op_num_threads": used.intra_op_num_threads, "execution_mode": used.execution_mode.name,
                  "enable_profiling": used.enable_profiling}))
'''


def tuned_manifest(folder: Path) -> Path:
    """The quickstart manifest, its lock and model, with the probe as entry point and the tuning opted in."""
    shutil.copytree(MANIFESTS / "models", folder / "models")
    (folder / "app").mkdir()
    probe = folder / "app" / "probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    shutil.copy(MANIFESTS / "quickstart-linux.lock.toml", folder)
    text = (MANIFESTS / "quickstart-linux.toml").read_text(encoding="utf-8")
    launch = text.index("[launch]")
    digest = hashlib.sha256(probe.read_bytes()).hexdigest()
    text = text[:launch] + f'[launch]\nscript = {{ path = "app/probe.py", sha256 = "{digest}" }}\napply_tuning = true\n'
    manifest = folder / "quickstart-linux.toml"
    manifest.write_text(text, encoding="utf-8")
    return manifest


@pytest.fixture(scope="module")
def installed(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(install root, the environment the launcher runs in: its own cache folder and log folder)."""
    work = tmp_path_factory.mktemp("tuned")
    manifest = tuned_manifest(work / "src")
    run_cli("fetch", "-q", "--cache", str(bundler_cache), str(manifest))  # the probe is a new input
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(work / "dist"), str(manifest))
    with zipfile.ZipFile(work / "dist" / f"{STEM}.zip") as archive:
        archive.extractall(work)
    env = {**os.environ, "ORT_BUNDLE_CACHE_DIR": str(work / "cache"), "XDG_STATE_HOME": str(work / "state")}
    root = work / "opt" / "tuned"
    proc = subprocess.run(["sh", str(work / STEM / "install.sh"), "--install-dir", str(root)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root, env


def run(root: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(root / "run.sh"), *args], capture_output=True, text=True, env=env, timeout=600)


def test_tune_then_the_entry_points_session_uses_it_unless_it_sets_its_own(installed: tuple[Path, dict[str, str]]) \
        -> None:
    root, env = installed
    before = json.loads(run(root, env=env).stdout)
    assert before["intra_op_num_threads"] == 0  # nothing tuned yet: ORT's default

    proc = run(root, "--tune", "--warmup", "3", "--runs", "10", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "<- best" in proc.stdout and f"written to {root / TUNING_FILE}" in proc.stdout
    assert "[100%] tiny-mlp:" in proc.stderr  # the progress
    tuning = TuningFile.read(root)
    (model,) = tuning.models
    assert model.best in {m.settings for m in model.candidates} and (tuning.warmup, tuning.runs) == (3, 10)
    assert {m.settings.intra_op_num_threads for m in model.candidates} >= {1, tuning.machine.physical_cores}

    used = json.loads(run(root, env=env).stdout)
    assert (used["intra_op_num_threads"], used["execution_mode"]) == \
        (model.best.intra_op_num_threads, model.best.execution_mode)
    own = model.best.intra_op_num_threads + 1
    kept = json.loads(run(root, "--own-threads", str(own), env=env).stdout)
    assert kept["intra_op_num_threads"] == own

    report = json.loads(run(root, "--self-check", "--json", env=env).stdout)
    check = next(c for c in report["checks"] if c["id"] == "tuning")
    assert check["status"] == "pass" and check["details"]["applied_by_hook"] is True
    assert check["details"]["models"][0]["intra_op_num_threads"] == model.best.intra_op_num_threads

    tuning_json = run(root, "--tune", "--runs", "2", "--warmup", "0", "--json", "--no-write", env=env)
    assert json.loads(tuning_json.stdout)["tuning"]["runs"] == 2 and TuningFile.read(root) == tuning


def test_profile_runs_the_entry_point_with_profiling_and_names_the_trace(installed: tuple[Path, dict[str, str]]) \
        -> None:
    root, env = installed
    proc = run(root, "--profile", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["enable_profiling"] is True
    folder = Path(env["ORT_BUNDLE_CACHE_DIR"]) / "profiles"
    traces = [Path(line.strip()) for line in proc.stderr.splitlines() if line.strip().endswith(".json")]
    assert len(traces) == 1 and traces[0].parent == folder, proc.stderr
    events = json.loads(traces[0].read_text(encoding="utf-8"))
    kernels = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    assert kernels and all(e["args"]["op_name"] for e in kernels)
    assert json.loads(run(root, env=env).stdout)["enable_profiling"] is False  # only under --profile


def default_log_folder(env: dict[str, str]) -> Path:
    """install.sh's log folder: root's, or the user's state folder."""
    return Path("/var/log/ort-bundler") if os.geteuid() == 0 else Path(env["XDG_STATE_HOME"]) / "ort-bundler"


def test_support_bundle_of_the_install(installed: tuple[Path, dict[str, str]]) -> None:
    """Issue 26, defect 1: the zip holds the log the receipt records, not another install's of the same version."""
    root, env = installed
    assert run(root, "--profile", env=env).returncode == 0
    own = default_log_folder(env) / log_file_name(INSTALL_ID, str(root), "install")
    assert json.loads((root / "receipt.json").read_text(encoding="utf-8"))["install_log"] == str(own)
    other = own.with_name(log_file_name(INSTALL_ID, str(root.parent / "elsewhere"), "install"))
    other.write_text("another installation of the same version\n", encoding="utf-8")
    try:
        proc = run(root, "--support-bundle", env=env)
    finally:
        other.unlink()
    assert proc.returncode == 0, proc.stderr
    cache = Path(env["ORT_BUNDLE_CACHE_DIR"])
    written = max((cache / "support").glob("*.zip"), key=lambda p: p.stat().st_mtime)
    with zipfile.ZipFile(written) as archive:
        names = set(archive.namelist())
        index = json.loads(archive.read("index.json"))
        report = json.loads(archive.read("selfcheck.json"))
    assert {"selfcheck.json", "receipt.json", "bundle.json", "modules.json", "environment.json", "system.json"} <= names
    assert any(name.startswith("profiles/") for name in names)
    assert report["ok"] is True
    allowed = (root, cache / "profiles", own.parent)
    assert [name for name in names if name.startswith("logs/")] == [f"logs/{own.name}"]
    assert all(any(Path(m["source"]).is_relative_to(folder) for folder in allowed)
               for m in index["members"] if m["source"] is not None)


def test_uninstall_removes_the_tuning_file_and_so_the_folder(installed: tuple[Path, dict[str, str]],
                                                             tmp_path: Path) -> None:
    """Issue 26, defect 8: `run --tune` wrote tuning.json; it is the product's, so uninstall removes it and the
    folder goes, with the temporary file a `run --tune` killed while writing leaves (named by the same mkstemp
    call as TuningFile.write's). Removes the shared install: keep it last."""
    root, env = installed
    if not (root / TUNING_FILE).is_file():
        assert run(root, "--tune", "--warmup", "0", "--runs", "2", env=env).returncode == 0
    assert (root / TUNING_FILE).is_file()
    handle, _ = tempfile.mkstemp(prefix=f".{TUNING_FILE}.", suffix=".tmp", dir=str(root))
    os.close(handle)
    own = default_log_folder(env) / log_file_name(INSTALL_ID, str(root), "install")
    uninstall = root.parent.parent / STEM / "uninstall.sh"  # the bundle the fixture extracted beside opt/
    proc = subprocess.run(["sh", str(uninstall), "--install-dir", str(root), "--log-path",
                           str(tmp_path / "uninstall.log")], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not root.exists(), sorted(str(p) for p in root.rglob("*"))
    own.unlink(missing_ok=True)  # the install's default log, named after this test's folder
