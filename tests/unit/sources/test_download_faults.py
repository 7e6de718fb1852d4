"""Misbehaving servers and disks during `fetch` (issue 18, items 7 and 11), over real sockets on 127.0.0.1.

A download is bounded by the size the manifest declares, else by the server's Content-Length checked
against the documented default (DEFAULT_MAX_DOWNLOAD), and the body is cut off at that bound whatever
the headers said. A file that cannot fit leaves no `.part` behind, so the next run is not doomed to fail
the same way; a full or read-only cache is named in one line. Disks are real: small tmpfs mounts.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.hostile import Tmpfs, needs_mount, one_line, run, snapshot
from fixtures.http_server import Behaviour, Handler, LocalHTTPServer, declares, endless, serve

from bundler.sources.cache import Cache
from bundler.sources.download import DEFAULT_MAX_DOWNLOAD, FREE_SPACE_MARGIN


@pytest.fixture
def server() -> Iterator[LocalHTTPServer]:
    with LocalHTTPServer() as running:
        yield running


def payload(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def manifest(folder: Path, url: str, digest: str, *, size: int | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    declared = f", size = {size}" if size is not None else ""
    path = folder / "app.toml"
    path.write_text(f"""
[bundle]
name = "dltest"
version = "1.0.0"
platform = "linux_x86_64"
python = "3.11"

[ort]
version = "1.23.1"
archive = {{ url = "{url}", sha256 = "{digest}"{declared} }}
""", encoding="utf-8")
    return path


def cache_files(cache: Path) -> dict[str, list[str]]:
    """What the cache holds under its final names and as partial downloads."""
    return {name: sorted(p.name for p in (cache / name).rglob("*") if p.is_file()) if (cache / name).exists() else []
            for name in ("sha256", "partial")}


def test_a_server_that_never_stops_is_cut_off_at_the_declared_size(server: LocalHTTPServer, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    url = server.route("/onnxruntime-linux-x64-1.23.1.tgz", endless())
    path = manifest(tmp_path / "project", url, "b" * 64, size=2_000_000)
    code, err = run(capsys, "fetch", "-q", "--cache", str(tmp_path / "cache"), str(path))
    assert code == 4, err
    line = one_line(err, "fetch")
    assert f"ort.archive: {url} sent more than 2000000 bytes without ending" in line
    assert cache_files(tmp_path / "cache") == {"sha256": [], "partial": []}  # no partial that can never complete
    assert len(server.seen()) == 1  # a file that is too big is not retried


@pytest.mark.parametrize(("length", "size"), [(50_000_000, 1_000_000), (DEFAULT_MAX_DOWNLOAD + 1, None)])
def test_a_content_length_beyond_the_bound_is_refused_before_a_byte(server: LocalHTTPServer, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     length: int, size: int | None) -> None:
    url = server.route("/big.zip", declares(length, b"\0" * 1000))
    path = manifest(tmp_path / "project", url, "c" * 64, size=size)
    before = snapshot(tmp_path / "project")
    code, err = run(capsys, "fetch", "-q", "--cache", str(tmp_path / "cache"), str(path))
    assert code == 4, err
    bound = size or DEFAULT_MAX_DOWNLOAD
    assert (f"ort.archive: {url} is {length} bytes, above the bound of {bound} bytes; if that size is right, "
            f"declare it with `size = {length}` in the manifest entry") in one_line(err, "fetch")
    assert cache_files(tmp_path / "cache") == {"sha256": [], "partial": []}
    assert snapshot(tmp_path / "project") == before


def test_declaring_the_size_raises_the_bound(server: LocalHTTPServer, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    data = payload(300_000, 7)
    url = server.route("/onnxruntime-win-x64-1.23.1.zip", serve(data))
    path = manifest(tmp_path / "project", url, hashlib.sha256(data).hexdigest(), size=len(data))
    code, err = run(capsys, "fetch", "-q", "--cache", str(tmp_path / "cache"), str(path))
    assert code == 0, err
    assert cache_files(tmp_path / "cache") == {"sha256": ["onnxruntime-win-x64-1.23.1.zip"], "partial": []}


def test_a_partial_larger_than_the_bound_is_dropped_and_the_file_fetched(server: LocalHTTPServer, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A `.part` that a run with a larger bound (or an endless server) left can never complete: start over."""
    data = payload(200_000, 8)
    digest = hashlib.sha256(data).hexdigest()
    url = server.route("/m.zip", serve(data))
    partial = Cache(tmp_path / "cache").partial(digest)
    partial.write_bytes(b"\xab" * 300_000)
    path = manifest(tmp_path / "project", url, digest, size=len(data))
    code, err = run(capsys, "fetch", "-q", "--cache", str(tmp_path / "cache"), str(path))
    assert code == 0, err
    assert [r.range for r in server.seen()] == [None]  # not resumed from the oversized partial
    assert cache_files(tmp_path / "cache") == {"sha256": ["m.zip"], "partial": []}


