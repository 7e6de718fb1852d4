"""Which wheels pip's own hash check is trusted for, and which are hashed again (bundler/sources/pip_batch.py).

pip under `--require-hashes` checks a file it downloads in its temporary folder (pointed into our private scratch
folder) and copies that: such a file is adopted without a second read. A wheel pip takes from a local path (a
`file://` index or `--find-links`, as this machine's pip configuration has) is checked where it lies and copied
from there later, so it is hashed again. Real pip runs throughout: against this machine's configuration, and
against a real HTTP index served on 127.0.0.1 (a PEP 503 page and the wheel pip itself fetched).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from fixtures.http_server import Handler, LocalHTTPServer, serve

from bundler.errors import HashMismatchError
from bundler.manifest import Input
from bundler.runner import run
from bundler.sources.cache import Cache
from bundler.sources.fetch import FetchOptions, fetch_inputs
from bundler.sources.lock import Target
from bundler.sources.pip_batch import downloaded_names

pytestmark = pytest.mark.integration

LINUX = Target(platform="linux_x86_64", python="3.11")
FLATBUFFERS = Input(key="lock:flatbuffers", kind="requirement", location="flatbuffers==25.12.19",
                    sha256=("7634f50c427838bb021c2d66a3d1168e9d199b0607e6329399f04846d42e20b4",),
                    filename="flatbuffers-25.12.19-py2.py3-none-any.whl")


class Logged:
    """The real runner, keeping what each pip run wrote to stdout (its log)."""

    def __init__(self) -> None:
        self.logs: list[str] = []

    def __call__(self, cmd: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str:
        out = run(cmd, cwd=cwd, env=env)
        self.logs.append(out)
        return out


class SwappedAfterPipsCheck(Logged):
    """A stand-in for another user who rewrites a wheel in a local index folder after pip checked its hash and
    before it is read again (the window a local path leaves): here, the file pip saved gets a byte more."""

    def __call__(self, cmd: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str:
        out = super().__call__(cmd, cwd=cwd, env=env)
        dest = Path(cmd[cmd.index("-d") + 1])
        for saved in dest.iterdir():
            with saved.open("ab") as fh:
                fh.write(b"\0")
        return out


def test_a_wheel_pip_took_from_a_local_path_is_hashed_again(tmp_path: Path) -> None:
    runner = SwappedAfterPipsCheck()
    cache = Cache(tmp_path / "cache")
    with pytest.raises(HashMismatchError, match="lock:flatbuffers: hash mismatch"):
        fetch_inputs([FLATBUFFERS], cache=cache, target=LINUX, options=FetchOptions(quiet=True), runner=runner)
    assert downloaded_names("\n".join(runner.logs)) == frozenset()  # this machine's pip reads a local index
    assert not list(cache.root.rglob("sha256/*/*/*.whl"))  # nothing under a final name


def html(body: bytes):  # a PEP 503 page: pip reads only text/html (or JSON) as an index page
    def behaviour(handler: Handler, index: int) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/html")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.write_body(body)

    return behaviour


@pytest.fixture
def http_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalHTTPServer]:
    """pip's configuration replaced by one HTTP index on 127.0.0.1 serving the real flatbuffers wheel."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--require-hashes", "-d", str(wheels),
                    "-r", "/dev/stdin"], input=f"{FLATBUFFERS.location} --hash=sha256:{FLATBUFFERS.sha256[0]}\n",
                   text=True, check=True)
    data = (wheels / str(FLATBUFFERS.filename)).read_bytes()
    with LocalHTTPServer() as server:
        link = f"/files/{FLATBUFFERS.filename}"
        server.route(link, serve(data))
        page = f'<html><body><a href="{link}#sha256={FLATBUFFERS.sha256[0]}">{FLATBUFFERS.filename}</a></body></html>'
        server.route("/simple/flatbuffers/", html(page.encode()))
        for name in [name for name in os.environ if name.startswith("PIP_")]:
            monkeypatch.delenv(name)
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no configuration file: the index below alone
        monkeypatch.setenv("PIP_INDEX_URL", server.url("/simple/"))
        monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
        yield server


def test_a_wheel_pip_downloaded_is_adopted_under_the_hash_pip_checked(http_index: LocalHTTPServer, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    runner = Logged()
    files = fetch_inputs([FLATBUFFERS], cache=Cache(tmp_path / "cache"), target=LINUX,
                         options=FetchOptions(quiet=False), runner=runner)
    assert downloaded_names("\n".join(runner.logs)) == {FLATBUFFERS.filename}  # pip's log: "Downloading …"
    assert [r.path for r in http_index.seen(f"/files/{FLATBUFFERS.filename}")] == [f"/files/{FLATBUFFERS.filename}"]
    landed = files[FLATBUFFERS.key]
    assert landed.name == FLATBUFFERS.filename
    assert hashlib.sha256(landed.read_bytes()).hexdigest() == FLATBUFFERS.sha256[0]
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"fetch: {landed.stat().st_size / 1024:.1f} KiB, 1/1 ")


def test_pip_log_lines_name_the_downloaded_wheels_by_file_or_url() -> None:
    log = "\n".join([
        "Collecting numpy==2.1.0",
        "  Downloading numpy-2.1.0-cp311-cp311-win_amd64.whl (12.9 MB)",
        "  Downloading https://example.invalid/simple/torch/torch-2.5.1%2Bcu121-cp311-cp311-linux_x86_64.whl (2.3 GB)",
        "  Using cached protobuf-5.28.0-cp310-abi3-win_amd64.whl (431 kB)",
        "Processing /opt/wheels/sympy-1.13.3-py3-none-any.whl",
        "Saved ./out/numpy-2.1.0-cp311-cp311-win_amd64.whl",
    ])
    assert downloaded_names(log) == {"numpy-2.1.0-cp311-cp311-win_amd64.whl",
                                     "torch-2.5.1+cu121-cp311-cp311-linux_x86_64.whl",
                                     "protobuf-5.28.0-cp310-abi3-win_amd64.whl"}
