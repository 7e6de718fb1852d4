"""The model gate against real models built with onnx and the real onnxruntime 1.23.1.

No test depends on which onnxruntime this interpreter has: the gate runs 1.23.1 in this process when
that is the host's version, else in an isolated environment made once in the test cache; the worker
tests run the host's own version, whatever it is. The integration test installs a different real ORT
version into a venv and gates through it.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from fixtures.models import make_identity_model
from fixtures.wheels import ORT_VERSION, cache_root
from onnx import TensorProto, helper

from bundler import runner as runners
from bundler.assembly import modelgate, ortenv, shipped_package
from bundler.assembly.modelgate import ModelInput, gate_models
from bundler.errors import BuildError, HashMismatchError
from bundler.shipped.ort_bundle.synth import output_digest, synthesize_inputs

OTHER_ORT_VERSION = "1.22.1"


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def graph_model(nodes, inputs, outputs, *, initializers=(), opsets=(("", 13),)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, version) for domain, version in opsets])
    model.ir_version = 8
    return model


def model_input(path: Path, name: str = "m", shapes=None) -> ModelInput:
    return ModelInput(name=name, path=path, sha256=hashlib.sha256(path.read_bytes()).hexdigest(), shapes=shapes or {})


def matmul_model(path: Path) -> tuple[Path, np.ndarray]:
    """y = x @ W with a dynamic batch: real arithmetic whose reference numpy can recompute."""
    weights = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5.0) / 7.0
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], weights.ravel().tolist())
    return save(graph_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [x], [y], initializers=[w]), path), weights


HOST_ORT_VERSION = onnxruntime.__version__


def gate_work() -> Path:
    """Where the isolated ORT 1.23.1 environment lives when the host has another version: made once."""
    return cache_root() / "modelgate"


def gate_one(model: ModelInput, tmp_path: Path):
    return gate_models([model], ort_version=ORT_VERSION, work_dir=gate_work())


def test_good_model_is_recorded_with_signature_opsets_and_reference(tmp_path):
    path, weights = matmul_model(tmp_path / "mm.onnx")
    model = model_input(path, "mm", shapes={"x": (5, 4)})

    (record,) = gate_one(model, tmp_path)

    assert record.name == "mm" and record.sha256 == model.sha256
    assert record.opsets == {"ai.onnx": 13}
    assert record.inputs == [{"name": "x", "type": "tensor(float)", "shape": ["batch", 4]}]
    assert record.outputs == [{"name": "y", "type": "tensor(float)", "shape": ["batch", 3]}]
    assert record.shapes == {"x": [5, 4]}
    feeds = synthesize_inputs(record.inputs, record.shapes)
    expected = feeds["x"] @ weights
    output = record.reference["outputs"]["y"]
    assert output["shape"] == [5, 3] and output["dtype"] == "float32"
    np.testing.assert_allclose(np.array(output["values"], dtype=np.float32).reshape(5, 3), expected, rtol=1e-6)
    assert record.reference["inputs"] == {"x": output_digest(feeds["x"])}
    assert record.reference["rtol"] > 0 and record.reference["atol"] > 0
    assert json.loads(json.dumps(record.to_json())) == record.to_json()


def test_identity_reference_digest_is_the_input_digest(tmp_path):
    path = make_identity_model(tmp_path / "id.onnx", shape=("n", 4))

    (record,) = gate_one(model_input(path), tmp_path)

    synthesized = synthesize_inputs(record.inputs)["x"]  # dynamic dim becomes 1
    assert synthesized.shape == (1, 4)
    assert record.reference["outputs"]["y"]["digest"] == output_digest(synthesized)
    assert record.reference["outputs"]["y"]["values"] == [9 / 16, -41 / 16, -19 / 16, 96 / 16]  # both signs


def test_truncated_model_fails_naming_it(tmp_path):
    path = make_identity_model(tmp_path / "full.onnx")
    truncated = tmp_path / "cut.onnx"
    truncated.write_bytes(path.read_bytes()[:-9])

    with pytest.raises(BuildError, match=r"model 'cut' \(models/cut.onnx\): .* not a readable ONNX model"):
        gate_one(model_input(truncated, "cut"), tmp_path)


def test_changed_file_fails_with_hash_mismatch(tmp_path):
    path = make_identity_model(tmp_path / "m.onnx")
    model = ModelInput(name="m", path=path, sha256="0" * 64)

    with pytest.raises(HashMismatchError, match="expected sha256 0{64}"):
        gate_one(model, tmp_path)


def identity_with_opset(path: Path, opset: int) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    return save(graph_model([helper.make_node("Identity", ["x"], ["y"])], [x], [y], opsets=(("", opset),)), path)


def test_too_new_opset_fails_with_orts_reason(tmp_path):
    path = identity_with_opset(tmp_path / "new.onnx", 99)

    with pytest.raises(BuildError) as caught:
        gate_one(model_input(path, "new"), tmp_path)

    message = str(caught.value)
    assert message.startswith("model 'new' (models/new.onnx): does not load (opset imports: ai.onnx 99), "
                              "ORT 1.23.1 says: ")
    assert "Opset 99" in message and "till opset 23" in message


def test_custom_domain_operator_fails_with_orts_reason(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    model = graph_model([helper.make_node("Foo", ["x"], ["y"], domain="my.custom")], [x], [y],
                        opsets=(("", 13), ("my.custom", 1)))
    path = save(model, tmp_path / "custom.onnx")

    with pytest.raises(BuildError, match=r"model 'custom' .*does not load \(opset imports: ai.onnx 13, my.custom 1\), "
                                         r"ORT 1.23.1 says: .*my.custom:Foo"):
        gate_one(model_input(path, "custom"), tmp_path)


def test_model_that_loads_but_cannot_run_fails_with_orts_reason(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [3, 3])
    model = graph_model([helper.make_node("Reshape", ["x", "s"], ["y"])], [x], [y], initializers=[shape])
    onnx.checker.check_model(model, full_check=True)  # the checker lets it through: only running finds it
    path = save(model, tmp_path / "reshape.onnx")

    with pytest.raises(BuildError, match=r"model 'reshape' .*fails to run on synthesised inputs.*"
                                         r"ORT 1.23.1 says: .*cannot be reshaped"):
        gate_one(model_input(path, "reshape"), tmp_path)


def test_mismatched_static_matmul_fails_the_checker(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 2], [0.0] * 6)
    path = save(graph_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [x], [y], initializers=[w]),
                tmp_path / "mm.onnx")

    with pytest.raises(BuildError, match=r"model 'mm' .*fails the ONNX checker: .*Incompatible dimensions"):
        gate_one(model_input(path, "mm"), tmp_path)


def test_shapes_that_contradict_the_model_fail(tmp_path):
    path = make_identity_model(tmp_path / "m.onnx", shape=("n", 4))

    with pytest.raises(BuildError, match=r"model 'm' .*shapes do not fit the model: .*given shape is \[2, 5\]"):
        gate_one(model_input(path, shapes={"x": (2, 5)}), tmp_path)


def test_every_failing_model_is_named_at_once(tmp_path):
    bad_run = identity_with_opset(tmp_path / "a.onnx", 99)
    good = make_identity_model(tmp_path / "b.onnx")
    bad_shape = make_identity_model(tmp_path / "c.onnx", shape=("n", 4))
    truncated = tmp_path / "d.onnx"
    truncated.write_bytes(good.read_bytes()[:-9])
    models = [model_input(bad_run, "a"), model_input(good, "b"), model_input(bad_shape, "c", shapes={"y": (1, 4)}),
              model_input(truncated, "d")]

    with pytest.raises(BuildError) as caught:
        gate_models(models, ort_version=ORT_VERSION, work_dir=gate_work())

    lines = str(caught.value).splitlines()
    assert sorted(line.split(":")[0] for line in lines) == [
        "model 'a' (models/a.onnx)", "model 'c' (models/c.onnx)", "model 'd' (models/d.onnx)"]


def made_identity_model() -> bytes:
    """The self-check's identity model as onnx's helpers make it: Identity over float32[2, 8], opset 13, IR 8
    (opset 13 needs IR 7+; 8 loads in every ORT the bundler supports)."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="identity")],
                              "ort-bundler-selfcheck", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="ort-bundler")
    model.ir_version = 8
    return model.SerializeToString(deterministic=True)


