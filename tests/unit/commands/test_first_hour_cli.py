"""What a new user met in the first hour (issue 38, items 5, 8c, 8d, 8g and 8h), each driven through the real CLI.

5: a model saved with onnx's defaults (the newest IR version and opset) passed `init` and `inspect` silently, and
`lock` refused it after its dependency resolution with ORT's raw C++ text. `init` and `inspect` now say which
IR version and opsets the pinned ORT loads, `lock` refuses such a model before it resolves anything, naming the
path as the manifest wrote it, and the gate's own refusal says what the release loads. The table the advice
comes from is checked here against the real ORT 1.23.1 (the model gate's environment).
8c: a mistyped command gets "did you mean". 8d: `init` and `lock` print JSON with `--json`.
8g: SOURCE_DATE_EPOCH in the environment is ignored, and the build says so (the bundle's bytes do not change).
8h: a win_amd64 bundle without [vc_redist] gets a warning at build that the target needs the VC++ runtime.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import onnx
import pytest
from fixtures.cli import MANIFESTS, run_cli
from fixtures.wheels import ORT_VERSION, cache_root
from integration.real_wheels.test_first_use_messages import quickstart_copy
from onnx import TensorProto, helper
from unit.assembly.test_modelgate import model_input

from bundler.assembly.modelgate import gate_models
from bundler.cli import main
from bundler.errors import BuildError
from bundler.readers.onnx_limits import limits_for


def stamped(path: Path, *, ir: int | None = None, opset: int | None = None) -> Path:
    """y = relu(x @ W) as the quickstart's shape, saved with onnx's defaults unless `ir`/`opset` are given."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    w = helper.make_tensor("W", TensorProto.FLOAT, [4, 3], [0.1 * i - 0.5 for i in range(12)])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Relu", ["xw"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=[w])
    opsets = [helper.make_opsetid("", opset)] if opset is not None else None
    model = helper.make_model(graph, opset_imports=opsets) if opsets else helper.make_model(graph)
    if ir is not None:
        model.ir_version = ir
    path.write_bytes(model.SerializeToString())
    return path


def test_onnx_defaults_are_newer_than_the_pinned_ort() -> None:
    """The premise: what onnx writes by default is newer than ORT 1.23 loads (else this file tests nothing)."""
    limits = limits_for(ORT_VERSION)
    assert limits is not None
    assert onnx.IR_VERSION > limits.ir and onnx.defs.onnx_opset_version() > limits.opset


def test_init_says_at_once_which_ir_and_opsets_the_pinned_ort_loads(tmp_path: Path) -> None:
    model = stamped(tmp_path / "new.onnx")
    proc = run_cli("init", "--from", str(model), "-o", str(tmp_path / "app.toml"))
    assert (f"warning: --from {model} is stamped IR version {onnx.IR_VERSION} (at most 11) and ai.onnx opset "
            f"{onnx.defs.onnx_opset_version()} (at most 23), newer than ONNX Runtime {ORT_VERSION} loads") in proc.stderr
    assert "convert_version(model, 23)" in proc.stderr and "model.ir_version = 11" in proc.stderr
    assert (tmp_path / "app.toml").is_file()  # the manifest is still written: the model can be re-saved later
    quiet = run_cli("init", "--from", str(stamped(tmp_path / "old.onnx", ir=8, opset=17)), "-o",
                    str(tmp_path / "ok.toml"))
    assert "warning" not in quiet.stderr


def test_inspect_says_which_ort_loads_the_model(tmp_path: Path) -> None:
    new = run_cli("inspect", str(stamped(tmp_path / "new.onnx"))).stdout
    assert f"ONNX Runtime {ORT_VERSION} loads IR version 11 and ai.onnx opset 23, ai.onnx.ml opset 5 at most" in new
    assert "warning: new.onnx is stamped IR version" in new
    old = run_cli("inspect", str(stamped(tmp_path / "old.onnx", ir=9, opset=20))).stdout
    assert "ONNX Runtime 1.17 and newer load it" in old and "warning" not in old
    findings = json.loads(run_cli("inspect", "--json", str(tmp_path / "old.onnx")).stdout)
    assert findings["onnxruntime"] == {"oldest": "1.17", "default": ORT_VERSION, "too_new": None,
                                       "takes": f"ONNX Runtime {ORT_VERSION} loads IR version 11 and ai.onnx opset "
                                                "23, ai.onnx.ml opset 5 at most"}


def test_lock_refuses_such_a_model_before_resolving_anything(tmp_path: Path) -> None:
    manifest = quickstart_copy(tmp_path / "project")
    model = stamped(tmp_path / "project" / "models" / "tiny-mlp.onnx")
    text = manifest.read_text(encoding="utf-8").replace(
        "db67a4b8fc5f6964f6329c9db9dde717e7c0f1892abde30b0c141e1fbd2ece3a", hashlib.sha256(model.read_bytes()).hexdigest())
    manifest.write_text(text, encoding="utf-8")
    env = {**os.environ, "PIP_INDEX_URL": "http://127.0.0.1:9/simple"}  # pip would fail: the refusal comes first
    proc = run_cli("lock", "-q", "--cache", str(cache_root() / "bundler-cache"), str(manifest), env=env, check=False)
    assert proc.returncode == 7, proc.stderr
    assert f"models[0] (models/tiny-mlp.onnx) is stamped IR version {onnx.IR_VERSION} (at most 11)" in proc.stderr
    assert "pin a newer ONNX Runtime" in proc.stderr and "onnxruntime_src" not in proc.stderr
    lock = tmp_path / "project" / "quickstart-linux.lock.toml"
    assert lock.read_bytes() == (MANIFESTS / "quickstart-linux.lock.toml").read_bytes()  # nothing written


