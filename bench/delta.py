"""`ort-bundler delta` against xdelta3 and zstd's --patch-from, and against carrying the new zip itself.

Issue 39's targets, per case: our delta no larger than the smaller of the two tools' deltas plus 1 %, and
smaller on the model-only case, where it is at most the changed member's stored size plus 64 KiB; applying
no slower than 1.2x copying the new zip. The cases, built for real (lock through pip, fetch, build; not timed):

- (a) the Linux quickstart, 1.0.0 -> 1.1.0 with another model under the same name;
- (b) the Windows quickstart with one wheel upgraded: numpy pinned one patch release back in 1.0.0, the
      quickstart's own numpy in 1.1.0;
- (c) the Linux GPU bundle (manifests/gpu-linux-cuda12.toml, about 2.3 GB of inputs, fetched into the cache
      first) with another model: printed as "skipped: no GPU bundle (...)" when its inputs are not in the cache
      (`ort-bundler fetch --cache DIR manifests/gpu-linux-cuda12.toml` brings them).

The tools get their large-file options (`xdelta3 -e -9 -B <size of OLD>`, `zstd -19 --long=31
--patch-from=OLD`, Debian's packages); a size a tool refuses is recorded as its error. Each command runs in a
new process, as a user runs it: ours is `python -m bundler delta` to make and the old zip's shipped applier
under `python3 -I -S` to apply (hashing OLD and the result as it must); the copy is `cp NEW`, shown also
with `sha256sum` of the copy, which is what checking a carried zip costs, and as a durable copy (`cp NEW COPY &&
sync COPY`): the applier fsyncs its result before renaming it into place, as `build` does, so that a crash
leaves the old name or the whole new file. Every applied result is compared with NEW byte for byte, or the
script fails.

Run: python bench/delta.py [--cache DIR] [--repeat 3] [--keep]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from _payload import machine, workspace

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = REPO / "manifests"
DEFAULT_CACHE = Path(os.environ.get("ORT_BUNDLER_TEST_CACHE", Path.home() / ".cache" / "ort-bundler-tests")) / "bundler-cache"
OLD_NUMPY = "numpy==2.4.5"
GPU_MANIFEST = "gpu-linux-cuda12.toml"
SIZE_SLACK, APPLY_TARGET, MODEL_SLACK = 1.01, 1.2, 64 * 1024


@dataclass(frozen=True, kw_only=True)
class Tool:
    name: str
    size: int | None  # None: the tool refused (see error)
    make: float
    apply: float
    error: str = ""


class Skipped(Exception):
    """A case that cannot run here, and why (printed; not a failure)."""


def bundler(*args: str) -> None:
    error = bundler_status(*args)
    if error:
        raise SystemExit(f"ort-bundler {' '.join(args)} failed:\n{error}")


def bundler_status(*args: str) -> str:
    """'' when `ort-bundler ARGS` succeeded, else its exit code and error output."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "bundler", *args], capture_output=True, text=True, env=env)
    return f"exit {proc.returncode}: {proc.stderr.strip()}" if proc.returncode else ""


def timed(cmd: Sequence[str], repeat: int, *, before: Callable[[], None] = lambda: None,
          env: dict[str, str] | None = None) -> tuple[float, str]:
    """The best of `repeat` runs (seconds) and the last run's error output, '' when it succeeded."""
    best, error = float("inf"), ""
    for _ in range(repeat):
        before()
        start = time.perf_counter()
        proc = subprocess.run(list(cmd), capture_output=True, text=True, env=env)
        elapsed = time.perf_counter() - start
        error = "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        best = min(best, elapsed)
    return best, error


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


# -- the releases ------------------------------------------------------------------------------------------


def linux_model_change(work: Path, cache: Path) -> tuple[Path, Path, str]:
    return model_change("quickstart-linux.toml", work, "a", cache)


def gpu_model_change(work: Path, cache: Path) -> tuple[Path, Path, str]:
    missing = bundler_status("fetch", "-q", "--offline", "--cache", str(cache), str(MANIFESTS / GPU_MANIFEST))
    if missing:
        raise Skipped(f"no GPU bundle ({missing.splitlines()[0]})")
    return model_change(GPU_MANIFEST, work, "c", cache)


