"""The native probe under Wine, against the real ONNX Runtime Windows DLLs (issue 7 §1 and the probe side of §4).

These tests prove the probe itself: that it reports the DLL the search order really found, runs models
through the C API with digests that match the Linux onnxruntime of the same version, and fails with
distinct exit codes. The launcher tests build on it by making `run.cmd` the caller instead of the small
`.cmd` written here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from fixtures.models import make_identity_model
from fixtures.native import (  # noqa: F401
    DECOY_ORT_VERSION,
    ProbeExit,
    ProbeReport,
    ort_win_capi,
    ortprobe_exe,
    reference_inputs,
    reference_outputs,
    reference_run,
    write_path_cmd,
)
from fixtures.wheels import ORT_VERSION
from fixtures.wine import mingw_gcc, wine  # noqa: F401
from onnx import TensorProto, helper

pytestmark = [pytest.mark.wine, pytest.mark.integration]


def _save(model: onnx.ModelProto, path: Path) -> Path:
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return path


def make_affine_model(path: Path) -> Path:
    """Two float inputs (one with a dynamic batch dim), two outputs: x*3+y and x*y."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    scaled = helper.make_tensor_value_info("scaled", TensorProto.FLOAT, ["batch", 3])
    product = helper.make_tensor_value_info("product", TensorProto.FLOAT, ["batch", 3])
    three = helper.make_tensor("three", TensorProto.FLOAT, [], [3.0])
    nodes = [
        helper.make_node("Mul", ["x", "three"], ["x3"]),
        helper.make_node("Add", ["x3", "y"], ["scaled"]),
        helper.make_node("Mul", ["x", "y"], ["product"]),
    ]
    graph = helper.make_graph(nodes, "affine", [x, y], [scaled, product], initializer=[three])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def make_reshape_model(path: Path) -> Path:
    """Valid, but fails at run time: the probe feeds a dynamic dim as 1, and 1 element cannot become [2, 2]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [2, 2])
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "reshape", [x], [y],
                              initializer=[shape])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def make_negate_model(path: Path) -> Path:
    """Same signature as the identity model, different values: --check-identity must notice."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "negate", [x], [y])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def make_int64_input_model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [2])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "int64", [x], [y])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("probe models")
    corrupt = folder / "corrupt.onnx"
    corrupt.write_bytes(b"this is not a protobuf model\x00\xff" * 8)
    return {
        "identity": make_identity_model(folder / "identity.onnx", opset=13),
        "affine": make_affine_model(folder / "affine.onnx"),
        "reshape": make_reshape_model(folder / "reshape.onnx"),
        "int64": make_int64_input_model(folder / "int64.onnx"),
        "negate": make_negate_model(folder / "negate.onnx"),
        "corrupt": corrupt,
    }


@pytest.fixture(scope="module")
def ort_capi(ort_win_capi) -> Path:
    return ort_win_capi(ORT_VERSION)


@pytest.fixture(scope="module")
def with_ort_on_path(tmp_path_factory, wine, ortprobe_exe, ort_capi) -> Path:
    return write_path_cmd(tmp_path_factory.mktemp("caller") / "probe.cmd", wine=wine, target=ortprobe_exe,
                          path_first=[ort_capi])


def _same_windows_path(reported: str | None, expected: str) -> bool:
    return reported is not None and reported.lower() == expected.lower()


def test_probe_loads_the_dll_on_path_and_identity_is_exact(wine, with_ort_on_path, ort_capi, models):
    model = wine.to_windows(models["identity"])
    result = wine.cmd(with_ort_on_path, "--expect-version", ORT_VERSION, "--check-identity", f'"{model}"')
    report = ProbeReport.parse(result.stdout)

    assert result.returncode == ProbeExit.OK, result.stdout + result.stderr
    assert _same_windows_path(report.module, wine.to_windows(ort_capi / "onnxruntime.dll"))
    assert report.version == ORT_VERSION
    [run] = report.models
    assert _same_windows_path(run.path, model)
    assert run.identity == "exact"
    assert run.outputs == reference_outputs(models["identity"])