def test_identity_model_bytes_are_the_shipped_file_onnx_makes_and_run_exactly():
    first = shipped_package.identity_model_bytes()

    assert first == made_identity_model()
    onnx.checker.check_model(onnx.load_from_string(first), full_check=True)
    session = onnxruntime.InferenceSession(first, providers=["CPUExecutionProvider"])
    feeds = synthesize_inputs([{"name": "x", "type": "tensor(float)", "shape": [2, 8]}])
    (result,) = session.run(None, feeds)
    assert np.array_equal(result, feeds["x"])


def test_reference_worker_in_a_real_subprocess_matches_in_process(tmp_path):
    path, _ = matmul_model(tmp_path / "mm.onnx")
    bad = identity_with_opset(tmp_path / "new.onnx", 99)
    models = [model_input(path, "mm", shapes={"x": (2, 4)}), model_input(bad, "new")]

    paths = {model.name: model.path for model in models}
    report = modelgate.run_reference_worker(Path(sys.executable), models, paths=paths, ort_version=HOST_ORT_VERSION,
                                            runner=runners.run, work_dir=tmp_path / "work")

    in_process = modelgate.probe_models(models, paths=paths, ort_version=HOST_ORT_VERSION, runner=runners.run,
                                        work_dir=tmp_path)
    assert report == json.loads(json.dumps(in_process))
    assert report["mm"]["ok"] and report["new"]["stage"] == "load"


