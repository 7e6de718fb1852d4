"""Make the quickstart model, `tiny-mlp.onnx`: y = relu(x @ W + b) with a dynamic batch dimension.

Deterministic (fixed weights, fixed producer fields), so running it again reproduces the committed bytes
and the sha256 pinned in the quickstart manifests. Usage: python manifests/models/make_models.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent


def tiny_mlp() -> onnx.ModelProto:
    weights = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5.5) / 8.0
    bias = np.array([0.25, -0.5, 1.0], dtype=np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["z"]),
        helper.make_node("Relu", ["z"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "tiny-mlp", [x], [y],
                              initializer=[numpy_helper.from_array(weights, "W"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ort-bundler",
                              producer_version="1")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def main() -> None:
    (HERE / "tiny-mlp.onnx").write_bytes(tiny_mlp().SerializeToString())


if __name__ == "__main__":
    main()
