"""Credentials never travel in a URL (issue 34, severe 6).

A manifest `url = "https://user:token@host/…"` was accepted, printed in errors and written into bundle.json.
It is now refused where every command parses the manifest (exit 3), the refusal itself shows the URL without
the credential, and the advice it gives (~/.netrc, or the file $NETRC names) is proven to work against a real
server that asks for Basic authentication. Every URL a download message shows goes through one redaction
helper, tested here on a real server's 404.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from pathlib import Path

import pytest
import requests
from fixtures.hostile import one_line, run, snapshot
from fixtures.http_server import Handler, LocalHTTPServer, send_status, serve
from unit.manifest.test_manifest_hostile import SHA, manifest_text

from bundler.errors import InputUnavailableError
from bundler.hashing import mismatch_message
from bundler.manifest import load
from bundler.names import redact_url
from bundler.sources.cache import Cache
from bundler.sources.download import download
from bundler.sources.fetch import FetchOptions, fetch_inputs
from bundler.sources.inputs import target_of

TOKEN = "s3cr3t-t0ken"


@pytest.mark.parametrize("command", ["lock", "fetch", "build"])
@pytest.mark.parametrize("url", [f"https://deploy:{TOKEN}@models.example/m1.onnx",
                                 f"https://{TOKEN}@models.example/m1.onnx",
                                 f"http://deploy:{TOKEN}@127.0.0.1:8080/m1.onnx"])
def test_a_url_with_a_credential_is_refused_by_every_command(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             command: str, url: str) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    path = folder / "app.toml"
    path.write_text(manifest_text(model=f'url = "{url}"'), encoding="utf-8")
    before = snapshot(tmp_path)
    code, err = run(capsys, command, "-q", "--cache", str(tmp_path / "cache"), str(path))
    line = one_line(err, command)
    assert code == 3, err
    assert TOKEN not in err
    assert "models[0].url: found '" in line and "://***@" in line
    assert "expected a URL without a user or password" in line
    assert "~/.netrc (or the file $NETRC names)" in line
    assert snapshot(tmp_path) == before


def test_the_netrc_advice_authenticates_a_real_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the refusal tells users to do works: a server that demands Basic auth gets it from $NETRC."""
    data = b"model bytes behind a login"
    expected = "Basic " + base64.b64encode(f"deploy:{TOKEN}".encode()).decode()
    seen: list[str | None] = []

    def guarded(handler: Handler, index: int) -> None:
        seen.append(handler.headers.get("Authorization"))
        if handler.headers.get("Authorization") != expected:
            handler.send_response(401)
            handler.send_header("WWW-Authenticate", 'Basic realm="models"')
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        serve(data)(handler, index)

    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1 login deploy password {TOKEN}\n", encoding="utf-8")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    with LocalHTTPServer() as server:
        url = server.route("/m1.onnx", guarded)
        project = tmp_path / "project"
        project.mkdir()
        (project / "app.toml").write_text(manifest_text(model=f'url = "{url}"',
                                                        model_sha=hashlib.sha256(data).hexdigest()), encoding="utf-8")
        manifest = load(project / "app.toml")
        found = fetch_inputs([manifest.models[0].source], cache=Cache(tmp_path / "cache"),
                             target=target_of(manifest), options=FetchOptions(quiet=True))
    assert found["models[0]"].read_bytes() == data
    assert expected in seen


def test_download_messages_show_no_credential(tmp_path: Path) -> None:
    """A URL that reaches the downloader with a credential (not from a manifest, which refuses it) is shown
    without it: the server's 404 names the URL."""
    with LocalHTTPServer() as server:
        server.route("/gone.onnx", lambda handler, index: send_status(handler, 404))
        url = server.url("/gone.onnx").replace("http://", f"http://deploy:{TOKEN}@")
        with pytest.raises(InputUnavailableError) as info, requests.Session() as session:
            download(url, tmp_path / "partial", label="models[0]", session=session, stop=threading.Event())
    assert TOKEN not in str(info.value)
    assert "http://***@127.0.0.1:" in str(info.value) and "HTTP 404" in str(info.value)


def test_redaction_covers_every_url_in_a_text() -> None:
    text = f"failed: https://deploy:{TOKEN}@a.example/x, then http://{TOKEN}@b.example:81/y?q=1#f"
    assert redact_url(text) == "failed: https://***@a.example/x, then http://***@b.example:81/y?q=1#f"
    assert redact_url("https://a.example/path@version/file.onnx") == "https://a.example/path@version/file.onnx"
    assert TOKEN not in mismatch_message("models[0]", f"https://u:{TOKEN}@a.example/m.onnx", SHA, "b" * 64)


@pytest.mark.parametrize("url", [f"https://deploy:{TOKEN}@models.example/" + "a" * 2100 + ".onnx",
                                 f"https://deploy:{TOKEN}@models.example/m1\\u0007.onnx"])
def test_other_refusals_of_such_a_url_show_no_credential(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         url: str) -> None:
    path = tmp_path / "app.toml"
    path.write_text(manifest_text(model=f'url = "{url}"'), encoding="utf-8")
    code, err = run(capsys, "fetch", "-q", "--cache", str(tmp_path / "cache"), str(path))
    assert code == 3 and "models[0].url: found '" in err
    assert TOKEN not in err
