"""The model gate: every bundled model must load and run in the pinned ORT version.

An unsupported operator or opset found on an air-gapped target costs a release; found here it
costs a build. `lock` runs the gate once, on the connected machine, and pins what it found (each
model's fingerprint, signature and a reference output computed on deterministic inputs,
`target/synth.py`); `build` runs it again and checks that the pinned ORT reproduces the pinned
reference within its tolerance, and ships the pinned record: the zip never carries this machine's
floating-point results. The session runs in the very ORT version the bundle ships, always in a child
process running the shipped self-check's `--reference` mode with a memory limit and a wall-clock limit
per model (`gate_limits.limited`): with
this interpreter when it has that version, else in an isolated environment on the build host (`ortenv`). A model
is untrusted input: one whose signature asks for gigabytes is refused before anything is allocated
(`synth.size_problem`), and one that only asks for them while it runs fails in the child, not the host.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import secrets
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from bundler import __version__
from bundler import runner as runners
from bundler.assembly.gate_limits import gate_seconds, limited, worker_failure
from bundler.assembly.ortenv import host_has_ort, isolated_python
from bundler.assembly.shipped_package import package_files, write_package
from bundler.atomic import link_or_copy, write_atomic
from bundler.errors import (
    BuildError,
    HashMismatchError,
    ManifestError,
)
from bundler.hashing import file_sha256, mismatch_message
from bundler.readers.externaldata import external_refs, reference_problems, without_external_initializers
from bundler.readers.onnx_limits import takes, too_new
from bundler.runner import Runner
from bundler.shipped.ort_bundle.synth import SYNTH_VERSION

# The model gate's private folders under the isolated environments' folder (cache/ort-envs/).
GATE_PREFIX = "gate-"
# What the reference worker may allocate beyond the model's own files (see `gate_limits.limited`).
GATE_MEMORY_BYTES = 8 * 1024**3
Json = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class DataFile:
    """One external data file of a model, verified in the cache, and the location the model's tensors name."""

    location: str
    path: Path
    sha256: str


@dataclass(frozen=True, kw_only=True)
class ModelInput:
    """One `[[models]]` entry, resolved to its verified files in the cache."""

    name: str
    path: Path
    sha256: str
    shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)
    data: tuple[DataFile, ...] = ()
    synth: int = SYNTH_VERSION  # the synthesised inputs' definition: a pinned reference is checked on its own

    @property
    def data_hashes(self) -> dict[str, str]:
        return {data.location: data.sha256 for data in sorted(self.data, key=lambda d: d.location)}

    @property
    def label(self) -> str:
        return f"model '{self.name}' (models/{self.name}.onnx)"


@dataclass(frozen=True, kw_only=True)
class ModelRecord:
    """What bundle.json says about a model; the build adds "file": "models/<name>.onnx"."""

    name: str
    sha256: str
    opsets: dict[str, int]
    inputs: list[Json]
    outputs: list[Json]
    shapes: dict[str, list[int]]
    reference: Json
    data: dict[str, str] = field(default_factory=dict)  # external data: location -> sha256

    def to_json(self) -> Json:
        """The record; "data" only for a model that has external data, so the records of others never change."""
        record = {
            "name": self.name,
            "sha256": self.sha256,
            "opsets": dict(self.opsets),
            "inputs": self.inputs,
            "outputs": self.outputs,
            "shapes": self.shapes,
            "reference": self.reference,
        }
        return {**record, "data": dict(sorted(self.data.items()))} if self.data else record

    def pinned_json(self) -> str:
        """The record as the lock pins it: one canonical JSON line, without the name and hash the lock states."""
        data = {key: value for key, value in self.to_json().items() if key not in ("name", "sha256")}
        return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_pinned(cls, *, name: str, sha256: str, text: str) -> ModelRecord:
        """The record a lock pins (`pinned_json`); a record missing a key is a lock error."""
        data = json.loads(text)
        missing = sorted({"opsets", "inputs", "outputs", "shapes", "reference"} - set(data))
        if missing:
            msg = f"the lock's record of model '{name}' lacks {', '.join(missing)}; run `ort-bundler lock` again"
            raise ManifestError(msg)
        return cls(name=name, sha256=sha256, opsets=data["opsets"], inputs=data["inputs"], outputs=data["outputs"],
                   shapes=data["shapes"], reference=data["reference"], data=data.get("data", {}))


