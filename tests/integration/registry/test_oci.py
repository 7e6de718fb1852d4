"""A team's cache and releases on an OCI registry, against real `docker-registry` (distribution 2.8) processes.

Nothing is mocked: the registries are real processes on 127.0.0.1 (plain http; htpasswd basic auth behind TLS
from a CA made here; `auth: token` with a token server written here), the wrong-bytes case is a real proxy in
front of a real registry, and every command runs as a user runs it (`python -m bundler …`).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import tracemalloc
import urllib.request
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from fixtures.cli import MANIFESTS
from fixtures.registry import (
    IDENTITY_TOKEN,
    PASSWORD,
    USER,
    FrontHandler,
    RunningRegistry,
    free_port,
    htpasswd_line,
    make_tls,
    make_token_issuer,
    start_corrupting_proxy,
    start_front,
    start_registry,
    start_token_server,
    write_docker_config,
)

TIMEOUT = 300


def cli(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bundler", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=TIMEOUT)


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def manifest_json(host: str, repo: str, tag: str, *, scheme: str = "http") -> dict:
    request = urllib.request.Request(f"{scheme}://{host}/v2/{repo}/manifests/{tag}",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def final_files(cache: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((cache / "sha256").rglob("*")) if p.is_file()}


# -- registries ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory):
    running = start_registry(tmp_path_factory.mktemp("registry"))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory):
    """htpasswd basic auth behind TLS from a CA made here; `config` is a Docker config.json with the login."""
    folder = tmp_path_factory.mktemp("secure")
    ca, cert, key = make_tls(folder)
    (folder / "htpasswd").write_text(htpasswd_line(USER, PASSWORD), encoding="utf-8")
    auth = f"  htpasswd:\n    realm: ort-bundler-test\n    path: {folder / 'htpasswd'}\n"
    running = start_registry(folder / "registry", auth=auth, tls=(cert, key), ca=ca)
    config = write_docker_config(folder / "config.json", running.host, USER, PASSWORD)
    wrong = write_docker_config(folder / "wrong.json", running.host, USER, "not-" + PASSWORD)
    yield SimpleNamespace(registry=running, ca=ca, config=config, wrong=wrong, folder=folder)
    running.stop()


@pytest.fixture(scope="module")
def token(tmp_path_factory: pytest.TempPathFactory):
    """distribution's `auth: token`: the registry trusts the token server's signing CA and sends clients there."""
    folder = tmp_path_factory.mktemp("token")
    service = "ort-bundler-test-registry"
    issuer, bundle = make_token_issuer(folder, service)
    server, realm = start_token_server(issuer)
    auth = (f"  token:\n    realm: {realm}\n    service: {service}\n    issuer: {issuer.issuer}\n"
            f"    rootcertbundle: {bundle}\n")
    running = start_registry(folder / "registry", auth=auth)
    config = write_docker_config(folder / "config.json", running.host, USER, PASSWORD)
    wrong = write_docker_config(folder / "wrong.json", running.host, USER, "not-" + PASSWORD)
    yield SimpleNamespace(registry=running, issuer=issuer, config=config, wrong=wrong)
    running.stop()
    server.shutdown()
    server.server_close()


# -- a small manifest whose inputs are local files ---------------------------------------------------


@pytest.fixture()
def small(tmp_path: Path) -> SimpleNamespace:
    """A manifest of two local inputs (an ORT archive and a model), fetched into a cache of its own."""
    archive, model = os.urandom(300_000), os.urandom(70_000)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "onnxruntime-linux-x64-1.23.1.tgz").write_bytes(archive)
    (tmp_path / "src" / "m.onnx").write_bytes(model)
    manifest = tmp_path / "src" / "app.toml"
    manifest.write_text("\n".join([
        "[bundle]", 'name = "ocitest"', 'version = "1.0.0+cu118"', 'platform = "linux_x86_64"', 'python = "3.11"', "",
        "[ort]", 'version = "1.23.1"',
        f'archive = {{ path = "onnxruntime-linux-x64-1.23.1.tgz", sha256 = "{hashlib.sha256(archive).hexdigest()}" }}',
        "", "[[models]]", 'name = "m"', 'path = "m.onnx"', f'sha256 = "{hashlib.sha256(model).hexdigest()}"', ""]),
        encoding="utf-8")
    cache = tmp_path / "cache"
    ok(cli("fetch", "-q", "--cache", cache, manifest))
    return SimpleNamespace(manifest=manifest, cache=cache, archive=archive, model=model, folder=tmp_path)


def test_push_skips_what_is_there_and_fetch_takes_everything_from_the_registry_alone(
        registry: RunningRegistry, small: SimpleNamespace, tmp_path: Path) -> None:
    url = registry.url("team/small")
    first = json.loads(ok(cli("cache", "push", "--json", "--cache", small.cache, small.manifest, url)).stdout)
    assert sorted(first["uploaded"]) == ["m.onnx", "onnxruntime-linux-x64-1.23.1.tgz"] and first["present"] == []
    assert first["reference"] == f"{url}:ocitest-1.0.0_cu118-inputs"  # + is not a tag character
    again = json.loads(ok(cli("cache", "push", "--json", "--cache", small.cache, small.manifest, url)).stdout)
    assert again["uploaded"] == [] and again["uploaded_bytes"] == 0 and len(again["present"]) == 2  # HEAD hits
    assert again["digest"] == first["digest"]  # the same inputs give the same manifest

    document = manifest_json(registry.host, "team/small", "ocitest-1.0.0_cu118-inputs")
    assert document["artifactType"] == "application/vnd.ort-bundler.inputs.v1"
    titles = {layer["annotations"]["org.opencontainers.image.title"]: layer["digest"] for layer in document["layers"]}
    assert titles == {"onnxruntime-linux-x64-1.23.1.tgz": "sha256:" + hashlib.sha256(small.archive).hexdigest(),
                      "m.onnx": "sha256:" + hashlib.sha256(small.model).hexdigest()}

    for source in (small.folder / "src").glob("*.*"):  # the sources are gone: the registry is all there is
        if source.suffix != ".toml":
            source.unlink()
    fresh = tmp_path / "fresh"
    proc = ok(cli("fetch", "--json", "--cache", fresh, small.manifest, "--mirror", url))
    assert set(json.loads(proc.stdout)) == {"ort.archive", "models[0]"}
    assert final_files(fresh) == {"onnxruntime-linux-x64-1.23.1.tgz": small.archive, "m.onnx": small.model}
    assert not list((fresh / "partial").glob("*")) and not [p for p in (fresh / "tmp").iterdir() if p.is_dir()]


def test_two_concurrent_pushes_of_the_same_inputs_both_succeed(registry: RunningRegistry, small: SimpleNamespace,
                                                               tmp_path: Path) -> None:
    url = registry.url("team/concurrent")
    command = [sys.executable, "-m", "bundler", "cache", "push", "--json", "--cache", str(small.cache),
               str(small.manifest), url]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [proc.communicate(timeout=TIMEOUT) + (proc.returncode,) for proc in procs]
    assert all(code == 0 for _, _, code in results), results
    digests = {json.loads(out)["digest"] for out, _, _ in results}
    assert len(digests) == 1
    fresh = tmp_path / "fresh"
    ok(cli("fetch", "-q", "--cache", fresh, small.manifest, "--mirror", url))
    assert final_files(fresh)["m.onnx"] == small.model


def test_a_look_up_answered_500_is_asked_again_and_a_write_answered_500_is_not(registry: RunningRegistry) -> None:
    """The concurrent pushes above failed once in a full run: the real registry answered HTTP 500 to a HEAD of a blob
    the other push was uploading. A front answers the first look-up, and then the first upload start, with 500."""
    from bundler.errors import InputUnavailableError
    from bundler.sources.oci import Registry, RegistryOptions, parse_reference

    failed: set[str] = set()

    def first_500(handler: FrontHandler, method: str, body: bytes) -> bool:
        if method not in ("HEAD", "POST") or method in failed:
            return False
        failed.add(method)
        handler.reply(500, {"Content-Type": "application/json"}, b'{"errors": [{"code": "UNKNOWN"}]}')
        return True

    data = os.urandom(4096)
    with start_front(registry, rule=first_500, login=False) as front:
        client = Registry(parse_reference(front.url("team/flaky"), what="test", tag=False), RegistryOptions())
        with pytest.raises(InputUnavailableError, match="answered HTTP 500"):
            client.push_bytes(data)  # the look-up is asked again and answered 404; the upload's 500 ends it
        assert [seen.method for seen in front.server.seen] == ["HEAD", "HEAD", "POST"]
        client.push_bytes(data)  # nothing fails now: the blob goes up
    assert client.blob_size("sha256:" + hashlib.sha256(data).hexdigest()) == len(data)


def test_wrong_bytes_from_the_registry_exit_5_and_nothing_is_cached(registry: RunningRegistry, small: SimpleNamespace,
                                                                    tmp_path: Path) -> None:
    ok(cli("cache", "push", "-q", "--cache", small.cache, small.manifest, registry.url("team/tampered")))
    proxy = start_corrupting_proxy(registry.host)
    try:
        fresh = tmp_path / "fresh"
        url = f"oci://127.0.0.1:{proxy.server_address[1]}/team/tampered"
        proc = cli("fetch", "-q", "--cache", fresh, small.manifest, "--mirror", url)
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert proc.returncode == 5, proc.stderr
    assert "hash mismatch" in proc.stderr and "/blobs/sha256:" in proc.stderr
    assert final_files(fresh) == {}
    assert not list((fresh / "partial").glob("*"))


def test_an_interrupted_fetch_resumes_with_range(registry: RunningRegistry, small: SimpleNamespace,
                                                 tmp_path: Path) -> None:
    """What a killed fetch leaves (the first bytes under partial/) is resumed, not fetched again."""
    ok(cli("cache", "push", "-q", "--cache", small.cache, small.manifest, registry.url("team/resume")))
    fresh = tmp_path / "fresh"
    model_sha = hashlib.sha256(small.model).hexdigest()
    (fresh / "partial").mkdir(parents=True)
    (fresh / "partial" / f"{model_sha}.part").write_bytes(small.model[:30_000])
    proxy = start_corrupting_proxy(registry.host, corrupt=False)
    try:
        ok(cli("fetch", "-q", "--cache", fresh, small.manifest, "--mirror",
               f"oci://127.0.0.1:{proxy.server_address[1]}/team/resume"))
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert final_files(fresh)["m.onnx"] == small.model
    assert (f"/v2/team/resume/blobs/sha256:{model_sha}", "bytes=30000-") in proxy.ranges


def test_the_proxy_variables_apply(registry: RunningRegistry, small: SimpleNamespace, tmp_path: Path) -> None:
    ok(cli("cache", "push", "-q", "--cache", small.cache, small.manifest, registry.url("team/proxied")))
    proxy = start_corrupting_proxy(registry.host, corrupt=False)
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(HTTP_PROXY=f"http://127.0.0.1:{proxy.server_address[1]}", NO_PROXY="")
    try:
        ok(cli("fetch", "-q", "--cache", tmp_path / "fresh", small.manifest, "--mirror", registry.url("team/proxied"),
               env=env))
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert final_files(tmp_path / "fresh")["m.onnx"] == small.model
    via_proxy = [path for path, _ in proxy.ranges]
    assert f"http://{registry.host}/v2/team/proxied/blobs/sha256:{hashlib.sha256(small.model).hexdigest()}" in via_proxy


def test_registry_down_missing_blob_and_unknown_tag_exit_4_in_one_line(registry: RunningRegistry,
                                                                        small: SimpleNamespace, tmp_path: Path) -> None:
    down = cli("fetch", "--cache", tmp_path / "c1", small.manifest, "--mirror", f"oci://127.0.0.1:{free_port()}/x")
    assert down.returncode == 4 and len(down.stderr.strip().splitlines()) == 1, down.stderr
    assert "cannot be reached (connection refused)" in down.stderr

    empty = cli("fetch", "--cache", tmp_path / "c2", small.manifest, "--mirror", registry.url("team/empty"))
    assert empty.returncode == 4, empty.stderr
    assert "ort.archive" in empty.stderr and "not in the registry" in empty.stderr and "cache push" in empty.stderr

    missing = cli("pull", registry.url("team/releases") + ":9.9.9", "-o", tmp_path / "out")
    assert missing.returncode == 4 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert "9.9.9" in missing.stderr and "team/releases" in missing.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())

    bad = cli("cache", "push", small.manifest, "oci://127.0.0.1/Team/Upper")
    assert bad.returncode == 2 and "lower-case" in bad.stderr


def _no_secret(*procs: subprocess.CompletedProcess[str]) -> None:
    for proc in procs:
        for text in (proc.stdout, proc.stderr):
            assert PASSWORD not in text and PASSWORD[-12:] not in text


def test_basic_auth_over_tls_with_the_ca_option_and_docker_config(secure: SimpleNamespace, small: SimpleNamespace,
                                                                  tmp_path: Path) -> None:
    url = secure.registry.url("team/secure")
    trust = ["--registry-ca", secure.ca]
    pushed = ok(cli("cache", "push", "-v", "--json", "--cache", small.cache, small.manifest, url,
                    "--registry-config", secure.config, *trust))
    fresh = tmp_path / "fresh"
    fetched = ok(cli("fetch", "-v", "--json", "--cache", fresh, small.manifest, "--mirror", url,
                     "--registry-config", secure.config, *trust))
    assert final_files(fresh)["m.onnx"] == small.model

    untrusted = cli("cache", "push", "--cache", small.cache, small.manifest, url, "--registry-config", secure.config)
    assert untrusted.returncode == 4 and "TLS failed (certificate verify failed: " in untrusted.stderr
    assert "--registry-ca" in untrusted.stderr and len(untrusted.stderr.strip().splitlines()) == 1

    wrong = cli("cache", "push", "-v", "--json", "--cache", small.cache, small.manifest, url,
                "--registry-config", secure.wrong, *trust)
    assert wrong.returncode == 4, wrong.stderr
    assert secure.registry.host in wrong.stderr and "HTTP 401" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1 or "Traceback" in wrong.stderr  # -v adds the traceback

    anonymous = cli("fetch", "--cache", tmp_path / "anon", small.manifest, "--mirror", url,
                    "--registry-config", tmp_path / "none.json", *trust)
    assert anonymous.returncode == 2 and "none.json does not exist" in anonymous.stderr
    (tmp_path / "empty.json").write_text("{}", encoding="utf-8")
    anonymous = cli("fetch", "--cache", tmp_path / "anon", small.manifest, "--mirror", url,
                    "--registry-config", tmp_path / "empty.json", *trust)
    assert anonymous.returncode == 4 and "no credentials" in anonymous.stderr and "docker login" in anonymous.stderr
    _no_secret(pushed, fetched, untrusted, wrong, anonymous)


def test_a_credential_helper_answers_for_the_registry(secure: SimpleNamespace, small: SimpleNamespace,
                                                      tmp_path: Path) -> None:
    """`credHelpers` runs `docker-credential-NAME get` with the host on stdin (docker-credential-helpers' protocol)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-ortest"
    helper.write_text(f"#!/bin/sh\nread host\n[ \"$1\" = get ] && [ \"$host\" = \"{secure.registry.host}\" ] || exit 1\n"
                      f"echo '{{\"ServerURL\":\"'$host'\",\"Username\":\"{USER}\",\"Secret\":\"{PASSWORD}\"}}'\n",
                      encoding="utf-8")
    helper.chmod(0o755)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"credHelpers": {secure.registry.host: "ortest"}}), encoding="utf-8")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "DOCKER_CONFIG": str(tmp_path)}
    pushed = ok(cli("cache", "push", "-v", "--cache", small.cache, small.manifest, secure.registry.url("team/helper"),
                    "--registry-ca", secure.ca, env=env))
    assert "pushed 2 inputs" in pushed.stdout
    config.write_text(json.dumps({"auths": {secure.registry.host: {}}, "credsStore": "ortest"}), encoding="utf-8")
    stored = ok(cli("fetch", "-v", "--json", "--cache", tmp_path / "fresh", small.manifest, "--mirror",
                    secure.registry.url("team/helper"), "--registry-ca", secure.ca, env=env))  # the default store
    assert final_files(tmp_path / "fresh")["m.onnx"] == small.model
    _no_secret(pushed, stored)


