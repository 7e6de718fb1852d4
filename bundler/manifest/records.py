"""What a manifest says, as frozen records: parsed once from the TOML (`bundler.manifest.parse`), read everywhere."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bundler.names import redact_url
from bundler.target_platform import TARGETS, TargetPlatform

PLATFORMS = tuple(TARGETS)


NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


VERSION_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$")


PYTHON_RE = re.compile(r"^3\.(\d{1,2})$")


# 1980-01-01, the earliest time a zip entry can carry.
ZIP_EPOCH = 315532800


DEFAULT_SOURCE_DATE_EPOCH = ZIP_EPOCH


InputKind = Literal["url", "path", "requirement"]


@dataclass(frozen=True, kw_only=True)
class Input:
    """One external input: where it comes from and the hash(es) it must have."""

    key: str  # key path in the manifest, e.g. "ort.capi" or "models[1]"
    kind: InputKind
    location: str  # the URL, the absolute path, or the requirement "name==version"
    sha256: tuple[str, ...]  # one for url/path; one or more (one per candidate wheel) for requirement
    filename: str | None  # the file name, when the source names it (a requirement's wheel name is found by pip)
    size: int | None = None  # bytes, when the manifest declares them: then the bound of a download
    # A `path` (or file: URL) outside the manifest's folder is read only with `allow_outside = true` (issue 27).
    allow_outside: bool = False
    # The location as the manifest's author wrote it (`models/scorer.onnx`), for messages: `location` is resolved.
    written: str = ""

    @property
    def display(self) -> str:
        return f"{self.key} ({redact_url(self.location)})"

    @property
    def as_written(self) -> str:
        """The location in the author's words: a relative path as written, else the resolved location."""
        return redact_url(self.written or self.location)


@dataclass(frozen=True, kw_only=True)
class Bundle:
    name: str
    version: str
    target: TargetPlatform  # `[bundle] platform`, resolved once by the parser
    python: str
    source_date_epoch: int
    publisher: str | None = None  # Add/Remove Programs' and the MSI's publisher; "ort-bundler" when unset
    upgrade_code: str | None = None  # the MSI's UpgradeCode and GUID namespace; from the name when unset

    @property
    def platform(self) -> str:
        """The manifest's `[bundle] platform` as written (the records and file names carry it)."""
        return self.target.tag

    @property
    def python_tag(self) -> str:
        return "cp" + self.python.replace(".", "")

    @property
    def stem(self) -> str:
        return f"{self.name}-{self.version}-{self.platform}"


@dataclass(frozen=True, kw_only=True)
class AllowedTestSignature:
    """One `[ort] allow_test_signed` entry: the file (by name) and the exact bytes (sha256) allowed a test signature."""

    file: str
    sha256: str


@dataclass(frozen=True, kw_only=True)
class Ort:
    version: str
    archive: Input | None
    wheel: Input | None
    capi: Input | None
    dependencies: tuple[str, ...] | None
    allow_unsigned: bool  # the ORT binaries are a custom build without a vendor signature
    # Named ORT files, by sha256, allowed to carry Microsoft's test signature (onnxruntime-gpu 1.18.1's binaries)
    allow_test_signed: tuple[AllowedTestSignature, ...] = ()

    @property
    def python_source(self) -> Input | None:
        return self.wheel or self.capi


@dataclass(frozen=True, kw_only=True)
class Python:
    lock: Path | None
    requirements: tuple[str, ...]
    runtime: Input | None = None  # the interpreter the bundle carries (embeddable package / python-build-standalone)


@dataclass(frozen=True, kw_only=True)
class VcRedist:
    source: Input
    min_version: str | None
    allow_unsigned: bool  # a redistributable repackaged by the user's organisation, without Microsoft's signature


@dataclass(frozen=True, kw_only=True)
class GpuSource:
    source: Input
    include: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Gpu:
    # The CUDA route's stack; both empty for the DirectML route (`providers = ["DmlExecutionProvider"]`), whose
    # one library, DirectML.dll, comes inside the onnxruntime-directml wheel itself (bundler/platforms/windows/gpu_directml.py).
    cuda: str
    cudnn: str
    sources: tuple[GpuSource, ...]
    # The execution providers the self-check must find running (`[gpu] providers`, default CUDA alone).
    providers: tuple[str, ...] = ("CUDAExecutionProvider",)

    @property
    def directml(self) -> bool:
        """The DirectML route: the parser allows DmlExecutionProvider only alone, without cuda/cudnn/sources."""
        return "DmlExecutionProvider" in self.providers


@dataclass(frozen=True, kw_only=True)
class ModelData:
    """One external data file of a model: the location its tensors name (relative to the model's folder)."""

    location: str
    source: Input


@dataclass(frozen=True, kw_only=True)
class Model:
    name: str
    source: Input
    shapes: Mapping[str, tuple[int, ...]]
    license: str | None = None  # SPDX expression, checked on load; the SBOM says "unknown" without one
    data: tuple[ModelData, ...] = ()  # installed beside the model, as models/<location>

    def inputs(self) -> list[Input]:
        """The model's file and its external data files: what the gate needs to load it."""
        return [self.source, *(data.source for data in self.data)]


@dataclass(frozen=True, kw_only=True)
class Launch:
    module: str | None
    script: Input | None
    program: Input | None  # a native executable (C/C++ applications built against the SDK)
    cache_dir: str | None
    env: Mapping[str, str]
    apply_tuning: bool = False  # the start-up hook gives the entry point's sessions run --tune's options


@dataclass(frozen=True, kw_only=True)
class Manifest:
    path: Path
    bundle: Bundle
    ort: Ort
    python: Python
    vc_redist: VcRedist | None
    gpu: Gpu | None
    models: tuple[Model, ...]
    launch: Launch
    raw: Mapping[str, Any] = field(repr=False)  # the parsed TOML, recorded in bundle.json

    def inputs(self) -> list[Input]:
        """Every file input, in manifest order (the lock's wheels come from `lock.py`)."""
        found = [self.ort.archive, self.ort.wheel, self.ort.capi, self.python.runtime]
        if self.vc_redist:
            found.append(self.vc_redist.source)
        if self.gpu:
            found.extend(s.source for s in self.gpu.sources)
        found.extend(source for m in self.models for source in m.inputs())
        found.extend([self.launch.script, self.launch.program])
        return [i for i in found if i is not None]
