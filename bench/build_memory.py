"""Peak memory of a build as the payload grows: it must stay flat (PRODUCT.md "Performance").

For each size the payload is generated and put into a real cache by this process, and the build runs in a
fresh child process (`write_zip` with an empty member cache, as in bench/build_throughput.py), so the child's
high-water mark (VmHWM) holds the build and nothing else. The child also reports its high-water mark just
before the build, which is the floor that imports alone cost.

Run: python bench/build_memory.py [--sizes 250,1024]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from _payload import MB, describe, generate, machine, stage, workspace

from bundler.manifest import ZIP_EPOCH
from bundler.sources.cache import Cache
from bundler.writer.members import Member, MemberCache
from bundler.writer.zipwriter import write_zip


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="250,1024", help="payload sizes in MiB, comma-separated (default 250,1024)")
    parser.add_argument("--workdir", type=Path, default=None, help="where to generate (default: a temp dir)")
    parser.add_argument("--jobs", type=int, default=None, help="compression threads (default: CPU count)")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    return parser.parse_args()


def high_water_mark() -> int:
    """Peak resident set size of this process so far, in bytes."""
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    msg = "/proc/self/status has no VmHWM line; this benchmark needs Linux"
    raise SystemExit(msg)


def child(spec_path: Path) -> None:
    """Run one build from a spec file and print the high-water marks as JSON on stdout."""
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    members = [Member(name=m["name"], source=Path(m["source"]), sha256=m["sha256"]) for m in spec["members"]]
    before = high_water_mark()
    start = time.perf_counter()
    write_zip(members, Path(spec["dest"]), epoch=ZIP_EPOCH, member_cache=MemberCache(Path(spec["member_cache"])),
              jobs=spec["jobs"])
    seconds = time.perf_counter() - start
    print(json.dumps({"before": before, "peak": high_water_mark(), "seconds": seconds}))


def child_command(members: list[Member], dest: Path, member_cache: Path, jobs: int | None, spec_path: Path) -> list[str]:
    """The command that builds `members` into `dest` in a fresh process (see `child`), its spec written to
    `spec_path`: bench/scale.py runs the same child to count its writes."""
    spec = {
        "members": [{"name": m.name, "source": str(m.source), "sha256": m.sha256} for m in members],
        "dest": str(dest),
        "member_cache": str(member_cache),
        "jobs": jobs,
    }
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    return [sys.executable, str(Path(__file__).resolve()), "--child", str(spec_path)]


def measure(size_mb: int, parent: Path, jobs: int | None) -> dict[str, float]:
    payload = generate(parent / "payload", total=size_mb * MB)
    print(f"payload: {describe(payload)}")
    cache = Cache(parent / "cache")
    members = stage(payload, cache)
    command = child_command(members, parent / "out" / "bundle.zip", cache.work_dir("members"), jobs,
                            parent / "spec.json")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        msg = f"the build of the {size_mb} MiB payload failed (exit {done.returncode}):\n{done.stderr}"
        raise SystemExit(msg)
    return json.loads(done.stdout)


def main() -> None:
    args = parse_args()
    if args.child is not None:
        child(args.child)
        return
    print(f"machine: {machine()}; jobs: {args.jobs or 'CPU count'}")
    print("build = bundler.writer.zipwriter.write_zip of the cached payload in a fresh process, member cache empty")
    sizes = [int(s) for s in args.sizes.split(",")]
    peaks = []
    for size in sizes:
        with workspace(args.workdir) as work:
            result = measure(size, work, args.jobs)
        peaks.append(result["peak"])
        print(f"{size:5d} MiB: peak RSS {result['peak'] / MB:6.1f} MiB (after imports {result['before'] / MB:.1f} MiB, "
              f"build {result['seconds']:.1f} s)")
    print(f"peak RSS ratio {sizes[-1]} MiB / {sizes[0]} MiB: {peaks[-1] / peaks[0]:.2f}  (flat = 1.00)")


if __name__ == "__main__":
    main()
