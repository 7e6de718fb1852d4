"""The model gate: every bundled model must load and run in the pinned ORT version at build time.

An unsupported operator or opset found on an air-gapped target costs a release; found here it
costs a build. The gate also records what the self-check needs to prove the install: each model's
fingerprint, signature and a reference output computed on deterministic inputs (`target/synth.py`).
The session runs in the very ORT version the bundle ships: in this process when it is that version,
else in an isolated environment on the build host running the shipped self-check's `--reference` mode.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from filelock import FileLock

from bundler import runner as runners
from bundler.errors import BuildError, HashMismatchError, UnsupportedError
from bundler.hashing import file_sha256, mismatch_message
from bundler.runner import Runner
from bundler.target import synth

# The one line of selfcheck.py that the shipped copy replaces with synth.py's source.
INLINED = ("synth", "records", "dllsearch", "interpreter")
FUTURE_IMPORT = "from __future__ import annotations\n"
READY_MARKER = ".ort-bundler-ready"


@dataclass(frozen=True, kw_only=True)
class ModelInput:
    """One `[[models]]` entry, resolved to its verified file in the cache."""

    name: str
    path: Path
    sha256: str
    shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"model '{self.name}' (models/{self.name}.onnx)"


@dataclass(frozen=True, kw_only=True)
class ModelRecord:
    """What bundle.json says about a model; the build adds "file": "models/<name>.onnx"."""

    name: str
    sha256: str
    opsets: dict[str, int]
    inputs: list[dict]
    outputs: list[dict]
    shapes: dict[str, list[int]]
    reference: dict

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "sha256": self.sha256,
            "opsets": dict(self.opsets),
            "inputs": self.inputs,
            "outputs": self.outputs,
            "shapes": self.shapes,
            "reference": self.reference,
        }


def gate_models(
    models: Sequence[ModelInput], *, ort_version: str, runner: Runner | None = None, work_dir: Path
) -> list[ModelRecord]:
    """Check every model and record it, or fail the build naming every model that cannot ship."""
    opsets, problems = {}, []
    for model in models:
        try:
            opsets[model.name] = check_model_file(model)
        except BuildError as exc:
            problems.append(str(exc))
    parsed = [model for model in models if model.name in opsets]
    probes = probe_models(parsed, ort_version=ort_version, runner=runner or runners.run, work_dir=work_dir)
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
        )
        for model in models
    ]


def check_model_file(model: ModelInput) -> dict[str, int]:
    """Verify, parse and check one model with onnx; returns its opset imports by domain."""
    import onnx
    from google.protobuf.message import DecodeError

    actual = file_sha256(model.path)
    if actual != model.sha256:
        raise HashMismatchError(mismatch_message(model.label, str(model.path), model.sha256, actual))
    try:
        proto = onnx.load(str(model.path), load_external_data=False)
    except (DecodeError, OSError, ValueError) as exc:
        msg = f"{model.label}: {model.path} is not a readable ONNX model (truncated or corrupt): {exc}"
        raise BuildError(msg) from None
    external = [tensor.name for tensor in proto.graph.initializer
                if tensor.data_location == onnx.TensorProto.EXTERNAL]
    if external:
        msg = (f"{model.label}: initializers {external[:3]} keep their data in external files, "
               "which a bundle does not ship yet; save the model as one .onnx file")
        raise UnsupportedError(msg)
    try:
        onnx.checker.check_model(proto, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        msg = f"{model.label}: fails the ONNX checker: {' '.join(str(exc).split())}"
        raise BuildError(msg) from None
    return {entry.domain or "ai.onnx": int(entry.version) for entry in proto.opset_import}


def probe_problem(model: ModelInput, probe: dict, opsets: Mapping[str, int], ort_version: str) -> str | None:
    """The build's sentence for a model the pinned ORT cannot load or run, or None when it can."""
    if probe["ok"]:
        return None
    if probe["stage"] == "inputs":
        return f"{model.label}: its [[models]] shapes do not fit the model: {probe['reason']}"
    if probe["stage"] == "load":
        imports = ", ".join(f"{domain} {version}" for domain, version in sorted(opsets.items()))
        what = f"does not load (opset imports: {imports})"
    else:
        what = f"fails to run on synthesised inputs (shapes {dict(model.shapes) or 'all dynamic dims 1'})"
    return f"{model.label}: {what}, ORT {ort_version} says: {probe['reason']}"


