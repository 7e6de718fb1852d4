"""Byte progress while fetching (issue 37), and pip's wheels fetched in one run each read once.

Progress goes to stderr only: a tqdm bar when stderr is a terminal (a real pseudo-terminal here), plain lines
when it is not (a CI log, captured by pytest), nothing with `-q` or `--json`. The wheels are real ones from
pip's own configuration, named by the committed quickstart lock; the downloads come from a real HTTP server.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from fixtures.cli import REPO
from fixtures.http_server import LocalHTTPServer, serve

from bundler.errors import HashMismatchError
from bundler.manifest import Input
from bundler.runner import run
from bundler.sources.cache import Cache
from bundler.sources.download import RetryPolicy
from bundler.sources.fetch import FetchOptions, fetch_inputs
from bundler.sources.lock import Target, read_lock
from bundler.sources.progress import ByteProgress

LINUX = Target(platform="linux_x86_64", python="3.11")
FAST = RetryPolicy(attempts=2, backoff=0.01, max_backoff=0.05, timeout=5.0)
SMALL_WHEELS = ("coloredlogs", "flatbuffers", "humanfriendly")


@pytest.fixture
def server() -> Iterator[LocalHTTPServer]:
    with LocalHTTPServer() as running:
        yield running


def url_input(url: str, data: bytes) -> Input:
    return Input(key="models[0]", kind="url", location=url, sha256=(hashlib.sha256(data).hexdigest(),),
                 filename=url.rsplit("/", 1)[1])


def wheel_inputs(names: Sequence[str] = SMALL_WHEELS) -> list[Input]:
    """Locked wheels of the quickstart, as `fetch` makes inputs of them (bundler/sources/inputs.py)."""
    lock = read_lock(REPO / "manifests" / "quickstart-linux.lock.toml")
    return [Input(key=f"lock:{w.name}", kind="requirement", location=f"{w.name}=={w.version}", sha256=(w.sha256,),
                  filename=w.filename) for w in lock.wheels if w.name in names]


class Recording:
    """The real runner, with each command kept: how many pip runs a fetch takes."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def __call__(self, cmd: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str:
        self.commands.append([str(part) for part in cmd])
        return run(cmd, cwd=cwd, env=env)

    def pip_downloads(self) -> list[list[str]]:
        return [cmd for cmd in self.commands if cmd[1:4] == ["-m", "pip", "download"]]


# -- the renderer ------------------------------------------------------------------------------------------


def test_a_log_gets_whole_lines_with_bytes_never_carriage_returns() -> None:
    stream = io.StringIO()  # not a terminal, as a CI log is not
    with ByteProgress("fetch", files=2, stream=stream, interval=0) as progress:
        progress.add(3 * 1024 * 1024)
        progress.file_done()
        progress.add(1024 * 1024)
        progress.file_done()
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert lines[0].startswith("fetch: 3.0 MiB, 0/2 files, ")
    assert lines[-1].startswith("fetch: 4.0 MiB, 2/2 files, in ")
    assert len(lines) == 3


def test_a_log_is_not_flooded_between_intervals() -> None:
    stream = io.StringIO()
    with ByteProgress("zip", total=10_000 * 1024, stream=stream, interval=3600) as progress:
        for _ in range(10_000):
            progress.add(1024)
    assert stream.getvalue().splitlines() == [stream.getvalue().strip()]  # the final line alone
    assert stream.getvalue().startswith("zip: 9.8 MiB of 9.8 MiB, in ")


def test_quiet_writes_nothing_at_all() -> None:
    stream = io.StringIO()
    with ByteProgress("fetch", files=1, stream=stream, quiet=True, interval=0) as progress:
        progress.add(5000)
        progress.file_done()
    assert stream.getvalue() == ""


# -- fetch ---------------------------------------------------------------------------------------------------


