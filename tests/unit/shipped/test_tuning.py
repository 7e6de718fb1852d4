"""Tuning, tuned session options and profiling (bundler/shipped/ort_bundle: machine, tuning, tuning_file, sessions, profile).

The unit tests check the choices; the rest run the shipped `ort_bundle` package (laid out from
`shipped_package.package_files`, the bytes a bundle ships) in real subprocesses against this
interpreter's real onnxruntime and a real model made with onnx. Where a test needs the venv start-up
hook, a two-line stand-in calls the same `sessions.activate()` the hook calls; the installed flow
through the launchers is in test_tuning_install.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from bundler.assembly.shipped_package import package_files
from bundler.shipped.ort_bundle.bundle_info import BundleInfo
from bundler.shipped.ort_bundle.machine import Cores, cores, thread_candidates
from bundler.shipped.ort_bundle.tuning import choose, percentile
from bundler.shipped.ort_bundle.tuning_file import (
    TUNING_FILE,
    Machine,
    Measurement,
    ModelTuning,
    Settings,
    TuningFile,
    TuningFileError,
)

SEQ, PAR = "ORT_SEQUENTIAL", "ORT_PARALLEL"

# Prints what the session it creates runs with, as ORT reports it; with an argument, it sets
# intra_op_num_threads itself first and reports what its own options object holds afterwards.
PROBE_APP = '''
import json, sys
import numpy as np
import onnxruntime as ort
model, own = sys.argv[1], sys.argv[2:]
options = None
if own:
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(own[0])
session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
session.run(None, {"x": np.ones((8, 64), np.float32)})
used = session.get_session_options()
print(json.dumps({"intra_op_num_threads": used.intra_op_num_threads, "execution_mode": used.execution_mode.name,
                  "enable_profiling": used.enable_profiling,
                  "own_after": None if options is None else options.intra_op_num_threads}))
'''
# Stand-in for the venv start-up hook (ort_bundle_hook.py), which makes the same call at interpreter start.
# Its argv: the install root (the hook takes it from sys.prefix), the application, the application's arguments.
HOOK_STAND_IN = "import sys, runpy, pathlib, ort_bundle.sessions as s; s.activate(pathlib.Path(sys.argv[1])); " \
                "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def measurement(threads: int, mode: str, p50: float, p95: float) -> Measurement:
    return Measurement(settings=Settings(intra_op_num_threads=threads, execution_mode=mode), p50_ms=p50,
                       p95_ms=p95, min_ms=p50 / 2, max_ms=p95 * 2)


# ---------------------------------------------------------------- the choices


def test_candidates_are_one_the_physical_cores_and_neighbours_and_the_logical_cores() -> None:
    assert thread_candidates(Cores(logical=16, physical=8, source="sysfs")) == (1, 7, 8, 9, 16)
    assert thread_candidates(Cores(logical=2, physical=2, source="sysfs")) == (1, 2)  # no oversubscription
    assert thread_candidates(Cores(logical=1, physical=1, source="assumed")) == (1,)


def test_percentiles_are_nearest_rank() -> None:
    runs = [float(v) for v in range(1, 101)]
    assert (percentile(runs, 0.5), percentile(runs, 0.95), percentile([3.0], 0.95)) == (50.0, 95.0, 3.0)


def test_best_is_the_lowest_p50_and_p95_breaks_a_near_tie() -> None:
    clear = [measurement(1, SEQ, 2.0, 2.1), measurement(4, SEQ, 1.0, 9.0), measurement(4, PAR, 1.5, 1.6)]
    assert choose(clear) == Settings(intra_op_num_threads=4, execution_mode=SEQ)
    tie = [measurement(2, SEQ, 1.000, 3.0), measurement(4, PAR, 0.995, 1.2), measurement(8, SEQ, 1.5, 1.0)]
    assert choose(tie) == Settings(intra_op_num_threads=4, execution_mode=PAR)
    even = [measurement(4, PAR, 1.0, 1.0), measurement(2, SEQ, 1.0, 1.0)]
    assert choose(even) == Settings(intra_op_num_threads=2, execution_mode=SEQ)  # sequential, then fewer threads


def tuning_record(best: Settings) -> TuningFile:
    model = ModelTuning(name="m", file="models/m.onnx", sha256="0" * 64, providers=("CPUExecutionProvider",),
                        best=best, candidates=(measurement(1, SEQ, 1.0, 1.5), measurement(2, PAR, 0.5, 0.7)))
    return TuningFile(install_id="t-1.0", created_at="2026-01-01T00:00:00Z", ort_version="1.23.1",
                      machine=Machine(cpu="cpu", logical_cores=2, physical_cores=2, cores_source="sysfs"),
                      warmup=20, runs=100, models=(model,))


def test_the_tuning_file_round_trips_and_refuses_what_it_cannot_use(tmp_path: Path) -> None:
    record = tuning_record(Settings(intra_op_num_threads=2, execution_mode=PAR))
    record.write(tmp_path)
    assert TuningFile.read(tmp_path) == record
    assert [p.name for p in tmp_path.iterdir()] == [TUNING_FILE]  # no temporary file left beside it

    data = record.to_json()
    with pytest.raises(TuningFileError, match="format is 7, expected 1"):
        TuningFile.from_json({**data, "format": 7})
    unmeasured = json.loads(json.dumps(data))
    unmeasured["models"][0]["best"] = {"intra_op_num_threads": 9, "execution_mode": SEQ}
    with pytest.raises(TuningFileError, match=r"models\[0\]: best .* is not one of the measured candidates"):
        TuningFile.from_json(unmeasured)
    (tmp_path / TUNING_FILE).write_text("{", encoding="utf-8")
    with pytest.raises(TuningFileError, match=f"{TUNING_FILE} cannot be read as JSON"):
        TuningFile.read(tmp_path)


# ---------------------------------------------------------------- real sessions


def make_model(path: Path) -> Path:
    """MatMul, Add, Relu over an [8, 64] input: a few nodes for the profiler to report."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array((np.arange(64 * 32, dtype=np.float32) % 7 - 3).reshape(64, 32) / 8, "w")
    bias = numpy_helper.from_array(np.linspace(-1, 1, 32, dtype=np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32])], [weights, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return path


def bundle_info(model: Path) -> BundleInfo:
    """A bundle.json as the build writes it, for the one model (only the keys the tuning reads matter)."""
    record = {"name": "mlp", "file": "models/mlp.onnx", "sha256": hashlib.sha256(model.read_bytes()).hexdigest(),
              "inputs": [{"name": "x", "type": "tensor(float)", "shape": [8, 64]}],
              "outputs": [{"name": "y", "type": "tensor(float)", "shape": [8, 32]}], "shapes": None}
    empty = {f.name: None for f in fields(BundleInfo)}  # every key the definition has, whatever it gains
    values = {"name": "tuned", "version": "1.0", "platform": "linux_x86_64", "python": "3.11", "python_tag": "cp311",
              "built_with": {}, "manifest": {}, "wheels": [], "expected_providers": ["CPUExecutionProvider"],
              "selfcheck": {}, "models": [record], "signatures": [], "licenses": []}
    return BundleInfo(**{**empty, **values})


def shipped_package(site: Path) -> Path:
    """The `ort_bundle` package as the bundle ships it, written to a folder put on PYTHONPATH."""
    for relative, data in package_files().items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_bytes(data)
    return site


@pytest.fixture()
def install(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """(an install root with bundle.json and the model, the environment that imports the shipped ort_bundle)."""
    site = shipped_package(tmp_path / "site")
    root = tmp_path / "root"
    model = make_model(root / "models" / "mlp.onnx")
    (root / "bundle.json").write_text(json.dumps(bundle_info(model).to_json()), encoding="utf-8")
    (tmp_path / "probe.py").write_text(PROBE_APP, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(site), "ORT_BUNDLE_CACHE_DIR": str(tmp_path / "cache")}
    for name in ("ORT_BUNDLE_APPLY_TUNING", "ORT_BUNDLE_PROFILE", "ORT_BUNDLE_PROFILE_DIR"):
        env.pop(name, None)
    return root, env


def python(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300)


def tune(root: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return python("-m", "ort_bundle.tuning", "--root", str(root), "--warmup", "2", "--runs", "5", *extra, env=env)


def probe(root: Path, env: dict[str, str], *own: str) -> dict[str, object]:
    proc = python("-c", HOOK_STAND_IN, str(root), str(root.parent / "probe.py"), str(root / "models" / "mlp.onnx"),
                  *own, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_tune_writes_a_tuning_file_naming_a_measured_candidate(install: tuple[Path, dict[str, str]]) -> None:
    root, env = install
    proc = tune(root, env, "--json", "--threads", "1,2")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["tuning_file"] == str(root / TUNING_FILE)
    tuning = TuningFile.read(root)
    assert tuning.to_json() == result["tuning"] and (tuning.warmup, tuning.runs) == (2, 5)
    (model,) = tuning.models
    assert [asdict(m.settings) for m in model.candidates] == [
        {"intra_op_num_threads": t, "execution_mode": mode} for t in (1, 2) for mode in (SEQ, PAR)]
    assert model.best in {m.settings for m in model.candidates}
    assert all(0 < m.min_ms <= m.p50_ms <= m.p95_ms <= m.max_ms for m in model.candidates)
    assert "[100%] mlp: 2 threads parallel: p50" in proc.stderr  # the progress, one line per candidate off a terminal

    table = tune(root, env, "--no-write")
    assert table.returncode == 0 and "<- best" in table.stdout and "not written (--no-write)" in table.stdout


def test_tune_refuses_bad_counts_and_an_unwritable_folder(install: tuple[Path, dict[str, str]]) -> None:
    root, env = install
    bad = tune(root, env, "--runs", "0")
    assert bad.returncode == 10 and "at least one timed run is needed" in bad.stderr
    assert tune(root, env, "--threads", "two").returncode == 10
    if os.geteuid() == 0:
        blocked = root / TUNING_FILE  # root ignores permissions: a folder in the file's place blocks the rename
        blocked.mkdir()
    else:
        root.chmod(0o555)
    try:
        proc = tune(root, env)
    finally:
        root.chmod(0o755)
    assert proc.returncode == 13 and f"cannot write {root / TUNING_FILE}" in proc.stderr
    assert not [p for p in root.iterdir() if p.name.startswith(f".{TUNING_FILE}")]  # no temporary left behind


def test_the_hook_applies_the_tuning_and_the_application_keeps_its_own_value(
        install: tuple[Path, dict[str, str]]) -> None:
    root, env = install
    assert tune(root, env, "--threads", "1,2").returncode == 0
    best = TuningFile.read(root).models[0].best
    untuned = probe(root, env)
    assert untuned["intra_op_num_threads"] == 0  # the hook only acts when the launcher opts in

    on = {**env, "ORT_BUNDLE_APPLY_TUNING": "1"}
    tuned = probe(root, on)
    assert (tuned["intra_op_num_threads"], tuned["execution_mode"]) == (best.intra_op_num_threads, best.execution_mode)
    own = probe(root, on, "3")
    assert own["intra_op_num_threads"] == 3 and own["own_after"] == 3

    model = root / "models" / "mlp.onnx"
    bundle = json.loads((root / "bundle.json").read_text())
    bundle["models"][0]["sha256"] = "f" * 64  # a reinstall shipped another model: the tuning is stale
    (root / "bundle.json").write_text(json.dumps(bundle))
    proc = python("-c", HOOK_STAND_IN, str(root), str(root.parent / "probe.py"), str(model), env=on)
    assert json.loads(proc.stdout)["intra_op_num_threads"] == 0
    assert "the tuning of model 'mlp' is not applied: model 'mlp' changed since it was tuned" in proc.stderr


def test_the_helper_gives_tuned_options_and_names_the_models_for_a_typo(install: tuple[Path, dict[str, str]]) -> None:
    root, env = install
    code = ("import sys, ort_bundle; from pathlib import Path; o = ort_bundle.session_options('mlp', root=Path(sys.argv[1]));"
            " print(o.intra_op_num_threads, o.execution_mode.name)")
    before = python("-c", code, str(root), env=env)
    assert before.returncode == 0 and before.stdout.split() == ["0", SEQ]  # not tuned yet: ORT's defaults
    assert tune(root, env).returncode == 0
    best = TuningFile.read(root).models[0].best
    after = python("-c", code, str(root), env=env)
    assert after.stdout.split() == [str(best.intra_op_num_threads), best.execution_mode]
    (root / TUNING_FILE).write_text("{", encoding="utf-8")  # damaged: the application still starts, untuned
    damaged = python("-c", code, str(root), env=env)
    assert damaged.stdout.split() == ["0", SEQ] and "tuned session options are not applied" in damaged.stderr
    typo = python("-c", code.replace("'mlp'", "'mpl'"), str(root), env=env)
    assert typo.returncode != 0 and "'mpl' is not a model of this bundle; its [[models]] are ['mlp']" in typo.stderr


def test_profile_runs_the_entry_point_once_and_names_its_trace(install: tuple[Path, dict[str, str]],
                                                               tmp_path: Path) -> None:
    root, env = install
    # Beside the shipped package: the profiled child runs isolated (-I, issue 34 §3), so PYTHONPATH does not reach
    # it; a script's own folder is first on its sys.path, as in an install's app/.
    entry = Path(env["PYTHONPATH"]) / "entry.py"  # the hook stand-in, then the application, as the profiled child runs them
    entry.write_text(f"import ort_bundle.sessions as s, pathlib; s.activate(pathlib.Path({str(root)!r}))\n" + PROBE_APP,
                     encoding="utf-8")
    proc = python("-m", "ort_bundle.profile", "--entry-kind", "script", "--entry", str(entry), "--",
                  str(root / "models" / "mlp.onnx"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["enable_profiling"] is True
    folder = tmp_path / "cache" / "profiles"
    (trace,) = folder.glob("*.json")
    assert f"1 trace written to {folder}" in proc.stderr and str(trace) in proc.stderr
    events = json.loads(trace.read_text())
    kernels = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    assert kernels and all(e["dur"] >= 0 and e["args"]["op_name"] for e in kernels)  # ORT fuses the three into one

    program = python("-m", "ort_bundle.profile", "--entry-kind", "program", "--entry", "app/native", env=env)
    assert program.returncode == 10 and "does not start Python" in program.stderr


def test_the_self_checks_verdict_names_the_values_and_whether_they_are_in_force(
        install: tuple[Path, dict[str, str]]) -> None:
    from bundler.shipped.ort_bundle.sessions import tuning_verdict

    root, env = install
    assert tuning_verdict(root, applied_by_hook=True).status == "skip"
    assert tune(root, env).returncode == 0
    best = TuningFile.read(root).models[0].best
    verdict = tuning_verdict(root, applied_by_hook=True)
    assert verdict.status == "pass" and f"mlp: {best.label}" in verdict.message
    assert verdict.details["models"][0]["intra_op_num_threads"] == best.intra_op_num_threads
    assert "[launch] apply_tuning is off" in tuning_verdict(root, applied_by_hook=False).message

    data = json.loads((root / TUNING_FILE).read_text())
    data["machine"]["logical_cores"] += 64  # tuned elsewhere: the folder was copied to this machine
    (root / TUNING_FILE).write_text(json.dumps(data))
    stale = tuning_verdict(root, applied_by_hook=True)
    assert stale.status == "warn" and "not in force" in stale.message and "usable cores" in stale.message
    (root / TUNING_FILE).write_text("[]")
    assert tuning_verdict(root, applied_by_hook=True).status == "warn"


def test_launch_apply_tuning_is_true_or_false(tmp_path: Path) -> None:
    from unit.manifest.test_manifest import GOOD, write

    from bundler.errors import ManifestError
    from bundler.manifest import load

    assert load(write(tmp_path, GOOD)).launch.apply_tuning is False
    assert load(write(tmp_path, GOOD + "apply_tuning = true\n")).launch.apply_tuning is True
    with pytest.raises(ManifestError, match=r"launch.apply_tuning: found 'yes', expected true or false"):
        load(write(tmp_path, GOOD + 'apply_tuning = "yes"\n'))


def test_tune_keeps_to_its_time_budget_and_reports_the_runs_and_spread(install: tuple[Path, dict[str, str]]) -> None:
    """Issue 26: `run.sh --tune` took two minutes for one model with noisy figures; a budget bounds it."""
    root, env = install
    started = time.monotonic()
    proc = python("-m", "ort_bundle.tuning", "--root", str(root), "--threads", "1,2", "--budget", "2",
                  "--warmup", "100000", "--runs", "1000000", env=env)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    tuning = TuningFile.read(root)
    assert tuning.budget_s == 2.0 and tuning.elapsed_s <= 2.0 + 1.0 and took < 2.0 + 20.0  # + interpreter, ORT import
    (model,) = tuning.models
    assert all(5 <= m.runs < 1000000 for m in model.candidates)  # stopped by the budget, after the minimum
    # p95 above p50 in percent of p50, from the unrounded times (a 4 µs p50 rounds to 0.1 µs in the file)
    assert all(m.spread_pct >= 0 and (m.spread_pct > 0) == (m.p95_ms > m.p50_ms) for m in model.candidates)
    assert "runs" in proc.stdout and "spread" in proc.stdout and "a budget of 2 s" in proc.stdout
    unlimited = tune(root, env, "--budget", "0", "--threads", "1")  # 0: every one of the 2 + 5 runs
    assert unlimited.returncode == 0 and [m.runs for m in TuningFile.read(root).models[0].candidates] == [5, 5]
    assert tune(root, env, "--budget", "soon").returncode == 10


def test_thread_counts_above_the_machines_cores_are_capped_and_said(install: tuple[Path, dict[str, str]]) -> None:
    """Issue 27: a 64-thread candidate on a 2-core machine was measured, applied and passed the self-check."""
    root, env = install
    logical = cores().logical
    proc = tune(root, env, "--threads", f"1,{logical + 62}", "--json")
    assert proc.returncode == 0, proc.stderr
    note = f"{logical + 62} threads asked for, more than the {logical} logical cores of this machine"
    assert note in proc.stderr
    tuning = TuningFile.read(root)
    assert {m.settings.intra_op_num_threads for m in tuning.models[0].candidates} == {1, logical}
    assert any(note in n for n in tuning.notes)
    # A file whose best exceeds the cores it records was not written by --tune: refused, never applied.
    data = tuning.to_json()
    model = data["models"][0]
    chosen = next(c for c in model["candidates"] if c["settings"] == model["best"])
    chosen["settings"]["intra_op_num_threads"] = model["best"]["intra_op_num_threads"] = 64
    data["machine"]["logical_cores"] = 2
    with pytest.raises(TuningFileError, match="best has 64 threads, more than the 2 logical cores"):
        TuningFile.from_json(data)


def test_the_default_entry_point_runs_the_first_model_or_says_plainly_there_is_none(
        install: tuple[Path, dict[str, str]]) -> None:
    """`ort_bundle.infer`, the `[launch]` entry point `ort-bundler init` writes (issue 26)."""
    root, env = install
    ran = python("-m", "ort_bundle.infer", "--root", str(root), env=env)
    assert ran.returncode == 0, ran.stderr
    assert "model 'mlp' (models/mlp.onnx): one inference with onnxruntime" in ran.stdout
    assert "output y: float32 [8, 32]" in ran.stdout and "replace it with your application" in ran.stdout
    typo = python("-m", "ort_bundle.infer", "--root", str(root), "mpl", env=env)
    assert typo.returncode == 2 and "there is no model 'mpl' in this bundle; expected one of mlp" in typo.stderr
    data = json.loads((root / "bundle.json").read_text(encoding="utf-8"))
    (root / "bundle.json").write_text(json.dumps({**data, "models": []}), encoding="utf-8")
    empty = python("-m", "ort_bundle.infer", "--root", str(root), env=env)
    assert empty.returncode == 2 and empty.stdout == ""
    assert "no entry point is configured" in empty.stderr and "lists no [[models]]" in empty.stderr
