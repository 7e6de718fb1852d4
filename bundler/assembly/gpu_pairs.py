"""Wrong GPU pairs, refused at `lock` in one sentence each, before anything is resolved or built.

An ONNX Runtime GPU wheel records what it was built for in `onnxruntime/capi/version_info.py` (`cuda_version =
"11.8.89"`, `cudnn_version = "8"`) and `build_and_package_info.py` (`package_name = 'onnxruntime-gpu'`). A
manifest that pairs that build with another CUDA or cuDNN major (in [gpu] or in NVIDIA's `*-cuNN` wheels it
names) makes a bundle whose CUDA provider cannot load, and ORT then falls back to the CPU without a word. Two ORT
distributions in one lock (`onnxruntime` beside `onnxruntime-gpu`) install the same `onnxruntime` module, so
whichever installs last wins. The build checks the DLLs themselves (`gpu.py`); these checks only need names and
versions, so `lock` says it before it downloads the libraries.
"""

from __future__ import annotations

import ast
import re
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from bundler.manifest import Gpu, Manifest

# Read in this order: build_and_package_info.py shortens cuda_version ('12.2'), version_info.py has it whole.
INFO_FILES = ("onnxruntime/capi/build_and_package_info.py", "onnxruntime/capi/version_info.py")
# The distributions that install the `onnxruntime` module (the package index's names).
ORT_DISTRIBUTIONS = frozenset({"onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-openvino",
                               "onnxruntime-qnn", "onnxruntime-training", "ort-nightly", "ort-nightly-gpu"})
DIRECTML_DISTRIBUTION = "onnxruntime-directml"
# NVIDIA's library wheels name the CUDA major they belong to: nvidia-cublas-cu11, nvidia-cudnn-cu12, ...
NVIDIA_CUDA_WHEEL = re.compile(r"^nvidia-([a-z0-9-]+?)-cu(\d+)$")
# Where builds for each major are (docs/facts.md §10): the package index's onnxruntime-gpu.
ORT_GPU_FOR_CUDA = {11: "onnxruntime-gpu 1.15-1.18", 12: "onnxruntime-gpu 1.19 or later"}


@dataclass(frozen=True, kw_only=True)
class OrtBuild:
    """What an ORT wheel says it was built for; None where it says nothing (a CPU or DirectML build)."""

    distribution: str | None
    version: str | None
    cuda: str | None
    cudnn: str | None

    @property
    def label(self) -> str:
        return f"{self.distribution or 'onnxruntime'} {self.version or '?'}"


def read_ort_build(wheel: Path) -> OrtBuild:
    """The literal assignments of the wheel's version_info.py and build_and_package_info.py (never executed)."""
    values: dict[str, str] = {}
    if not zipfile.is_zipfile(wheel):
        return OrtBuild(distribution=None, version=None, cuda=None, cudnn=None)
    with zipfile.ZipFile(wheel) as archive:
        present = set(archive.namelist())
        for name in INFO_FILES:
            if name in present:
                values.update(_literal_assignments(archive.read(name).decode("utf-8", "replace")))
    return OrtBuild(distribution=values.get("package_name"), version=values.get("__version__"),
                    cuda=values.get("cuda_version") or None, cudnn=values.get("cudnn_version") or None)


def _literal_assignments(source: str) -> dict[str, str]:
    """The `name = "text"` assignments at the top level of a module."""
    found: dict[str, str] = {}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return found
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found[node.targets[0].id] = value.value
    return found


def pair_problems(manifest: Manifest, build: OrtBuild) -> list[str]:
    """One sentence per wrong pair of this ORT build with [gpu] and its [[gpu.sources]] requirements."""
    gpu = manifest.gpu
    if gpu is None:
        return []
    wrong_wheel = _provider_wheel_problem(manifest.path.name, gpu, build)
    if wrong_wheel is not None or gpu.directml or build.cuda is None:
        return [wrong_wheel] if wrong_wheel is not None else []
    name = manifest.path.name
    problems = []
    cuda, cudnn = _major(build.cuda), _major(build.cudnn) if build.cudnn else None
    if _major(gpu.cuda) != cuda:
        problems.append(f"{name}: [gpu] cuda = \"{gpu.cuda}\", but {build.label} was built for CUDA {build.cuda} "
                        f"(its capi/version_info.py); expected CUDA {cuda}.x, or an ORT built for CUDA "
                        f"{_major(gpu.cuda)} ({_where(_major(gpu.cuda))}).")
    if cudnn is not None and _major(gpu.cudnn) != cudnn:
        problems.append(f"{name}: [gpu] cudnn = \"{gpu.cudnn}\", but {build.label} was built for cuDNN {cudnn} "
                        f"(its capi/version_info.py: cudnn_version = \"{build.cudnn}\"); expected cuDNN {cudnn}.x.")
    problems.extend(_source_problems(name, gpu, build, cuda=cuda, cudnn=cudnn))
    return problems