def gate_models(
    models: Sequence[ModelInput], *, ort_version: str, runner: Runner | None = None, work_dir: Path,
    wheels: Sequence[Path] = (),
) -> list[ModelRecord]:
    """Check every model and record it, or fail naming every model that cannot ship (run by `lock`)."""
    opsets, problems = check_model_files(models)
    parsed = [model for model in models if model.name in opsets]
    with staged_models(parsed, work_dir) as paths:
        probes = probe_models(parsed, paths=paths, ort_version=ort_version, runner=runner or runners.run,
                              work_dir=work_dir, wheels=wheels)
    problems += [problem for model in parsed
                 if (problem := probe_problem(model, probes[model.name], opsets[model.name], ort_version))]
    if problems:
        raise BuildError("\n".join(problems))
    return [
        ModelRecord(
            name=model.name,
            sha256=model.sha256,
            opsets=opsets[model.name],
            inputs=probes[model.name]["inputs"],
            outputs=probes[model.name]["outputs"],
            shapes={name: [int(dim) for dim in shape] for name, shape in sorted(model.shapes.items())},
            reference=probes[model.name]["reference"],
            data=model.data_hashes,
        )
        for model in models
    ]


def gate_pinned(
    models: Sequence[ModelInput], pinned: Mapping[str, ModelRecord], *, ort_version: str,
    runner: Runner | None = None, work_dir: Path, results_dir: Path, wheels: Sequence[Path] = (),
) -> list[ModelRecord]:
    """The build's gate: the pinned ORT must reproduce each pinned record within its tolerance.

    What ships is the pinned record, never this machine's output, so the zip does not depend on the CPU
    kernels of the build machine. The model's checks with onnx (checker, opsets, external data locations)
    ran when `lock` pinned the record, for these very bytes (the caller holds each model to the sha256 the
    lock pins): they are a function of the bytes and are not repeated, and the build never imports onnx
    (with NumPy and ml_dtypes, over a second). A model that passed once for the same model and data hashes,
    ORT version, pinned record and gate code is not run again either (`results_dir`).
    """
    models = [replace(model, synth=pinned[model.name].reference.get("synth", 1)) for model in models]
    keys = {model.name: gate_key(model, pinned[model.name], ort_version) for model in models}
    todo = [model for model in models if not (results_dir / keys[model.name]).is_file()]
    for model in todo:
        if problem := changed_model(model):  # the cache was altered after the file was verified on entry
            raise HashMismatchError(problem)
    with staged_models(todo, work_dir) as paths:
        probes = probe_models(todo, paths=paths, ort_version=ort_version, runner=runner or runners.run,
                              work_dir=work_dir, wheels=wheels)
    problems = [problem for model in todo
                if (problem := probe_problem(model, probes[model.name], pinned[model.name].opsets, ort_version)
                    or pinned_problem(model, pinned[model.name], probes[model.name], ort_version))]
    if problems:
        raise BuildError("\n".join(problems))
    results_dir.mkdir(parents=True, exist_ok=True)
    for model in todo:
        write_atomic(results_dir / keys[model.name], b"passed\n")
    return [pinned[model.name] for model in models]


def gate_key(model: ModelInput, pinned: ModelRecord, ort_version: str) -> str:
    """What a gate result depends on: the model, the ORT version, the pinned record and the gate's own code."""
    parts = [model.sha256, ort_version, pinned.pinned_json(), __version__,
             _package_digest()]
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()


def _package_digest() -> str:
    """The shipped package's files, one digest: the gate runs its self-check, which imports its siblings."""
    listing = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in package_files().items())
    return hashlib.sha256(listing.encode("utf-8")).hexdigest()


def pinned_problem(model: ModelInput, pinned: ModelRecord, probe: Json, ort_version: str) -> str | None:
    """None when this run reproduces the pinned record within its tolerance, else the build's sentence."""
    if (probe["inputs"], probe["outputs"]) != (pinned.inputs, pinned.outputs):
        return (f"{model.label}: ORT {ort_version} reports the signature inputs {probe['inputs']} outputs "
                f"{probe['outputs']}, but the lock pins inputs {pinned.inputs} outputs {pinned.outputs}; "
                "run `ort-bundler lock` again")
    fresh, recorded = probe["reference"], pinned.reference
    if fresh["inputs"] != recorded["inputs"]:
        return (f"{model.label}: the synthesised inputs differ from those the pinned reference was computed on "
                f"({fresh['inputs']} here, {recorded['inputs']} pinned); run `ort-bundler lock` again")
    worst = largest_difference(fresh["outputs"], recorded["outputs"], rtol=recorded["rtol"], atol=recorded["atol"])
    if worst is None:
        return None
    return (f"{model.label}: ORT {ort_version} on this machine does not reproduce the pinned reference within "
            f"rtol {recorded['rtol']}, atol {recorded['atol']}: {worst}")


