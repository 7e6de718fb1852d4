"""The models part of the self-check: the identity model and every bundled model run in the installed ORT,
each model's files checked against bundle.json first and its outputs compared with the build's reference
(computed on the same synthesised inputs, `synth`)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path, PurePosixPath
from typing import Any, Dict, List

from ..records import Check
from ..synth import compare_output, describe_io, output_digest, synthesize_inputs
from .check_context import Context
from .cuda_check import CUDA, DML, session_options

CPU = "CPUExecutionProvider"
LATENCY_RUNS = 5
LATENCY_BUDGET_SECONDS = 5.0


def session_providers(ctx: Context, ort: Any, *, cuda_ok: bool, dml_ok: bool = True) -> list[str]:
    expected = ctx.bundle.get("expected_providers", [CPU])
    available = ort.get_available_providers()
    chosen = [name for name in expected if name in available and (name != CUDA or cuda_ok)
              and (name != DML or dml_ok)]
    return chosen if CPU in chosen else [*chosen, CPU]


def check_identity(ctx: Context, ort: Any) -> Check:
    import numpy as np

    path = ctx.root / ctx.bundle["selfcheck"]["identity_model"]
    if not path.is_file():
        return Check(id="identity", status="fail", message=f"the identity model {path} is missing", fix=ctx.reinstall())
    try:
        session = ort.InferenceSession(str(path), session_options(ort), providers=[CPU])
        feeds = synthesize_inputs(describe_io(session.get_inputs()))
        (result,) = session.run(None, feeds)
    except Exception as exc:  # whatever ORT raises here is the finding
        return Check(id="identity", status="fail", message=f"the identity model {path} did not run: {exc}",
                     fix=ctx.reinstall())
    (given,) = feeds.values()
    if result.dtype != given.dtype or not np.array_equal(result, given):
        return Check(id="identity", status="fail", fix=ctx.reinstall(),
                     message=f"the identity model {path} returned {result.dtype}{list(result.shape)}, "
                             "which differs from its input")
    return Check(id="identity", status="pass",
                 message=f"identity model returned its {given.dtype}{list(given.shape)} input exactly")


def file_sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def model_file_problem(ctx: Context, record: Dict[str, Any]) -> str | None:
    """The model file and its external data files (installed beside it, at the locations its tensors name)."""
    folder = PurePosixPath(record["file"]).parent
    files = [(record["file"], record["sha256"])]
    files += [(str(folder / location), sha256) for location, sha256 in sorted(record.get("data", {}).items())]
    for name, expected in files:
        path = ctx.root / name
        what = f"model '{record['name']}' file {name}"
        if not path.is_file():
            return f"{what} is missing from {ctx.root}"
        actual = file_sha256(path)
        if actual != expected:
            return f"{what} has sha256 {actual}, the bundle recorded {expected}"
    return None


def timed_runs(session: Any, feeds: Dict[str, Any]) -> tuple[List[Any], list[float]]:
    """The first run's outputs and the durations of up to LATENCY_RUNS runs within the time budget."""
    durations: List[float] = []
    results: List[Any] = []
    while len(durations) < LATENCY_RUNS and sum(durations) < LATENCY_BUDGET_SECONDS:
        started = time.perf_counter()
        outputs = session.run(None, feeds)
        durations.append(time.perf_counter() - started)
        results = results or outputs
    return results, durations


def check_model(ctx: Context, ort: Any, record: Dict[str, Any], providers: list[str]) -> Check:
    check_id = f"model:{record['name']}"
    problem = model_file_problem(ctx, record)
    if problem:
        return Check(id=check_id, status="fail", message=problem, fix=ctx.reinstall())
    reference = record.get("reference") or {}
    try:
        feeds = synthesize_inputs(record["inputs"], record.get("shapes"), reference.get("synth", 1))
    except ValueError as exc:
        return Check(id=check_id, status="fail", message=f"model '{record['name']}': {exc}", fix=ctx.reinstall())
    drifted = [name for name, digest in reference.get("inputs", {}).items() if output_digest(feeds[name]) != digest]
    if drifted:
        return Check(id=check_id, status="fail", fix="Rebuild the bundle: its self-check and its references disagree.",
                     message=f"model '{record['name']}': the synthesised inputs {drifted} differ "
                             "from the ones the build used")
    try:
        session = ort.InferenceSession(str(ctx.root / record["file"]), session_options(ort), providers=providers)
        results, durations = timed_runs(session, feeds)
    except Exception as exc:  # ORT's reason is the finding
        return Check(id=check_id, status="fail", fix=ctx.reinstall(),
                     message=f"model '{record['name']}' ({record['file']}) did not run: {' '.join(str(exc).split())}")
    latency = statistics.median(durations) * 1000
    details = {"latency_ms": round(latency, 3), "runs": len(durations), "providers": session.get_providers()}
    mismatches = [
        mismatch for spec, value in zip(record["outputs"], results)
        if spec["name"] in reference.get("outputs", {})
        and (mismatch := compare_output(spec["name"], value, reference["outputs"][spec["name"]],
                                        rtol=reference["rtol"], atol=reference["atol"]))
    ]
    if mismatches:
        return Check(id=check_id, status="fail", details=details,
                     message=f"model '{record['name']}' ran but differs from the build's reference: "
                             f"{'; '.join(mismatches)}",
                     fix="Compare this machine's onnxruntime and libraries below with the bundle; re-run the installer "
                         "with -Force if files were changed.")
    compared = "matches the reference" if reference.get("outputs") else "ran (no reference recorded)"
    return Check(id=check_id, status="pass", details=details,
                 message=f"model '{record['name']}' {compared}; "
                         f"median latency {latency:.2f} ms on {session.get_providers()[0]}")
