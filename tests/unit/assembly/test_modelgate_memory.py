"""The model gate against models that ask for gigabytes (issue 27, item 9): real models made with onnx,
run by the real onnxruntime of this interpreter in the gate's real child process.

A tensor whose size follows from the model's signature (a static input, a declared output) is refused
before anything is allocated, naming the tensor; what only shows when the model runs (an output whose
shape is computed) meets the child's memory limit instead of the build host's memory. Either way the
build's one sentence and exit 7 (BuildError).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tomllib
from pathlib import Path

import onnx
import onnxruntime
import pytest
from fixtures.cli import MANIFESTS
from onnx import TensorProto, helper

from bundler import runner as runners
from bundler.assembly import modelgate, ortenv
from bundler.assembly.modelgate import ModelInput, gate_models
from bundler.errors import BuildError

HOST_ORT_VERSION = onnxruntime.__version__


def save(graph: onnx.GraphProto, path: Path) -> ModelInput:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return ModelInput(name=path.stem, path=path, sha256=hashlib.sha256(path.read_bytes()).hexdigest())


def static_input(path: Path, shape: list[int]) -> ModelInput:
    """Identity over an input whose shape is fixed in the model: no `shapes` in the manifest can bound it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    return save(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y]), path)


def constant_of_shape(path: Path, shape: list[int], declared: list[int | str]) -> ModelInput:
    """No input at all: ConstantOfShape makes an output of `shape` from an initializer, declared as `declared`."""
    dims = helper.make_tensor("dims", TensorProto.INT64, [len(shape)], shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, declared)
    node = helper.make_node("ConstantOfShape", ["dims"], ["y"])
    return save(helper.make_graph([node], "g", [], [y], initializer=[dims]), path)


def gate_error(model: ModelInput, tmp_path: Path) -> BuildError:
    with pytest.raises(BuildError) as caught:
        gate_models([model], ort_version=HOST_ORT_VERSION, work_dir=tmp_path / "work")
    assert caught.value.return_code == 7
    return caught.value


def test_a_static_input_of_gigabytes_is_refused_naming_it(tmp_path: Path) -> None:
    message = str(gate_error(static_input(tmp_path / "wide.onnx", [2**31, 4]), tmp_path))
    assert message.startswith("model 'wide' (models/wide.onnx): input 'x' is float32[2147483648, 4]")
    assert "above the limit of 16777216 elements" in message and "\n" not in message


def test_an_output_declared_at_gigabytes_is_refused_before_the_run(tmp_path: Path) -> None:
    model = constant_of_shape(tmp_path / "fill.onnx", [2**31, 4], [2**31, 4])
    message = str(gate_error(model, tmp_path))
    assert message.startswith("model 'fill' (models/fill.onnx): output 'y' is declared float32[2147483648, 4]")
    assert "above the limit of 1073741824 bytes for one output" in message


def test_an_output_that_only_the_run_makes_large_meets_the_childs_memory_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """1 GiB made at run time under a 256 MiB limit: refused in the child, the host keeps its memory."""
    monkeypatch.setattr(modelgate, "GATE_MEMORY_BYTES", 256 * 1024**2)
    model = constant_of_shape(tmp_path / "grow.onnx", [2**28], ["n"])
    message = str(gate_error(model, tmp_path))
    assert message.startswith("model 'grow' (models/grow.onnx): ")
    assert "Failed to allocate memory" in message or "limited to " in message
    assert "\n" not in message


def test_a_model_within_the_limits_still_passes(tmp_path: Path) -> None:
    [record] = gate_models([static_input(tmp_path / "small.onnx", [2, 4])], ort_version=HOST_ORT_VERSION,
                           work_dir=tmp_path / "work")
    assert record.outputs == [{"name": "y", "type": "tensor(float)", "shape": [2, 4]}]


# -- minor: the gate's environment is made from pinned wheels only ------------------------------------------

def locked_gate_wheels(bundler_cache: Path) -> tuple[Path, ...]:
    """The quickstart's own linux ORT 1.23.1 and NumPy wheels, in the cache under their sha256 (the shared cache
    holds other versions too, which other tests lock)."""
    manifest = tomllib.loads((MANIFESTS / "quickstart-linux.toml").read_text(encoding="utf-8"))
    lock = tomllib.loads((MANIFESTS / "quickstart-linux.lock.toml").read_text(encoding="utf-8"))
    pinned = {manifest["ort"]["capi"]["sha256"], *(wheel["sha256"] for wheel in lock["wheel"])}
    return ortenv.host_wheels(path for path in bundler_cache.glob("sha256/*/*/*.whl") if path.parent.name in pinned)


@pytest.mark.integration
def test_the_gate_environment_is_made_from_the_bundles_wheels_held_to_their_hashes(bundler_cache: Path,
                                                                                  tmp_path: Path) -> None:
    wheels = locked_gate_wheels(bundler_cache)
    assert [w.name.split("-")[0] for w in wheels] == ["onnxruntime", "numpy"]
    commands: list[list[str]] = []

    def recorded(cmd, *, cwd=None, env=None):  # the real runner; the commands kept for the assertion
        commands.append([str(part) for part in cmd])
        return runners.run(cmd, cwd=cwd, env=env)

    python = ortenv.isolated_python("1.23.1", runner=recorded, work_dir=tmp_path / "envs", wheels=wheels)
    version = subprocess.run([str(python), "-I", "-c", "import onnxruntime; print(onnxruntime.__version__)"],
                             capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    assert version == "1.23.1"
    install = commands[-1]
    assert {"--no-index", "--no-deps", "--require-hashes", "--only-binary", ":all:"} <= set(install)
    listed = Path(install[install.index("-r") + 1]).read_text(encoding="utf-8").splitlines()
    assert [line.split(" --hash=sha256:")[1] for line in listed] == [w.parent.name for w in wheels]


@pytest.mark.integration
def test_a_gate_wheel_whose_bytes_differ_from_its_pin_is_refused(bundler_cache: Path, tmp_path: Path) -> None:
    ort, numpy = locked_gate_wheels(bundler_cache)
    swapped = tmp_path / "sha256" / "00" / ("0" * 64) / ort.name  # ORT's bytes under another pin
    swapped.parent.mkdir(parents=True)
    shutil.copyfile(ort, swapped)
    with pytest.raises(BuildError) as caught:
        ortenv.isolated_python("1.23.1", runner=runners.run, work_dir=tmp_path / "envs", wheels=(swapped, numpy))
    assert caught.value.return_code == 7 and "DO NOT MATCH THE HASHES" in str(caught.value)


def test_without_the_bundles_wheels_pip_installs_wheels_only(tmp_path: Path) -> None:
    """A host that cannot install the target's wheels (another platform): pip may bring no sdist."""
    commands: list[list[str]] = []

    def recorded(cmd, *, cwd=None, env=None):  # venv for real; pip's command only recorded
        commands.append([str(part) for part in cmd])
        return runners.run(cmd, cwd=cwd, env=env) if "venv" in cmd else ""

    ortenv.isolated_python("1.23.1", runner=recorded, work_dir=tmp_path / "envs")
    install = commands[-1]
    assert install[install.index("--only-binary") + 1] == ":all:"
    assert "onnxruntime==1.23.1" in install