@needs_mount
def test_a_download_larger_than_the_free_space_is_refused_up_front(server: LocalHTTPServer, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    disk = Tmpfs(tmp_path / "small", "4m")
    try:
        data = payload(8 * 1024**2, 9)
        url = server.route("/m.zip", serve(data))
        path = manifest(tmp_path / "project", url, hashlib.sha256(data).hexdigest())
        code, err = run(capsys, "fetch", "-q", "--cache", str(disk.path / "cache"), str(path))
        assert code == 4, err
        line = one_line(err, "fetch")
        assert f"ort.archive: {url} needs {len(data)} bytes but the cache folder {disk.path / 'cache' / 'partial'} has" in line
        assert "free; free some space or pass --cache on a larger disk" in line
        assert cache_files(disk.path / "cache")["sha256"] == []
    finally:
        disk.close()


@needs_mount
def test_an_endless_body_without_a_length_stops_short_of_a_full_disk(server: LocalHTTPServer, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """No Content-Length and no `size` (issue 27, item 7): cut off at the disk's room less the margin, the
    partial removed, and the next run fails the same way rather than on a disk the first one filled."""
    disk = Tmpfs(tmp_path / "small", "48m")
    try:
        url = server.route("/m.zip", endless())
        path = manifest(tmp_path / "project", url, "d" * 64)
        for _ in range(2):
            code, err = run(capsys, "fetch", "-q", "--cache", str(disk.path / "cache"), str(path))
            assert code == 4, err
            line = one_line(err, "fetch")
            assert f"ort.archive: {url} sent " in line and "bytes without ending, all the room the cache folder" in line
            assert "the partial download was removed" in line
            assert cache_files(disk.path / "cache") == {"sha256": [], "partial": []}
            assert shutil.disk_usage(disk.path).free > FREE_SPACE_MARGIN
    finally:
        disk.close()


def fills_the_disk_after(first: int, disk: Path) -> Behaviour:
    """An endless body whose disk another writer fills once `first` bytes are out and the download has written some
    of them: the download meets ENOSPC. (Filling it sooner raced the download's room check, which runs before its
    first write and rightly refuses a disk that is already full, with another message.)"""

    def behaviour(handler: Handler, index: int) -> None:
        handler.send_response(200)
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True
        try:
            handler.write_body(b"\xab" * first)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(
                    p.is_file() and p.stat().st_size for p in (disk / "cache").rglob("*") if "partial" in p.parts):
                time.sleep(0.01)
            with contextlib.suppress(OSError), (disk / "someone-else.bin").open("wb", buffering=0) as other:
                while True:
                    other.write(b"\0" * 65536)
            while not handler.server.owner.release.is_set():
                handler.write_body(b"\xab" * 65536)
        except OSError:
            return

    return behaviour


@needs_mount
def test_a_disk_another_writer_fills_mid_download_is_exit_4_and_the_partial_goes(
        server: LocalHTTPServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    disk = Tmpfs(tmp_path / "small", "32m")
    try:
        url = server.route("/m.zip", fills_the_disk_after(256 * 1024, disk.path))
        path = manifest(tmp_path / "project", url, "d" * 64)
        code, err = run(capsys, "fetch", "-q", "--cache", str(disk.path / "cache"), str(path))
        assert code == 4, err
        line = one_line(err, "fetch")
        assert "No space left on device" in line and "the partial download was removed" in line
        assert cache_files(disk.path / "cache") == {"sha256": [], "partial": []}
    finally:
        disk.close()


def test_a_declared_size_beyond_the_free_space_is_refused_before_a_request(
        server: LocalHTTPServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = server.route("/huge.zip", serve(b"small"))
    size = 10 * 1024**4  # 10 TiB: no disk of this machine has the room
    path = manifest(tmp_path / "project", url, "e" * 64, size=size)
    code, err = run(capsys, "fetch", "-q", "--cache", str(tmp_path / "cache"), str(path))
    assert code == 4, err
    assert f"ort.archive: {url} needs {size} bytes but the cache folder" in one_line(err, "fetch")
    assert server.seen() == []
    assert cache_files(tmp_path / "cache") == {"sha256": [], "partial": []}


@needs_mount
def test_a_full_cache_disk_before_pip_runs_is_exit_4_not_an_internal_error(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A requirement's scratch (its requirements file) on a disk that is already full."""
    disk = Tmpfs(tmp_path / "small", "2m")
    try:
        cache = disk.path / "cache"
        Cache(cache).work_dir("tmp")
        Cache(cache).work_dir("locks")
        with contextlib.suppress(OSError), (disk.path / "filler.bin").open("wb", buffering=0) as filler:
            while True:
                filler.write(b"\0" * 4096)
        path = manifest(tmp_path / "project", "https://127.0.0.1:9/unused.tgz", "f" * 64)
        text = path.read_text(encoding="utf-8").replace(
            'archive = { url = "https://127.0.0.1:9/unused.tgz"', 'capi = { requirement = "onnxruntime==1.23.1"')
        path.write_text(text, encoding="utf-8")
        code, err = run(capsys, "fetch", "-q", "--cache", str(cache), str(path))
        assert code == 4, err
        assert "No space left on device" in one_line(err, "fetch")
    finally:
        disk.close()


@needs_mount
def test_a_read_only_cache_is_named_by_fetch(server: LocalHTTPServer, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    cached, missing = payload(50_000, 10), payload(50_000, 11)
    disk = Tmpfs(tmp_path / "ro", "64m")
    try:
        cache = disk.path / "cache"
        have = manifest(tmp_path / "have", server.route("/a.zip", serve(cached)), hashlib.sha256(cached).hexdigest())
        assert run(capsys, "fetch", "-q", "--cache", str(cache), str(have))[0] == 0
        disk.read_only()
        before = snapshot(cache)
        assert run(capsys, "fetch", "-q", "--cache", str(cache), str(have))[0] == 0  # all cached: reading is enough
        need = manifest(tmp_path / "need", server.route("/b.zip", serve(missing)), hashlib.sha256(missing).hexdigest())
        code, err = run(capsys, "fetch", "-q", "--cache", str(cache), str(need))
        assert code == 4, err
        line = one_line(err, "fetch")
        assert f"the cache folder {cache}" in line and "cannot be written (Read-only file system)" in line
        assert "pass --cache DIR" in line
        assert snapshot(cache) == before
    finally:
        disk.close()
