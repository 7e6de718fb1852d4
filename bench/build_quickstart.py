"""The real `ort-bundler build` on the quickstart manifests against `zip -r -6` of the same bundle, in one run.

Issue 26's targets: a first build with a warm input cache at most 1.2x the baseline, a rebuild with
nothing changed at most 0.3x (issue 16's were 2.0x and 1.0x). The baseline is `zip -q -r -6` of the first build's own zip, unpacked: the
same files, compressed by the tool everyone has.

What each phase is:
- prepare (not timed): `ort-bundler fetch` into an input cache, then one build, which also creates the
  model gate's ONNX Runtime environment (a venv made once per ORT version and machine, not per bundle);
- first build: a fresh cache holding only the inputs (hard links) and that environment (links to its
  folder), so every derived artifact (the wheel built from capi, deflated members, gate results) is
  made again; the command is `python -m bundler build` in a new process, imports included;
- rebuild: the same command again on that cache, nothing changed: it publishes the zip the first build
  kept in the cache under the hash of all it was made from (`bundler/writer/reuse.py`), after checking it;
- rebuild, assembled: the same with `--no-reuse`, every part run again from the derived artifacts the
  first build cached (built wheel, deflated members, gate results): shown, no target;
- baseline: `zip -q -r -6` of the unpacked first build, after `sync`, from a warm page cache.
All builds must be byte-identical to each other and to the prepare build; the script says so or fails.
The commands run as on a user's machine, where Python keeps compiled bytecode: PYTHONDONTWRITEBYTECODE
(set on some CI machines) is dropped from their environment.

Memory the machine has never used is not what is measured. On a fresh virtual machine (this project's CI
and work machines are Firecracker VMs) the first touch of a page of guest memory costs the host a fault:
writing 3 GiB into /dev/shm took 6.9 s the first time and 1.0 s once those pages had been used and freed.
A first build wrote about 140 MiB of new files (the kept zip, the rebuilt wheel, the wheels' extracted
binaries; 80 MiB since those binaries are read where they lie) and the zip baseline 33 MiB, so on such a machine the build paid 0.3-0.5 s more than its work,
all of it system time (1.3-1.5 s against 1.0 s), and less and less as the machine's memory got used. So
before each timed command the script writes to, then frees, 1 GiB (`pretouch`), and removes each attempt's
folders once its figures are taken: every command then allocates pages the machine has used before, as
on a machine that has been up for a while. The report says what each side wrote.

Run: python bench/build_quickstart.py [--manifest manifests/quickstart-win.toml ...] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from _payload import Ran, checked, machine, run_measured, workspace

REPO = Path(__file__).resolve().parents[1]
QUICKSTARTS = (REPO / "manifests" / "quickstart-linux.toml", REPO / "manifests" / "quickstart-win.toml")
FIRST_TARGET, REBUILD_TARGET = 1.2, 0.3
ENV_PREFIX = "ort-"  # the model gate's environments under <cache>/ort-envs/: ort-<version>-py<XY>


@dataclass(frozen=True, kw_only=True)
class Figures:
    manifest: str
    first: float
    rebuild: float
    assembled: float
    baseline: float
    zip_bytes: int
    build_wrote: int  # bytes of new files a first build left: in its cache (not links to inputs) and its zip
    build_written: int  # bytes the kernel counted as written by a first build's process tree (see Ran), the most
    build_peak_rss: int  # the largest resident set of a first build's processes, the most of the attempts


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--manifest", type=Path, action="append", help="a manifest (default: both quickstarts)")
    parser.add_argument("--workdir", type=Path, default=None, help="where to work (default: a temp dir)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="time each phase this many times, keep the fastest (default 3: see the docstring)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory and every attempt's folders")
    return parser.parse_args()


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "bundler", *args]


def timed(command: Sequence[str], *, cwd: Path | None = None) -> Ran:
    """One command in a new process, after flushing earlier writes so they are not charged to it, and in memory
    the machine has used before (`pretouch`): its seconds, peak RSS and bytes written."""
    subprocess.run(["sync"], check=True)
    pretouch()
    return run(command, cwd=cwd)


PRETOUCH = 2**30  # bytes: over three times what a first build writes and its processes allocate


def pretouch() -> None:
    """Write to, then free, more memory than the command will take, so that its allocations (page cache for
    what it writes, its heap) come from pages used before, not from memory the VM has never touched."""
    scratch = bytearray(PRETOUCH)  # zero-filled: every page is written
    del scratch


USER_ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def run(command: Sequence[str], *, cwd: Path | None = None) -> Ran:
    """The build's notes (licences it could not map) are not the benchmark's output: shown only on failure."""
    return checked(run_measured(command, cwd=cwd, env=USER_ENV))


def fresh_cache(inputs: Path, dest: Path) -> Path:
    """A cache with the inputs (hard links: as `fetch` leaves them) and the gate's ORT environment, nothing else."""
    for path in sorted((inputs / "sha256").rglob("*")):
        target = dest / path.relative_to(inputs)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            os.link(path, target)
    envs = dest / "ort-envs"
    envs.mkdir(parents=True)
    for env in sorted((inputs / "ort-envs").iterdir()):
        if env.name.startswith(ENV_PREFIX) and env.is_dir():  # the venv folders; no results of any kind
            (envs / env.name).symlink_to(env, target_is_directory=True)
    return dest


