"""The command line as users meet it: help with examples, usage errors, init."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli
from fixtures.models import make_identity_model

from bundler.cli import main
from bundler.manifest import load


@pytest.mark.parametrize("command", ["init", "lock", "fetch", "build", "verify", "inspect", "package"])
def test_every_command_has_help_with_examples(command: str) -> None:
    proc = run_cli(command, "--help")
    assert "examples:" in proc.stdout and f"ort-bundler {command}" in proc.stdout
    assert "--verbose" in proc.stdout and "--quiet" in proc.stdout


def test_top_level_help_documents_exit_codes() -> None:
    out = run_cli("--help").stdout
    for line in ("3  invalid manifest", "5  hash mismatch", "8  verification failure"):
        assert line in out


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build"]) == 2
    assert main(["frobnicate"]) == 2
    assert main(["fetch", str(MANIFESTS / "quickstart-linux.toml"), "--offline", "--mirror", str(tmp_path)]) == 2
    assert "choose one" in capsys.readouterr().err


def test_verbose_shows_the_traceback_and_quiet_hides_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[bundle]\n")
    quiet = run_cli("build", str(bad), check=False)
    assert quiet.returncode == 3 and "Traceback" not in quiet.stderr
    verbose = run_cli("build", "-v", str(bad), check=False)
    assert verbose.returncode == 3 and "Traceback" in verbose.stderr


def test_init_writes_a_manifest_that_loads_and_pins_local_files(tmp_path: Path) -> None:
    (tmp_path / "inputs").mkdir()
    model = make_identity_model(tmp_path / "inputs" / "my model.onnx")
    wheel = tmp_path / "inputs" / "onnxruntime-1.23.1-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"a stand-in: init only hashes the file")
    out = tmp_path / "app.toml"
    run_cli("init", "--from", str(wheel), str(model), "-o", str(out))
    manifest = load(out)
    assert manifest.bundle.platform == "linux_x86_64" and manifest.ort.version == "1.23.1"
    assert manifest.ort.capi.sha256 == (hashlib.sha256(wheel.read_bytes()).hexdigest(),)
    assert manifest.models[0].name == "my-model"
    assert manifest.models[0].source.location == str(model)
    # a working default entry point (tests/integration/real_wheels/test_first_use_init.py)
    assert manifest.launch.module == "ort_bundle.infer"
    again = run_cli("init", "-o", str(out), check=False)
    assert again.returncode == 2 and "already exists" in again.stderr
    unknown = tmp_path / "inputs" / "notes.txt"
    unknown.write_text("?")
    proc = run_cli("init", "--from", str(unknown), "-o", str(tmp_path / "x.toml"), check=False)
    assert proc.returncode == 2 and "cannot tell what this file is" in proc.stderr
    assert not (tmp_path / "x.toml").exists()


def test_plain_init_loads_after_the_placeholders_are_filled(tmp_path: Path) -> None:
    out = tmp_path / "starter.toml"
    run_cli("init", "-o", str(out))
    text = out.read_text().replace("<sha256 of the wheel for your platform>", "0" * 64)
    out.write_text(text)
    assert load(out).ort.capi.location == "onnxruntime==1.23.1"


def test_common_options_are_accepted_before_the_command(tmp_path: Path, bundler_cache: Path) -> None:
    """Issue 26: `ort-bundler --cache DIR build …` failed with "invalid choice"; the README says every command takes it."""
    manifest = str(MANIFESTS / "quickstart-linux.toml")
    before = run_cli("--cache", str(bundler_cache), "-q", "fetch", "--offline", manifest)
    assert before.stdout == "" and before.stderr == ""  # -q before the command is honoured too
    empty = tmp_path / "empty-cache"
    missing = run_cli("--cache", str(empty), "fetch", "--offline", manifest, check=False)
    assert missing.returncode == 4 and str(empty) in missing.stderr  # the cache named before the command is used
    after_wins = run_cli("--cache", str(empty), "fetch", "--offline", manifest, "--cache", str(bundler_cache))
    assert after_wins.returncode == 0 and str(bundler_cache) in after_wins.stdout
