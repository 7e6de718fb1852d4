"""The GPU component through the real CLI: lock, fetch and build refuse a CUDA set that cannot work.

The ORT GPU wheels are the real ones (fetched once with pip into the test cache and given to the manifest
by path); the CUDA runtime wheel is NVIDIA's real cudart 11.8 wheel.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli
from fixtures.wheels import pip_download

pytestmark = pytest.mark.integration

CUDART = ("nvidia-cuda-runtime-cu11==11.8.89", "f60c9fdaed8065b38de8097867240efc5556a8a710007146daeb9082334a6e63")


def gpu_manifest(folder: Path, ort_wheel: Path, version: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "models").mkdir()
    (folder / "models" / "tiny-mlp.onnx").write_bytes((MANIFESTS / "models" / "tiny-mlp.onnx").read_bytes())
    sha = hashlib.sha256(ort_wheel.read_bytes()).hexdigest()
    manifest = folder / "gpu.toml"
    manifest.write_text(f"""
[bundle]
name = "gpu"
version = "1.0.0"
platform = "win_amd64"
python = "3.11"

[ort]
version = "{version}"
capi = {{ path = "{ort_wheel}", sha256 = "{sha}", allow_outside = true }}

[python]
lock = "gpu.lock.toml"

[gpu]
cuda = "11.8"
cudnn = "8.9"

[[gpu.sources]]
requirement = "{CUDART[0]}"
sha256 = "{CUDART[1]}"
include = ["nvidia/cuda_runtime/bin/cudart64_110.dll"]

[[models]]
name = "tiny-mlp"
path = "models/tiny-mlp.onnx"
sha256 = "{hashlib.sha256((MANIFESTS / 'models' / 'tiny-mlp.onnx').read_bytes()).hexdigest()}"
""")
    return manifest


def lock_fetch_build(manifest: Path, cache: Path, out: Path):
    run_cli("lock", "-q", "--cache", str(cache), str(manifest))
    run_cli("fetch", "-q", "--cache", str(cache), str(manifest))
    return run_cli("build", "--cache", str(cache), "-o", str(out), str(manifest), check=False)


def test_cuda118_provider_with_only_cudart_names_every_missing_dll(bundler_cache: Path, tmp_path: Path) -> None:
    wheel = pip_download("onnxruntime-gpu==1.17.1", "win_amd64")
    proc = lock_fetch_build(gpu_manifest(tmp_path / "m", wheel, "1.17.1"), bundler_cache, tmp_path / "out")
    assert proc.returncode == 7, proc.stderr
    for dll in ("cudnn64_8.dll", "cublas64_11.dll", "cublasLt64_11.dll", "cufft64_10.dll"):
        assert dll in proc.stderr
    assert "onnxruntime_providers_cuda.dll" in proc.stderr
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.zip"))


def test_ort_123_provider_with_cuda118_is_refused_at_lock(bundler_cache: Path, tmp_path: Path) -> None:
    wheel = pip_download("onnxruntime-gpu==1.23.2", "win_amd64")
    manifest = gpu_manifest(tmp_path / "m", wheel, "1.23.2")
    proc = run_cli("lock", "-q", "--cache", str(bundler_cache), str(manifest), check=False)
    assert proc.returncode == 3, proc.stderr
    for fragment in ('[gpu] cuda = "11.8", but onnxruntime-gpu 1.23.2 was built for CUDA 12.2.128',
                     '[gpu] cudnn = "8.9", but onnxruntime-gpu 1.23.2 was built for cuDNN 9',
                     "nvidia-cuda-runtime-cu11==11.8.89 carries CUDA 11 libraries", "1.15-1.18"):
        assert fragment in proc.stderr
