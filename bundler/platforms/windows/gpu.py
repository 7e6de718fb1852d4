"""The GPU part of a Windows bundle: which route the `[gpu]` table takes.

Two routes ship on Windows: CUDA, whose DLLs come from NVIDIA's wheels or archives and are closure-checked
against the provider (`gpu_cuda.py`), and DirectML, whose one library ships inside the onnxruntime-directml
wheel (`gpu_directml.py`). The parser allows `providers = ["DmlExecutionProvider"]` only for targets whose
`gpu_providers` carry it, so the choice here is the table's, not the platform's.
"""

from __future__ import annotations

from bundler.assembly.assembly import Assembly, BuildInputs
from bundler.platforms.windows.gpu_cuda import add_gpu_cuda
from bundler.platforms.windows.gpu_directml import add_gpu_directml


def add_gpu(assembly: Assembly, build: BuildInputs) -> None:
    """Ship the [gpu] table's libraries (or record DirectML's), or record that the bundle has no GPU part."""
    gpu = build.manifest.gpu
    if gpu is None:
        assembly.facts.gpu = None
    elif gpu.directml:
        add_gpu_directml(assembly, build)
    else:
        add_gpu_cuda(assembly, build)
