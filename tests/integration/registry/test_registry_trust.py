"""A registry is a party we do not control: its credentials stay with it, its bytes are bounded in size and time.

Real `docker-registry` processes behind a hostile front (tests/fixtures/registry.py): the front is the registry
as the client sees it (its host:port, its Basic login) and forwards to the real registry except where it
misbehaves — a blob redirected to another origin that asks for credentials, an upload Location on another
origin, a body sent one byte at a time. "Another origin" is a second server on another port, recording what
reaches it. Every command runs as a user runs it (`python -m bundler …`).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from fixtures.registry import (
    PASSWORD,
    FrontHandler,
    RunningRegistry,
    is_blob_get,
    make_tls,
    redirect_blobs,
    relocate_uploads,
    slow_bodies,
    start_front,
    start_other,
    start_registry,
    write_docker_config,
)

from bundler.sources.oci_origin import DEADLINE_ENV

TIMEOUT = 120


def cli(*args: str | Path, env: dict[str, str] | None = None, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bundler", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory):
    running = start_registry(tmp_path_factory.mktemp("registry"))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def small(registry: RunningRegistry, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A manifest of two local inputs, fetched into a cache and pushed to the real registry (team/small)."""
    folder = tmp_path_factory.mktemp("small")
    archive, model = os.urandom(300_000), os.urandom(70_000)
    (folder / "onnxruntime-linux-x64-1.23.1.tgz").write_bytes(archive)
    (folder / "m.onnx").write_bytes(model)
    manifest = folder / "app.toml"
    manifest.write_text("\n".join([
        "[bundle]", 'name = "trusttest"', 'version = "1.0.0"', 'platform = "linux_x86_64"', 'python = "3.11"', "",
        "[ort]", 'version = "1.23.1"',
        f'archive = {{ path = "onnxruntime-linux-x64-1.23.1.tgz", sha256 = "{hashlib.sha256(archive).hexdigest()}" }}',
        "", "[[models]]", 'name = "m"', 'path = "m.onnx"', f'sha256 = "{hashlib.sha256(model).hexdigest()}"', ""]),
        encoding="utf-8")
    cache = folder / "cache"
    ok(cli("fetch", "-q", "--cache", cache, manifest))
    ok(cli("cache", "push", "-q", "--cache", cache, manifest, registry.url("team/small")))
    blobs = {f"/v2/team/small/blobs/sha256:{hashlib.sha256(data).hexdigest()}": data for data in (archive, model)}
    return SimpleNamespace(manifest=manifest, cache=cache, blobs=blobs, folder=folder)


def login(tmp_path: Path, host: str) -> Path:
    return write_docker_config(tmp_path / "config.json", host, "ci-builder", PASSWORD)


# -- credentials stay with the registry --------------------------------------------------------------


def test_a_blob_redirected_to_another_origin_that_asks_for_basic_credentials_gets_none(
        registry: RunningRegistry, small: SimpleNamespace, tmp_path: Path) -> None:
    with start_other("basic") as other, start_front(registry, rule=redirect_blobs(other.base)) as front:
        proc = cli("fetch", "--cache", tmp_path / "fresh", small.manifest, "--mirror", front.url("team/small"),
                   "--registry-config", login(tmp_path, front.host))
    assert proc.returncode == 4, proc.stderr
    assert f"registry {front.host}" in proc.stderr and "asks for credentials" in proc.stderr, proc.stderr
    assert other.seen, "the redirect was not followed at all"
    assert [seen.authorization for seen in other.seen] == [None] * len(other.seen)
    assert any(seen.authorization for seen in front.seen)  # the registry itself did get the login
    assert PASSWORD not in proc.stderr + proc.stdout


def test_a_redirect_to_another_origin_asking_for_a_token_never_reaches_the_token_service(
        registry: RunningRegistry, small: SimpleNamespace, tmp_path: Path) -> None:
    with start_other("storage") as tokens, start_other("bearer", realm=f"{tokens.base}/token") as other, \
            start_front(registry, rule=redirect_blobs(other.base)) as front:
        proc = cli("fetch", "--cache", tmp_path / "fresh", small.manifest, "--mirror", front.url("team/small"),
                   "--registry-config", login(tmp_path, front.host))
    assert proc.returncode == 4 and "asks for credentials" in proc.stderr, proc.stderr
    assert other.seen and tokens.seen == []  # the user and password never went to a realm another origin named


