"""`diff` as a review gate (issue 38, item 7; issue 34, the minor nested bundle.json; issue 38, item 8i).

`diff` exits 1 when the bundles differ and 0 when they are the same, as diff(1) and `git diff --exit-code` do,
so CI can gate on it; errors stay above 1. A model change says how its reference outputs moved, not only its
sha256: the quickstart is built, its model replaced by one with other weights (locked and built for real), and
the two bundles compared. A bundle.json nested thousands deep is a clear exit 8, not Python's RecursionError,
and a bundle path that does not exist is exit 4 ("not found"), as the exit-code table says.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from fixtures.cli import run_cli
from integration.real_wheels.test_first_use_messages import quickstart_copy
from onnx import TensorProto, helper, numpy_helper

from bundler.operations.diff_models import reference_moves

STEM = "quickstart-linux-1.0.0-linux_x86_64"


def reweighted_mlp(path: Path) -> str:
    """The quickstart's y = relu(x @ W + b), same signature and opset, other weights."""
    weights = (np.arange(12, dtype=np.float32).reshape(4, 3) - 4.0) / 6.0
    bias = np.array([0.5, -0.25, 0.75], dtype=np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["z"]),
             helper.make_node("Relu", ["z"], ["y"])]
    graph = helper.make_graph(nodes, "tiny-mlp", [x], [y], initializer=[numpy_helper.from_array(weights, "W"),
                                                                         numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ort-bundler-tests")
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def two_models(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("review")
    old_manifest = quickstart_copy(root / "old")
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(root / "old-dist"), str(old_manifest))
    new_manifest = quickstart_copy(root / "new")
    sha = reweighted_mlp(root / "new" / "models" / "tiny-mlp.onnx")
    text = new_manifest.read_text(encoding="utf-8")
    new_manifest.write_text(text.replace("db67a4b8fc5f6964f6329c9db9dde717e7c0f1892abde30b0c141e1fbd2ece3a", sha),
                            encoding="utf-8")
    run_cli("lock", "-q", "--cache", str(bundler_cache), str(new_manifest))
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(root / "new-dist"), str(new_manifest))
    return root / "old-dist" / f"{STEM}.zip", root / "new-dist" / f"{STEM}.zip"


@pytest.mark.integration
def test_bundles_that_differ_exit_1_and_a_model_change_shows_its_reference_moving(two_models) -> None:
    old, new = two_models
    proc = run_cli("diff", str(old), str(new), check=False)
    assert proc.returncode == 1, proc.stderr
    assert "model: tiny-mlp: sha256 db67a4b8fc5f… -> " in proc.stdout
    assert "    reference output 'y': " in proc.stdout and " recorded values moved beyond rtol 0.0001" in proc.stdout
    report = json.loads(run_cli("diff", "--json", str(old), str(new), check=False).stdout)
    (model,) = [c for c in report["changes"] if c["kind"] == "model"]
    assert model["detail"].startswith("reference output 'y': ") and "the largest by" in model["detail"]


@pytest.mark.integration
def test_the_same_bundle_exits_0(two_models) -> None:
    old, _ = two_models
    assert run_cli("diff", str(old), str(old), check=False).returncode == 0


def test_a_reference_on_other_inputs_is_said_to_be_not_comparable() -> None:
    before = {"inputs": {"x": "a" * 64}, "synth": 2, "rtol": 1e-4, "atol": 1e-5,
              "outputs": {"y": {"shape": [2], "dtype": "float32", "digest": "1" * 64, "values": [1.0, 2.0]}}}
    after = {**before, "outputs": {"y": {"shape": [2], "dtype": "float32", "digest": "2" * 64, "values": [1.0, 2.5]}}}
    assert reference_moves(before, after) == [
        "reference output 'y': 1 of 2 recorded values moved beyond rtol 0.0001, atol 1e-05; the largest by 0.5 "
        "(element 1: 2 -> 2.5); mean 1.5 -> 1.75"]
    other = {**after, "inputs": {"x": "b" * 64}}
    assert reference_moves(before, other) == [
        "reference output 'y': computed on other synthesised inputs, not comparable value by value "
        "(digest 111111111111… -> 222222222222…)"]


def nested(source: Path, dest: Path, depth: int) -> Path:
    """The bundle with its bundle.json's launch environment replaced by arrays nested `depth` deep."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(dest, "w") as new:
        for info in old.infolist():
            data = old.read(info)
            if info.filename == f"{STEM}/bundle.json":
                text = json.dumps({**json.loads(data), "deep": "@"})
                data = text.replace('"@"', "[" * depth + "]" * depth).encode()
            new.writestr(info, data)
    return dest


@pytest.mark.integration
@pytest.mark.parametrize("depth", [900, 100_000])
@pytest.mark.parametrize("command", ["diff", "reproduce"])
def test_a_deeply_nested_bundle_json_is_a_clear_exit_8(two_models, tmp_path: Path, bundler_cache: Path,
                                                       depth: int, command: str) -> None:
    old, _ = two_models
    deep = nested(old, tmp_path / "deep.zip", depth)
    args = [str(old), str(deep)] if command == "diff" else ["--offline", "--cache", str(bundler_cache), str(deep)]
    proc = run_cli(command, *args, check=False)
    assert proc.returncode == 8, proc.stderr
    assert "bundle.json nests arrays or objects more than 32 levels deep" in proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["diff", "reproduce", "verify"])
def test_a_bundle_that_is_not_there_is_exit_4_not_found(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "app-1.0.0-linux_x86_64.zip"
    args = [str(missing), str(missing)] if command == "diff" else [str(missing)]
    proc = run_cli(command, "--cache", str(tmp_path / "cache"), *args, check=False)
    assert proc.returncode == 4, proc.stderr
    assert f"{missing}: not found" in proc.stderr
