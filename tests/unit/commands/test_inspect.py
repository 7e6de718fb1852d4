"""`ort-bundler inspect` on real artifacts: the win wheel, its DLL and .pyd, an ONNX model."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli
from fixtures.models import make_identity_model


def inspect(path: Path) -> dict:
    return json.loads(run_cli("inspect", "--json", str(path)).stdout)


@pytest.mark.integration
def test_inspect_wheel_dll_and_pyd(ort_win_wheel: Path, tmp_path: Path) -> None:
    wheel = inspect(ort_win_wheel)
    assert wheel["kind"] == "wheel" and wheel["version"] == "1.23.1"
    assert wheel["tags"] == ["cp311-cp311-win_amd64"]
    assert any(r.startswith("numpy") for r in wheel["requires"])
    assert "onnxruntime/capi/onnxruntime.dll" in wheel["binaries"]
    with zipfile.ZipFile(ort_win_wheel) as archive:
        archive.extract("onnxruntime/capi/onnxruntime.dll", tmp_path)
        archive.extract("onnxruntime/capi/onnxruntime_pybind11_state.pyd", tmp_path)
    dll = inspect(tmp_path / "onnxruntime/capi/onnxruntime.dll")
    assert dll["machine"] == "x64" and dll["linker_version"] == "14.40"
    assert dll["file_version"] == "1.23.20251002.1.d9b2048"
    assert dll["signature"]["signed"] and dll["signature"]["verified"]
    assert "Microsoft" in dll["signature"]["signer"]
    pyd = inspect(tmp_path / "onnxruntime/capi/onnxruntime_pybind11_state.pyd")
    assert "python311.dll" in pyd["imports"] and "onnxruntime.dll" not in pyd["imports"]
    human = run_cli("inspect", str(tmp_path / "onnxruntime/capi/onnxruntime.dll")).stdout
    assert "machine x64, linker 14.40" in human and "verified" in human


def test_inspect_model(tmp_path: Path) -> None:
    model = inspect(MANIFESTS / "models" / "tiny-mlp.onnx")
    assert model["kind"] == "model" and model["opsets"] == {"ai.onnx": 17}
    assert model["inputs"] == [{"name": "x", "type": "float", "shape": ["batch", 4]}]
    assert model["outputs"] == [{"name": "y", "type": "float", "shape": ["batch", 3]}]
    identity = inspect(make_identity_model(tmp_path / "id.onnx"))
    assert identity["inputs"][0]["shape"] == [1, 4]


def test_inspect_refuses_what_it_cannot_explain(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    proc = run_cli("inspect", str(text), check=False)
    assert proc.returncode == 9 and "inspect explains only those" in proc.stderr
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"\x08\x01garbage")
    proc = run_cli("inspect", str(broken), check=False)
    assert proc.returncode == 9 and "not a readable ONNX model" in proc.stderr
    proc = run_cli("inspect", str(tmp_path / "missing.dll"), check=False)
    assert proc.returncode == 4 and "no such file" in proc.stderr