def test_reference_worker_refuses_another_ort_version(tmp_path):
    path = make_identity_model(tmp_path / "m.onnx")

    with pytest.raises(BuildError, match=f"imports onnxruntime {re.escape(HOST_ORT_VERSION)}, expected 1.0.0"):
        modelgate.run_reference_worker(Path(sys.executable), [model_input(path)], paths={"m": path},
                                       ort_version="1.0.0", runner=runners.run, work_dir=tmp_path / "work")


@pytest.mark.integration
def test_gate_in_an_isolated_environment_with_another_ort_version(tmp_path):
    """A real venv with onnxruntime 1.22.1 (made once in the test cache): its own opset limit applies."""
    work = cache_root() / "modelgate"
    good = make_identity_model(tmp_path / "good.onnx")
    opset23 = identity_with_opset(tmp_path / "opset23.onnx", 23)

    (record,) = gate_models([model_input(good, "good")], ort_version=OTHER_ORT_VERSION, work_dir=work)
    with pytest.raises(BuildError, match=f"model 'opset23' .*does not load .*, ORT {OTHER_ORT_VERSION} says: "
                                         ".*Opset 23"):
        gate_models([model_input(opset23, "opset23")], ort_version=OTHER_ORT_VERSION, work_dir=work)

    assert record.reference["outputs"]["y"]["values"] == [9 / 16, -41 / 16, -19 / 16, 96 / 16]  # both signs


