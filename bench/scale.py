"""Issue 37's figures in one command: each measured beside its baseline in the same run, one summary table.

Every figure is a ratio against a baseline timed in this run on this machine (or, for memory, a limit): never a
timed assertion, since the machine decides absolute times. The figures, named as `--only` takes them:

- fetch: `ort-bundler fetch` of a GPU manifest against `pip download --require-hashes` of the same wheels
  (bench/fetch.py's commands); only with `--gpu-manifest`, because it downloads gigabytes;
- build: the build's writer at each `--sizes` payload (bench/_payload.py) in a fresh process, against
  `sha256sum` + `zip -r -6` of the same tree (bench/build_throughput.py's baseline, bench/build_memory.py's
  child); with `--gpu-manifest` also the real first build of that manifest against `zip -r -6` of its
  contents (bench/build_quickstart.py), what it wrote and its peak memory;
- quickstart: the real first build of manifests/quickstart-win.toml against `zip -r -6` of its contents
  (bench/build_quickstart.py, `--repeat` attempts);
- written: what a first build's processes wrote (the kernel's count, os.wait4's ru_oublock: the member cache,
  derived files and temporary files included, hard links not) over the size of the zip it made, for the
  quickstart and at each size;
- rss: the peak resident set of the fetch (bench/fetch_throughput.py's `fetch_inputs` from a local server),
  the build, `package --msi` and `package --intunewin` at each size, each a fresh process whose tree os.wait4
  reports (wixl, gcab and msibuild included), and whether it stays flat from the smallest size to the largest;
- msi: the MSI writer `package --msi` runs (bench/msi_scale.py) at each size, against `gcab -c -z` of the same
  image + `openssl enc` of the cabinet, and whether its time grows linearly; `--msi-install` also installs the
  largest MSI under Wine's msiexec and checks every file;
- intunewin: `write_intunewin` (what `package --intunewin` runs) of a setup folder holding one incompressible
  file of each size, a stand-in MSI, against `openssl enc -aes-256-cbc` + `sha256sum` of the same file;
- install: the Linux quickstart's (or `--install-manifest`'s) `install.sh` against `uv venv` + `uv pip install
  --offline --no-index --require-hashes --compile-bytecode --no-cache` of the same wheels
  (bench/install_throughput.py); needs uv (`python3 -m pip install uv`).

A figure that cannot run says why in its row and the others go on; the exit status is 1 only when a figure
failed, never for a missed target. Run: python bench/scale.py [--sizes 50,500] [--only build,rss]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from _payload import MB, Ran, checked, generate, machine, random_file, run_measured, stage, workspace
from _table import Row, Target, errored, table

REPO = Path(__file__).resolve().parents[1]
FIGURES = ("fetch", "build", "quickstart", "written", "rss", "msi", "intunewin", "install")
RSS = Target(limit=300, unit="MiB")
FLAT = Target(limit=1.2, note="flat: largest size / smallest")
LINEAR = Target(limit=1.2, note="linear: s/MiB at largest size / at smallest")
WRITTEN = Target(limit=2.2)
EPOCH = 1767225600
SETUP_FILE = "setup.msi"
QUICKSTART_WIN = REPO / "manifests" / "quickstart-win.toml"


@dataclass(kw_only=True)
class Run:
    """What the figures share: the options, the work folder, and the measures compared across sizes."""

    args: argparse.Namespace
    work: Path
    wanted: frozenset[str]
    peaks: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # what -> (MiB, peak RSS bytes)
    msi_seconds: list[tuple[int, float]] = field(default_factory=list)  # (MiB, seconds of the writer)

    def want(self, *figures: str) -> bool:
        return bool(self.wanted.intersection(figures))

    def peak(self, what: str, size: int, ran: Ran) -> list[Row]:
        """The memory row of one process, kept for the flatness rows."""
        self.peaks.setdefault(what, []).append((size, ran.peak_rss))
        if not self.want("rss"):
            return []
        return [Row(figure=f"peak RSS of {what} at {size} MiB", ours=mib(ran.peak_rss), value=ran.peak_rss / MB,
                    target=RSS)]


def mib(size: float) -> str:
    return f"{size / MB:,.0f} MiB"


def seconds(value: float) -> str:
    return f"{value:.2f} s"


def sized(size: int, step: Callable[[Run, int, Path], list[Row]]) -> Callable[[Run], list[Row]]:
    """`step` at one size, in a folder of its own that goes when it ends: the payloads are large."""

    def at_size(run: Run) -> list[Row]:
        folder = run.work / f"{step.__name__}-{size}"
        folder.mkdir()
        try:
            return step(run, size, folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    return at_size


def child(kind: str, spec: dict[str, object], folder: Path) -> tuple[Ran, dict[str, Any]]:
    """One operation in a fresh process of this script (`--child`), so that its peak RSS and its writes are its
    own; the child times the operation itself, without its imports, as the single scripts do."""
    spec_path = folder / f"{kind}-spec.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    os.sync()  # earlier writes are not charged to this command
    ran = checked(run_measured([sys.executable, str(Path(__file__).resolve()), "--child", kind, str(spec_path)]))
    return ran, json.loads(ran.stdout.splitlines()[-1])


def run_child(kind: str, spec_path: Path) -> None:
    """The `--child` side: import only what the operation needs (the peak RSS is the process's), then time the
    operation alone and print its seconds as the last line."""
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    if kind == "fetch":
        from fetch_throughput import fetch_once

        def operation() -> dict[str, object]:
            fetch_once(spec["url"], spec["sha256"], Path(spec["root"]))
            return {}
    elif kind == "msi":
        from msi_scale import write

        def operation() -> dict[str, object]:
            msi, cabinets = write(Path(spec["image"]), spec["files"], Path(spec["work"]))
            return {"msi": str(msi), "size": msi.stat().st_size, "cabinets": len(cabinets)}
    elif kind == "intunewin":
        from bundler.platforms.windows.intunewin import write_intunewin
        from bundler.writer.members import MemberCache

        def operation() -> dict[str, object]:
            made = write_intunewin(Path(spec["folder"]), SETUP_FILE, Path(spec["output"]), name="scale",
                                   epoch=EPOCH, member_cache=MemberCache(Path(spec["members"])))
            return {"size": made.size}
    else:
        raise SystemExit(f"--child: found {kind!r}, expected fetch, msi or intunewin")
    start = time.perf_counter()
    result = operation()
    print(json.dumps({**result, "seconds": time.perf_counter() - start}))


def timed_commands(commands: Iterable[list[str]], *, cwd: Path | None = None) -> float:
    """Seconds of the commands one after the other, after flushing earlier writes."""
    os.sync()
    return sum(checked(run_measured(command, cwd=cwd)).seconds for command in commands)


def build_step(run: Run, size: int, folder: Path) -> list[Row]:
    """The writer's first build of the payload in a fresh process (bench/build_memory.py's child), then the
    baseline on the same tree (bench/build_throughput.py's)."""
    from build_memory import child_command
    from build_throughput import baseline, check_zip

    from bundler.sources.cache import Cache

    payload = generate(folder / "payload", total=size * MB)
    cache = Cache(folder / "cache")
    dest = folder / "out" / "bundle.zip"
    command = child_command(stage(payload, cache), dest, cache.work_dir("members"), run.args.jobs,
                            folder / "spec.json")
    os.sync()
    ran = checked(run_measured(command))
    ours = float(json.loads(ran.stdout)["seconds"])
    check_zip(dest, payload)
    zipped = dest.stat().st_size
    if ran.written == 0:
        msg = (f"the kernel counted no bytes written by a build that wrote {mib(zipped)}: {folder} is on a tmpfs or "
               "task I/O accounting is off; pass --workdir on a disk")
        raise SystemExit(msg)
    rows = []
    if run.want("build"):
        checksum, deflate = baseline(payload, folder / "baseline.zip")
        rows.append(Row(figure=f"first build at {size} MiB (writer)", ours=seconds(ours),
                        baseline=f"sha256sum {checksum:.2f} s + zip -r -6 {deflate:.2f} s",
                        value=ours / (checksum + deflate), target=Target(limit=1.2)))
    if run.want("written"):
        rows.append(Row(figure=f"bytes written by a first build at {size} MiB (writer)", ours=mib(ran.written),
                        baseline=f"its zip {mib(zipped)}", value=ran.written / zipped, target=WRITTEN))
    return rows + run.peak("build", size, ran)


def fetch_step(run: Run, size: int, folder: Path) -> list[Row]:
    """`fetch_inputs` of one file of `size` from a local server (bench/fetch_throughput.py's), for its memory."""
    import multiprocessing

    from fetch_throughput import serve


    served = random_file(folder, "served.bin", size * MB)
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    server = context.Process(target=serve, args=(served.path, send), daemon=True)
    server.start()
    try:
        url = f"http://127.0.0.1:{receive.recv()}/payload.bin"
        ran, _ = child("fetch", {"url": url, "sha256": served.sha256, "root": str(folder / "cache")}, folder)
    finally:
        server.terminate()
        server.join()
    return run.peak("fetch", size, ran)


def msi_step(run: Run, size: int, folder: Path) -> list[Row]:
    """The MSI writer on an incompressible image in a fresh process, then gcab + openssl (bench/msi_scale.py)."""
    from msi_scale import baseline, install, make_image

    image = folder / "image"
    files = make_image(image, size * MB, folder)
    ran, made = child("msi", {"image": str(image), "files": files, "work": str(folder)}, folder)
    ours = float(made["seconds"])
    run.msi_seconds.append((size, ours))
    rows = []
    if run.want("msi"):
        base = baseline(image, files, folder)
        rows.append(Row(figure=f"package --msi at {size} MiB (writer)",
                        ours=f"{seconds(ours)}, {made['cabinets']} cabinets beside",
                        baseline=f"gcab -c -z + openssl enc {seconds(base)}", value=ours / base,
                        target=Target(limit=1.3)))
    if run.args.msi_install and size == max(run.args.sizes):
        done = install(Path(made["msi"]), image, files, folder)
        wrong = len(done.differing) + (done.returncode != 0)
        rows.append(Row(figure=f"MSI at {size} MiB installed by Wine's msiexec", ours=done.describe(),
                        value=wrong, target=Target(limit=0, unit="wrong (exit code, files)")))
    return rows + run.peak("package --msi", size, ran)


def intunewin_step(run: Run, size: int, folder: Path) -> list[Row]:
    """`write_intunewin` of a folder holding one incompressible file in a fresh process, then `openssl enc` +
    `sha256sum` of that file."""

    setup = random_file(folder / "setup", SETUP_FILE, size * MB)
    spec = {"folder": str(folder / "setup"), "output": str(folder / "out" / "scale.intunewin"),
            "members": str(folder / "members")}
    ran, made = child("intunewin", spec, folder)
    ours = float(made["seconds"])
    rows = []
    if run.want("intunewin"):
        base = timed_commands([["openssl", "enc", "-aes-256-cbc", "-pbkdf2", "-pass", "pass:bench", "-in",
                                str(setup.path), "-out", str(folder / "encrypted.bin")],
                               ["sha256sum", str(setup.path)]])
        rows.append(Row(figure=f".intunewin at {size} MiB (writer)", ours=seconds(ours),
                        baseline=f"openssl enc -aes-256-cbc + sha256sum {seconds(base)}", value=ours / base,
                        target=Target(limit=1.0)))
    return rows + run.peak("package --intunewin", size, ran)


def real_build(manifest: Path, figure: str) -> Callable[[Run], list[Row]]:
    """The real first build of `manifest` against `zip -r -6` of its contents (bench/build_quickstart.py), judged
    as `figure`; what its processes wrote and their peak memory beside."""

    def step(run: Run) -> list[Row]:
        from build_quickstart import measure

        folder = run.work / f"real-{manifest.stem}"
        try:
            figures = measure(manifest.resolve(), folder, run.args.repeat, keep=False)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        rows = []
        if run.want(figure):
            rows.append(Row(figure=f"{manifest.stem} first build", ours=seconds(figures.first),
                            baseline=f"zip -r -6 {seconds(figures.baseline)}", value=figures.first / figures.baseline,
                            target=Target(limit=1.2)))
        if run.want("written"):
            rows.append(Row(figure=f"bytes written by the {manifest.stem} first build", ours=mib(figures.build_written),
                            baseline=f"its zip {mib(figures.zip_bytes)}",
                            value=figures.build_written / figures.zip_bytes, target=WRITTEN))
        if run.want("rss"):
            rows.append(Row(figure=f"peak RSS of the {manifest.stem} first build", ours=mib(figures.build_peak_rss),
                            value=figures.build_peak_rss / MB, target=RSS))
        return rows

    return step


def find_uv(given: str | None) -> str | None:
    """uv from --uv, PATH, or the `uv` Python package (`python3 -m pip install uv` puts its binary there)."""
    if given or shutil.which("uv"):
        return given or shutil.which("uv")
    try:
        from uv import find_uv_bin
    except ImportError:
        return None
    return str(find_uv_bin())


def install_step(run: Run) -> list[Row]:
    """The quickstart's install.sh against uv of the same wheels, alternated (bench/install_throughput.py)."""
    uv = find_uv(run.args.uv)
    if uv is None:
        return [Row(figure="install of the Linux quickstart", skipped="uv not installed")]
    from install_throughput import build_bundle, engine_install, timed, uv_install

    bundle = build_bundle(run.args.install_manifest.resolve(), run.args.cache, run.work / "install")
    python = shutil.which(f"python{json.loads((bundle / 'bundle.json').read_text())['python']}")
    if python is None:
        raise SystemExit("no python3.<the bundle's python> on PATH")
    libraries = bundle / "payload" / "gpu"  # a Linux GPU bundle's NVIDIA libraries: placed by the install, not wheels
    ours, theirs, copies = [], [], []
    for attempt in range(run.args.repeat):
        ours.append(engine_install(bundle, run.work / "install" / f"engine-{attempt}" / "app", python,
                                   self_check=False))
        theirs.append(uv_install(bundle, run.work / "install" / f"uv-{attempt}", python, uv))
        if libraries.is_dir():
            copies.append(timed(["cp", "-r", str(libraries), str(run.work / "install" / f"uv-{attempt}" / "gpu")]))
    figure = f"install of {run.args.install_manifest.stem} (install.sh, no self-check)"
    rows = [Row(figure=figure, ours=seconds(min(ours)), baseline=f"uv venv + uv pip install {seconds(min(theirs))}",
                value=min(ours) / min(theirs), target=Target(limit=1.0))]
    if copies:  # uv installs only the wheels: the same work also copies the libraries
        both = min(t + c for t, c in zip(theirs, copies))
        rows.append(Row(figure=f"{figure}, against uv and `cp -r payload/gpu`", ours=seconds(min(ours)),
                        baseline=f"uv venv + uv pip install + cp -r {seconds(both)}", value=min(ours) / both,
                        target=Target(limit=1.0)))
    return rows


def gpu_fetch_step(run: Run) -> list[Row]:
    """`ort-bundler fetch` of the GPU manifest against `pip download` of its wheels, in turns (bench/fetch.py)."""
    if run.args.gpu_manifest is None:
        return [Row(figure="GPU fetch", skipped="pass --gpu-manifest")] if run.want("fetch") else []
    from fetch import fetch_command, pip_commands

    manifest = run.args.gpu_manifest.resolve()
    ours: list[Ran] = []
    theirs = []
    for attempt in range(run.args.repeat):
        dest = run.work / f"pip-{attempt}"
        dest.mkdir()
        theirs.append(timed_commands(pip_commands(manifest, dest)))
        shutil.rmtree(dest)
        os.sync()
        [command] = fetch_command(manifest, run.work / f"cache-{attempt}")
        ours.append(checked(run_measured(command)))
        shutil.rmtree(run.work / f"cache-{attempt}")
    best = min(r.seconds for r in ours)
    rows = [Row(figure=f"GPU fetch ({manifest.name})", ours=seconds(best),
                baseline=f"pip download --require-hashes {seconds(min(theirs))}", value=best / min(theirs),
                target=Target(limit=1.1))] if run.want("fetch") else []
    peak = max(r.peak_rss for r in ours)
    if run.want("rss"):
        rows.append(Row(figure=f"peak RSS of the GPU fetch ({manifest.name})", ours=mib(peak), value=peak / MB,
                        target=RSS))
    return rows


def trend_rows(run: Run) -> list[Row]:
    """Flatness of each process's memory and linearity of the MSI writer, smallest size against largest."""
    rows = []
    for what, peaks in run.peaks.items():
        (small, low), (large, high) = min(peaks), max(peaks)
        if run.want("rss") and small != large:
            rows.append(Row(figure=f"peak RSS of {what}, {large} MiB / {small} MiB", ours=f"{mib(high)} / {mib(low)}",
                            value=high / low, target=FLAT))
    if run.want("msi") and len({size for size, _ in run.msi_seconds}) > 1:
        (small, fast), (large, slow) = min(run.msi_seconds), max(run.msi_seconds)
        rows.append(Row(figure=f"package --msi time per MiB, {large} MiB / {small} MiB",
                        ours=f"{slow / large * 1000:.1f} / {fast / small * 1000:.1f} ms/MiB",
                        value=(slow / large) / (fast / small), target=LINEAR))
    return rows


def steps(run: Run) -> list[tuple[str, Callable[[Run], list[Row]]]]:
    """(label, step) in the order they run; a step runs when one of its figures is wanted."""
    chosen: list[tuple[str, Callable[[Run], list[Row]]]] = []
    if run.want("fetch") or (run.want("rss") and run.args.gpu_manifest):
        chosen.append(("GPU fetch", gpu_fetch_step))
    for size in run.args.sizes:
        if run.want("build", "written", "rss"):
            chosen.append((f"build at {size} MiB", sized(size, build_step)))
        if run.want("rss"):
            chosen.append((f"fetch at {size} MiB", sized(size, fetch_step)))
        if run.want("msi", "rss"):
            chosen.append((f"package --msi at {size} MiB", sized(size, msi_step)))
        if run.want("intunewin", "rss"):
            chosen.append((f".intunewin at {size} MiB", sized(size, intunewin_step)))
    if run.want("quickstart", "written"):
        chosen.append(("quickstart-win first build", real_build(QUICKSTART_WIN, "quickstart")))
    if run.args.gpu_manifest and run.want("build", "written"):
        chosen.append((f"{run.args.gpu_manifest.stem} first build", real_build(run.args.gpu_manifest, "build")))
    if run.want("install"):
        chosen.append(("install", install_step))
    return chosen


def attempt(label: str, step: Callable[[], list[Row]]) -> list[Row]:
    """The step's rows, or one error row: a figure that fails says why, and the others still run."""
    start = time.perf_counter()
    print(f"{label}: running", flush=True)
    try:
        rows = step()
    except (Exception, SystemExit) as exc:  # the single scripts stop with SystemExit(message)
        message = str(exc).strip() or type(exc).__name__
        print(f"{label}: failed: {message}", flush=True)
        return [Row(figure=label, error=message.splitlines()[0][:200])]
    print(f"{label}: done in {time.perf_counter() - start:.1f} s", flush=True)
    return rows


def sizes(text: str) -> list[int]:
    try:
        found = [int(part) for part in text.split(",")]
    except ValueError:
        found = []
    if not found or min(found) <= 0:
        raise argparse.ArgumentTypeError(f"found {text!r}, expected sizes in MiB separated by commas, such as 50,500")
    return found


def figures(text: str) -> frozenset[str]:
    chosen = frozenset(part.strip() for part in text.split(","))
    if unknown := sorted(chosen - set(FIGURES)):
        raise argparse.ArgumentTypeError(f"found {', '.join(unknown)}, expected figures among {', '.join(FIGURES)}")
    return chosen


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from install_throughput import DEFAULT_CACHE

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=sizes, default=[50, 500],
                        help="payload sizes in MiB for build, written, rss, msi and intunewin (default 50,500; "
                             "issue 37's are 1500,3000)")
    parser.add_argument("--only", type=figures, default=frozenset(FIGURES),
                        help=f"comma-separated figures to run (default all: {','.join(FIGURES)})")
    parser.add_argument("--workdir", type=Path, default=None, help="parent of the work folder (default: a temp dir)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="attempts of the fetch, quickstart and install figures; the fastest counts (default 1)")
    parser.add_argument("--gpu-manifest", type=Path, default=None,
                        help="a GPU manifest (manifests/gpu-*.toml) for the fetch figure: downloads gigabytes")
    parser.add_argument("--install-manifest", type=Path, default=REPO / "manifests" / "quickstart-linux.toml",
                        help="the Linux bundle the install figure installs (default: the quickstart)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="ort-bundler cache the install figure builds with (default: the test suite's)")
    parser.add_argument("--uv", default=None, help="the uv binary (default: on PATH, else the uv Python package's)")
    parser.add_argument("--msi-install", action="store_true",
                        help="install the MSI of the largest size under Wine's msiexec and check its files")
    parser.add_argument("--jobs", type=int, default=None, help="the writer's compression threads (default: CPUs)")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "SPEC"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    if args.child:
        run_child(args.child[0], Path(args.child[1]))
        return 0
    # Every command this starts (`python -m bundler`, the children) imports this tree's bundler, as this does.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    started = datetime.now(UTC)
    print(f"bench/scale.py, {started:%Y-%m-%d %H:%M} UTC; {machine()}; sizes {','.join(map(str, args.sizes))} MiB; "
          f"figures {','.join(f for f in FIGURES if f in args.only)}", flush=True)
    rows: list[Row] = []
    with workspace(args.workdir) as work:
        run = Run(args=args, work=work, wanted=args.only)
        for label, step in steps(run):
            rows.extend(attempt(label, partial(step, run)))
        rows.extend(trend_rows(run))
    elapsed = (datetime.now(UTC) - started).total_seconds()
    print(f"\n{table(rows)}\n\nfinished in {elapsed / 60:.1f} min; {machine()}")
    return 1 if errored(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