def test_a_redirect_to_storage_on_another_origin_works_without_credentials(
        registry: RunningRegistry, small: SimpleNamespace, tmp_path: Path) -> None:
    """What worked before still works: blob storage elsewhere serves the bytes, without the registry's login."""
    with start_other("storage", blobs=small.blobs) as other, \
            start_front(registry, rule=redirect_blobs(other.base)) as front:
        ok(cli("fetch", "-q", "--cache", tmp_path / "fresh", small.manifest, "--mirror", front.url("team/small"),
               "--registry-config", login(tmp_path, front.host)))
    assert {seen.path for seen in other.seen} == set(small.blobs)
    assert [seen.authorization for seen in other.seen] == [None] * len(other.seen)


def test_a_redirect_to_plain_http_off_this_machine_is_refused(registry: RunningRegistry, small: SimpleNamespace,
                                                              tmp_path: Path) -> None:
    with start_front(registry, rule=redirect_blobs("http://ort-bundler-test.invalid:8080")) as front:
        proc = cli("fetch", "--cache", tmp_path / "fresh", small.manifest, "--mirror", front.url("team/small"),
                   "--registry-config", login(tmp_path, front.host))
    assert proc.returncode == 4, proc.stderr
    assert "http://ort-bundler-test.invalid:8080" in proc.stderr and "not loopback" in proc.stderr, proc.stderr


def test_an_upload_location_on_another_origin_over_http_gets_no_byte_and_no_credential(
        registry: RunningRegistry, small: SimpleNamespace, tmp_path: Path) -> None:
    with start_other("storage") as other, start_front(registry, rule=relocate_uploads(other.base)) as front:
        proc = cli("cache", "push", "--cache", small.cache, small.manifest, front.url("team/moved"),
                   "--registry-config", login(tmp_path, front.host))
    assert proc.returncode == 4, proc.stderr
    assert "upload Location" in proc.stderr and f"{other.base}" in proc.stderr, proc.stderr
    assert other.seen == []
    assert PASSWORD not in proc.stderr + proc.stdout


def test_an_upload_location_on_https_storage_gets_the_bytes_without_the_credential(
        registry: RunningRegistry, tmp_path: Path) -> None:
    from bundler.sources.oci import Registry, RegistryOptions, parse_reference

    ca, cert, key = make_tls(tmp_path)
    data = os.urandom(10_000)
    with start_other("storage", tls=(cert, key)) as storage, \
            start_front(registry, rule=relocate_uploads(storage.base)) as front:
        client = Registry(parse_reference(front.url("team/stored"), what="test", tag=False),
                          RegistryOptions(config=login(tmp_path, front.host), ca_file=ca))
        client.push_bytes(data)
    sent = [seen for seen in storage.seen if seen.method in ("PATCH", "PUT")]
    assert [seen.method for seen in sent] == ["PATCH", "PUT"] and sent[0].body == len(data)
    assert [seen.authorization for seen in storage.seen] == [None] * len(storage.seen)
    assert any(seen.authorization for seen in front.seen if seen.method == "POST")


def test_the_origin_policy_scopes_transport_credentials_and_token_realms() -> None:
    from bundler.errors import InputUnavailableError
    from bundler.sources.oci_origin import OriginPolicy, origin_of

    assert origin_of("https://R.example/v2/") == origin_of("https://r.example:443/x")
    assert origin_of("http://r.example/") != origin_of("https://r.example/")
    policy = OriginPolicy(name="r.example:5000", registry=origin_of("https://r.example:5000"))
    assert policy.is_registry("https://r.example:5000/v2/a/blobs/x") and not policy.is_registry("https://r.example/v2/")
    assert policy.upload_target("https://storage.example/up?sig=1") == "https://storage.example/up?sig=1"
    for url, problem in [("http://r.example:5000/up", "not loopback"), ("http://127.0.0.1:9/up", "plain http"),
                         ("ftp://r.example/up", "not an http")]:
        with pytest.raises(InputUnavailableError, match=problem):
            policy.upload_target(url)
    with pytest.raises(InputUnavailableError, match="not the registry"):
        policy.token_realm("https://auth.example/token", challenged_by="https://storage.example/blob")
    assert policy.token_realm("https://auth.example/token", challenged_by="https://r.example:5000/v2/").host == \
        "auth.example"
    with pytest.raises(InputUnavailableError, match="not loopback"):
        policy.token_realm("http://auth.example/token", challenged_by="https://r.example:5000/v2/")
    insecure = OriginPolicy(name="r.example:5000", registry=origin_of("http://r.example:5000"), insecure=True)
    insecure.check_transport("http://r.example:6000/token", what="its token realm")  # the registry's own host
    with pytest.raises(InputUnavailableError, match="registry's own host only"):
        insecure.check_transport("http://auth.example/token", what="its token realm")


