"""`ort-bundler init` gives a working entry point (issue 26): a starter manifest, built and installed for real,
and its `run.sh` runs one inference of the first model, saying it is a stand-in.

Before, `init` wrote no `[launch]`: the installed `run.sh` started a bare Python, printed nothing and exited 0.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli

from bundler.manifest import load

pytestmark = pytest.mark.integration


def test_a_starter_manifest_installs_a_run_sh_that_runs_the_first_model(bundler_cache: Path, ort_linux_wheel: Path,
                                                                        tmp_path: Path) -> None:
    src = tmp_path / "app"
    (src / "models").mkdir(parents=True)
    shutil.copy(MANIFESTS / "models" / "tiny-mlp.onnx", src / "models")
    shutil.copy(ort_linux_wheel, src)
    manifest = src / "app.toml"
    run_cli("init", "--from", str(src / ort_linux_wheel.name), str(src / "models" / "tiny-mlp.onnx"), "-o", str(manifest))
    assert load(manifest).launch.module == "ort_bundle.infer"
    text = manifest.read_text(encoding="utf-8")  # the model's batch is dynamic: the user fills in the shapes line
    assert "# shapes = { input = [1, 3, 224, 224] }" in text
    manifest.write_text(text.replace("# shapes = { input = [1, 3, 224, 224] }", "shapes = { x = [2, 4] }"),
                        encoding="utf-8")
    # The quickstart's lock pins the same ORT's closure for linux_x86_64 / 3.11 and this very model: no resolver run.
    shutil.copy(MANIFESTS / "quickstart-linux.lock.toml", src / "app.lock.toml")
    run_cli("fetch", "-q", "--cache", str(bundler_cache), str(manifest))
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(tmp_path / "dist"), str(manifest))
    stem = "app-1.0.0-linux_x86_64"
    with zipfile.ZipFile(tmp_path / "dist" / f"{stem}.zip") as archive:
        archive.extractall(tmp_path)
    env = {**os.environ, "ORT_BUNDLE_CACHE_DIR": str(tmp_path / "cache"), "XDG_STATE_HOME": str(tmp_path / "state")}
    root = tmp_path / "opt" / "app"
    installed = subprocess.run(["sh", str(tmp_path / stem / "install.sh"), "--install-dir", str(root)],
                               capture_output=True, text=True, env=env, timeout=600)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    ran = subprocess.run([str(root / "run.sh")], capture_output=True, text=True, env=env, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert "model 'tiny-mlp' (models/tiny-mlp.onnx): one inference with onnxruntime 1.23.1" in ran.stdout
    assert "output y: float32 [2, 3]" in ran.stdout  # the model's output for the self-check's inputs (shapes x = [2, 4])
    assert "replace it with your application" in ran.stdout
