#!/bin/sh
# The Linux GPU bundle on a real NVIDIA GPU (issue 36 §3): install it, run its strict self-check, run the model on
# CUDAExecutionProvider, and print the GPU, the driver, the providers and the timings. No test depends on it; put
# what it prints in bench/README.md with the date.
#
# Build the bundle on the build machine (no GPU needed), copy the zip to the GPU machine, run this script there:
#   ort-bundler fetch manifests/gpu-linux-cuda12.toml && ort-bundler build manifests/gpu-linux-cuda12.toml -o dist
#   sh bench/gpu_proof.sh dist/gpu-linux-cuda12-1.0.0*.zip [WORKDIR]
# The GPU machine needs the NVIDIA driver (>= 525.60.13 for CUDA 12) and nothing else: no CUDA toolkit, no cuDNN,
# no network. The script fails (non-zero) if the self-check does not pass strictly or the session is not on CUDA.
set -eu

zip=${1:?usage: sh bench/gpu_proof.sh BUNDLE.zip [WORKDIR]}
work=${2:-$(mktemp -d "${TMPDIR:-/tmp}/gpu-proof.XXXXXX")}
zip=$(cd "$(dirname "$zip")" && pwd)/$(basename "$zip")
mkdir -p "$work"
echo "== date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "== machine: $(uname -srm)"
if command -v nvidia-smi >/dev/null 2>&1; then
    echo "== GPU and driver (nvidia-smi):"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
else
    echo "== nvidia-smi not found: the driver's tools are not installed (the self-check below says what is missing)"
fi
echo "== system CUDA the loader could otherwise find (expected: none used):"
ldconfig -p 2>/dev/null | grep -E 'libcudart|libcudnn|libcublas' || echo "   none in the loader cache"

echo "== unpack"
start=$(date +%s.%N)
python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$zip" "$work/bundle"
bundle=$(find "$work/bundle" -maxdepth 2 -name install.sh -exec dirname {} \; | head -n 1)
[ -n "$bundle" ] || { echo "no install.sh in $zip" >&2; exit 1; }

echo "== install (its own self-check runs strictly: no --allow-cpu-fallback)"
t0=$(date +%s.%N)
sh "$bundle/install.sh" --install-dir "$work/install" --log-path "$work/install.log"
t1=$(date +%s.%N)

echo "== strict self-check (run.sh --self-check --json)"
rc=0
"$work/install/run.sh" --self-check --json > "$work/selfcheck.json" || rc=$?
t2=$(date +%s.%N)
"$work/install/venv/bin/python" - "$work/selfcheck.json" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
for check in report["checks"]:
    print(f"   {check['id']:<24} {check['status']:<5} {check['message']}")
EOF
[ "$rc" -eq 0 ] || { echo "strict self-check failed with exit code $rc" >&2; exit "$rc"; }

echo "== the bundle's own entry point (run.sh: the launcher's LD_LIBRARY_PATH, gpu/ first)"
"$work/install/run.sh"

echo "== the model on CUDAExecutionProvider (the environment's python: the start-up hook preloads gpu/, no launcher)"
cat > "$work/cuda_model.py" <<'EOF'
import os, sys, time
from pathlib import Path

import numpy as np
import onnxruntime as ort

root = Path(sys.argv[1])
print(f"onnxruntime {ort.__version__} from {Path(ort.__file__).parent}")
print(f"available providers {ort.get_available_providers()}")
t0 = time.perf_counter()
session = ort.InferenceSession(str(root / "models" / "tiny-mlp.onnx"), providers=["CUDAExecutionProvider"])
t1 = time.perf_counter()
providers = session.get_providers()
print(f"session providers {providers}")
x = np.arange(8, dtype=np.float32).reshape(2, 4) / 4.0
session.run(None, {"x": x})  # the first run loads the CUDA kernels
t2 = time.perf_counter()
runs = 1000
for _ in range(runs):
    (y,) = session.run(None, {"x": x})
t3 = time.perf_counter()
print(f"y {[[round(float(v), 4) for v in row] for row in y]}")
print(f"timings: session {1000 * (t1 - t0):.1f} ms, first run {1000 * (t2 - t1):.1f} ms, "
      f"steady {1e6 * (t3 - t2) / runs:.1f} us/run over {runs} runs")
with open("/proc/self/maps") as maps:
    loaded = sorted({line.split()[-1] for line in maps if "libcud" in line or "libcublas" in line})
print("CUDA libraries loaded from:")
for path in loaded:
    print(f"   {path}")
outside = [p for p in loaded if not p.startswith(str(root))]
if providers[0] != "CUDAExecutionProvider" or outside:
    print(f"FAIL: providers {providers}, libraries outside the install: {outside}", file=sys.stderr)
    sys.exit(1)
EOF
"$work/install/venv/bin/python" "$work/cuda_model.py" "$work/install"
t3=$(date +%s.%N)

python3 - "$start" "$t0" "$t1" "$t2" "$t3" <<'EOF'
import sys
start, t0, t1, t2, t3 = map(float, sys.argv[1:])
print(f"== timings: unpack {t0 - start:.1f} s, install {t1 - t0:.1f} s, self-check {t2 - t1:.1f} s, model {t3 - t2:.1f} s")
EOF
echo "== done: $work (remove it when the numbers are copied)"