def probe_models(models: Sequence[ModelInput], *, ort_version: str, runner: Runner, work_dir: Path) -> dict:
    """Each model's probe from `synth.probe_model`, computed in the pinned ORT version."""
    if not models:
        return {}
    if in_process_ort_version() == ort_version:
        import onnxruntime

        return {model.name: synth.probe_model(onnxruntime, str(model.path), model.shapes) for model in models}
    python = isolated_python(ort_version, runner=runner, work_dir=work_dir)
    return run_reference_worker(python, models, ort_version=ort_version, runner=runner, work_dir=work_dir)


def in_process_ort_version() -> str | None:
    try:
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime.__version__


def isolated_python(ort_version: str, *, runner: Runner, work_dir: Path) -> Path:
    """A virtual environment on the build host with exactly the pinned ORT, made once per work_dir."""
    env_dir = work_dir / f"ort-{ort_version}-py{sys.version_info.major}{sys.version_info.minor}"
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    work_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(work_dir / f"{env_dir.name}.lock"):  # builds sharing a cache make the environment once
        if (env_dir / READY_MARKER).is_file():
            return python
        shutil.rmtree(env_dir, ignore_errors=True)
        runner([sys.executable, "-m", "venv", str(env_dir)])
        runner([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                f"onnxruntime=={ort_version}", "numpy"])
        (env_dir / READY_MARKER).write_text(ort_version, encoding="utf-8")
    return python


def run_reference_worker(
    python: Path, models: Sequence[ModelInput], *, ort_version: str, runner: Runner, work_dir: Path
) -> dict:
    """Run the shipped self-check's `--reference` mode under `python` and read its JSON report."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work_dir, prefix="gate-") as private:  # one per build: builds may overlap
        script = Path(private) / "selfcheck-reference.py"
        script.write_bytes(selfcheck_script_bytes())
        request = Path(private) / "model-gate-request.json"
        request.write_text(json.dumps([{"name": model.name, "path": str(model.path), "shapes": dict(model.shapes)}
                                       for model in models]), encoding="utf-8")
        stdout = runner([str(python), "-I", str(script), "--reference", str(request)])
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        msg = f"the model check in ONNX Runtime {ort_version} printed no JSON report, but: {stdout[-500:]!r}"
        raise BuildError(msg) from None
    if report["ort_version"] != ort_version:
        msg = f"{python} imports onnxruntime {report['ort_version']}, expected {ort_version}"
        raise BuildError(msg)
    return report["models"]


def identity_model_bytes() -> bytes:
    """The self-check's identity model (payload/selfcheck/identity.onnx), the same bytes on every build."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="identity")],
                              "ort-bundler-selfcheck", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="ort-bundler")
    model.ir_version = 8  # opset 13 needs IR 7+; 8 loads in every ORT the bundler supports
    return model.SerializeToString(deterministic=True)


def selfcheck_script_bytes() -> bytes:
    """The self-check as shipped (payload/selfcheck/selfcheck.py): one file with synth.py and records.py inlined.

    The target has no ort-bundler package, so the script cannot import them; inlining keeps a
    single source for the inputs the build and the target synthesise and for the report's definition.
    """
    package = resources.files("bundler.target")
    script = (package / "selfcheck.py").read_text(encoding="utf-8").splitlines(keepends=True)
    for module in INLINED:
        source = (package / f"{module}.py").read_text(encoding="utf-8")
        prefix = f"from bundler.target.{module} import "
        imports = [index for index, line in enumerate(script) if line.startswith(prefix)]
        if len(imports) != 1 or FUTURE_IMPORT not in source:
            msg = (f"bundler/target/selfcheck.py must import {module} on exactly one line, "
                   f"and {module}.py must start with postponed annotations")
            raise BuildError(msg)
        end = imports[0] + 1
        while not script[end - 1].rstrip().endswith((")", "import")) and "(" in script[imports[0]]:
            end += 1
        body = source.replace(FUTURE_IMPORT, "", 1)
        banner = f"# --- inlined from bundler/target/{module}.py by ort-bundler ---\n"
        script = [*script[: imports[0]], banner, body, f"# --- end of {module}.py ---\n", *script[end:]]
    return "".join(script).encode("utf-8")
