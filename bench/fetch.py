"""`ort-bundler fetch` of a manifest's wheels against `pip download --require-hashes` of the same wheels, in one run.

Issue 37's figure "GPU fetch" (target: fetch / pip download <= 1.1). The fetch is the real command,
`python -m bundler fetch -q --cache EMPTY MANIFEST`, in a fresh process with an empty cache each time, so it
includes start-up, the lock's reading, the model files' copies and the atomic adopt into the cache. The
baseline is what a user would run by hand for the same wheels: one `pip download --no-deps --require-hashes`
per target (the bundle's, and the model gate's machine when the lock has a [gate] table) of every
`requirement` input, through the same pip configuration. The two take turns; the fastest of `--repeat` runs
of each counts.

Run: python bench/fetch.py [--manifest manifests/quickstart-win.toml] [--repeat 3]
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
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--manifest", type=Path, default=REPO / "manifests" / "quickstart-linux.toml",
                        help="the manifest whose inputs are fetched (default: manifests/quickstart-linux.toml)")
    parser.add_argument("--repeat", type=int, default=3, help="time each side this many times, keep the fastest")
    parser.add_argument("--workdir", type=Path, default=None, help="where to work (default: a temp dir)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    manifest = args.manifest.resolve()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    print(f"machine: {machine()}")
    print(f"manifest: {manifest}")
    with workspace(args.workdir) as work:
        fetches, pips = [], []
        for run in range(args.repeat):
            dest = work / f"pip-{run}"
            dest.mkdir()
            pips.append(timed(pip_commands(manifest, dest)))
            fetch = [sys.executable, "-m", "bundler", "fetch", "-q", "--cache", str(work / f"cache-{run}"), str(manifest)]
            fetches.append(timed([fetch], env))
        wheels = sum(1 for path in work.glob("pip-0/wheels-*/*") if path.is_file())
        size = sum(path.stat().st_size for path in work.glob("pip-0/wheels-*/*") if path.is_file())
        fetch_s, pip_s = min(fetches), min(pips)
        print(f"wheels: {wheels}, {size / 2**20:.1f} MiB")
        print(f"ort-bundler fetch:             {fetch_s:6.2f} s  (runs: {', '.join(f'{t:.2f}' for t in fetches)})")
        print(f"pip download --require-hashes: {pip_s:6.2f} s  (runs: {', '.join(f'{t:.2f}' for t in pips)})")
        print(f"fetch/pip ratio: {fetch_s / pip_s:.2f}  (target <= 1.1)")


if __name__ == "__main__":
    main()