# -- every read has a deadline -------------------------------------------------------------------------


def test_a_blob_sent_one_byte_at_a_time_is_cut_off_at_its_deadline(registry: RunningRegistry,
                                                                   small: SimpleNamespace, tmp_path: Path) -> None:
    with start_front(registry, rule=slow_bodies(0.2), login=False) as front:
        started = time.monotonic()
        proc = cli("fetch", "--cache", tmp_path / "fresh", small.manifest, "--mirror", front.url("team/small"),
                   env={DEADLINE_ENV: "2"}, timeout=90)
        took = time.monotonic() - started
    assert proc.returncode == 4, proc.stderr
    assert f"registry {front.host}" in proc.stderr and "did not arrive within 2 s" in proc.stderr, proc.stderr
    assert took < 30


def test_a_manifest_sent_one_byte_at_a_time_is_cut_off_at_its_deadline(registry: RunningRegistry,
                                                                       small: SimpleNamespace, tmp_path: Path) -> None:
    slow = slow_bodies(0.3, match=lambda method, path: method == "GET" and "/manifests/" in path)
    with start_front(registry, rule=slow, login=False) as front:
        proc = cli("pull", front.url("team/small") + ":trusttest-1.0.0-inputs", "-o", tmp_path / "out",
                   env={DEADLINE_ENV: "1:1048576"}, timeout=90)  # 1 s plus 4 MiB (a manifest's most) at 1 MiB/s
    assert proc.returncode == 4, proc.stderr
    assert "registry" in proc.stderr and "the manifest trusttest-1.0.0-inputs did not arrive within 5 s" in proc.stderr, \
        proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_blob_that_sends_headers_and_then_nothing_is_cut_off_at_its_deadline(
        registry: RunningRegistry, small: SimpleNamespace, tmp_path: Path) -> None:
    """No byte at all after the headers: the per-read timeout (60 s) is capped by what is left of the deadline."""

    def stall(handler: FrontHandler, method: str, body: bytes) -> bool:
        if not is_blob_get(method, handler.path):
            return False
        handler.send_response(200)
        handler.send_header("Content-Length", "70000")
        handler.end_headers()
        handler.wfile.flush()
        time.sleep(20)
        handler.close_connection = True
        return True

    with start_front(registry, rule=stall, login=False) as front:
        started = time.monotonic()
        proc = cli("fetch", "--cache", tmp_path / "fresh", small.manifest, "--mirror", front.url("team/small"),
                   env={DEADLINE_ENV: "2"}, timeout=90)
        took = time.monotonic() - started
    assert proc.returncode == 4 and "did not arrive within 2 s" in proc.stderr, proc.stderr
    assert took < 15


def test_a_blob_whose_headers_claim_more_than_the_registry_declared_is_refused_naming_the_registry(
        registry: RunningRegistry, small: SimpleNamespace, tmp_path: Path) -> None:
    def claims(handler: FrontHandler, method: str, body: bytes) -> bool:
        if not is_blob_get(method, handler.path):
            return False
        handler.send_response(200)
        handler.send_header("Content-Length", str(10**12))
        handler.end_headers()
        handler.close_connection = True
        return True

    with start_front(registry, rule=claims, login=False) as front:
        proc = cli("fetch", "--cache", tmp_path / "fresh", small.manifest, "--mirror", front.url("team/small"))
    assert proc.returncode == 4, proc.stderr
    assert f"registry {front.host}" in proc.stderr and "declares 1,000,000,000,000 bytes, more than the" in proc.stderr, \
        proc.stderr
    assert "manifest entry" not in proc.stderr


def test_a_deadline_setting_that_is_not_a_number_is_refused(registry: RunningRegistry, small: SimpleNamespace,
                                                             tmp_path: Path) -> None:
    proc = cli("fetch", "--cache", tmp_path / "fresh", small.manifest, "--mirror", registry.url("team/small"),
               env={DEADLINE_ENV: "soon"})
    assert proc.returncode == 2 and f"{DEADLINE_ENV}: found 'soon'" in proc.stderr, proc.stderr