@pytest.mark.parametrize(("ir", "opset", "loads"), [(11, 23, True), (12, 23, False), (11, 24, False)])
def test_the_table_is_what_the_real_ort_loads(tmp_path: Path, ir: int, opset: int, loads: bool) -> None:
    """The pinned ORT itself (the gate's environment) loads exactly up to the table's row; above it, the gate's
    refusal says what the release loads."""
    model = model_input(stamped(tmp_path / "m.onnx", ir=ir, opset=opset), "m")
    if loads:
        assert gate_models([model], ort_version=ORT_VERSION, work_dir=cache_root() / "modelgate")
        return
    with pytest.raises(BuildError) as caught:
        gate_models([model], ort_version=ORT_VERSION, work_dir=cache_root() / "modelgate")
    assert f"ONNX Runtime {ORT_VERSION} loads IR version 11 and ai.onnx opset 23" in str(caught.value)


def test_a_mistyped_command_gets_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["biuld", "app.toml"]) == 2
    assert "invalid choice: 'biuld'" in (err := capsys.readouterr().err) and "did you mean 'build'?" in err
    assert main(["--cache", "/tmp/x", "verfy", "a.zip"]) == 2
    assert "did you mean 'verify'?" in capsys.readouterr().err
    assert main(["zzzz"]) == 2
    assert "did you mean" not in capsys.readouterr().err


def test_init_json(tmp_path: Path) -> None:
    model = stamped(tmp_path / "new.onnx")
    proc = run_cli("init", "--json", "--from", str(model), "-o", str(tmp_path / "app.toml"))
    report = json.loads(proc.stdout)
    assert report["manifest"] == str(tmp_path / "app.toml") and report["models"] == ["new"]
    assert report["ort_version"] == ORT_VERSION and report["platform"] == "win_amd64"
    assert len(report["warnings"]) == 1 and report["warnings"][0].startswith(f"--from {model} is stamped")


@pytest.mark.integration
def test_lock_json(tmp_path: Path, bundler_cache: Path) -> None:
    manifest = quickstart_copy(tmp_path / "project")
    report = json.loads(run_cli("lock", "--json", "--cache", str(bundler_cache), str(manifest)).stdout)
    assert report["lock"] == str(tmp_path / "project" / "quickstart-linux.lock.toml")
    assert report["target"] == {"platform": "linux_x86_64", "python": "3.11"}
    assert "numpy" in {w["name"] for w in report["wheels"]}
    assert report["models"][0]["name"] == "tiny-mlp"


@pytest.mark.integration
def test_source_date_epoch_in_the_environment_is_ignored_and_said(tmp_path: Path, bundler_cache: Path) -> None:
    args = ["build", "--no-reuse", "--cache", str(bundler_cache), str(MANIFESTS / "quickstart-linux.toml")]
    plain = run_cli(*args, "-o", str(tmp_path / "a"))
    with_env = run_cli(*args, "-o", str(tmp_path / "b"), env={**os.environ, "SOURCE_DATE_EPOCH": "1700000000"})
    assert "SOURCE_DATE_EPOCH" not in plain.stderr
    assert ("warning: SOURCE_DATE_EPOCH=1700000000 in the environment is ignored: the bundle's timestamps come from "
            "[bundle] source_date_epoch (1767225600 in quickstart-linux.toml)") in with_env.stderr
    name = "quickstart-linux-1.0.0-linux_x86_64.zip"
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.integration
def test_a_windows_bundle_without_vc_redist_is_warned_about(tmp_path: Path, bundler_cache: Path) -> None:
    win = run_cli("build", "--cache", str(bundler_cache), "-o", str(tmp_path), str(MANIFESTS / "quickstart-win.toml"))
    assert ("warning: quickstart-win-1.0.0-win_amd64 needs the Visual C++ 2015-2022 runtime (x64) 14.") in win.stderr
    assert "the manifest has no [vc_redist]" in win.stderr
    linux = run_cli("build", "--cache", str(bundler_cache), "-o", str(tmp_path),
                    str(MANIFESTS / "quickstart-linux.toml"))
    assert "Visual C++" not in linux.stderr


def test_cache_option_beats_the_environment_and_the_environment_beats_the_user_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38 §8f: the docs say `--cache DIR`, else `$ORT_BUNDLER_CACHE`, else the user cache folder; so does
    the code every command asks (commands/shared.py cache_of)."""
    import argparse

    from bundler.commands.shared import cache_of

    monkeypatch.setenv("ORT_BUNDLER_CACHE", str(tmp_path / "from-env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_of(argparse.Namespace(cache=tmp_path / "from-option")).root == tmp_path / "from-option"
    assert cache_of(argparse.Namespace(cache=None)).root == tmp_path / "from-env"
    monkeypatch.delenv("ORT_BUNDLER_CACHE")
    assert cache_of(argparse.Namespace(cache=None)).root == tmp_path / "xdg" / "ort-bundler"
