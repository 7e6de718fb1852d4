"""Wrong GPU pairs refused at `lock`, one sentence each, read from the real wheels' capi/version_info.py.

The ORT wheels are the real ones (fetched once with pip into the test cache): onnxruntime-gpu 1.18.1 (CUDA 11.8,
cuDNN 8), 1.23.2 (CUDA 12.2, cuDNN 9) and the CPU onnxruntime 1.23.1. The lock refusals stop before anything is
resolved, so they cost the wheel's download once and milliseconds after.
"""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli
from fixtures.wheels import pip_download

from bundler.assembly.gpu_pairs import OrtBuild, distribution_problems, pair_problems, read_ort_build
from bundler.manifest import load, parse

CUDNN8 = ("nvidia-cudnn-cu11==8.9.5.29", "ba6358cafcbf9ab66887099f5c821dde3968d7b4580cb87c56b548947917b54d")
CUBLAS11 = ("nvidia-cublas-cu11==11.11.3.6", "6ab12b1302bef8ac1ff4414edd1c059e57f4833abef9151683fb8f4de25900be")
CUDA12_BUILD = OrtBuild(distribution="onnxruntime-gpu", version="1.23.2", cuda="12.2.128", cudnn="9")


def manifest_text(wheel: Path, version: str, *, cuda: str, cudnn: str, sources: list[tuple[str, str]]) -> str:
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    text = f"""
[bundle]
name = "gpu"
version = "1.0.0"
platform = "win_amd64"
python = "3.11"

[ort]
version = "{version}"
capi = {{ path = "{wheel}", sha256 = "{sha}", allow_outside = true }}

[gpu]
cuda = "{cuda}"
cudnn = "{cudnn}"
"""
    for requirement, pin in sources:
        text += f'\n[[gpu.sources]]\nrequirement = "{requirement}"\nsha256 = "{pin}"\n'
    return text


def parsed(text: str, tmp_path: Path):
    return parse(tomllib.loads(text), path=tmp_path / "gpu.toml")


@pytest.mark.integration
@pytest.mark.parametrize(("requirement", "expected"), [
    ("onnxruntime-gpu==1.18.1", OrtBuild(distribution=None, version=None, cuda="11.8.89", cudnn="8")),
    ("onnxruntime-gpu==1.23.2", CUDA12_BUILD),
])
def test_the_build_is_read_from_the_real_wheels_version_files(requirement, expected):
    assert read_ort_build(pip_download(requirement, "win_amd64")) == expected


@pytest.mark.integration
def test_a_cpu_wheel_names_no_cuda():
    build = read_ort_build(pip_download("onnxruntime==1.23.1", "win_amd64"))
    assert (build.distribution, build.version, build.cuda) == ("onnxruntime", "1.23.1", None)


def test_cudnn8_and_cuda11_wheels_with_a_cuda12_build_are_each_named(tmp_path):
    text = manifest_text(Path(__file__), "1.23.2", cuda="11.8", cudnn="8.9", sources=[CUBLAS11, CUDNN8])
    problems = pair_problems(parsed(text, tmp_path), CUDA12_BUILD)
    assert problems == [
        'gpu.toml: [gpu] cuda = "11.8", but onnxruntime-gpu 1.23.2 was built for CUDA 12.2.128 (its '
        'capi/version_info.py); expected CUDA 12.x, or an ORT built for CUDA 11 (onnxruntime-gpu 1.15-1.18).',
        'gpu.toml: [gpu] cudnn = "8.9", but onnxruntime-gpu 1.23.2 was built for cuDNN 9 (its capi/version_info.py: '
        'cudnn_version = "9"); expected cuDNN 9.x.',
        "gpu.toml: gpu.sources[0]: nvidia-cublas-cu11==11.11.3.6 carries CUDA 11 libraries, but onnxruntime-gpu "
        "1.23.2 was built for CUDA 12.2.128; expected NVIDIA's *-cu12 wheels.",
        "gpu.toml: gpu.sources[1]: nvidia-cudnn-cu11==8.9.5.29 carries CUDA 11 libraries, but onnxruntime-gpu "
        "1.23.2 was built for CUDA 12.2.128; expected NVIDIA's *-cu12 wheels.",
        "gpu.toml: gpu.sources[1]: nvidia-cudnn-cu11==8.9.5.29 is cuDNN 8, but onnxruntime-gpu 1.23.2 was built for "
        "cuDNN 9; expected nvidia-cudnn-cu12==9.x.",
    ]


def test_cudnn8_for_cuda12_is_named_even_when_the_cuda_major_fits(tmp_path):
    text = manifest_text(Path(__file__), "1.23.2", cuda="12.8", cudnn="9.10",
                         sources=[("nvidia-cudnn-cu12==8.9.7.29", "c" * 64)])
    assert pair_problems(parsed(text, tmp_path), CUDA12_BUILD) == [
        "gpu.toml: gpu.sources[0]: nvidia-cudnn-cu12==8.9.7.29 is cuDNN 8, but onnxruntime-gpu 1.23.2 was built for "
        "cuDNN 9; expected nvidia-cudnn-cu12==9.x."]


def test_the_matching_pair_passes(tmp_path):
    text = manifest_text(Path(__file__), "1.23.2", cuda="12.8", cudnn="9.10",
                         sources=[("nvidia-cudnn-cu12==9.10.2.21", "c" * 64), ("nvidia-cublas-cu12==12.8.4.1", "d" * 64)])
    assert pair_problems(parsed(text, tmp_path), CUDA12_BUILD) == []


def test_two_ort_distributions_in_one_lock_are_refused(tmp_path):
    manifest = load(MANIFESTS / "quickstart-win.toml")
    problems = distribution_problems(manifest, CUDA12_BUILD, [("numpy", "2.4.6"), ("onnxruntime", "1.23.2")])
    assert problems == [
        "quickstart-win.toml: the lock holds onnxruntime 1.23.2 and onnxruntime-gpu 1.23.2, which all install the "
        "module onnxruntime (the last one installed would win); expected one ONNX Runtime distribution: remove the "
        "other from [python] requirements or from what requires it."]
    assert distribution_problems(manifest, CUDA12_BUILD, [("numpy", "2.4.6")]) == []


@pytest.mark.integration
def test_lock_refuses_cudnn8_with_ort_123_before_resolving(tmp_path, bundler_cache):
    wheel = pip_download("onnxruntime-gpu==1.23.2", "win_amd64")
    manifest = tmp_path / "gpu.toml"
    manifest.write_text(manifest_text(wheel, "1.23.2", cuda="12.8", cudnn="8.9", sources=[CUDNN8]), encoding="utf-8")
    proc = run_cli("lock", "-q", "--cache", str(bundler_cache), str(manifest), check=False)
    assert proc.returncode == 3, proc.stderr
    assert 'gpu.toml: [gpu] cudnn = "8.9", but onnxruntime-gpu 1.23.2 was built for cuDNN 9' in proc.stderr
    assert "nvidia-cudnn-cu11==8.9.5.29 carries CUDA 11 libraries" in proc.stderr
    assert not (tmp_path / "gpu.lock.toml").exists()
