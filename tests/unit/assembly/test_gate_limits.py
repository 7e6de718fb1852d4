"""The model gate's wall-clock limit: a tiny model that runs forever is stopped, and named.

The model is real (made with onnx): a Loop with 10^12 trips over an Add, a few hundred bytes that keep ORT
busy for days. The limit is lowered to seconds through its setting (ORT_BUNDLER_GATE_TIMEOUT); each test runs
in well under a minute, where without the limit it would never end (the CLI test's own timeout says so).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import onnx
import onnxruntime
import pytest
from fixtures.cli import MANIFESTS
from fixtures.models import make_identity_model
from fixtures.wheels import ORT_VERSION
from onnx import TensorProto, helper

from bundler.assembly import gate_limits
from bundler.assembly.modelgate import ModelInput, ModelRecord, gate_models, gate_pinned
from bundler.errors import BuildError, UsageError

HOST_ORT_VERSION = onnxruntime.__version__
TRIPS = 10**12


def spinning_model(path: Path) -> Path:
    """y = x + 1, 10^12 times over: valid ONNX (the checker passes it), a few hundred bytes."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "one"], ["acc_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1])],
        initializer=[helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "keep_going", "x"], ["y"], body=body)],
        "spin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        initializer=[helper.make_tensor("trips", TensorProto.INT64, [], [TRIPS]),
                     helper.make_tensor("keep_going", TensorProto.BOOL, [], [True])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    path.write_bytes(model.SerializeToString())
    return path


def model_input(path: Path, name: str) -> ModelInput:
    return ModelInput(name=name, path=path, sha256=hashlib.sha256(path.read_bytes()).hexdigest())


def test_the_spinning_model_is_tiny(tmp_path: Path) -> None:
    assert spinning_model(tmp_path / "spin.onnx").stat().st_size < 400


def test_lock_s_gate_stops_a_model_that_runs_past_the_limit_and_names_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two models in one worker: the one that finishes passes its probe, the one on the clock is named alone."""
    monkeypatch.setenv(gate_limits.GATE_SECONDS_ENV, "3")
    good = model_input(make_identity_model(tmp_path / "good.onnx"), "good")
    spin = model_input(spinning_model(tmp_path / "spin.onnx"), "spin")
    started = time.monotonic()
    with pytest.raises(BuildError) as caught:
        gate_models([good, spin], ort_version=HOST_ORT_VERSION, work_dir=tmp_path / "work")
    assert time.monotonic() - started < 60
    message = str(caught.value)
    assert message.startswith("model 'spin' (models/spin.onnx): the model check in ONNX Runtime ")
    assert "did not finish within 3 seconds and was stopped" in message
    assert gate_limits.GATE_SECONDS_ENV in message and "good" not in message and "\n" not in message


def test_build_s_gate_has_the_same_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`build` (and `reproduce`, which builds) checks the pinned record through the same worker."""
    monkeypatch.setenv(gate_limits.GATE_SECONDS_ENV, "2")
    spin = model_input(spinning_model(tmp_path / "spin.onnx"), "spin")
    pinned = ModelRecord(name="spin", sha256=spin.sha256, opsets={"ai.onnx": 13}, inputs=[], outputs=[], shapes={},
                         reference={})
    with pytest.raises(BuildError, match=r"^model 'spin' \(models/spin.onnx\): .* did not finish within 2 seconds"):
        gate_pinned([spin], {"spin": pinned}, ort_version=HOST_ORT_VERSION, work_dir=tmp_path / "work",
                    results_dir=tmp_path / "results")
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())


def test_the_limit_is_per_model_and_a_model_within_it_still_passes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gate_limits.GATE_SECONDS_ENV, "20")
    models = [model_input(make_identity_model(tmp_path / f"m{index}.onnx"), f"m{index}") for index in range(3)]
    records = gate_models(models, ort_version=HOST_ORT_VERSION, work_dir=tmp_path / "work")
    assert [record.name for record in records] == ["m0", "m1", "m2"]


def test_the_default_limit_is_ten_minutes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gate_limits.GATE_SECONDS_ENV, raising=False)
    assert gate_limits.gate_seconds() == 600


@pytest.mark.parametrize("value", ["0", "-5", "ten", "1.5"])
def test_a_limit_that_is_not_a_whole_number_of_seconds_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                                   value: str) -> None:
    monkeypatch.setenv(gate_limits.GATE_SECONDS_ENV, value)
    with pytest.raises(UsageError) as caught:
        gate_limits.gate_seconds()
    assert str(caught.value) == (f"the environment variable {gate_limits.GATE_SECONDS_ENV} is {value!r}; expected a "
                                 "whole number of seconds above 0")


@pytest.mark.integration
def test_lock_of_a_manifest_with_the_spinning_model_ends_with_one_sentence(bundler_cache: Path, tmp_path: Path) -> None:
    """The CLI as a user runs it, in the pinned ORT (the isolated environment in the test cache): exit 7 within
    seconds, where before the limit `lock` never returned (the 300 s timeout here would fail the test)."""
    folder = tmp_path / "m"
    shutil.copytree(MANIFESTS, folder, ignore=shutil.ignore_patterns("*.lock.toml", "quickstart-win*"))
    shutil.copy(MANIFESTS / "quickstart-linux.lock.toml", folder)
    spin = spinning_model(folder / "models" / "spin.onnx")
    manifest = folder / "quickstart-linux.toml"
    digest = hashlib.sha256(spin.read_bytes()).hexdigest()
    manifest.write_text(manifest.read_text(encoding="utf-8") + (
        f'\n[[models]]\nname = "spin"\npath = "models/spin.onnx"\nsha256 = "{digest}"\nshapes = {{ x = [1] }}\n'),
        encoding="utf-8")
    env = {**os.environ, gate_limits.GATE_SECONDS_ENV: "5"}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "bundler", "lock", "-q", "--cache", str(bundler_cache), str(manifest)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 7, proc.stderr
    assert time.monotonic() - started < 240
    [line] = [line for line in proc.stderr.splitlines() if "spin" in line]
    assert re.search(rf"model 'spin' \(models/spin.onnx\): the model check in ONNX Runtime {re.escape(ORT_VERSION)} "
                     r"did not finish within 5 seconds and was stopped", line), proc.stderr
    assert "tiny-mlp" not in line


def test_the_limits_are_a_module_of_the_build_run_as_a_file_not_code_in_a_string() -> None:
    """The limits were a bootstrap written in a string (`python -c`) that exec'd the inlined self-check script;
    they are `bundler/assembly/gate_worker.py`, which loads the shipped package through its start file's finder."""
    worker, memory, seconds = gate_limits.limited(123, 4)
    assert Path(worker) == Path(gate_limits.gate_worker.__file__).resolve() and Path(worker).is_file()
    assert (memory, seconds) == ("123", "4") and "-c" not in gate_limits.limited(123, 4)
    assert not hasattr(gate_limits, "_LIMIT_BOOTSTRAP")
