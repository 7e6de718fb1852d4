"""A `path` input whose file is there with other bytes than its pin is exit 5 in every command (issue 38, item 1).

The cache answers by hash, so a model overwritten in place while the manifest kept the old sha256 was never
read again: with a warm cache `lock`, `fetch` and `build` exited 0 and the new version's zip carried the *old*
bytes. Each test overwrites the quickstart's model in a copy of its folder, keeps the old pin, uses the warm
test cache, and expects exit 5 naming the path as the manifest wrote it, before anything is fetched or built.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.cli import REPO, run_cli
from fixtures.hostile import snapshot
from fixtures.models import make_identity_model
from integration.real_wheels.test_first_use_messages import quickstart_copy

WRITTEN = "models/tiny-mlp.onnx"


def changed_model_project(folder: Path) -> tuple[Path, str]:
    """The quickstart with its model replaced by another real model; the manifest still pins the old one."""
    manifest = quickstart_copy(folder)
    model = folder / WRITTEN
    make_identity_model(model, shape=(2, 4))
    return manifest, hashlib.sha256(model.read_bytes()).hexdigest()


def refused_with_5(result: subprocess.CompletedProcess[str], command: str, digest: str) -> None:
    assert result.returncode == 5, (result.returncode, result.stderr)
    assert f"ort-bundler {command}: error: models[0]: {WRITTEN} has sha256 {digest}, but the manifest pins " \
           "db67a4b8fc5f" in result.stderr, result.stderr
    assert "the file changed after it was pinned" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["lock", "fetch", "build"])
def test_a_changed_model_with_a_stale_pin_is_exit_5_with_a_warm_cache(tmp_path: Path, bundler_cache: Path,
                                                                      command: str) -> None:
    manifest, digest = changed_model_project(tmp_path / "project")
    out = tmp_path / "dist"
    args = [command, "-q", "--cache", str(bundler_cache), str(manifest)] + (["-o", str(out)] if command == "build" else [])
    before = snapshot(tmp_path)
    result = run_cli(*args, check=False)
    refused_with_5(result, command, digest)
    assert snapshot(tmp_path) == before  # no lock written, no zip, nothing beside the manifest


def test_fetch_with_a_mirror_still_checks_a_local_file_that_is_there(tmp_path: Path, bundler_cache: Path) -> None:
    """--mirror lets a manifest's own files be absent (the air-gapped side); one that is present must still match."""
    manifest, digest = changed_model_project(tmp_path / "project")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    result = run_cli("fetch", "-q", "--cache", str(bundler_cache), "--mirror", str(mirror), str(manifest), check=False)
    refused_with_5(result, "fetch", digest)


def test_a_file_outside_the_folder_is_not_read_to_compare_it(tmp_path: Path, bundler_cache: Path) -> None:
    """The pin check never hashes a file the manifest may not read (issue 27): that stays exit 3, nothing disclosed."""
    manifest = quickstart_copy(tmp_path / "project")
    secret = tmp_path / "secret.onnx"
    secret.write_bytes(b"not yours")
    text = manifest.read_text(encoding="utf-8").replace(f'path = "{WRITTEN}"', f'path = "{secret}"')
    manifest.write_text(text, encoding="utf-8")
    result = run_cli("fetch", "-q", "--cache", str(bundler_cache), str(manifest), check=False)
    assert result.returncode == 3, result.stderr
    assert hashlib.sha256(b"not yours").hexdigest() not in result.stderr


@pytest.mark.integration
def test_reproduce_refuses_a_changed_local_file_it_can_see(tmp_path: Path, bundler_cache: Path) -> None:
    """A bundle whose manifest names an absolute path (allow_outside) rebuilt where that file now differs: exit 5."""
    manifest = quickstart_copy(tmp_path / "project")
    model = (tmp_path / "project" / WRITTEN).resolve()
    text = manifest.read_text(encoding="utf-8").replace(f'path = "{WRITTEN}"',
                                                         f'path = "{model}"\nallow_outside = true')
    manifest.write_text(text, encoding="utf-8")
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(tmp_path / "dist"), str(manifest))
    bundle = tmp_path / "dist" / "quickstart-linux-1.0.0-linux_x86_64.zip"
    make_identity_model(model, shape=(2, 4))
    result = run_cli("reproduce", "-q", "--cache", str(bundler_cache), str(bundle), check=False)
    assert result.returncode == 5, result.stderr
    assert f"models[0]: {model} has sha256 {hashlib.sha256(model.read_bytes()).hexdigest()}" in result.stderr


def test_the_check_runs_before_the_network(tmp_path: Path) -> None:
    """An empty cache and no network needed: the mismatch is found before pip or a download is started."""
    manifest, digest = changed_model_project(tmp_path / "project")
    env = {"PATH": "/usr/bin:/bin", "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_NO_INPUT": "1",
           "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "bundler", "lock", "-q", "--cache", str(tmp_path / "cache"),
                             str(manifest)], capture_output=True, text=True, env=env, timeout=120)
    refused_with_5(result, "lock", digest)
