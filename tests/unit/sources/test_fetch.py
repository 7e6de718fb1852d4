"""`fetch` against a real HTTP server on 127.0.0.1: resume, retries, mismatches, parallelism, shared caches.

Nothing here patches `requests` or urllib3: the server in `http_server.py` really drops connections,
ignores Range, stalls and answers 404/503, and processes really get SIGKILLed, so the assertions are
about the bytes that end up (or must never end up) under the cache's final names.
"""

from __future__ import annotations

import hashlib
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.cli import REPO
from fixtures.http_server import (
    BarrierLog,
    LocalHTTPServer,
    after_barrier,
    cut_after,
    ignore_range,
    in_turn,
    serve,
    slowly,
    stall_after,
    status,
)

from bundler.errors import HashMismatchError, InputUnavailableError
from bundler.hashing import EMPTY_SHA256
from bundler.manifest import Input
from bundler.sources.cache import CACHE_ENV, Cache, default_cache_dir
from bundler.sources.download import RetryPolicy
from bundler.sources.fetch import FetchOptions, cached_inputs, fetch_inputs
from bundler.sources.lock import Target

TARGET = Target(platform="linux_x86_64", python="3.11")
FAST = RetryPolicy(attempts=4, backoff=0.01, max_backoff=0.05, timeout=5.0)