def test_non_finite_reference_values_stay_valid_json(tmp_path: Path) -> None:
    """Log of the synthesised (partly negative) inputs is NaN: bundle.json must still be strict JSON,
    which PowerShell's ConvertFrom-Json needs."""
    import json

    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    model = helper.make_model(helper.make_graph([helper.make_node("Log", ["x"], ["y"])], "log", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "log.onnx"
    path.write_bytes(model.SerializeToString())
    (record,) = gate_models([ModelInput(name="log", path=path, sha256=hashlib.sha256(path.read_bytes()).hexdigest())],
                            ort_version=onnxruntime.__version__, work_dir=tmp_path / "work")
    values = record.to_json()["reference"]["outputs"]["y"]["values"]
    assert "nan" in values
    json.dumps(record.to_json(), allow_nan=False)


# -- references pinned by `lock`, checked by `build` ------------------------------------------------------------


def perturbed_by_one_ulp(probes: dict) -> dict:
    """What another CPU kernel may return: every float output value moved by one unit in the last place."""
    changed = json.loads(json.dumps(probes))
    for probe in changed.values():
        for output in probe["reference"]["outputs"].values():
            values = np.asarray(output["values"], dtype=output["dtype"])
            moved = np.nextafter(values, np.asarray(np.inf, dtype=values.dtype))
            output["values"] = moved.tolist()
            output["digest"] = output_digest(moved.reshape(output["shape"]))
    return changed


def pinned_matmul(tmp_path: Path) -> tuple[ModelInput, modelgate.ModelRecord]:
    path, _ = matmul_model(tmp_path / "mm.onnx")
    model = model_input(path, "mm", shapes={"x": (2, 4)})
    (record,) = gate_models([model], ort_version=ORT_VERSION, work_dir=gate_work())
    return model, modelgate.ModelRecord.from_pinned(name="mm", sha256=model.sha256, text=record.pinned_json())


def test_pinned_record_round_trips_its_json_with_nan_and_non_tensor_outputs() -> None:
    record = modelgate.ModelRecord(name="m", sha256="a" * 64, opsets={"ai.onnx": 13}, inputs=[{"shape": ["n", None]}],
                                   outputs=[], shapes={}, reference={"outputs": {"y": {"values": ["nan", 1.5]},
                                                                                "z": {"kind": "dict", "digest": None}}})
    again = modelgate.ModelRecord.from_pinned(name="m", sha256="a" * 64, text=record.pinned_json())
    assert again == record


def test_build_gate_ships_the_pinned_record_even_when_this_cpu_rounds_one_ulp_differently(tmp_path, monkeypatch):
    model, pinned = pinned_matmul(tmp_path)
    real = modelgate.probe_models
    seen: list[dict] = []

    def other_cpu(*args, **kwargs):
        seen.append(perturbed_by_one_ulp(real(*args, **kwargs)))
        return seen[-1]

    monkeypatch.setattr(modelgate, "probe_models", other_cpu)
    (shipped,) = modelgate.gate_pinned([model], {"mm": pinned}, ort_version=ORT_VERSION, work_dir=gate_work(),
                                       results_dir=tmp_path / "results")

    assert seen and seen[0]["mm"]["reference"]["outputs"]["y"]["values"] != pinned.reference["outputs"]["y"]["values"]
    assert shipped == pinned  # the pinned bytes, not this run's
    assert len(list((tmp_path / "results").iterdir())) == 1


def test_a_gate_result_is_reused_for_the_same_model_ort_and_pinned_record(tmp_path, monkeypatch):
    model, pinned = pinned_matmul(tmp_path)
    probed: list[str] = []
    checked: list[str] = []
    real, real_check = modelgate.probe_models, modelgate.check_model_files

    def counting(models, **kwargs):
        probed.extend(m.name for m in models)
        return real(models, **kwargs)

    def counting_checks(models):
        checked.extend(m.name for m in models)
        return real_check(models)

    monkeypatch.setattr(modelgate, "probe_models", counting)
    monkeypatch.setattr(modelgate, "check_model_files", counting_checks)
    for _ in range(2):
        modelgate.gate_pinned([model], {"mm": pinned}, ort_version=ORT_VERSION, work_dir=gate_work(),
                              results_dir=tmp_path / "results")
    changed = modelgate.ModelRecord(**{**pinned.__dict__, "reference": {**pinned.reference, "rtol": 0.5}})
    modelgate.gate_pinned([model], {"mm": changed}, ort_version=ORT_VERSION, work_dir=gate_work(),
                          results_dir=tmp_path / "results")

    assert probed == ["mm", "mm"]  # once, then again only for the changed pinned record
    assert checked == []  # onnx's checks ran when the lock pinned these bytes: the build's gate never imports onnx


def test_a_pinned_reference_the_pinned_ort_cannot_reproduce_fails_naming_the_largest_difference(tmp_path):
    model, pinned = pinned_matmul(tmp_path)
    outputs = json.loads(json.dumps(pinned.reference["outputs"]))
    outputs["y"]["values"][4] += 0.5
    outputs["y"]["values"][1] += 0.25
    outputs["y"]["digest"] = output_digest(np.asarray(outputs["y"]["values"], dtype=np.float32).reshape(2, 3))
    wrong = modelgate.ModelRecord(**{**pinned.__dict__, "reference": {**pinned.reference, "outputs": outputs}})

    with pytest.raises(BuildError) as caught:
        modelgate.gate_pinned([model], {"mm": wrong}, ort_version=ORT_VERSION, work_dir=gate_work(),
                              results_dir=tmp_path / "results")

    message = str(caught.value)
    assert message.startswith("model 'mm' (models/mm.onnx): ORT 1.23.1 on this machine does not reproduce the pinned "
                              "reference within rtol 0.0001, atol 1e-05: the largest difference is 0.5 in output 'y' "
                              "element 4")
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())


def test_a_pinned_signature_that_differs_fails_and_says_to_lock_again(tmp_path):
    model, pinned = pinned_matmul(tmp_path)
    wrong = modelgate.ModelRecord(**{**pinned.__dict__, "outputs": [{"name": "z", "type": "tensor(float)",
                                                                     "shape": ["batch", 3]}]})

    with pytest.raises(BuildError, match=r"model 'mm' .*but the lock pins inputs .*run `ort-bundler lock` again"):
        modelgate.gate_pinned([model], {"mm": wrong}, ort_version=ORT_VERSION, work_dir=gate_work(),
                              results_dir=tmp_path / "results")


@pytest.mark.integration
def test_an_isolated_environment_whose_interpreter_is_gone_is_rebuilt(tmp_path):
    """A dead environment: its ready marker is there, its interpreter is not (a deleted base Python, a
    half-removed folder). The gate must make it again, not run a missing program."""
    version = OTHER_ORT_VERSION if HOST_ORT_VERSION != OTHER_ORT_VERSION else ORT_VERSION
    env_dir = tmp_path / f"ort-{version}-py{sys.version_info.major}{sys.version_info.minor}"
    (env_dir / "bin").mkdir(parents=True)
    ready = "\n".join(ortenv.isolated_requirements(version)) + "\n"
    (env_dir / ortenv.READY_MARKER).write_text(ready, encoding="utf-8")
    (env_dir / "bin" / "python").symlink_to(tmp_path / "gone" / "python3")

    python = ortenv.isolated_python(version, runner=runners.run, work_dir=tmp_path)

    assert python.exists()
    assert runners.run([str(python), "-c", "import onnxruntime; print(onnxruntime.__version__)"]).strip() == version


def test_an_ort_built_against_numpy_1_gets_numpy_1_in_its_isolated_environment():
    assert ortenv.isolated_requirements("1.17.1") == ["onnxruntime==1.17.1", "numpy<2"]
    assert ortenv.isolated_requirements("1.18.1") == ["onnxruntime==1.18.1", "numpy<2"]
    assert ortenv.isolated_requirements("1.23.1") == ["onnxruntime==1.23.1", "numpy"]


def test_a_killed_gates_scratch_is_removed_by_the_next_gate_and_a_live_ones_kept(tmp_path: Path) -> None:
    """Issue 18 §6 for the model gate: a SIGKILLed build leaves `gate-*` under cache/ort-envs/; the next gate
    removes it, but never the folder of a gate that still runs in another process (it holds the lock)."""
    import subprocess
    import sys

    dead = tmp_path / "gate-0123456789abcdef"
    (dead / "selfcheck-reference.py").parent.mkdir(parents=True)
    (dead / "selfcheck-reference.py").write_text("left by a killed build\n")
    (tmp_path / "gate-0123456789abcdef.lock").write_text("")
    old_style = tmp_path / "gate-k3j2h1g0"  # from a version that made it with TemporaryDirectory, no lock
    old_style.mkdir()
    live = tmp_path / "gate-fedcba9876543210"
    live.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from filelock import FileLock; lock = FileLock(sys.argv[1]); lock.acquire(); "
        "print('held', flush=True); time.sleep(60)"), str(tmp_path / "gate-fedcba9876543210.lock")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with modelgate.gate_scratch(tmp_path) as private:
            assert private.is_dir() and private.name.startswith("gate-")
            assert not dead.exists() and not old_style.exists()
            assert live.is_dir()
        assert not private.exists() and live.is_dir()
    finally:
        holder.kill()
        holder.communicate()


