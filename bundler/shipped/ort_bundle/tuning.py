"""`run --tune`: measure each bundled model on this machine and keep the fastest session options.

    <install>/venv/bin/python -m ort_bundle.tuning [--budget SECONDS] [--warmup N] [--runs N] [--threads 1,2,4]
                                                   [--json] [--no-write]

The field guidance for ONNX Runtime on the CPU, automated where the model will run: candidate
`intra_op_num_threads` from this machine (1, the physical cores and their neighbours, the logical
cores), both execution modes, a warm-up that is never timed (the first runs pay for allocation and
caches), then timed runs on the self-check's deterministic inputs; p50 and p95 per candidate, the best
by p50 with p95 breaking near-ties, written to tuning.json in the install folder (atomically), where
the start-up hook and `ort_bundle.session_options(name)` find it. Standard library plus the installed
onnxruntime and numpy; Python 3.8+.

A time budget (`--budget`, 30 s unless told otherwise; 0 for none) bounds the whole run: each candidate
gets an equal share of what is left, a fifth of it at most for the warm-up, and stops its timed runs when
its share is spent (after at least MIN_TIMED_RUNS). A first use took two minutes for one 95 ms model on two
cores with the fixed counts, and its figures were noisy all the same (issue 26): the table therefore says
how many runs each candidate had and how far its p95 lies above its p50 (the spread), so a reader can tell
a real difference from noise. Thread counts above the machine's logical cores only oversubscribe it: they
are capped at the cores, and the output says so (issue 27).
Exit codes: 0 tuned, 10 usage, 12 prerequisite (no onnxruntime, no models, a model that does not
run), 13 the tuning file cannot be written.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, TextIO, Tuple

from .bundle_info import BundleInfo, BundleInfoError
from .machine import Cores, cores, cpu_name, thread_candidates
from .sessions import install_root
from .synth import synthesize_inputs
from .tuning_file import (
    EXECUTION_MODES,
    TUNING_FILE,
    Machine,
    Measurement,
    ModelTuning,
    Settings,
    TuningFile,
)

EXIT_OK, EXIT_USAGE, EXIT_PREREQUISITE, EXIT_WRITE = 0, 10, 12, 13
DEFAULT_WARMUP = 20
DEFAULT_RUNS = 100
DEFAULT_BUDGET = 30.0  # seconds for the whole run
WARMUP_SHARE = 0.2  # of a candidate's share of the budget, at most, for its warm-up
MIN_TIMED_RUNS = 5  # a percentile of fewer runs says little; a budget never stops a candidate before them
#: Candidates whose p50 is within this fraction of the fastest are a tie, decided by p95; then the
#: sequential mode and fewer threads win, as the guidance says to keep ORT_SEQUENTIAL unless it loses.
TIE_TOLERANCE = 0.02


class TuningError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """Nearest rank: the smallest value with at least `fraction` of the runs at or below it."""
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def summarize(settings: Settings, durations: Sequence[float]) -> Measurement:
    ordered = sorted(duration * 1000.0 for duration in durations)
    p50, p95 = percentile(ordered, 0.50), percentile(ordered, 0.95)
    return Measurement(settings=settings, p50_ms=round(p50, 4), p95_ms=round(p95, 4), min_ms=round(ordered[0], 4),
                       max_ms=round(ordered[-1], 4), runs=len(ordered),
                       spread_pct=round(100.0 * (p95 - p50) / p50, 1) if p50 > 0 else 0.0)


def choose(measurements: Sequence[Measurement]) -> Settings:
    """The best by p50; among those within TIE_TOLERANCE of it, the lowest p95, then sequential, then fewer threads."""
    fastest = min(measurement.p50_ms for measurement in measurements)
    tied = [m for m in measurements if m.p50_ms <= fastest * (1 + TIE_TOLERANCE)]
    best = min(tied, key=lambda m: (m.p95_ms, m.settings.execution_mode != "ORT_SEQUENTIAL",
                                    m.settings.intra_op_num_threads))
    return best.settings


class Progress:
    """A bar on stderr, redrawn in place on a terminal; a line per finished candidate elsewhere (logs, CI)."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.done, self.stream = max(total, 1), 0, stream
        self.live = stream.isatty()
        self.drawn = 0.0

    def skip(self, count: int) -> None:
        """Runs a time budget left out: counted as done, so the bar still ends at 100 %."""
        self.done += count

    def step(self, label: str) -> None:
        self.done += 1
        now = time.monotonic()
        if self.live and (now - self.drawn > 0.1 or self.done == self.total):
            self.drawn = now
            filled = int(30 * self.done / self.total)
            self.stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {100 * self.done // self.total:3d}% {label:<40}")
            self.stream.flush()

    def finished(self, label: str, measurement: Measurement) -> None:
        if not self.live:
            self.stream.write(f"[{100 * self.done // self.total:3d}%] {label}: p50 {measurement.p50_ms:.3f} ms, "
                              f"p95 {measurement.p95_ms:.3f} ms\n")
            self.stream.flush()

    def close(self) -> None:
        if self.live:
            self.stream.write("\n")
            self.stream.flush()


@dataclass(frozen=True)
class TuningPlan:
    """What one run measures: every model under every candidate setting, on these providers."""

    settings: Tuple[Settings, ...]
    providers: List[str]
    warmup: int
    runs: int

    @classmethod
    def make(cls, *, threads: Sequence[int], providers: List[str], warmup: int, runs: int) -> TuningPlan:
        settings = tuple(Settings(intra_op_num_threads=count, execution_mode=mode)
                         for count in threads for mode in EXECUTION_MODES)
        return cls(settings=settings, providers=providers, warmup=warmup, runs=runs)


def make_options(ort: Any, settings: Settings) -> Any:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = settings.intra_op_num_threads
    options.execution_mode = getattr(ort.ExecutionMode, settings.execution_mode)
    return options


def measure(ort: Any, model: Path, feeds: Dict[str, Any], settings: Settings, *, providers: List[str],
            warmup: int, runs: int, progress: Progress, label: str, deadline: Optional[float] = None) -> Measurement:
    """Warm-up runs first (never timed), then `runs` timed runs of one fresh session; with a `deadline`
    (time.monotonic), the warm-up ends after WARMUP_SHARE of the time left and the timed runs at the
    deadline, once MIN_TIMED_RUNS are made."""
    session = ort.InferenceSession(str(model), make_options(ort, settings), providers=providers)
    warm_until = time.monotonic() + WARMUP_SHARE * (deadline - time.monotonic()) if deadline is not None else None
    done = 0
    for index in range(warmup):
        if warm_until is not None and index and time.monotonic() >= warm_until:
            break
        session.run(None, feeds)
        progress.step(label)
        done += 1
    durations: List[float] = []
    for _ in range(runs):
        if deadline is not None and len(durations) >= MIN_TIMED_RUNS and time.monotonic() >= deadline:
            break
        started = time.perf_counter()
        session.run(None, feeds)
        durations.append(time.perf_counter() - started)
        progress.step(label)
    progress.skip(warmup - done + runs - len(durations))
    measurement = summarize(settings, durations)
    progress.finished(label, measurement)
    return measurement


def session_providers(ort: Any, bundle: BundleInfo) -> List[str]:
    """The bundle's expected providers that this onnxruntime offers, in the bundle's order (CPU last)."""
    available = ort.get_available_providers()
    wanted = [name for name in bundle.expected_providers if name in available]
    return wanted or ["CPUExecutionProvider"]


class Budget:
    """The time left, shared out evenly over the candidates still to measure; no limit without seconds."""

    def __init__(self, seconds: Optional[float], candidates: int) -> None:
        self.started = time.monotonic()
        self.end = self.started + seconds if seconds else None
        self.left = max(candidates, 1)

    def next_deadline(self) -> Optional[float]:
        """The deadline of the candidate about to be measured."""
        if self.end is None:
            return None
        now = time.monotonic()
        share = max(self.end - now, 0.0) / self.left
        self.left = max(self.left - 1, 1)
        return now + share

    @property
    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 2)