def payload(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def url_input(url: str, expected: str, *, key: str = "models[0]") -> Input:
    return Input(key=key, kind="url", location=url, sha256=(expected,), filename=url.rsplit("/", 1)[1])


def fetch(inputs: list[Input], cache: Cache, **options: object) -> dict[str, Path]:
    settings = {"quiet": True, "retry": FAST, **options}
    return fetch_inputs(inputs, cache=cache, target=TARGET, options=FetchOptions(**settings))


def final_files(cache: Cache) -> list[Path]:
    """Everything under the cache's final names (sha256/…), where only verified files may ever be."""
    root = cache.root / "sha256"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def leftovers(cache: Cache) -> list[Path]:
    """Partial downloads and temporary files still in the cache."""
    return sorted(p for name in ("partial", "tmp") if (cache.root / name).exists()
                  for p in (cache.root / name).iterdir())


@pytest.fixture
def server() -> Iterator[LocalHTTPServer]:
    with LocalHTTPServer() as running:
        yield running


@pytest.fixture
def cache(tmp_path: Path) -> Cache:
    return Cache(tmp_path / "cache")


# -- one file -------------------------------------------------------------------------------------------


def test_download_lands_under_its_hash_with_one_request(server: LocalHTTPServer, cache: Cache) -> None:
    data = payload(300_000, 1)
    url = server.route("/model.onnx", serve(data))
    files = fetch([url_input(url, sha256(data))], cache)
    path = files["models[0]"]
    assert path == cache.root / "sha256" / sha256(data)[:2] / sha256(data) / "model.onnx"
    assert path.read_bytes() == data
    assert [r.range for r in server.seen()] == [None]
    assert leftovers(cache) == []
    # A second fetch is answered from the cache.
    assert fetch([url_input(url, sha256(data))], cache) == files
    assert len(server.seen()) == 1


def test_dropped_connection_resumes_with_range(server: LocalHTTPServer, cache: Cache) -> None:
    data = payload(300_000, 2)
    url = server.route("/ort.zip", in_turn(cut_after(data, 100_000), serve(data)))
    files = fetch([url_input(url, sha256(data), key="ort.archive")], cache)
    assert [r.range for r in server.seen()] == [None, "bytes=100000-"]
    assert hashlib.sha256(files["ort.archive"].read_bytes()).hexdigest() == sha256(data)
    assert leftovers(cache) == []


def test_server_ignoring_range_restarts_the_file(server: LocalHTTPServer, cache: Cache) -> None:
    data = payload(300_000, 3)
    url = server.route("/ort.zip", in_turn(cut_after(data, 120_000), ignore_range(data)))
    files = fetch([url_input(url, sha256(data))], cache)
    assert [r.range for r in server.seen()] == [None, "bytes=120000-"]
    assert files["models[0]"].read_bytes() == data  # not the first 120 000 bytes twice
    assert leftovers(cache) == []


def test_wrong_bytes_raise_a_mismatch_and_leave_nothing(server: LocalHTTPServer, cache: Cache) -> None:
    expected, wrong = payload(50_000, 4), payload(50_000, 5)
    url = server.route("/model.onnx", serve(wrong))
    with pytest.raises(HashMismatchError) as caught:
        fetch([url_input(url, sha256(expected), key="models[3]")], cache)
    message = str(caught.value)
    for part in ("models[3]", url, sha256(expected), sha256(wrong)):
        assert part in message
    assert "empty file" not in message
    assert final_files(cache) == []
    assert leftovers(cache) == []


def test_empty_body_is_called_out(server: LocalHTTPServer, cache: Cache) -> None:
    url = server.route("/model.onnx", serve(b""))
    with pytest.raises(HashMismatchError) as caught:
        fetch([url_input(url, sha256(b"the real model"))], cache)
    assert EMPTY_SHA256 in str(caught.value)
    assert "this is the hash of an empty file" in str(caught.value)
    assert final_files(cache) == []


def test_404_is_final_after_one_request(server: LocalHTTPServer, cache: Cache) -> None:
    url = server.route("/gone.onnx", status(404))
    with pytest.raises(InputUnavailableError) as caught:
        fetch([url_input(url, sha256(b"x"), key="models[1]")], cache)
    assert "models[1]" in str(caught.value)
    assert "HTTP 404" in str(caught.value)
    assert url in str(caught.value)
    assert len(server.seen()) == 1
    assert final_files(cache) == []


def test_503_twice_then_200_succeeds_after_retries(server: LocalHTTPServer, cache: Cache) -> None:
    data = payload(10_000, 6)
    url = server.route("/busy.onnx", in_turn(status(503), status(503), serve(data)))
    files = fetch([url_input(url, sha256(data))], cache)
    assert files["models[0]"].read_bytes() == data
    assert len(server.seen()) == 3


def test_persistent_503_gives_up_after_the_policy_attempts(server: LocalHTTPServer, cache: Cache) -> None:
    url = server.route("/down.onnx", status(503))
    with pytest.raises(InputUnavailableError) as caught:
        fetch([url_input(url, sha256(b"x"))], cache)
    assert "failed after 4 attempts" in str(caught.value)
    assert "HTTP 503" in str(caught.value)
    assert len(server.seen()) == FAST.attempts


def test_progress_shows_bytes_and_files(server: LocalHTTPServer, cache: Cache,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """More in tests/test_fetch_progress.py (a terminal, a log, -q, --json, pip's wheels)."""
    data = payload(200_000, 7)
    url = server.route("/shown.onnx", serve(data))
    fetch([url_input(url, sha256(data))], cache, quiet=False)
    err = capsys.readouterr().err
    assert "fetch: 195.3 KiB, 1/1 files" in err


# -- several files, several processes ------------------------------------------------------------------


def test_inputs_download_in_parallel(server: LocalHTTPServer, cache: Cache) -> None:
    count = 3
    barrier, log = threading.Barrier(count, timeout=5), BarrierLog()
    inputs = []
    for i in range(count):
        data = payload(80_000, 10 + i)
        url = server.route(f"/m{i}.onnx", after_barrier(barrier, log, serve(data)))
        inputs.append(url_input(url, sha256(data), key=f"models[{i}]"))
    files = fetch(inputs, cache, jobs=4)
    server.wait_idle()
    assert log.broken == []  # all three requests were in flight at once
    seen = server.seen()
    assert len(seen) == count
    assert max(r.started for r in seen) < min(r.finished for r in seen)
    assert sorted(files) == [f"models[{i}]" for i in range(count)]


def write_manifest(folder: Path, *, archive: tuple[str, str], models: list[tuple[str, str]] = ()) -> Path:
    """A minimal manifest: the ORT archive alone plus models, all plain URL inputs."""
    lines = ["[bundle]", 'name = "fetchtest"', 'version = "1.0.0"', 'platform = "linux_x86_64"', 'python = "3.11"',
             "", "[ort]", 'version = "1.23.1"', f'archive = {{ url = "{archive[0]}", sha256 = "{archive[1]}" }}']
    for i, (url, digest) in enumerate(models):
        lines += ["", "[[models]]", f'name = "model{i}"', f'url = "{url}"', f'sha256 = "{digest}"']
    path = folder / "app.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def cli(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "bundler", *map(str, args)]


def test_cli_fetch_returns_0(server: LocalHTTPServer, tmp_path: Path) -> None:
    archive, model = payload(150_000, 20), payload(40_000, 21)
    manifest = write_manifest(tmp_path, archive=(server.route("/ort-1.23.1.zip", serve(archive)), sha256(archive)),
                              models=[(server.route("/model.onnx", serve(model)), sha256(model))])
    result = subprocess.run(cli("fetch", manifest, "--cache", tmp_path / "cache", "-q"), cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    cache = Cache(tmp_path / "cache")
    stored = {p.name: p.read_bytes() for p in final_files(cache)}
    assert stored == {"ort-1.23.1.zip": archive, "model.onnx": model}


def test_cli_mismatch_exits_5_with_the_message(server: LocalHTTPServer, tmp_path: Path) -> None:
    expected, wrong = payload(30_000, 22), payload(30_000, 23)
    url = server.route("/ort-1.23.1.zip", serve(wrong))
    manifest = write_manifest(tmp_path, archive=(url, sha256(expected)))
    result = subprocess.run(cli("fetch", manifest, "--cache", tmp_path / "cache", "-q"), cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 5
    assert "Traceback" not in result.stderr
    assert "ort.archive" in result.stderr
    assert url in result.stderr
    assert sha256(expected) in result.stderr and sha256(wrong) in result.stderr
    assert final_files(Cache(tmp_path / "cache")) == []


def test_two_processes_share_one_cache(server: LocalHTTPServer, tmp_path: Path) -> None:
    data = payload(400_000, 30)
    url = server.route("/shared.zip", slowly(data, pieces=8, delay=0.1))
    manifest = write_manifest(tmp_path, archive=(url, sha256(data)))
    command = cli("fetch", manifest, "--cache", tmp_path / "cache", "-q")
    procs = [subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outcomes = [(p.wait(timeout=60), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert [code for code, _ in outcomes] == [0, 0], outcomes
    cache = Cache(tmp_path / "cache")
    files = final_files(cache)
    assert len(files) == 1
    assert files[0].read_bytes() == data
    assert 1 <= len(server.seen()) <= 2
    assert leftovers(cache) == []


def test_sigkill_mid_body_leaves_no_final_file_and_the_next_fetch_resumes(server: LocalHTTPServer,
                                                                         tmp_path: Path) -> None:
    data = payload(600_000, 40)
    url = server.route("/big.zip", in_turn(stall_after(data, 250_000), serve(data)))
    manifest = write_manifest(tmp_path, archive=(url, sha256(data)))
    cache = Cache(tmp_path / "cache")
    partial = cache.root / "partial" / f"{sha256(data)}.part"
    proc = subprocess.Popen(cli("fetch", manifest, "--cache", cache.root, "-q"), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_partial(partial, stable=True)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    kept = partial.stat().st_size
    assert 0 < kept <= 250_000
    assert final_files(cache) == []
    server.release.set()  # let the stalled response end; the killed client is gone anyway
    files = fetch([url_input(url, sha256(data), key="ort.archive")], cache)
    assert files["ort.archive"].read_bytes() == data
    assert [r.range for r in server.seen()] == [None, f"bytes={kept}-"]
    assert leftovers(cache) == []


def _wait_for_partial(path: Path, *, stable: bool, timeout: float = 20) -> None:
    """Until `path` has bytes (and, if `stable`, stopped growing: the client wrote all it got before a stall)."""
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        size = path.stat().st_size if path.exists() else 0
        if size and (size == last or not stable):
            return
        last = size
        time.sleep(0.2 if stable else 0.02)
    msg = f"{path} never held a {'stable, ' if stable else ''}non-empty partial download within {timeout} s"
    raise AssertionError(msg)


#: Starts the rest of its argv as a terminal's foreground process gets ctrl-c: SIGINT neither ignored nor blocked.
#: A child inherits both from whoever starts it (a shell's `&` or nohup ignores SIGINT, and Python then keeps it
#: ignored, rightly), so the test cannot take them from its worker: in a full run, one worker's child once let
#: SIGINT pass unanswered until its download ended.
AS_FROM_A_TERMINAL = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                      "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); os.execv(sys.executable, sys.argv[1:])")


@pytest.mark.parametrize("body", ["stalled", "flowing"])
def test_ctrl_c_stops_at_once_and_keeps_the_partial(server: LocalHTTPServer, tmp_path: Path, body: str) -> None:
    data = payload(2_000_000, 70)
    served = stall_after(data, 250_000) if body == "stalled" else slowly(data, pieces=100, delay=0.05)
    url = server.route("/big.zip", served)
    manifest = write_manifest(tmp_path, archive=(url, sha256(data)))
    cache = Cache(tmp_path / "cache")
    partial = cache.root / "partial" / f"{sha256(data)}.part"
    command = [sys.executable, "-c", AS_FROM_A_TERMINAL, *cli("fetch", manifest, "--cache", cache.root, "-q")]
    with subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        try:
            _wait_for_partial(partial, stable=body == "stalled")
            proc.send_signal(signal.SIGINT)
            interrupted = time.monotonic()
            _, stderr = proc.communicate(timeout=15)
        finally:
            proc.kill()
    assert time.monotonic() - interrupted < 3  # not after the read timeout, nor after the download finished
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert final_files(cache) == []
    assert 0 < partial.stat().st_size < len(data)


# -- offline and mirror: never the network --------------------------------------------------------------


def test_offline_with_an_empty_cache_names_every_missing_input(server: LocalHTTPServer, cache: Cache) -> None:
    inputs = [url_input(server.url("/a.onnx"), sha256(b"a"), key="models[0]"),
              url_input(server.url("/b.zip"), sha256(b"b"), key="ort.archive")]
    with pytest.raises(InputUnavailableError) as caught:
        fetch(inputs, cache, offline=True)
    for item in inputs:
        assert item.display in str(caught.value)
    assert "--offline" in str(caught.value)
    assert server.seen() == []
    with pytest.raises(InputUnavailableError) as listed:
        cached_inputs(inputs, cache)
    assert "models[0]" in str(listed.value) and "ort.archive" in str(listed.value)


def test_offline_uses_what_is_cached(server: LocalHTTPServer, cache: Cache) -> None:
    data = payload(5_000, 50)
    item = url_input(server.route("/a.onnx", serve(data)), sha256(data))
    online = fetch([item], cache)
    assert fetch([item], cache, offline=True) == online == cached_inputs([item], cache)
    assert len(server.seen()) == 1


@pytest.mark.parametrize("stored_as", ["name", "sha256", "other"])
def test_mirror_finds_by_name_hash_name_or_content(server: LocalHTTPServer, cache: Cache, tmp_path: Path,
                                                  stored_as: str) -> None:
    data = payload(20_000, 60)
    mirror = tmp_path / "mirror"
    (mirror / "sub").mkdir(parents=True)
    name = {"name": "model.onnx", "sha256": sha256(data), "other": "sub/renamed.bin"}[stored_as]
    (mirror / name).write_bytes(data)
    (mirror / "unrelated.bin").write_bytes(b"noise")
    item = url_input(server.url("/model.onnx"), sha256(data))
    files = fetch([item], cache, mirror=mirror)
    assert files["models[0]"].read_bytes() == data
    assert files["models[0]"].parent.name == sha256(data)
    assert server.seen() == []


def test_mirror_miss_is_an_error_without_network(server: LocalHTTPServer, cache: Cache, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "unrelated.bin").write_bytes(b"noise")
    url = server.route("/model.onnx", serve(b"would have worked"))
    with pytest.raises(InputUnavailableError) as caught:
        fetch([url_input(url, sha256(b"would have worked"))], cache, mirror=mirror)
    assert "models[0]" in str(caught.value)
    assert str(mirror) in str(caught.value)
    assert server.seen() == []
    assert final_files(cache) == []


def test_mirror_file_with_the_right_name_but_wrong_bytes_is_a_mismatch(cache: Cache, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "model.onnx").write_bytes(b"tampered")
    with pytest.raises(HashMismatchError) as caught:
        fetch([url_input("http://127.0.0.1:9/model.onnx", sha256(b"original"))], cache, mirror=mirror)
    assert sha256(b"tampered") in str(caught.value)
    assert final_files(cache) == []
    assert leftovers(cache) == []


def test_cache_location_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "elsewhere"))
    assert default_cache_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv(CACHE_ENV)
    assert default_cache_dir() != tmp_path / "elsewhere"
    assert "ort-bundler" in default_cache_dir().parts


def test_mirror_skips_a_stale_file_of_the_same_name_for_the_pinned_one(cache: Cache, tmp_path: Path) -> None:
    """VC_redist.x64.exe has that name in every version: the pinned bytes may sit in a subfolder."""
    mirror = tmp_path / "mirror"
    (mirror / "new").mkdir(parents=True)
    (mirror / "VC_redist.x64.exe").write_bytes(b"old version")
    (mirror / "new" / "VC_redist.x64.exe").write_bytes(b"pinned version")
    item = url_input("http://127.0.0.1:9/VC_redist.x64.exe", sha256(b"pinned version"))
    fetched = fetch([item], cache, mirror=mirror)
    assert next(iter(fetched.values())).read_bytes() == b"pinned version"
