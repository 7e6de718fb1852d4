"""Shared fixtures: real artifacts fetched once into a test cache, real models made with onnx.

Wheels come through pip's own configuration (`pip download`), never a hard-coded index URL. The
cache lives in $ORT_BUNDLER_TEST_CACHE (default: ~/.cache/ort-bundler-tests) so a developer pays
for the downloads once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

ORT_VERSION = "1.23.1"

PLATFORM_TAGS = {
    "win_amd64": ["win_amd64"],
    "linux_x86_64": ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux2014_x86_64"],
}


def cache_root() -> Path:
    root = Path(os.environ.get("ORT_BUNDLER_TEST_CACHE", Path.home() / ".cache" / "ort-bundler-tests"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def pip_download(requirement: str, platform: str, python_version: str = "3.11") -> Path:
    """Download one wheel (no dependencies) for a target platform into the test cache, once."""
    dest = cache_root() / "wheels" / platform
    dest.mkdir(parents=True, exist_ok=True)
    name, _, version = requirement.partition("==")
    stem = f"{name.replace('-', '_')}-{version}-"
    with FileLock(dest / f"{stem}lock"):  # test workers share the cache: one downloads, the others wait
        found = sorted(p for p in dest.glob("*.whl") if p.name.lower().startswith(stem.lower()))
        if found:
            return found[0]
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--python-version", python_version, "--implementation", "cp", "-d", str(dest), requirement]
        for tag in PLATFORM_TAGS.get(platform, [platform]):
            cmd[5:5] = ["--platform", tag]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        found = sorted(p for p in dest.glob("*.whl") if p.name.lower().startswith(stem.lower()))
    assert found, f"pip download {requirement} for {platform} produced no wheel in {dest}"
    return found[0]


#: Marks that keep a test out of the inner loop's tier.
NOT_FAST = ("integration", "wine", "slow")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`-m fast` is everything that is neither `integration`, `wine` nor `slow`, decided here so no test joins
    the inner loop by forgetting a mark; a test that uses a Wine prefix is `wine` whether it says so or not."""
    for item in items:
        if "wine" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.wine)
        if not any(item.get_closest_marker(name) for name in NOT_FAST):
            item.add_marker(pytest.mark.fast)


@pytest.fixture(scope="session")
def ort_win_wheel() -> Path:
    """The real onnxruntime 1.23.1 cp311 win_amd64 wheel: real PE files (DLLs, PYD)."""
    return pip_download(f"onnxruntime=={ORT_VERSION}", "win_amd64")


@pytest.fixture(scope="session")
def ort_linux_wheel() -> Path:
    """The real onnxruntime 1.23.1 cp311 manylinux wheel."""
    return pip_download(f"onnxruntime=={ORT_VERSION}", "linux_x86_64")


def make_identity_model(path: Path, *, shape=(1, 4), opset: int = 13) -> Path:
    """A real ONNX model: Identity over one float tensor."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="ort-bundler-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return path


REPO = Path(__file__).resolve().parents[1]
MANIFESTS = REPO / "manifests"


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    """`python -m bundler …` in a real subprocess, as a user runs it."""
    proc = subprocess.run([sys.executable, "-m", "bundler", *args], capture_output=True, text=True,
                          env=env, cwd=cwd)
    if check:
        assert proc.returncode == 0, f"ort-bundler {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}"
    return proc


@pytest.fixture(scope="session")
def bundler_cache() -> Path:
    """One ort-bundler cache for the whole test run, holding the quickstart inputs (fetched for real)."""
    cache = cache_root() / "bundler-cache"
    cache.mkdir(exist_ok=True)
    with FileLock(cache_root() / "bundler-cache.fetch.lock"):  # the first worker fetches, the others find it there
        for name in ("quickstart-linux.toml", "quickstart-win.toml"):
            run_cli("fetch", "-q", "--cache", str(cache), str(MANIFESTS / name))
    return cache


def part_inputs(manifest, *, files=None, work: Path, lock=None, cache=None):
    """What the build hands every part (`BuildInputs`), for tests that run one part on its own."""
    from bundler.assembly.assembly import BuildInputs
    from bundler.sources.cache import Cache

    return BuildInputs(manifest=manifest, lock=lock, files=files or {}, work=work,
                       cache=cache if cache is not None else Cache(work / "cache"))