def largest_difference(fresh: Mapping[str, Json], pinned: Mapping[str, Json], *, rtol: float, atol: float) -> str | None:
    """None when every output is within the tolerance, else the largest difference, said in one phrase.

    The values decide, not the digests: a digest differs after a one-ulp change that the tolerance allows.
    A reference holds a few values (`synth.REFERENCE_VALUES`): plain Python compares them, as `numpy.isclose`
    would (NaN matches NaN, an infinity only itself), without importing NumPy into the build.
    """
    failures = []
    for name, recorded in sorted(pinned.items()):
        value = fresh.get(name)
        if value is None:
            failures.append((math.inf, f"output '{name}' is missing"))
            continue
        if recorded.get("digest") is None:  # not a tensor: nothing numeric was pinned
            continue
        if (value.get("shape"), value.get("dtype")) != (recorded["shape"], recorded["dtype"]):
            failures.append((math.inf, (f"output '{name}' is {value.get('dtype')}{value.get('shape')}, "
                                        f"pinned {recorded['dtype']}{recorded['shape']}")))
            continue
        actual, expected = ([float(v) for v in values] for values in (value["values"], recorded["values"]))
        if len(actual) != len(expected):
            failures.append((math.inf, f"output '{name}' has {len(actual)} reference values, pinned {len(expected)}"))
            continue
        gaps = [(_gap(a, e, rtol=rtol, atol=atol), index) for index, (a, e) in enumerate(zip(actual, expected))]
        gap, index = max(gaps, key=lambda g: (g[0], -g[1]), default=(0.0, 0))  # the first of equal gaps
        if gap > 0:
            failures.append((gap, (f"the largest difference is {gap:g} in output '{name}' element {index} "
                                   f"({actual[index]!r} here, {expected[index]!r} pinned)")))
    return max(failures)[1] if failures else None


def _gap(actual: float, expected: float, *, rtol: float, atol: float) -> float:
    """0.0 within the tolerance, else how far apart: infinite when a NaN or an infinity is involved."""
    if math.isnan(actual) or math.isnan(expected):
        return 0.0 if math.isnan(actual) and math.isnan(expected) else math.inf
    if math.isinf(actual) or math.isinf(expected):
        return 0.0 if actual == expected else math.inf
    gap = abs(actual - expected)
    return 0.0 if gap <= atol + rtol * abs(expected) else gap


def check_model_files(models: Sequence[ModelInput]) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Each readable model's opsets, and the sentence for each model that is not."""
    opsets, problems = {}, []
    for model in models:
        try:
            opsets[model.name] = check_model_file(model)
        except BuildError as exc:
            problems.append(str(exc))
    return opsets, problems


def changed_model(model: ModelInput) -> str | None:
    """The sentence for a model file whose bytes are not the ones pinned (hashed again from the cache), or None."""
    actual = file_sha256(model.path)
    return None if actual == model.sha256 else mismatch_message(model.label, str(model.path), model.sha256, actual)