def model_change(name: str, work: Path, case: str, cache: Path) -> tuple[Path, Path, str]:
    """The example `name` as 1.0.0, and as 1.1.0 with another tiny-mlp (its lock made again for it)."""
    sys.path.insert(0, str(REPO / "tests"))
    from integration.real_wheels.test_diff import other_model

    old = build(MANIFESTS / name, work / f"{case}-old", cache)
    folder = copy_manifests(work / f"{case}-variant")
    manifest = folder / name
    sha = other_model(folder / "models" / "tiny-mlp.onnx")
    text = re.sub(r'sha256 = "db67[0-9a-f]+"', f'sha256 = "{sha}"', manifest.read_text(encoding="utf-8"))
    manifest.write_text(bump(text), encoding="utf-8")
    return old, build(manifest, work / f"{case}-new", cache, lock=True), "payload/models/tiny-mlp.onnx"


def windows_wheel_upgrade(work: Path, cache: Path) -> tuple[Path, Path, str]:
    folder = copy_manifests(work / "b-old-manifest")
    manifest = folder / "quickstart-win.toml"
    text = manifest.read_text(encoding="utf-8").replace(
        'lock = "quickstart-win.lock.toml"', f'lock = "quickstart-win.lock.toml"\nrequirements = ["{OLD_NUMPY}"]')
    manifest.write_text(text, encoding="utf-8")
    old = build(manifest, work / "b-old", cache, lock=True)
    folder = copy_manifests(work / "b-new-manifest")
    manifest = folder / "quickstart-win.toml"
    manifest.write_text(bump(manifest.read_text(encoding="utf-8")), encoding="utf-8")
    return old, build(manifest, work / "b-new", cache), "payload/wheels/numpy-"


