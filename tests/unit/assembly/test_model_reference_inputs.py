"""The model check proves something (issue 38, item 9).

The synthesised self-check input was the ramp ((i % 251) - 125) / 16: all negative for the first 125 values,
so a small ReLU model's pinned reference was all zeros whatever its weights, and the install's self-check
accepted any model with the same signature. The inputs now have both signs from the first element (a seeded
hash of the index, the same on every machine), `lock` warns when a reference output is all zeros or constant,
and a lock pinned on the old inputs is pinned again rather than kept.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from fixtures.cli import MANIFESTS
from fixtures.wheels import ORT_VERSION, cache_root
from onnx import TensorProto, helper
from unit.assembly.test_modelgate import graph_model, model_input, save

from bundler.assembly.modelgate import gate_models
from bundler.assembly.models import _still_pinned, model_inputs
from bundler.manifest import load
from bundler.operations.lock import flat_references
from bundler.shipped.ort_bundle.synth import SYNTH_VERSION, synthesize_inputs
from bundler.sources.cache import Cache
from bundler.sources.lock import PinnedModel, read_lock

FLOATS = ["tensor(float)", "tensor(double)", "tensor(float16)"]


@pytest.mark.parametrize("element", FLOATS)
@pytest.mark.parametrize("count", [2, 4, 8, 125])
def test_small_inputs_have_both_signs(element: str, count: int) -> None:
    values = synthesize_inputs([{"name": "x", "type": element, "shape": [count]}])["x"]
    assert (values > 0).any() and (values < 0).any(), values


def test_inputs_are_the_same_bytes_every_time_and_exact_in_half_precision() -> None:
    spec = [{"name": "x", "type": "tensor(float)", "shape": [1, 300]}]
    first, second = synthesize_inputs(spec)["x"], synthesize_inputs(spec)["x"]
    assert first.tobytes() == second.tobytes()
    # The definition is fixed: a change would silently invalidate every pinned reference, so it is spelled out.
    assert hashlib.sha256(first.tobytes()).hexdigest() == \
        "859065ac3ed2ae276a735668ad32e7a69e6e5c3f36273c838c51a2b6b1744d74"
    half = synthesize_inputs([{"name": "x", "type": "tensor(float16)", "shape": [1, 300]}])["x"]
    assert np.array_equal(half.astype(np.float32), first)


def relu_model(path: Path, weights: np.ndarray) -> Path:
    """y = relu(x @ W): 4 input values, far fewer than the 125 that used to be all negative."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], weights.ravel().tolist())
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Relu", ["xw"], ["y"])]
    return save(graph_model(nodes, [x], [y], initializers=[w]), path)


def test_two_relu_models_with_different_weights_pin_different_references(tmp_path: Path) -> None:
    one = relu_model(tmp_path / "one.onnx", np.full((4, 3), 0.5, dtype=np.float32))
    two = relu_model(tmp_path / "two.onnx", np.full((4, 3), 0.25, dtype=np.float32))
    records = gate_models([model_input(one, "one"), model_input(two, "two")], ort_version=ORT_VERSION,
                          work_dir=cache_root() / "modelgate")
    outputs = [record.reference["outputs"]["y"] for record in records]
    assert outputs[0]["digest"] != outputs[1]["digest"]
    assert any(v != 0 for v in outputs[0]["values"]), outputs[0]
    assert all(record.reference["synth"] == SYNTH_VERSION for record in records)


def _pinned(name: str, outputs: dict[str, list[float]]) -> PinnedModel:
    reference = {"outputs": {key: {"values": values} for key, values in outputs.items()}}
    return PinnedModel(name=name, sha256="0" * 64, ort_version=ORT_VERSION, record=json.dumps({"reference": reference}))


def test_lock_warns_about_a_reference_that_is_all_zeros_or_constant(tmp_path: Path) -> None:
    manifest = load(MANIFESTS / "quickstart-linux.toml")
    warnings = flat_references(manifest, [_pinned("tiny-mlp", {"y": [0.0] * 6, "z": [2.5, 2.5], "w": [1.0, 2.0],
                                                              "one": [3.0], "nil": [0]})])
    assert warnings == [
        "models[0] (models/tiny-mlp.onnx): the reference output 'nil' is all zeros on the synthesised inputs, so the "
        "install's self-check cannot tell this model from another with the same signature; check the model, or give "
        "[[models]] shapes that exercise it",
        "models[0] (models/tiny-mlp.onnx): the reference output 'y' is all zeros on the synthesised inputs, so the "
        "install's self-check cannot tell this model from another with the same signature; check the model, or give "
        "[[models]] shapes that exercise it",
        "models[0] (models/tiny-mlp.onnx): the reference output 'z' is the constant 2.5 in every element on the "
        "synthesised inputs, so the install's self-check cannot tell this model from another with the same "
        "signature; check the model, or give [[models]] shapes that exercise it",
    ]