def tune_model(ort: Any, root: Path, record: Dict[str, Any], plan: TuningPlan, progress: Progress,
               budget: Optional[Budget] = None) -> ModelTuning:
    name = str(record["name"])
    try:
        feeds = synthesize_inputs(record["inputs"], record.get("shapes"))
    except ValueError as exc:
        raise TuningError(EXIT_PREREQUISITE, f"model '{name}': {exc}") from None
    measured = []
    for settings in plan.settings:
        label = f"{name}: {settings.label}"
        try:
            measured.append(measure(ort, root / record["file"], feeds, settings, providers=plan.providers,
                                    warmup=plan.warmup, runs=plan.runs, progress=progress, label=label,
                                    deadline=budget.next_deadline() if budget else None))
        except Exception as exc:  # ORT raises a family of pybind classes; the reason is the finding
            reason = " ".join(str(exc).split())
            raise TuningError(EXIT_PREREQUISITE, f"model '{name}' ({record['file']}) did not run with "
                                                 f"{settings.label}: {reason}; run --self-check") from None
    return ModelTuning(name=name, file=str(record["file"]), sha256=str(record["sha256"]),
                       providers=tuple(plan.providers), best=choose(measured), candidates=tuple(measured))


def tune(root: Path, bundle: BundleInfo, *, found: Cores, threads: Sequence[int], warmup: int, runs: int,
         stream: TextIO, budget: Optional[float] = None, notes: Sequence[str] = ()) -> TuningFile:
    try:
        import onnxruntime as ort
    except Exception as exc:  # ImportError, or OSError when a library fails to load
        raise TuningError(EXIT_PREREQUISITE, f"import onnxruntime failed ({exc}); run --self-check") from None
    if not bundle.models:
        raise TuningError(EXIT_PREREQUISITE, f"{root / 'bundle.json'} lists no [[models]]: there is nothing to tune")
    plan = TuningPlan.make(threads=threads, providers=session_providers(ort, bundle), warmup=warmup, runs=runs)
    progress = Progress(len(bundle.models) * len(plan.settings) * (warmup + runs), stream)
    clock = Budget(budget, len(bundle.models) * len(plan.settings))
    try:
        models = tuple(tune_model(ort, root, record, plan, progress, clock) for record in bundle.models)
    finally:
        progress.close()
    machine = Machine(cpu=cpu_name(), logical_cores=found.logical, physical_cores=found.physical,
                      cores_source=found.source)
    return TuningFile(install_id=f"{bundle.name}-{bundle.version}", ort_version=str(ort.__version__),
                      created_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                      machine=machine, warmup=warmup, runs=runs, models=models, budget_s=float(budget or 0),
                      elapsed_s=clock.elapsed, notes=tuple(notes))