def test_the_bearer_token_flow_against_distributions_token_auth(token: SimpleNamespace, small: SimpleNamespace,
                                                                tmp_path: Path) -> None:
    url = token.registry.url("team/token")
    pushed = ok(cli("cache", "push", "-v", "--cache", small.cache, small.manifest, url, "--registry-config", token.config))
    fresh = tmp_path / "fresh"
    fetched = ok(cli("fetch", "-q", "--cache", fresh, small.manifest, "--mirror", url, "--registry-config", token.config))
    assert final_files(fresh)["onnxruntime-linux-x64-1.23.1.tgz"] == small.archive
    scopes = " ".join(token.issuer.requests)
    # The push asked for both actions, in the order the registry's challenge named them (distribution's order varies).
    assert ("scope=repository%3Ateam%2Ftoken%3Apull%2Cpush" in scopes or "scope=repository%3Ateam%2Ftoken%3Apush%2Cpull"
            in scopes) and "service=ort-bundler-test-registry" in scopes

    identity = tmp_path / "identity.json"  # what `docker login` stores for an OAuth2 login: an identity token
    identity.write_text(json.dumps({"auths": {f"https://{token.registry.host}/v1/": {
        "identitytoken": IDENTITY_TOKEN}}}), encoding="utf-8")
    refreshed = ok(cli("fetch", "--json", "--cache", tmp_path / "id", small.manifest, "--mirror", url,
                       "--registry-config", identity))
    assert "POST client_id grant_type refresh_token scope service" in token.issuer.requests
    assert IDENTITY_TOKEN not in refreshed.stdout + refreshed.stderr

    wrong = cli("fetch", "--cache", tmp_path / "w", small.manifest, "--mirror", url, "--registry-config", token.wrong)
    assert wrong.returncode == 4 and token.registry.host in wrong.stderr and "credentials" in wrong.stderr, wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1
    _no_secret(pushed, fetched, wrong)