def test_a_download_shows_its_bytes_on_stderr(server: LocalHTTPServer, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    data = os.urandom(300 * 1024)
    url = server.route("/shown.onnx", serve(data))
    fetch_inputs([url_input(url, data)], cache=Cache(tmp_path / "cache"), target=LINUX,
                 options=FetchOptions(quiet=False, retry=FAST))
    out, err = capsys.readouterr()
    assert out == ""
    assert "\r" not in err
    assert err.splitlines()[-1].startswith("fetch: 300.0 KiB, 1/1 files, in ")


@pytest.mark.integration
def test_pip_wheels_show_their_bytes_and_come_in_one_pip_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wheels = wheel_inputs()
    runner = Recording()
    files = fetch_inputs(wheels, cache=Cache(tmp_path / "cache"), target=LINUX, options=FetchOptions(quiet=False),
                         runner=runner)
    assert len(runner.pip_downloads()) == 1
    assert "--require-hashes" in runner.pip_downloads()[0]
    for item in wheels:
        assert files[item.key].name == item.filename
        assert hashlib.sha256(files[item.key].read_bytes()).hexdigest() == item.sha256[0]
    size = sum(path.stat().st_size for path in files.values())
    out, err = capsys.readouterr()
    assert out == ""
    last = err.splitlines()[-1]
    assert last.startswith(f"fetch: {size / 1024:.1f} KiB, 3/3 files, in "), err


@pytest.mark.integration
def test_a_wrong_hash_in_the_batch_fails_by_name_and_the_others_land(tmp_path: Path) -> None:
    good, other, wrong = wheel_inputs()
    forged = Input(key=wrong.key, kind="requirement", location=wrong.location, sha256=("0" * 64,),
                   filename=wrong.filename)
    cache = Cache(tmp_path / "cache")
    with pytest.raises(HashMismatchError, match=f"{wrong.key}: hash mismatch") as caught:
        fetch_inputs([good, other, forged], cache=cache, target=LINUX, options=FetchOptions(quiet=True))
    assert good.key not in str(caught.value)
    landed = sorted(path.name for path in (cache.root / "sha256").rglob("*.whl"))
    assert landed == sorted([good.filename, other.filename])
    assert not list((cache.root / "tmp").glob("pip-*"))


@pytest.mark.integration
def test_quiet_pip_fetch_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fetch_inputs(wheel_inputs(("flatbuffers",)), cache=Cache(tmp_path / "cache"), target=LINUX,
                 options=FetchOptions(quiet=True))
    assert capsys.readouterr() == ("", "")


# -- the command -------------------------------------------------------------------------------------------


def write_manifest(folder: Path, url: str, data: bytes) -> Path:
    """A manifest whose one input is the ORT archive at `url` (the server never unpacks it: fetch only)."""
    digest = hashlib.sha256(data).hexdigest()
    path = folder / "app.toml"
    path.write_text("\n".join(["[bundle]", 'name = "progress"', 'version = "1.0.0"', 'platform = "linux_x86_64"',
                               'python = "3.11"', "", "[ort]", 'version = "1.23.1"',
                               f'archive = {{ url = "{url}", sha256 = "{digest}" }}']) + "\n", encoding="utf-8")
    return path


def cli(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "bundler", *map(str, args)]


def cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def test_fetch_on_a_terminal_draws_a_byte_bar_on_stderr(server: LocalHTTPServer, tmp_path: Path) -> None:
    data = os.urandom(2 * 1024 * 1024)
    manifest = write_manifest(tmp_path, server.route("/onnxruntime-linux-x64-1.23.1.tgz", serve(data)), data)
    controller, terminal = pty.openpty()  # a real pseudo-terminal as stderr, as a person's shell gives
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a window 100 columns wide
    try:
        done = subprocess.run(cli("fetch", "--cache", tmp_path / "cache", manifest), stderr=terminal,
                              stdout=subprocess.PIPE, text=True, env=cli_env(), timeout=120, check=False)
        os.close(terminal)
        drawn = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal's other side is closed: all is read
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(controller)
    assert done.returncode == 0, drawn
    assert "fetch:" not in done.stdout  # the bar is stderr's alone
    text = drawn.decode("utf-8", "replace")
    assert "fetch:" in text
    assert "2.00M" in text  # tqdm's own rendering of the 2 MiB moved (unit_divisor 1024)
    assert "1/1 files" in text


def test_fetch_json_keeps_stdout_json_and_stderr_free_of_progress(server: LocalHTTPServer, tmp_path: Path) -> None:
    data = os.urandom(256 * 1024)
    manifest = write_manifest(tmp_path, server.route("/onnxruntime-linux-x64-1.23.1.tgz", serve(data)), data)
    done = subprocess.run(cli("fetch", "--json", "--cache", tmp_path / "cache", manifest), capture_output=True,
                          text=True, env=cli_env(), timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)) == 1
    assert "fetch:" not in done.stderr
    assert "KiB" not in done.stderr