def render_table(tuning: TuningFile) -> str:
    machine = tuning.machine
    limit = f"a budget of {tuning.budget_s:g} s" if tuning.budget_s else "no time budget"
    lines = [f"ONNX Runtime {tuning.ort_version} on {machine.cpu}: {machine.physical_cores} physical, "
             f"{machine.logical_cores} logical cores; at most {tuning.warmup} warm-up and {tuning.runs} timed runs "
             f"each, {limit}, {tuning.elapsed_s:g} s used", *(f"note: {note}" for note in tuning.notes)]
    for model in tuning.models:
        lines.append(f"\nmodel '{model.name}' ({model.file}) on {', '.join(model.providers)}")
        lines.append(f"  {'threads':>7}  {'mode':<10}  {'runs':>5}  {'p50 ms':>10}  {'p95 ms':>10}  {'min ms':>10}  "
                     f"{'spread':>7}")
        for m in model.candidates:
            mark = "  <- best" if m.settings == model.best else ""
            lines.append(f"  {m.settings.intra_op_num_threads:>7}  {m.settings.execution_mode[4:].lower():<10}  "
                         f"{m.runs:>5}  {m.p50_ms:>10.4f}  {m.p95_ms:>10.4f}  {m.min_ms:>10.4f}  "
                         f"{m.spread_pct:>6.1f}%{mark}")
    lines.append("\nspread: how far p95 lies above p50; candidates closer than their spread are a tie within the noise")
    return "\n".join(lines)