def test_a_one_gib_blob_goes_up_and_down_with_flat_memory(registry: RunningRegistry, tmp_path: Path) -> None:
    from bundler.sources.oci import Blob, Registry, parse_reference

    big = tmp_path / "big.bin"
    block = os.urandom(1024**2)
    digest = hashlib.sha256()
    with big.open("wb") as fh:
        for _ in range(1024):
            fh.write(block)
            digest.update(block)
    expected = "sha256:" + digest.hexdigest()
    del block
    client = Registry(parse_reference(registry.url("team/big"), what="test", tag=False))
    tracemalloc.start()
    try:
        assert client.push_blob(big, digest=expected)
        assert client.blob_size(expected) == 1024**3
        out = tmp_path / "pulled.bin"
        actual = client.fetch_blob(Blob(digest=expected, size=1024**3), out, label="big")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"sha256:{actual}" == expected and out.stat().st_size == 1024**3
    assert peak < 64 * 1024**2, f"peak {peak / 1024**2:.1f} MiB"


def test_an_upload_of_a_file_that_changed_is_refused(registry: RunningRegistry, tmp_path: Path) -> None:
    """The upload is hashed while it streams: a cache file altered after it was verified never gets committed."""
    from bundler.errors import HashMismatchError
    from bundler.sources.oci import Registry, parse_reference

    path = tmp_path / "f.bin"
    path.write_bytes(b"what the cache verified")
    claimed = "sha256:" + hashlib.sha256(b"what the cache verified").hexdigest()
    path.write_bytes(b"what the disk holds now")
    client = Registry(parse_reference(registry.url("team/altered"), what="test", tag=False))
    with pytest.raises(HashMismatchError, match="hash mismatch while uploading"):
        client.push_blob(path, digest=claimed)
    assert client.blob_size(claimed) is None


