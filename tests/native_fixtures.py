"""The native Windows probe (`tests/native/ortprobe.c`) and real Windows ONNX Runtime DLLs, for the Wine tier.

The probe is the stand-in for a user's program: it loads `onnxruntime.dll` by name, so whatever set-up
runs before it (a test's `.cmd`, or the generated `run.cmd` with the probe as the bundle's program) decides
which copy it gets. This module compiles it, extracts the `capi/` folder of real `win_amd64` wheels, reads
its report, and runs the Linux onnxruntime on the very inputs the build synthesises (`bundler.shipped.ort_bundle.synth`,
which the probe mirrors in C), so a digest printed under Wine can be checked against the same computation
done here or recorded in a bundle.

Import the fixtures into a test module with
`from native_fixtures import ortprobe_exe, ort_win_capi  # noqa: F401` next to `from wine import wine, mingw_gcc`.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from pathlib import Path

import numpy as np
import pytest
from conftest import pip_download
from wine import Wine, compile_windows_exe

from bundler.shipped.ort_bundle import synth

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
class ProbeTensor:
    """One "input …" or "output …" line: a tensor's name, shape and the digest of its raw bytes."""

    name: str
    shape: tuple[int, ...]
    sha256: str


@dataclass(frozen=True, kw_only=True)
class ProbeModel:
    path: str
    inputs: tuple[ProbeTensor, ...] = ()
    outputs: tuple[ProbeTensor, ...] = ()
    identity: str | None = None


@dataclass(frozen=True, kw_only=True)
class ProbeReport:
    """What one probe run printed: the DLL it really loaded, ORT's version, and per-model digests."""

    module: str | None
    version: str | None
    models: tuple[ProbeModel, ...]
    args: tuple[str, ...]
    env: Mapping[str, str | None]

    @classmethod
    def parse(cls, stdout: str) -> ProbeReport:
        module = version = None
        args: list[str] = []
        env: dict[str, str | None] = {}
        models: list[ProbeModel] = []
        for line in stdout.splitlines():
            key, _, value = line.partition(": ")
            if key == "module":
                module = value
            elif key == "version":
                version = value
            elif key.startswith("arg "):
                args.append(value.removeprefix("[").removesuffix("]"))
            elif line.startswith("env "):
                name, unset, _ = key.removeprefix("env ").partition(" unset")
                env[name] = None if unset else value
            elif key == "model":
                models.append(ProbeModel(path=value))
            elif key == "identity":
                models[-1] = replace(models[-1], identity=value)
            elif line.startswith(("input ", "output ")):
                kind, _, rest = line.partition(" ")
                last = models[-1]
                tensors = (*getattr(last, f"{kind}s"), _parse_tensor(rest))
                models[-1] = replace(last, **{f"{kind}s": tensors})
        return cls(module=module, version=version, models=tuple(models), args=tuple(args), env=env)


def _parse_tensor(rest: str) -> ProbeTensor:
    # "<name> shape [d0,d1] sha256 <hex>"; the name may itself contain spaces.
    head, _, digest = rest.rpartition(" sha256 ")
    name, _, shape_text = head.rpartition(" shape ")
    dims = shape_text.strip("[]")
    return ProbeTensor(name=name, shape=tuple(int(d) for d in dims.split(",")) if dims else (), sha256=digest)


def probe_inputs(session, shapes: Mapping[str, Sequence[int]] | None = None) -> dict[str, np.ndarray]:
    """The inputs the probe feeds `session`: the build's own synthesis, not a copy of it."""
    return synth.synthesize_inputs(synth.describe_io(session.get_inputs()), shapes)


def _session(model: Path):
    import onnxruntime

    return onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])


def reference_run(model: Path, shapes: Mapping[str, Sequence[int]] | None = None) -> dict[str, np.ndarray]:
    """Run `model` with the Linux onnxruntime installed here on the probe's inputs; outputs by name."""
    session = _session(model)
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, probe_inputs(session, shapes)), strict=True))


def _tensors(arrays: Mapping[str, np.ndarray]) -> tuple[ProbeTensor, ...]:
    return tuple(ProbeTensor(name=name, shape=tuple(value.shape), sha256=synth.output_digest(value))
                 for name, value in arrays.items())


def reference_inputs(model: Path, shapes: Mapping[str, Sequence[int]] | None = None) -> tuple[ProbeTensor, ...]:
    """The "input" lines the probe must print for `model`."""
    return _tensors(probe_inputs(_session(model), shapes))


def reference_outputs(model: Path, shapes: Mapping[str, Sequence[int]] | None = None) -> tuple[ProbeTensor, ...]:
    """The "output" lines the probe must print for `model` when it loads the same ORT version."""
    return _tensors(reference_run(model, shapes))


def write_path_cmd(script: Path, *, wine: Wine, target: Path, path_first: Sequence[Path]) -> Path:
    """A user's console in a file: folders first on PATH, then `target` (a program or a .cmd) with the arguments.

    It hands over to a .cmd target without `call`, so the target's `exit /b` code is the exit code.
    """
    folders = "".join(f"{wine.to_windows(folder)};" for folder in path_first)
    lines = ["@echo off", f'set "PATH={folders}%PATH%"', f'"{wine.to_windows(target)}" %*', "exit /b %ERRORLEVEL%"]
    script.write_bytes(("\r\n".join(lines) + "\r\n").encode("ascii"))
    return script


@pytest.fixture(scope="session")
def ortprobe_exe(mingw_gcc: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The probe, cross-compiled once per session into a folder that holds nothing else (no stray DLLs).

    Without a link timestamp the same source gives the same bytes, so bundles built with the probe as
    their program add one file to the shared test cache, not one per session.
    """
    folder = tmp_path_factory.mktemp("ortprobe")
    return compile_windows_exe(mingw_gcc, PROBE_SOURCE, folder / "ortprobe.exe",
                               "-municode", "-Wall", "-Wextra", "-Werror", "-Wl,--no-insert-timestamp")


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
