"""Build throughput against `sha256sum` + `zip -r -6` of the same files, measured in one run.

PRODUCT.md "Performance": a build should cost well under (sha256sum + zip) on two cores (target <= 0.8),
and a rebuild with unchanged inputs a small fraction of a first build.

What "the build" is here: the manifest has no section for arbitrary payload files, and models are parsed
by onnx, so a generated payload cannot go through `ort-bundler build` as is. This script drives the
build's own writer exactly as `bundler.operations.build.build` does: the payload is put into a real content-addressed
`Cache` (as `ort-bundler fetch` leaves it), and `write_zip` writes it with the expected sha256 of every
file and a `MemberCache` in that cache, so hashing in the compression pass, the parallel deflate, the
stored-or-deflated trial, the member cache and the final fsync are all measured. Not measured: manifest
parsing, wheel and model inspection, script rendering (all small next to moving 500 MB).

All phases read from a warm page cache (the payload was just written). Run: python bench/build_throughput.py
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from _payload import MB, Payload, describe, generate, machine, stage, workspace

from bundler.manifest import ZIP_EPOCH
from bundler.sources.cache import Cache
from bundler.writer.members import Member, MemberCache
from bundler.writer.zipwriter import write_zip


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=500, help="payload size in MiB (default 500)")
    parser.add_argument("--workdir", type=Path, default=None, help="where to generate (default: a temp dir)")
    parser.add_argument("--jobs", type=int, default=None, help="compression threads (default: CPU count)")
    parser.add_argument("--repeat", type=int, default=1, help="time each phase this many times, keep the fastest")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    return parser.parse_args()


def timed(action: Callable[[], object]) -> float:
    """Seconds of one call, after flushing earlier writes so they are not charged to this phase."""
    subprocess.run(["sync"], check=True)
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def best(repeat: int, action: Callable[[], object], *, before: Callable[[], object] = lambda: None) -> float:
    times = []
    for _ in range(repeat):
        before()
        times.append(timed(action))
    return min(times)


def build_once(members: list[Member], dest: Path, member_cache: MemberCache, jobs: int | None) -> None:
    write_zip(members, dest, epoch=ZIP_EPOCH, member_cache=member_cache, jobs=jobs)


def baseline(payload: Payload, out: Path) -> tuple[float, float]:
    """(sha256sum seconds, zip -r -6 seconds) over the payload tree."""
    names = [f.name for f in payload.files]

    def checksum() -> None:
        subprocess.run(["sha256sum", *names], cwd=payload.root, check=True, stdout=subprocess.DEVNULL)

    def deflate() -> None:
        out.unlink(missing_ok=True)
        subprocess.run(["zip", "-q", "-r", "-6", str(out), "data"], cwd=payload.root, check=True)

    return timed(checksum), timed(deflate)


def check_zip(path: Path, payload: Payload) -> None:
    """A benchmark of a wrong zip is worthless: the members and their sizes must be the payload's."""
    with zipfile.ZipFile(path) as archive:
        sizes = sorted(i.file_size for i in archive.infolist() if not i.is_dir())
    if sizes != sorted(f.size for f in payload.files):
        msg = f"{path}: its members do not match the payload ({len(sizes)} files, expected {len(payload.files)})"
        raise SystemExit(msg)


def main() -> None:
    args = parse_args()
    print(f"machine: {machine()}; jobs: {args.jobs or 'CPU count'}")
    with workspace(args.workdir, keep=args.keep) as work:
        start = time.perf_counter()
        payload = generate(work / "payload", total=args.size * MB)
        print(f"payload: {describe(payload)} (generated in {time.perf_counter() - start:.1f} s, not timed)")
        cache = Cache(work / "cache")
        members = stage(payload, cache)
        member_cache = MemberCache(cache.work_dir("members"))
        out = work / "out"
        first_zip, second_zip = out / "first.zip", out / "rebuild.zip"

        def clear_members() -> None:
            shutil.rmtree(member_cache.root, ignore_errors=True)

        print("build = bundler.writer.zipwriter.write_zip of the cached payload, as bundler.operations.build.build calls it")
        build = best(args.repeat, lambda: build_once(members, first_zip, member_cache, args.jobs), before=clear_members)
        rebuild = best(args.repeat, lambda: build_once(members, second_zip, member_cache, args.jobs))
        check_zip(first_zip, payload)
        identical = filecmp.cmp(first_zip, second_zip, shallow=False)
        runs = [baseline(payload, out / "baseline.zip") for _ in range(args.repeat)]
        checksum, deflate = min(r[0] for r in runs), min(r[1] for r in runs)
        total = checksum + deflate

        print(f"build (member cache empty):   {build:7.2f} s  -> {first_zip.stat().st_size / MB:.0f} MiB")
        print(f"rebuild (member cache warm): {rebuild:7.2f} s  (byte-identical to the first: {identical})")
        print(f"sha256sum:                   {checksum:7.2f} s")
        print(f"zip -r -6:                   {deflate:7.2f} s  -> {(out / 'baseline.zip').stat().st_size / MB:.0f} MiB")
        print(f"build/baseline ratio: {build / total:.2f}  (target <= 0.8 on 2 cores)")
        print(f"rebuild/build ratio: {rebuild / build:.2f}")


if __name__ == "__main__":
    main()
