"""The payload every benchmark measures: half incompressible bytes, half text-like lines.

PRODUCT.md "Performance" states its targets for "500 MB, half random, half text", so the payload has that
shape at any `--size`: each half is one large file (40 %), ten medium files (40 %) and fifty small files
(20 %), because a bundle holds a few big libraries or models and many small files, and the writer must be
fast for both. The text half is logs, CSV and JSON lines drawn from a seeded generator; it deflates about
4x at level 6, like real text, rather than the 100x of repeated filler that would flatter any compressor.

Generating text line by line in Python runs at ~15 MB/s, so each style draws its lines at random from a
pool of distinct lines instead. A pool is far larger than deflate's 32 KiB window, so reuse of a line
gives the compressor nothing it would not find in fresh text.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bundler.sources.cache import Cache
from bundler.writer.members import Member

MB = 1 << 20
CHUNK = 4 * MB
POOL_LINES = 100_000
SHARES = ((0.4, 1, "big"), (0.4, 10, "mid"), (0.2, 50, "small"))


@dataclass(frozen=True, kw_only=True)
class PayloadFile:
    """One generated file: `name` is its path relative to the payload root, with `/` separators."""

    name: str
    path: Path
    sha256: str
    size: int


@dataclass(frozen=True, kw_only=True)
class Payload:
    root: Path
    files: tuple[PayloadFile, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


def _log_line(r: random.Random) -> str:
    t = r.randrange(86_400_000)
    level = r.choice(("INFO", "INFO", "INFO", "INFO", "DEBUG", "DEBUG", "WARN", "ERROR"))
    path = r.choice(("/api/v1/items", "/api/v1/users", "/health", "/api/v2/orders", "/metrics", "/api/v1/sessions"))
    return (f"2024-05-{r.randrange(1, 29):02d}T{t // 3_600_000:02d}:{t // 60_000 % 60:02d}:{t // 1000 % 60:02d}."
            f"{t % 1000:03d}Z {level} worker-{r.randrange(24):02d} request_id={r.getrandbits(48):012x} "
            f"path={path}/{r.randrange(100_000)} status={r.choice((200, 200, 200, 201, 204, 304, 404, 500))} "
            f"latency_ms={r.randrange(1, 5000) / 10}\n")


def _csv_line(r: random.Random) -> str:
    return (f"{r.randrange(10**9)},{r.choice(('de', 'fr', 'us', 'jp', 'br', 'in'))},"
            f"sensor-{r.randrange(512):03d},{r.gauss(20, 5):.4f},{r.gauss(1013, 8):.2f},{r.random():.6f},"
            f"{r.choice(('ok', 'ok', 'ok', 'degraded', 'fault'))}\n")


def _json_line(r: random.Random) -> str:
    tags = ",".join(f'"{r.choice(("alpha", "beta", "gamma", "delta", "prod", "test", "edge"))}"'
                    for _ in range(r.randrange(1, 4)))
    return (f'{{"id": "{r.getrandbits(64):016x}", "user": {r.randrange(50_000)}, "score": {r.random():.5f}, '
            f'"active": {r.choice(("true", "false"))}, "tags": [{tags}], "count": {r.randrange(1000)}}}\n')


STYLES: dict[str, tuple[str, Callable[[random.Random], str]]] = {
    "big": ("log", _log_line), "mid": ("csv", _csv_line), "small": ("jsonl", _json_line),
}


def _layout(half: int) -> Iterator[tuple[str, int, int]]:
    """(size class, index, bytes) for one half of the payload."""
    for share, count, label in SHARES:
        for index in range(count):
            yield label, index, int(half * share) // count


def _write(root: Path, name: str, chunks: Iterator[bytes]) -> PayloadFile:
    """Hash while writing, as a fetch would, so the build is handed the expected sha256 of every file."""
    digest = hashlib.sha256()
    size = 0
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        for chunk in chunks:
            digest.update(chunk)
            size += len(chunk)
            fh.write(chunk)
    return PayloadFile(name=name, path=path, sha256=digest.hexdigest(), size=size)


def _random_chunks(size: int) -> Iterator[bytes]:
    while size > 0:
        chunk = os.urandom(min(CHUNK, size))
        size -= len(chunk)
        yield chunk


def _text_chunks(size: int, pool: list[str], rng: random.Random) -> Iterator[bytes]:
    average = sum(len(line) for line in pool[:1000]) // 1000
    while size > 0:
        block = "".join(rng.choices(pool, k=CHUNK // average)).encode("ascii")[:size]
        size -= len(block)
        yield block


def random_file(root: Path, name: str, size: int) -> PayloadFile:
    return _write(root, name, _random_chunks(size))


def generate(root: Path, *, total: int, seed: int = 2024) -> Payload:
    """Write a payload of about `total` bytes under `root` (which must not hold one already)."""
    rng = random.Random(seed)
    half = total // 2
    files: list[PayloadFile] = []
    for label, index, size in _layout(half):
        name = f"data/random/{label}-{index:03d}.bin"
        files.append(random_file(root, name, size))
    pools = {label: [make(rng) for _ in range(POOL_LINES)] for label, (_, make) in STYLES.items()}
    for label, index, size in _layout(half):
        extension = STYLES[label][0]
        name = f"data/text/{label}-{index:03d}.{extension}"
        files.append(_write(root, name, _text_chunks(size, pools[label], rng)))
    return Payload(root=root, files=tuple(files))


def describe(payload: Payload) -> str:
    return f"{len(payload.files)} files, {payload.size / MB:.0f} MiB under {payload.root}"


def stage(payload: Payload, cache: Cache, *, prefix: str = "bench-1.0-linux_x86_64/payload") -> list[Member]:
    """Put the payload into a real content-addressed cache, as `ort-bundler fetch` leaves it, and name its members.

    The files are hard-linked rather than copied: a build reads its inputs from the cache, and the baseline
    reads the same inodes from the payload tree, so both read the same (warm) pages.
    """
    members = []
    for item in payload.files:
        with cache.temporary() as tmp:
            tmp.unlink()
            os.link(item.path, tmp)
            cached = cache.adopt(tmp, sha256=item.sha256, filename=Path(item.name).name)
        members.append(Member(name=f"{prefix}/{item.name}", source=cached, sha256=item.sha256))
    return members


@contextmanager
def workspace(parent: Path | None, *, keep: bool = False) -> Iterator[Path]:
    """A fresh directory for one benchmark run, removed afterwards unless `keep`."""
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="ort-bundler-bench-", dir=parent))
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def machine() -> str:
    """What the figures depend on: other load on the same cores distorts every ratio."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPUs, load average {load}"