@pytest.mark.parametrize(("fresh", "pinned", "expected"), [
    ([1.0, "nan", "inf"], [1.0, "nan", "inf"], None),  # NaN matches NaN, an infinity itself: as numpy.isclose
    ([1.0, 2.00001, 3.0], [1.0, 2.0, 3.0], None),  # within rtol 1e-4
    ([1.0, 2.5, 3.75], [1.0, 2.0, 3.0], "the largest difference is 0.75 in output 'y' element 2 (3.75 here, 3.0 pinned)"),
    ([1.0, "nan"], [1.0, 2.0], "the largest difference is inf in output 'y' element 1 (nan here, 2.0 pinned)"),
    (["-inf", 2.0], ["inf", 2.0], "the largest difference is inf in output 'y' element 0 (-inf here, inf pinned)"),
    ([1.0], [1.0, 2.0], "output 'y' has 1 reference values, pinned 2"),
])
def test_the_largest_difference_compares_values_as_numpy_isclose_does(fresh, pinned, expected):
    """The build compares a handful of reference values in plain Python, NumPy never imported into it."""
    def output(values):
        return {"y": {"shape": [2, 3], "dtype": "float32", "digest": "d", "values": values}}

    assert modelgate.largest_difference(output(fresh), output(pinned), rtol=1e-4, atol=1e-5) == expected
    if len(fresh) == len(pinned):  # and NumPy, asked the same, agrees
        numeric = [[float(v) for v in values] for values in (fresh, pinned)]
        assert np.isclose(*numeric, rtol=1e-4, atol=1e-5, equal_nan=True).all() == (expected is None)