def zip_of(out: Path) -> Path:
    [found] = sorted(out.glob("*.zip"))
    return found


def new_bytes(*folders: Path) -> int:
    """Bytes of the files under `folders` that are not hard links to files elsewhere (the cache's inputs)."""
    return sum(path.stat().st_size for folder in folders for path in folder.rglob("*")
               if path.is_file() and not path.is_symlink() and path.stat().st_nlink == 1)


def measure(manifest: Path, work: Path, repeat: int, *, keep: bool) -> Figures:
    inputs = work / "inputs"
    run(cli("fetch", "-q", "--cache", str(inputs), str(manifest)))
    run(cli("build", "-q", "--cache", str(inputs), "-o", str(work / "prepared"), str(manifest)))
    reference = zip_of(work / "prepared").read_bytes()
    firsts: list[Ran] = []
    rebuilds, assembled, baselines, wrote = [], [], [], []
    for attempt in range(repeat):
        cache = fresh_cache(inputs, work / f"cache-{attempt}")
        build = cli("build", "-q", "--cache", str(cache), "-o", str(work / f"out-{attempt}"), str(manifest))
        firsts.append(timed(build))
        wrote.append(new_bytes(cache, work / f"out-{attempt}"))
        first = zip_of(work / f"out-{attempt}").read_bytes()
        rebuilds.append(timed(build).seconds)
        again = zip_of(work / f"out-{attempt}").read_bytes()
        assembled.append(timed([*build[:-1], "--no-reuse", build[-1]]).seconds)
        forced = zip_of(work / f"out-{attempt}").read_bytes()
        if not first == again == forced == reference:
            msg = f"{manifest.name}: the builds of run {attempt} are not byte-identical to each other and the first"
            raise SystemExit(msg)
        unpacked = work / f"unpacked-{attempt}"
        with zipfile.ZipFile(zip_of(work / f"out-{attempt}")) as archive:
            archive.extractall(unpacked)
        [top] = [p.name for p in unpacked.iterdir()]
        baselines.append(timed(["zip", "-q", "-r", "-6", str(work / f"baseline-{attempt}.zip"), top],
                               cwd=unpacked).seconds)
        if not keep:  # their pages go back to the machine for the next attempt (see the docstring)
            for folder in (cache, work / f"out-{attempt}", unpacked):
                shutil.rmtree(folder)
            (work / f"baseline-{attempt}.zip").unlink()
    return Figures(manifest=manifest.name, first=min(r.seconds for r in firsts), rebuild=min(rebuilds),
                   assembled=min(assembled), baseline=min(baselines), zip_bytes=len(reference), build_wrote=max(wrote),
                   build_written=max(r.written for r in firsts), build_peak_rss=max(r.peak_rss for r in firsts))


def report(figures: Figures) -> str:
    first, rebuild = figures.first / figures.baseline, figures.rebuild / figures.baseline
    return "\n".join([
        f"{figures.manifest}: {figures.zip_bytes / 2**20:.1f} MiB zip, byte-identical across builds",
        f"  first build:  {figures.first:6.2f} s   {first:5.2f}x baseline  (target <= {FIRST_TARGET})"
        f"{'' if first <= FIRST_TARGET else '  MISSED'}",
        f"  rebuild:      {figures.rebuild:6.2f} s   {rebuild:5.2f}x baseline  (target <= {REBUILD_TARGET})"
        f"{'' if rebuild <= REBUILD_TARGET else '  MISSED'}",
        f"  rebuild, assembled (--no-reuse): {figures.assembled:6.2f} s   "
        f"{figures.assembled / figures.baseline:5.2f}x baseline",
        f"  zip -r -6:    {figures.baseline:6.2f} s",
        f"  written: first build {figures.build_wrote / 2**20:.0f} MiB, zip -r -6 {figures.zip_bytes / 2**20:.0f} MiB",
        f"  first build's processes: {figures.build_written / 2**20:.0f} MiB written (kernel count, files deleted "
        f"since included), peak RSS {figures.build_peak_rss / 2**20:.0f} MiB",
    ])


def main() -> None:
    args = parse_args()
    print(machine())
    with workspace(args.workdir, keep=args.keep) as work:
        for index, manifest in enumerate(args.manifest or QUICKSTARTS):
            print(report(measure(manifest.resolve(), work / str(index), args.repeat, keep=args.keep)), flush=True)
    print(machine())


if __name__ == "__main__":
    main()