def check_model_file(model: ModelInput) -> dict[str, int]:
    """Verify, parse and check one model with onnx; returns its opset imports by domain."""
    import onnx
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    if problem := changed_model(model):
        raise HashMismatchError(problem)
    try:
        proto = onnx.load(str(model.path), load_external_data=False)
    except (DecodeError, OSError, ValueError) as exc:
        msg = f"{model.label}: {model.path} is not a readable ONNX model (truncated or corrupt): {exc}"
        raise BuildError(msg) from None
    # Before the checker, which would follow the locations: each is checked as text first (CVE-2024-27318).
    sizes = {data.location: data.path.stat().st_size for data in model.data}
    if problems := reference_problems(model.label, external_refs(proto), sizes):
        raise BuildError("\n".join(problems))
    try:
        onnx.checker.check_model(without_external_initializers(proto) if model.data else proto, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        msg = f"{model.label}: fails the ONNX checker: {' '.join(str(exc).split())}"
        raise BuildError(msg) from None
    return {entry.domain or "ai.onnx": int(entry.version) for entry in proto.opset_import}


def probe_problem(model: ModelInput, probe: Json, opsets: Mapping[str, int], ort_version: str) -> str | None:
    """The build's sentence for a model the pinned ORT cannot load or run, or None when it can."""
    if probe["ok"]:
        return None
    if probe["stage"] == "inputs":
        return f"{model.label}: its [[models]] shapes do not fit the model: {probe['reason']}"
    if probe["stage"] == "size":
        return f"{model.label}: {probe['reason']}; the gate does not run a model that asks for that much memory"
    if probe["stage"] == "load":
        imports = ", ".join(f"{domain} {version}" for domain, version in sorted(opsets.items()))
        what = f"does not load (opset imports: {imports})"
        if too_new(0, opsets, ort_version) or "IR version" in probe["reason"]:  # stamped newer than it loads
            return (f"{model.label}: {what}, ORT {ort_version} says: {probe['reason']}; {takes(ort_version)}: re-save "
                    "the model for it or pin a newer ONNX Runtime")
    else:
        what = f"fails to run on synthesised inputs (shapes {dict(model.shapes) or 'all dynamic dims 1'})"
    return f"{model.label}: {what}, ORT {ort_version} says: {probe['reason']}"


def probe_models(models: Sequence[ModelInput], *, paths: Mapping[str, Path], ort_version: str, runner: Runner,
                 work_dir: Path, wheels: Sequence[Path] = ()) -> dict[str, Json]:
    """Each model's probe from `synth.probe_model`, computed in the pinned ORT version (`paths`: `staged_models`)."""
    if not models:
        return {}
    python = Path(sys.executable) if host_has_ort(ort_version) else isolated_python(
        ort_version, runner=runner, work_dir=work_dir, wheels=wheels)
    return run_reference_worker(python, models, paths=paths, ort_version=ort_version, runner=runner, work_dir=work_dir)


@contextlib.contextmanager
def staged_models(models: Sequence[ModelInput], work_dir: Path) -> Iterator[dict[str, Path]]:
    """Where ORT reads each model: in the cache when it has no external data, else in a folder of its own that
    holds it and its data files at the locations its tensors name (linked from the cache, copied where a link
    cannot be made), as they will be installed."""
    if not any(model.data for model in models):
        yield {model.name: model.path for model in models}
        return
    work_dir.mkdir(parents=True, exist_ok=True)
    with gate_scratch(work_dir) as folder:
        paths = {}
        for model in models:
            if not model.data:
                paths[model.name] = model.path
                continue
            paths[model.name] = folder / model.name / f"{model.name}.onnx"
            for target, source in [(paths[model.name], model.path),
                                   *((folder / model.name / data.location, data.path) for data in model.data)]:
                target.parent.mkdir(parents=True, exist_ok=True)  # the locations were checked: below the folder
                link_or_copy(source, target)
        yield paths


@contextlib.contextmanager
def gate_scratch(work_dir: Path) -> Iterator[Path]:
    """A private `gate-<hex>` folder, locked while the gate uses it; a killed build's folders are removed by
    the next gate, a live one's never (its lock is held)."""
    remove_dead_gate_scratch(work_dir)
    token = f"{GATE_PREFIX}{secrets.token_hex(8)}"
    lock = FileLock(work_dir / f"{token}.lock")
    lock.acquire()
    folder = work_dir / token
    try:
        folder.mkdir(mode=0o700)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        lock.release()
        (work_dir / f"{token}.lock").unlink(missing_ok=True)


def remove_dead_gate_scratch(work_dir: Path) -> list[Path]:
    """The `gate-*` folders whose owner died: their lock is free (or, from versions before the lock, absent)."""
    removed = []
    for folder in sorted(work_dir.glob(f"{GATE_PREFIX}*")):
        if not folder.is_dir() or folder.is_symlink():
            continue
        lock_path = folder.with_name(f"{folder.name}.lock")
        lock = FileLock(lock_path, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            continue  # a live gate
        try:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        finally:
            lock.release()
            lock_path.unlink(missing_ok=True)
    return removed


def run_reference_worker(
    python: Path, models: Sequence[ModelInput], *, paths: Mapping[str, Path], ort_version: str, runner: Runner,
    work_dir: Path,
) -> dict[str, Json]:
    """Run the shipped self-check's `--reference` mode under `python`, from a private copy of the shipped package
    started through its start file as on the target, and read its JSON report."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with gate_scratch(work_dir) as private:  # one per build: builds may overlap
        start = write_package(Path(private))
        request = Path(private) / "model-gate-request.json"
        request.write_text(json.dumps([{"name": model.name, "path": str(paths[model.name]), "shapes": dict(model.shapes),
                                        "synth": model.synth} for model in models]), encoding="utf-8")
        limit, seconds = GATE_MEMORY_BYTES + sum(model_bytes(model) for model in models), gate_seconds()
        try:
            stdout = runner([str(python), "-I", *limited(limit, seconds), str(start), "selfcheck", "--reference", str(request)])
        except BuildError as exc:  # stopped at its deadline, killed, or aborted by an allocation (std::bad_alloc)
            labels = {str(paths[model.name]): model.label for model in models}
            raise BuildError(worker_failure(str(exc), labels, ort_version=ort_version, memory=limit,
                                            seconds=seconds)) from None
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        msg = f"the model check in ONNX Runtime {ort_version} printed no JSON report, but: {stdout[-500:]!r}"
        raise BuildError(msg) from None
    if report["ort_version"] != ort_version:
        msg = f"{python} imports onnxruntime {report['ort_version']}, expected {ort_version}"
        raise BuildError(msg)
    probes: dict[str, Json] = report["models"]
    return probes


def model_bytes(model: ModelInput) -> int:
    """The model's file and external data: what the reference worker may map on top of its own needs."""
    return model.path.stat().st_size + sum(data.path.stat().st_size for data in model.data)