def _provider_wheel_problem(name: str, gpu: Gpu, build: OrtBuild) -> str | None:
    """The DirectML provider lives only in onnxruntime-directml, the CUDA provider never in it (their
    build_and_package_info.py names the distribution; a wheel that names none is judged at build time)."""
    if build.distribution is None:
        return None
    directml_wheel = canonicalize_name(build.distribution) == DIRECTML_DISTRIBUTION
    if gpu.directml and not directml_wheel:
        return (f"{name}: [gpu] providers = ['DmlExecutionProvider'], but [ort]'s wheel is {build.label} (its "
                f"capi/build_and_package_info.py), which has no DirectML provider; expected "
                f"{DIRECTML_DISTRIBUTION} (the package index serves 1.15.0 to 1.24.4).")
    if not gpu.directml and directml_wheel:
        return (f"{name}: [gpu] providers = {list(gpu.providers)}, but [ort]'s wheel is {build.label}, which has "
                f"no CUDA provider; expected onnxruntime-gpu, or providers = ['DmlExecutionProvider'] without "
                f"cuda, cudnn and [[gpu.sources]].")
    return None


def _source_problems(name: str, gpu: Gpu, build: OrtBuild, *, cuda: int, cudnn: int | None) -> list[str]:
    problems = []
    for index, source in enumerate(gpu.sources):
        if source.source.kind != "requirement":
            continue
        try:
            requirement = Requirement(source.source.location)
        except InvalidRequirement:
            continue
        match = NVIDIA_CUDA_WHEEL.match(canonicalize_name(requirement.name))
        if match is None:
            continue
        library, major = match.group(1), int(match.group(2))
        key = f"{name}: gpu.sources[{index}]"
        if major != cuda:
            problems.append(f"{key}: {requirement} carries CUDA {major} libraries, but {build.label} was built for "
                            f"CUDA {build.cuda}; expected NVIDIA's *-cu{cuda} wheels.")
        pinned = _pinned_major(requirement)
        if library == "cudnn" and cudnn is not None and pinned is not None and pinned != cudnn:
            problems.append(f"{key}: {requirement} is cuDNN {pinned}, but {build.label} was built for cuDNN {cudnn}; "
                            f"expected nvidia-cudnn-cu{cuda}=={cudnn}.x.")
    return problems


def distribution_problems(manifest: Manifest, ort: OrtBuild | None, locked: Iterable[tuple[str, str]]) -> list[str]:
    """Two ORT distributions in one lock: the [ort] binding's and another from the resolved requirements."""
    found: dict[str, str] = {}
    if ort is not None and ort.distribution:
        found[canonicalize_name(ort.distribution)] = ort.version or "?"
    for name, version in locked:
        if canonicalize_name(name) in ORT_DISTRIBUTIONS:
            found.setdefault(canonicalize_name(name), version)
    if len(found) < 2:
        return []
    listed = " and ".join(f"{name} {version}" for name, version in sorted(found.items()))
    return [f"{manifest.path.name}: the lock holds {listed}, which all install the module onnxruntime (the last one "
            f"installed would win); expected one ONNX Runtime distribution: remove the other from [python] "
            f"requirements or from what requires it."]


def _pinned_major(requirement: Requirement) -> int | None:
    pins = [s.version for s in requirement.specifier if s.operator in ("==", "===")]
    return _major(pins[0]) if pins and pins[0][:1].isdigit() else None


def _major(version: str) -> int:
    return int(re.split(r"\D", version, maxsplit=1)[0])


def _where(major: int) -> str:
    return ORT_GPU_FOR_CUDA.get(major, f"no ONNX Runtime build for CUDA {major} is known to ort-bundler")
