"""`ort-bundler fetch` of a manifest's wheels against `pip download --require-hashes` of the same wheels, in one run.

Issue 37's figure "GPU fetch" (target: fetch / pip download <= 1.1). The fetch is the real command,
`python -m bundler fetch -q --cache EMPTY MANIFEST`, in a fresh process with an empty cache each time, so it
includes start-up, the lock's reading, the model files' copies and the atomic adopt into the cache. The
baseline is what a user would run by hand for the same wheels: one `pip download --no-deps --require-hashes`
per target (the bundle's, and the model gate's machine when the lock has a [gate] table) of every
`requirement` input, through the same pip configuration. The two take turns; the fastest of `--repeat` runs
of each counts.

`--compare DIR` also times the fetch of another ort-bundler source tree (e.g. a checkout before a change) in the
same turns, and prints its ratio too.

Run: python bench/fetch.py [--manifest manifests/quickstart-win.toml] [--repeat 3] [--compare ../old-checkout]
(the GPU manifests, manifests/gpu-*.toml, bring gigabytes: pass them on purpose only).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from _payload import machine, workspace

from bundler.manifest import Input, load
from bundler.sources.gate import pip_targets
from bundler.sources.inputs import all_inputs, load_lock, target_of
from bundler.sources.lock import Target

REPO = Path(__file__).resolve().parents[1]


def pip_commands(manifest_path: Path, dest: Path) -> list[list[str]]:
    """The `pip download` a user would run for the manifest's wheels: one per target, hashes required."""
    manifest = load(manifest_path)
    targets = pip_targets(load_lock(manifest))
    groups: dict[Target, list[Input]] = defaultdict(list)
    for item in all_inputs(manifest):
        if item.kind == "requirement":
            groups[targets.get(item.key, target_of(manifest))].append(item)
    commands = []
    for index, (target, items) in enumerate(groups.items()):
        lines = {f"{item.location} " + " ".join(f"--hash=sha256:{h}" for h in item.sha256) for item in items}
        requirements = dest / f"requirements-{index}.txt"
        requirements.write_text("\n".join(sorted(lines)) + "\n", encoding="utf-8")
        commands.append([sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--quiet",
                         "--disable-pip-version-check", "--no-input", "-d", str(dest / f"wheels-{index}"),
                         *target.pip_target_args(), "-r", str(requirements)])
    return commands


def timed(commands: list[list[str]], env: dict[str, str] | None = None) -> float:
    """Seconds of the commands run one after the other, after flushing earlier writes."""
    subprocess.run(["sync"], check=True)
    start = time.perf_counter()
    for command in commands:
        done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    return time.perf_counter() - start


def source_env(tree: Path) -> dict[str, str]:
    """The environment that runs `python -m bundler` from `tree`."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}


def fetch_command(manifest: Path, cache: Path) -> list[list[str]]:
    return [[sys.executable, "-m", "bundler", "fetch", "-q", "--cache", str(cache), str(manifest)]]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--manifest", type=Path, default=REPO / "manifests" / "quickstart-linux.toml",
                        help="the manifest whose inputs are fetched (default: manifests/quickstart-linux.toml)")
    parser.add_argument("--repeat", type=int, default=3, help="time each side this many times, keep the fastest")
    parser.add_argument("--workdir", type=Path, default=None, help="where to work (default: a temp dir)")
    parser.add_argument("--compare", type=Path, default=None,
                        help="another ort-bundler source tree whose fetch is timed in the same turns")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    manifest = args.manifest.resolve()
    print(f"machine: {machine()}")
    print(f"manifest: {manifest}")
    with workspace(args.workdir) as work:
        times: dict[str, list[float]] = {"fetch": [], "pip": [], "compare": []}
        for run in range(args.repeat):
            dest = work / f"pip-{run}"
            dest.mkdir()
            times["pip"].append(timed(pip_commands(manifest, dest)))
            times["fetch"].append(timed(fetch_command(manifest, work / f"cache-{run}"), source_env(REPO)))
            if args.compare:
                times["compare"].append(timed(fetch_command(manifest, work / f"compare-{run}"),
                                              source_env(args.compare.resolve())))
        saved = [path for path in work.glob("pip-0/wheels-*/*") if path.is_file()]
        print(f"wheels: {len(saved)}, {sum(path.stat().st_size for path in saved) / 2**20:.1f} MiB")
        pip = min(times["pip"])
        rows = [("ort-bundler fetch", "fetch", REPO)] + ([("  compared", "compare", args.compare)] if args.compare else [])
        for label, key, tree in rows:
            print(f"{label} ({tree}): {min(times[key]):6.2f} s  (runs: {', '.join(f'{t:.2f}' for t in times[key])})")
        print(f"pip download --require-hashes: {pip:6.2f} s  (runs: {', '.join(f'{t:.2f}' for t in times['pip'])})")
        print(f"fetch/pip ratio: {min(times['fetch']) / pip:.2f}  (target <= 1.1)")
        if args.compare:
            print(f"compared fetch/pip ratio: {min(times['compare']) / pip:.2f}")


if __name__ == "__main__":
    main()
