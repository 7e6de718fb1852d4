"""Bundles of the real ORT 1.23.1 wheel for the Windows tier: manifests, built and unpacked for real.

Wine's limit, named here: numpy 2 aborts under Wine 8 (it lacks ucrtbase's crealf), so the manifests pin
`numpy<2` unless a test asks for numpy 2 to get an interpreter that fails on this machine.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import tomli_w
from conftest import MANIFESTS, run_cli


def manifest(work: Path, *, name: str, version: str, runtime: Path | None, lock: Path | None,
             numpy: str = "numpy<2", publisher: str | None = None) -> Path:
    """A manifest of the real ORT 1.23.1 wheel and the tiny model, with python.org's CPython when `runtime` is given."""
    data: dict[str, object] = {
        "bundle": {"name": name, "version": version, "platform": "win_amd64", "python": "3.11",
                   "source_date_epoch": 1767225600},
        "ort": {"version": "1.23.1", "capi": {"requirement": "onnxruntime==1.23.1",
                                              "sha256": "7973186e8eb66e32ea20cb238ae92b604091e4d1df632653ec830abf7584d0b3"}},
        # numpy 2 aborts under Wine 8 (unimplemented ucrtbase.dll.crealf): Wine's limit, not Windows'.
        "python": {"requirements": [numpy]},
        "models": [{"name": "tiny-mlp", "path": str(MANIFESTS / "models" / "tiny-mlp.onnx"), "allow_outside": True,
                    "sha256": "db67a4b8fc5f6964f6329c9db9dde717e7c0f1892abde30b0c141e1fbd2ece3a", "shapes": {"x": [2, 4]}}],
        "launch": {"script": {"path": str(MANIFESTS / "app" / "infer.py"), "allow_outside": True,
                              "sha256": "54ffbc4a8436bc9bbc5efdbc57d84825c6e39ed40821b33c3ee52f51032f8114"}},
    }
    if publisher is not None:
        data["bundle"]["publisher"] = publisher  # type: ignore[index]
    python = data["python"]
    assert isinstance(python, dict)
    if runtime is not None:
        python["runtime"] = {"path": str(runtime), "sha256": hashlib.sha256(runtime.read_bytes()).hexdigest(),
                             "allow_outside": True}
    if lock is not None:
        python["lock"] = str(lock)
    path = work / f"{name}-{version}.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def build_zip(path: Path, cache: Path, work: Path) -> Path:
    """Fetch and build the manifest; the bundle zip."""
    run_cli("fetch", "-q", "--cache", str(cache), str(path))
    result = json.loads(run_cli("build", "--json", "--cache", str(cache), "-o", str(work / "dist"), str(path)).stdout)
    return Path(result["zip"])


def build_and_unpack(path: Path, cache: Path, work: Path) -> Path:
    folder = work / "unpacked bundles" / path.stem  # a path with a space, as Windows users have them
    with zipfile.ZipFile(build_zip(path, cache, work)) as archive:
        archive.extractall(folder)
    [top] = folder.iterdir()
    return top