def capped_threads(wanted: Sequence[int], found: Cores) -> Tuple[Tuple[int, ...], List[str]]:
    """Thread counts within the machine's logical cores, and a note for every count that was lowered."""
    kept = tuple(sorted({min(count, found.logical) for count in wanted}))
    over = sorted(count for count in set(wanted) if count > found.logical)
    notes = [f"{', '.join(map(str, over))} thread{'s' if over != [1] else ''} asked for, more than the "
             f"{found.logical} logical cores of this machine: measured {found.logical} instead"] if over else []
    return kept, notes


def parse_threads(text: str) -> Tuple[int, ...]:
    try:
        values = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        values = ()
    if not values or values[0] < 1:
        msg = f"--threads is {text!r}, expected a comma-separated list of thread counts of 1 or more, e.g. 1,2,4"
        raise argparse.ArgumentTypeError(msg)
    return values


def count(text: str) -> int:
    if not text.isdigit():
        msg = f"{text!r} is not a whole number of 0 or more"
        raise argparse.ArgumentTypeError(msg)
    return int(text)


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or math.isinf(value):
        msg = f"{text!r} is not a number of seconds of 0 or more (0: no time budget)"
        raise argparse.ArgumentTypeError(msg)
    return value


def positive(text: str) -> int:
    value = count(text)
    if value < 1:
        msg = "at least one timed run is needed"
        raise argparse.ArgumentTypeError(msg)
    return value


class UsageParser(argparse.ArgumentParser):
    """argparse, with the installer's usage exit code instead of its own 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = UsageParser(prog="run --tune", description="Measure the bundled models and keep the fastest settings.")
    parser.add_argument("--budget", type=seconds, default=DEFAULT_BUDGET, metavar="SECONDS",
                        help=f"time for the whole run ({DEFAULT_BUDGET:g}); 0 makes every --warmup and --runs run")
    parser.add_argument("--warmup", type=count, default=DEFAULT_WARMUP, help="untimed runs per candidate, at most (20)")
    parser.add_argument("--runs", type=positive, default=DEFAULT_RUNS, help="timed runs per candidate, at most (100)")
    parser.add_argument("--threads", type=parse_threads, help="intra-op thread counts to try instead of the "
                                                              "machine's candidates, e.g. 1,2,4")
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON")
    parser.add_argument("--no-write", action="store_true", help=f"measure only; leave {TUNING_FILE} as it is")
    parser.add_argument("--root", type=Path, default=None, help="the installation folder (default: this venv's)")
    return parser.parse_args(argv)


def write(tuning: TuningFile, root: Path) -> Path:
    try:
        return tuning.write(root)
    except OSError as exc:
        raise TuningError(EXIT_WRITE, f"cannot write {root / TUNING_FILE} ({exc.strerror or exc}); run --tune as "
                                      f"the user who installed {root}, or add --no-write to only measure") from None


def read_install(root: Optional[Path], *, prog: str) -> Tuple[Path, Optional[BundleInfo]]:
    """The install folder (`--root`, else this environment's) and its bundle.json; None once said why on stderr."""
    folder = (root or install_root()).resolve()
    try:
        return folder, BundleInfo.read(folder / "bundle.json")
    except BundleInfoError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return folder, None


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    root, bundle = read_install(args.root, prog="run --tune")
    if bundle is None:
        return EXIT_PREREQUISITE
    found = cores()
    threads, notes = capped_threads(args.threads or thread_candidates(found), found)
    for note in notes:
        print(f"run --tune: {note}", file=sys.stderr)
    try:
        tuning = tune(root, bundle, found=found, threads=threads, warmup=args.warmup, runs=args.runs,
                      stream=sys.stderr, budget=args.budget or None, notes=notes)
        written = None if args.no_write else write(tuning, root)
    except TuningError as exc:
        print(f"run --tune: {exc}", file=sys.stderr)
        return exc.code
    if args.json:
        print(json.dumps({"tuning_file": str(written) if written else None, "tuning": tuning.to_json()}, indent=2))
    else:
        print(render_table(tuning))
        print(f"\nwritten to {written}" if written else "\nnot written (--no-write)")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