def test_probe_digests_match_linux_onnxruntime(wine, with_ort_on_path, models, tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    affine_path, identity_path = (f'"{wine.to_windows(models[name])}"' for name in ("affine", "identity"))
    result = wine.cmd(with_ort_on_path, "--dump", f'"{wine.to_windows(dump)}"', affine_path,
                      "--shape", "x=2,3", affine_path, identity_path)

    assert result.returncode == ProbeExit.OK, result.stdout + result.stderr
    dynamic, shaped, identity = ProbeReport.parse(result.stdout).models
    expected = reference_outputs(models["affine"])
    assert [o.name for o in expected] == ["scaled", "product"]
    assert all(o.shape == (1, 3) for o in expected), "the dynamic batch dim must be fed as 1"
    assert dynamic.inputs == reference_inputs(models["affine"])
    assert dynamic.outputs == expected
    # Every input restarts the ramp at element 0, as the build's synth.py does: y's bytes equal x's first row.
    assert dynamic.inputs[0].sha256 == dynamic.inputs[1].sha256
    assert shaped.inputs == reference_inputs(models["affine"], {"x": [2, 3]})
    assert [o.shape for o in shaped.outputs] == [(2, 3), (2, 3)]
    assert shaped.outputs == reference_outputs(models["affine"], {"x": [2, 3]})
    assert identity.outputs == reference_outputs(models["identity"])
    # The raw dumps allow a comparison within tolerance where bit-exactness cannot be expected.
    reference = reference_run(models["affine"], {"x": [2, 3]})
    for index, name in enumerate(["scaled", "product"]):
        windows = np.fromfile(dump / f"1_{index}.bin", dtype="<f4").reshape(reference[name].shape)
        np.testing.assert_allclose(windows, reference[name], rtol=1e-6)


@pytest.mark.parametrize(("shape", "error"), [
    ("x=2,3,1", "error: --shape x has 3 dimensions, the model's input has 2"),
    ("x=2,4", "error: --shape x gives dimension 1 as 4, the model declares 3"),
    ("z=1", "error: --shape z names no input of the model"),
    ("x=0,3", "error: --shape needs INPUT=D0,D1,... with positive dimensions"),
])
def test_a_shape_that_does_not_fit_the_model_is_a_usage_error(wine, with_ort_on_path, models, shape, error):
    result = wine.cmd(with_ort_on_path, "--shape", shape, f'"{wine.to_windows(models["affine"])}"')

    assert result.returncode == ProbeExit.USAGE, result.stdout + result.stderr
    assert error in result.stderr.splitlines(), result.stderr


def test_probe_without_the_dll_on_path_fails_to_load_with_126(wine, ortprobe_exe, models):
    result = wine.run([wine.to_windows(ortprobe_exe), wine.to_windows(models["identity"])], cwd=ortprobe_exe.parent)

    assert result.returncode == ProbeExit.LOAD, result.stdout + result.stderr
    assert "LoadLibraryW(onnxruntime.dll) failed: GetLastError 126" in result.stderr
    assert ProbeReport.parse(result.stdout).module is None


def test_decoy_first_on_path_shadows_the_real_dll_without_a_launcher(
        wine, ortprobe_exe, ort_win_capi, ort_capi, models, tmp_path):
    decoy = ort_win_capi(DECOY_ORT_VERSION)
    caller = write_path_cmd(tmp_path / "shadowed.cmd", wine=wine, target=ortprobe_exe, path_first=[decoy, ort_capi])
    result = wine.cmd(caller, "--expect-version", ORT_VERSION, f'"{wine.to_windows(models["identity"])}"')
    report = ProbeReport.parse(result.stdout)

    assert result.returncode == ProbeExit.VERSION, result.stdout + result.stderr
    assert _same_windows_path(report.module, wine.to_windows(decoy / "onnxruntime.dll"))
    assert report.version == DECOY_ORT_VERSION
    assert f"loaded ONNX Runtime {DECOY_ORT_VERSION}, expected {ORT_VERSION}" in result.stderr
    assert report.models == ()


@pytest.mark.parametrize(("model", "flags", "code", "error"), [
    ("corrupt", (), ProbeExit.SESSION, "error: CreateSessionFromArray failed: Failed to load model because protobuf"),
    ("reshape", (), ProbeExit.RUN, "error: Run failed: Non-zero status code returned while running Reshape node"),
    ("int64", (), ProbeExit.UNSUPPORTED, "error: input x has element type 7; the probe only feeds float (1)"),
    ("negate", ("--check-identity",), ProbeExit.IDENTITY, None),
])
def test_probe_failures_have_distinct_exit_codes(wine, with_ort_on_path, models, model, flags, code, error):
    result = wine.cmd(with_ort_on_path, *flags, f'"{wine.to_windows(models[model])}"')

    assert result.returncode == code, result.stdout + result.stderr
    if error is None:
        assert ProbeReport.parse(result.stdout).models[0].identity == "differs"
    else:
        assert any(line.startswith(error) for line in result.stderr.splitlines()), result.stderr


def test_probe_echoes_arguments_environment_and_returns_the_requested_exit_code(wine, ortprobe_exe, tmp_path):
    caller = write_path_cmd(tmp_path / "echo.cmd", wine=wine, target=ortprobe_exe, path_first=[])
    result = wine.cmd(caller, "--echo-args", "--echo-env", "PROBE_VALUE", "--echo-env", "PROBE_UNSET", "--exit", "42",
                      '"two words"', '"say \\"hi\\""', "plain", env={"PROBE_VALUE": "a b & c"})

    assert result.returncode == 42, result.stdout + result.stderr
    report = ProbeReport.parse(result.stdout)
    assert report.args == ("--echo-args", "--echo-env", "PROBE_VALUE", "--echo-env", "PROBE_UNSET", "--exit", "42",
                           "two words", 'say "hi"', "plain")
    assert report.env == {"PROBE_VALUE": "a b & c", "PROBE_UNSET": None}