# -- the quickstart: push, fetch from the registry alone, build the same bytes; publish and pull -----------


def _offline_env() -> dict[str, str]:
    """No package index and no network but loopback: pip has no configuration and no index; proxies go nowhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and "proxy" not in k.lower()}
    dead = f"http://127.0.0.1:{free_port()}"
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "HTTPS_PROXY": dead, "HTTP_PROXY": dead,
            "NO_PROXY": "127.0.0.1,localhost"}


@pytest.fixture(scope="module")
def quickstart(registry: RunningRegistry, bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory):
    manifest = MANIFESTS / "quickstart-linux.toml"
    out = tmp_path_factory.mktemp("original")
    built = json.loads(ok(cli("build", "--json", "--cache", bundler_cache, "-o", out, manifest)).stdout)
    return SimpleNamespace(manifest=manifest, zip=Path(built["zip"]), sha256=built["sha256"])


@pytest.mark.integration
def test_quickstart_from_the_registry_alone_builds_the_same_bytes(registry: RunningRegistry, bundler_cache: Path,
                                                                  quickstart: SimpleNamespace, tmp_path: Path) -> None:
    url = registry.url("team/quickstart")  # plain http: loopback
    ok(cli("cache", "push", "-q", "--cache", bundler_cache, quickstart.manifest, url))
    fresh, env = tmp_path / "fresh", _offline_env()
    ok(cli("fetch", "-q", "--cache", fresh, quickstart.manifest, "--mirror", url, env=env))
    built = json.loads(ok(cli("build", "--json", "--cache", fresh, "-o", tmp_path / "out", quickstart.manifest,
                              env=env)).stdout)
    assert built["reused"] is False and built["sha256"] == quickstart.sha256
    assert Path(built["zip"]).read_bytes() == quickstart.zip.read_bytes()
    assert any((fresh / "ort-envs").glob("ort-1.23.1-*"))  # the gate's ORT came from the fetched wheels


@pytest.mark.integration
def test_publish_and_pull_round_trip_signed_and_unsigned(registry: RunningRegistry, quickstart: SimpleNamespace,
                                                         tmp_path: Path) -> None:
    from fixtures.signing_pki import Pki

    url = registry.url("team/releases")
    published = json.loads(ok(cli("publish", "--json", quickstart.zip, url)).stdout)
    assert published["reference"] == f"{url}:1.0.0" and not published["unchanged"]
    document = manifest_json(registry.host, "team/releases", "1.0.0")
    assert document["annotations"]["org.opencontainers.image.version"] == "1.0.0"
    assert [layer["mediaType"] for layer in document["layers"]] == [
        "application/zip", "text/plain", "application/vnd.cyclonedx+json"]
    again = json.loads(ok(cli("publish", "--json", quickstart.zip, url)).stdout)
    assert again["unchanged"] and again["digest"] == published["digest"]

    pulled = json.loads(ok(cli("pull", "--json", f"{url}:1.0.0", "-o", tmp_path / "got")).stdout)
    assert Path(pulled["zip"]).read_bytes() == quickstart.zip.read_bytes()
    assert (tmp_path / "got" / f"{quickstart.zip.name}.sha256").read_text() == \
        quickstart.zip.with_name(quickstart.zip.name + ".sha256").read_text()
    with zipfile.ZipFile(quickstart.zip) as archive:
        sbom = next(n for n in archive.namelist() if n.endswith("/sbom.cdx.json"))
        assert (tmp_path / "got" / f"{quickstart.zip.stem}.sbom.cdx.json").read_bytes() == archive.read(sbom)

    pki = Pki.make(tmp_path / "pki", "release")
    ok(cli("sign", "-q", quickstart.zip, "-o", tmp_path / "signed", "--cert", pki.cert, "--key", pki.key,
           "--chain", pki.chain))
    signed = tmp_path / "signed" / quickstart.zip.name
    refused = cli("publish", signed, url)  # 1.0.0 holds the unsigned release: releases are immutable
    assert refused.returncode == 2 and "immutable" in refused.stderr and "--force" in refused.stderr
    ok(cli("publish", "-q", signed, f"{url}:1.0.0-signed"))
    ok(cli("pull", "-q", f"{url}:1.0.0-signed", "-o", tmp_path / "signed-got", "--trust", pki.root))
    assert (tmp_path / "signed-got" / signed.name).read_bytes() == signed.read_bytes()
    assert (tmp_path / "signed-got" / f"{quickstart.zip.stem}.SHA256SUMS.p7s").is_file()
    other = Pki.make(tmp_path / "other", "other")
    untrusted = cli("pull", f"{url}:1.0.0-signed", "-o", tmp_path / "untrusted", "--trust", other.root)
    assert untrusted.returncode == 8 and "does not verify" in untrusted.stderr
    assert not any((tmp_path / "untrusted").iterdir())  # nothing kept, not even a staging folder
    forced = json.loads(ok(cli("publish", "--json", "--force", signed, url)).stdout)
    assert forced["digest"] != published["digest"]


def test_cache_push_of_inputs_not_fetched_names_them(registry: RunningRegistry, small: SimpleNamespace,
                                                     tmp_path: Path) -> None:
    proc = cli("cache", "push", "--cache", tmp_path / "empty-cache", small.manifest, registry.url("team/x"))
    assert proc.returncode == 4 and "ort.archive" in proc.stderr and "ort-bundler fetch" in proc.stderr


def test_threads_share_one_client(registry: RunningRegistry, tmp_path: Path) -> None:
    """Fetch runs inputs on several threads: each gets its own session, all with the registry's auth."""
    from bundler.sources.oci import Blob, Registry, parse_reference

    client = Registry(parse_reference(registry.url("team/threads"), what="test", tag=False))
    blobs = []
    for index in range(4):
        data = os.urandom(50_000 + index)
        path = tmp_path / f"b{index}"
        path.write_bytes(data)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        client.push_blob(path, digest=digest)
        blobs.append(Blob(digest=digest, size=len(data)))
    results: dict[int, str] = {}

    def pull(index: int) -> None:
        results[index] = client.fetch_blob(blobs[index], tmp_path / f"out{index}", label=str(index))

    threads = [threading.Thread(target=pull, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert {f"sha256:{results[i]}" for i in range(4)} == {blob.digest for blob in blobs}


def test_references_tags_and_docker_config_are_read_strictly(tmp_path: Path) -> None:
    from bundler.errors import UsageError
    from bundler.sources.oci import parse_reference, tag_for
    from bundler.sources.oci_auth import credential_for

    ref = parse_reference("oci://[::1]:5000/team/app-win:1.0.0_cu118", what="pull", tag=True)
    assert (ref.host, ref.hostname, ref.repository, ref.tag) == ("[::1]:5000", "::1", "team/app-win", "1.0.0_cu118")
    assert str(parse_reference("oci://r.example/a/b@sha256:" + "0" * 64, what="pull", tag=True)).endswith("@sha256:" + "0" * 64)
    for text, problem in [("https://r.example/a", "expected oci://"), ("oci://r.example/A", "lower-case"),
                          ("oci://r.example/a:-x", "the tag"), ("oci://r.example/a:t", "a tag or digest is not taken")]:
        with pytest.raises(UsageError, match=problem):
            parse_reference(text, what="cache push", tag=not problem.startswith("a tag"))
    assert tag_for("1.0.0+cu118") == "1.0.0_cu118" and tag_for(".hidden") == "_.hidden"
    from bundler.commands import shared
    from bundler.sources import oci

    assert shared.SCHEME == oci.SCHEME  # the parser's copy, kept so `cli` need not import the client

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {"https://r.example:5000/v1/": {"username": USER, "password": PASSWORD}}}))
    found = credential_for("r.example:5000", config)
    assert found is not None and found.basic() is not None and PASSWORD not in repr(found)
    assert credential_for("other.example", config) is None
    config.write_text('{"auths": {"r.example": {"auth": "' + PASSWORD + '"}')  # broken JSON holding a secret
    with pytest.raises(UsageError) as broken:
        credential_for("r.example", config)
    assert "not valid JSON" in str(broken.value) and PASSWORD not in str(broken.value)
    config.write_text(json.dumps({"auths": {"r.example": {"auth": "bm90LWEtcGFpcg=="}}}))  # base64 of "not-a-pair"
    with pytest.raises(UsageError, match=r"auths\[r.example\].auth is not base64 of 'user:password'"):
        credential_for("r.example", config)


def test_a_release_whose_layer_names_a_path_is_refused_before_anything_is_written(registry: RunningRegistry,
                                                                                   tmp_path: Path) -> None:
    """Titles become file names on pull: a registry (or whoever pushed) cannot make pull write outside -o."""
    from bundler.sources.oci import Registry, parse_reference
    from bundler.sources.oci_artifact import BUNDLE_TYPE, Artifact, Layer

    client = Registry(parse_reference(registry.url("team/evil"), what="test", tag=False))
    blob = client.push_bytes(b"not a bundle")
    client.push_bytes(b"{}")
    layer = Layer(digest=blob.digest, size=blob.size, media_type="application/zip", title="../evil.zip")
    client.put_manifest("1.0.0", Artifact(artifact_type=BUNDLE_TYPE, layers=(layer,)).to_bytes())
    proc = cli("pull", registry.url("team/evil") + ":1.0.0", "-o", tmp_path / "out")
    assert proc.returncode == 4 and "'../evil.zip'" in proc.stderr and "plain file name" in proc.stderr, proc.stderr
    assert not (tmp_path / "evil.zip").exists() and not (tmp_path / "out").exists()