@dataclass(frozen=True, kw_only=True)
class Ran:
    """One command run to its end, with what the kernel counted for it and the descendants it waited for.

    `peak_rss` is the largest resident set of any one process of that tree (wait4's ru_maxrss), not their sum;
    the command is started by bench/_launcher.py, whose own 10 MiB or so is the floor of that figure.
    `written` is the bytes those processes dirtied in files on storage (ru_oublock, the kernel's write_bytes
    of /proc/<pid>/io, charged when a page is dirtied): files deleted before they reach the disk count, hard
    links and renames do not, and a tmpfs counts nothing.
    """

    command: tuple[str, ...]
    seconds: float
    peak_rss: int
    written: int
    returncode: int
    stdout: str
    stderr: str


@functools.cache
def _launcher() -> subprocess.Popen[str]:
    """The one small process that starts every measured command (see bench/_launcher.py); it ends with ours."""
    return subprocess.Popen([sys.executable, "-I", "-S", str(Path(__file__).with_name("_launcher.py"))],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def run_measured(command: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> Ran:
    """Run `command` in a new process, reaped with os.wait4, which alone hands back its resource usage
    (subprocess.run reaps with waitpid and loses it). Its output goes to files, so no pipe can fill; the seconds
    are from its start to its end."""
    launcher = _launcher()
    assert launcher.stdin is not None and launcher.stdout is not None
    with tempfile.TemporaryDirectory(prefix="ort-bundler-bench-run-") as tmp:
        out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
        request = {"command": list(command), "cwd": None if cwd is None else str(cwd),
                   "env": dict(os.environ if env is None else env), "stdout": str(out), "stderr": str(err)}
        launcher.stdin.write(json.dumps(request) + "\n")
        launcher.stdin.flush()
        reply = json.loads(launcher.stdout.readline() or '{"error": "bench/_launcher.py ended"}')
        if "error" in reply:
            raise SystemExit(f"{' '.join(command)} could not run: {reply['error']}")
        return Ran(command=tuple(command), seconds=reply["seconds"], peak_rss=reply["maxrss_kib"] * 1024,
                   written=reply["oublock"] * 512, returncode=reply["returncode"],
                   stdout=out.read_text(errors="replace"), stderr=err.read_text(errors="replace"))


def checked(ran: Ran) -> Ran:
    """`ran`, or SystemExit naming the command and its output when it failed: a benchmark of a failed run is
    worthless."""
    if ran.returncode != 0:
        msg = f"{' '.join(ran.command)} exited with {ran.returncode}:\n{ran.stdout}{ran.stderr}"
        raise SystemExit(msg)
    return ran