def test_the_quickstart_reference_is_not_flat_and_was_pinned_on_todays_inputs(bundler_cache: Path) -> None:
    manifest = load(MANIFESTS / "quickstart-linux.toml")
    lock = read_lock(MANIFESTS / "quickstart-linux.lock.toml")
    assert flat_references(manifest, lock.models) == []
    files = {manifest.models[0].source.key: Cache(bundler_cache).find_any(manifest.models[0].source.sha256, None)}
    inputs = model_inputs(manifest, files)
    assert _still_pinned(lock.models[0], manifest, inputs)
    old = json.loads(lock.models[0].record)
    del old["reference"]["synth"]  # a record pinned on the old ramp says nothing of its inputs
    stale = PinnedModel(name="tiny-mlp", sha256=lock.models[0].sha256, ort_version=ORT_VERSION, record=json.dumps(old))
    assert not _still_pinned(stale, manifest, inputs)


BASE = "4117c23"  # the commit this round started from: its quickstart lock pins references on the old ramp


def test_the_old_definition_is_still_the_ramp_its_references_were_computed_on() -> None:
    spec = [{"name": "f", "type": "tensor(float)", "shape": [300]}, {"name": "u", "type": "tensor(uint8)", "shape": [300]},
            {"name": "b", "type": "tensor(bool)", "shape": [4]}]
    feeds = synthesize_inputs(spec, version=1)
    ramp = (np.arange(300) % 251) - 125
    assert np.array_equal(feeds["f"], ramp / 16.0) and np.array_equal(feeds["u"], np.clip(ramp, 0, 255))
    assert feeds["b"].tolist() == [False, True, False, True]
    with pytest.raises(ValueError, match="definition 3, which this check does not know"):
        synthesize_inputs(spec, version=3)


@pytest.mark.integration
def test_a_lock_pinned_on_the_old_inputs_still_builds_checks_on_the_target_and_warns(bundler_cache: Path,
                                                                                      tmp_path: Path) -> None:
    """Users upgrade with their lock: it builds (each reference checked on the inputs it was computed on, at the
    build and by the installed self-check), and the build says how to get a reference that proves more."""
    import subprocess
    import zipfile

    import onnxruntime
    from fixtures.cli import REPO, run_cli
    from integration.real_wheels.test_first_use_messages import quickstart_copy

    from bundler.shipped.ort_bundle.selfcheck.check_context import Context
    from bundler.shipped.ort_bundle.selfcheck.model_check import check_model

    old = subprocess.run(["git", "-C", str(REPO), "show", f"{BASE}:manifests/quickstart-linux.lock.toml"],
                         capture_output=True, text=True, check=False)
    if old.returncode != 0:
        pytest.skip(f"this clone lacks commit {BASE}: {old.stderr.strip()}")
    manifest = quickstart_copy(tmp_path / "project")
    (tmp_path / "project" / "quickstart-linux.lock.toml").write_text(old.stdout, encoding="utf-8")
    built = run_cli("build", "--cache", str(bundler_cache), "-o", str(tmp_path / "dist"), str(manifest))
    assert "the lock pins the reference of model 'tiny-mlp' on the old synthesised inputs" in built.stderr
    stem = "quickstart-linux-1.0.0-linux_x86_64"
    with zipfile.ZipFile(tmp_path / "dist" / f"{stem}.zip") as archive:
        archive.extractall(tmp_path / "unpacked")
    root = tmp_path / "unpacked" / stem / "payload"
    record = json.loads((tmp_path / "unpacked" / stem / "bundle.json").read_text(encoding="utf-8"))
    (model,) = record["models"]
    assert "synth" not in model["reference"]
    check = check_model(Context(root=root, bundle=record, allow_cpu_fallback=False), onnxruntime, model,
                        ["CPUExecutionProvider"])
    assert check.status == "pass", check
