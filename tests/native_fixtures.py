"""The native Windows probe (`tests/native/ortprobe.c`) and real Windows ONNX Runtime DLLs, for the Wine tier.

The probe is the stand-in for a user's program: it loads `onnxruntime.dll` by name, so whatever set-up
runs before it (a test's `.cmd`, later the generated `run.cmd`) decides which copy it gets. This module
compiles it, extracts the `capi/` folder of real `win_amd64` wheels, reads its report, and reproduces its
deterministic inputs with the Linux onnxruntime, so a digest printed under Wine can be checked against
the same computation done here.

Import the fixtures into a test module with
`from native_fixtures import ortprobe_exe, ort_win_capi  # noqa: F401` next to `from wine import wine, mingw_gcc`.
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import numpy as np
import pytest
from conftest import pip_download
from wine import Wine, compile_windows_exe

PROBE_SOURCE = Path(__file__).parent / "native" / "ortprobe.c"

# The decoy for shadowing tests: a real, different ONNX Runtime with a cp311 win_amd64 wheel. Not 1.22.0:
# its onnxruntime.dll imports dxcore.dll, which Wine 8 lacks, so it fails to load (126) instead of shadowing.
DECOY_ORT_VERSION = "1.20.1"


class ProbeExit(IntEnum):
    """The probe's exit codes (see the header comment of ortprobe.c)."""

    OK = 0
    USAGE = 2
    LOAD = 3
    API = 4
    SESSION = 5
    RUN = 6
    IDENTITY = 7
    UNSUPPORTED = 8
    VERSION = 9


@dataclass(frozen=True, kw_only=True)
class ProbeOutput:
    name: str
    shape: tuple[int, ...]
    sha256: str


@dataclass(frozen=True, kw_only=True)
class ProbeModel:
    path: str
    outputs: tuple[ProbeOutput, ...]
    identity: str | None


@dataclass(frozen=True, kw_only=True)
class ProbeReport:
    """What one probe run printed: the DLL it really loaded, ORT's version, and per-model digests."""

    module: str | None
    version: str | None
    models: tuple[ProbeModel, ...]
    args: tuple[str, ...]

    @classmethod
    def parse(cls, stdout: str) -> ProbeReport:
        module = version = None
        args: list[str] = []
        models: list[ProbeModel] = []
        for line in stdout.splitlines():
            key, _, value = line.partition(": ")
            if key == "module":
                module = value
            elif key == "version":
                version = value
            elif key.startswith("arg "):
                args.append(value.removeprefix("[").removesuffix("]"))
            elif key == "model":
                models.append(ProbeModel(path=value, outputs=(), identity=None))
            elif key == "identity":
                models[-1] = ProbeModel(path=models[-1].path, outputs=models[-1].outputs, identity=value)
            elif line.startswith("output "):
                last = models[-1]
                models[-1] = ProbeModel(path=last.path, outputs=(*last.outputs, _parse_output(line)),
                                        identity=last.identity)
        return cls(module=module, version=version, models=tuple(models), args=tuple(args))


def _parse_output(line: str) -> ProbeOutput:
    # "output <name> shape [d0,d1] sha256 <hex>"; the name may itself contain spaces.
    head, _, digest = line.rpartition(" sha256 ")
    name_part, _, shape_text = head.rpartition(" shape ")
    dims = shape_text.strip("[]")
    return ProbeOutput(name=name_part.removeprefix("output "),
                       shape=tuple(int(d) for d in dims.split(",")) if dims else (),
                       sha256=digest)


def deterministic_inputs(shapes: Sequence[tuple[str, Sequence[int | str | None]]]) -> dict[str, np.ndarray]:
    """The probe's inputs, mirrored: dynamic dims are 1, element k (across all inputs) is ((k % 251) - 125) / 16."""
    inputs: dict[str, np.ndarray] = {}
    k = 0
    for name, dims in shapes:
        shape = tuple(d if isinstance(d, int) and d >= 0 else 1 for d in dims)
        count = int(np.prod(shape, dtype=np.int64))
        values = ((np.arange(k, k + count) % 251) - 125).astype(np.float32) / np.float32(16)
        inputs[name] = values.reshape(shape)
        k += count
    return inputs


def digest(array: np.ndarray) -> str:
    """The probe's digest: sha256 of the tensor's raw little-endian bytes."""
    contiguous = np.ascontiguousarray(array)
    return hashlib.sha256(contiguous.astype(contiguous.dtype.newbyteorder("<")).tobytes()).hexdigest()


def reference_run(model: Path) -> dict[str, np.ndarray]:
    """Run `model` with the Linux onnxruntime installed here on the probe's inputs; outputs by name."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    feeds = deterministic_inputs([(i.name, i.shape) for i in session.get_inputs()])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def reference_outputs(model: Path) -> tuple[ProbeOutput, ...]:
    """What the probe must print for `model` when it loads the same ORT version."""
    return tuple(ProbeOutput(name=name, shape=tuple(value.shape), sha256=digest(value))
                 for name, value in reference_run(model).items())


def write_path_cmd(script: Path, *, wine: Wine, probe: Path, path_first: Sequence[Path]) -> Path:
    """A minimal caller that puts folders first on PATH and runs the probe, passing its arguments on.

    Only a stand-in until the generated launchers exist: it is what a user's shell would do, not what
    `run.cmd` does.
    """
    folders = "".join(f"{wine.to_windows(folder)};" for folder in path_first)
    lines = ["@echo off", f'set "PATH={folders}%PATH%"', f'"{wine.to_windows(probe)}" %*', "exit /b %ERRORLEVEL%"]
    script.write_bytes(("\r\n".join(lines) + "\r\n").encode("ascii"))
    return script


@pytest.fixture(scope="session")
def ortprobe_exe(mingw_gcc: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The probe, cross-compiled once per session into a folder that holds nothing else (no stray DLLs)."""
    folder = tmp_path_factory.mktemp("ortprobe")
    return compile_windows_exe(mingw_gcc, PROBE_SOURCE, folder / "ortprobe.exe",
                               "-municode", "-Wall", "-Wextra", "-Werror")


@pytest.fixture(scope="session")
def ort_win_capi(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`ort_win_capi("1.23.1")`: the `onnxruntime/capi` folder of that real win_amd64 wheel, extracted once."""
    extracted: dict[str, Path] = {}

    def capi(version: str) -> Path:
        if version not in extracted:
            wheel = pip_download(f"onnxruntime=={version}", "win_amd64")
            root = tmp_path_factory.mktemp(f"ort-win-{version}")
            with zipfile.ZipFile(wheel) as archive:
                members = [n for n in archive.namelist() if n.startswith("onnxruntime/capi/")]
                archive.extractall(root, members=members)
            extracted[version] = root / "onnxruntime" / "capi"
            assert (extracted[version] / "onnxruntime.dll").is_file(), f"{wheel.name} has no capi/onnxruntime.dll"
        return extracted[version]

    return capi