def copy_manifests(dest: Path) -> Path:
    shutil.copytree(MANIFESTS, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def bump(text: str) -> str:
    return text.replace('version = "1.0.0"', 'version = "1.1.0"', 1)


def build(manifest: Path, out: Path, cache: Path, *, lock: bool = False) -> Path:
    for command in (("lock", "fetch") if lock else ("fetch",)):
        bundler(command, "-q", "--cache", str(cache), str(manifest))
    bundler("build", "-q", "--cache", str(cache), "-o", str(out), str(manifest))
    return next(out.glob("*.zip"))


# -- the measurements ------------------------------------------------------------------------------------


def measure(old: Path, new: Path, work: Path, repeat: int) -> list[Tool]:
    size = old.stat().st_size
    results = [ours(old, new, work, repeat)]
    xd3, zst = work / "new.xd3", work / "new.zst"
    results.append(other("xdelta3", ["xdelta3", "-e", "-9", "-f", "-B", str(size), "-s", str(old), str(new), str(xd3)],
                         ["xdelta3", "-d", "-f", "-s", str(old), str(xd3), str(work / "xd3.zip")],
                         xd3, work / "xd3.zip", new, repeat))
    results.append(other("zstd --patch-from", ["zstd", "-q", "-f", "-19", "--long=31", f"--patch-from={old}", str(new),
                                               "-o", str(zst)],
                         ["zstd", "-q", "-d", "-f", "--long=31", f"--patch-from={old}", str(zst), "-o",
                          str(work / "zst.zip")], zst, work / "zst.zip", new, repeat))
    copy, _ = timed(["cp", str(new), str(work / "copy.zip")], repeat)
    checked, _ = timed(["sh", "-c", f'cp "{new}" "{work / "copy.zip"}" && sha256sum "{work / "copy.zip"}"'], repeat)
    durable, _ = timed(["sh", "-c", f'cp "{new}" "{work / "copy.zip"}" && sync "{work / "copy.zip"}"'], repeat)
    results.append(Tool(name="NEW itself (cp; cp + sha256sum)", size=new.stat().st_size, make=0.0, apply=copy))
    results.append(Tool(name="  copied and checked", size=new.stat().st_size, make=0.0, apply=checked))
    results.append(Tool(name="  copied and synced", size=new.stat().st_size, make=0.0, apply=durable))
    return results


def ours(old: Path, new: Path, work: Path, repeat: int) -> Tool:
    out = work / "ours"
    make, error = timed([sys.executable, "-m", "bundler", "delta", "-q", str(old), str(new), "-o", str(out)], repeat,
                        before=lambda: shutil.rmtree(out, ignore_errors=True), env={**os.environ, "PYTHONPATH": str(REPO)})
    if error:
        raise SystemExit(f"ort-bundler delta failed: {error}")
    delta = next(out.glob("*.delta"))
    applier = work / "delta_apply.py"
    with zipfile.ZipFile(old) as archive:
        shipped = [n for n in archive.namelist() if n.endswith("/payload/ort_bundle/delta_apply.py")]
        applier.write_bytes(archive.read(shipped[0]) if shipped else (REPO / "bundler/shipped/ort_bundle/delta_apply.py").read_bytes())
    result = work / "ours-result"
    apply, error = timed([sys.executable, "-I", "-S", str(applier), str(old), str(delta), "-o", str(result)], repeat,
                         before=lambda: shutil.rmtree(result, ignore_errors=True))
    if error or sha256(result / new.name) != sha256(new):
        raise SystemExit(f"our applied result differs from {new.name}: {error}")
    return Tool(name="ort-bundler delta", size=delta.stat().st_size, make=make, apply=apply)


def other(name: str, make_cmd: list[str], apply_cmd: list[str], delta: Path, result: Path, new: Path,
          repeat: int) -> Tool:
    if shutil.which(make_cmd[0]) is None:
        return Tool(name=name, size=None, make=0.0, apply=0.0, error=f"{make_cmd[0]} not installed")
    make, error = timed(make_cmd, repeat)
    if error:
        return Tool(name=name, size=None, make=make, apply=0.0, error=error)
    apply, error = timed(apply_cmd, repeat)
    if error or sha256(result) != sha256(new):
        raise SystemExit(f"{name} did not give back {new.name}: {error}")
    return Tool(name=name, size=delta.stat().st_size, make=make, apply=apply, error="")


def report(title: str, old: Path, new: Path, changed: str, tools: list[Tool]) -> list[str]:
    with zipfile.ZipFile(new) as archive:
        member = sum(i.compress_size for i in archive.infolist() if changed in i.filename)
    print(f"\n{title}\n  OLD {old.name} {old.stat().st_size:,} bytes; NEW {new.name} {new.stat().st_size:,} bytes; "
          f"changed member(s) {changed}* stored {member:,} bytes")
    print(f"  {'':34} {'size':>12} {'of NEW':>8} {'make s':>8} {'apply s':>8}")
    for tool in tools:
        if tool.size is None:
            print(f"  {tool.name:34} refused: {tool.error}")
            continue
        print(f"  {tool.name:34} {tool.size:>12,} {tool.size / new.stat().st_size:>8.4%} {tool.make:>8.2f} "
              f"{tool.apply:>8.2f}")
    mine = tools[0]
    others = [t.size for t in tools[1:3] if t.size is not None]
    copy = tools[3].apply
    failures = []
    assert mine.size is not None
    if others:
        ratio = mine.size / min(others)
        print(f"  ours / smaller tool delta: {ratio:.3f} (target <= {SIZE_SLACK})")
        if ratio > SIZE_SLACK:
            failures.append(f"{title}: {mine.size} > {SIZE_SLACK} x {min(others)}")
    print(f"  ours / changed member + 64 KiB: {mine.size / (member + MODEL_SLACK):.3f}")
    print(f"  apply / cp NEW: {mine.apply / copy:.2f}x (target <= {APPLY_TARGET}); apply / (cp + sync): "
          f"{mine.apply / tools[5].apply:.2f}x; apply / (cp + sha256sum): {mine.apply / tools[4].apply:.2f}x")
    return failures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="the ort-bundler input cache")
    parser.add_argument("--repeat", type=int, default=3, help="runs per timed command (the best is shown)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--work", type=Path, default=None, help="parent of the work folder")
    parser.add_argument("--cases", default="abc", help="which cases to run (default: abc)")
    args = parser.parse_args(argv)
    print(machine())
    failures: list[str] = []
    with workspace(args.work, keep=args.keep) as work:
        for case, title, make in (("a", "(a) Linux quickstart, another model", linux_model_change),
                                  ("b", f"(b) Windows quickstart, {OLD_NUMPY} -> the quickstart's numpy",
                                   windows_wheel_upgrade),
                                  ("c", "(c) Linux GPU bundle (CUDA 12), another model", gpu_model_change)):
            if case not in args.cases:
                continue
            try:
                old, new, changed = make(work, args.cache)
            except Skipped as skipped:
                print(f"\n{title}\n  skipped: {skipped}")
                continue
            (work / case).mkdir()
            failures += report(title, old, new, changed, measure(old, new, work / case, args.repeat))
    for failure in failures:
        print(f"target missed: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
