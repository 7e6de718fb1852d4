"""The quickstart entry point: one inference with the bundled model, through the installed runtime.

`run.sh` / `run.cmd` start it with the bundle's environment; it prints the providers and the output and
exits 0, or exits 1 with the reason. Arguments: an optional install root (default: two folders up).
"""

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
session = ort.InferenceSession(str(root / "models" / "tiny-mlp.onnx"), providers=["CPUExecutionProvider"])
x = np.arange(8, dtype=np.float32).reshape(2, 4) / 4.0
(y,) = session.run(None, {"x": x})
print(f"onnxruntime {ort.__version__} from {Path(ort.__file__).parent}")
print(f"providers {session.get_providers()}")
print(f"y {[[round(float(v), 4) for v in row] for row in y]}")
sys.exit(0 if y.shape == (2, 3) else 1)
