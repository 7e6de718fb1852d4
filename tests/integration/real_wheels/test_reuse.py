"""A rebuild with nothing changed publishes the zip the cache kept from the same inputs, after checking it;
anything that changes the bundle's bytes changes the key; `--no-reuse` and a kept zip that was altered
assemble again. Real builds of the Linux quickstart, each in a cache of its own (the inputs linked in)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli

from bundler.writer import reuse

pytestmark = pytest.mark.integration

STEM = "quickstart-linux-1.0.0-linux_x86_64"


def own_cache(bundler_cache: Path, root: Path) -> Path:
    root.mkdir()
    for name in ("sha256", "ort-envs"):
        (root / name).symlink_to(bundler_cache / name)
    return root


def build(cache: Path, out: Path, manifest: Path, *extra: str) -> dict:
    proc = run_cli("build", "--json", "--cache", str(cache), "-o", str(out), *extra, str(manifest))
    return json.loads(proc.stdout)


def kept_zip(cache: Path) -> Path:
    [kept] = (cache / reuse.STORE).glob(f"*/*/{STEM}.zip")
    return kept


def test_a_rebuild_reuses_the_kept_zip_and_an_altered_one_is_assembled_again(bundler_cache: Path,
                                                                              tmp_path: Path) -> None:
    cache = own_cache(bundler_cache, tmp_path / "cache")
    manifest = MANIFESTS / "quickstart-linux.toml"
    first = build(cache, tmp_path / "one", manifest)
    data = Path(first["zip"]).read_bytes()
    second = build(cache, tmp_path / "two", manifest)
    assert (first["reused"], second["reused"]) == (False, True)
    assert Path(second["zip"]).read_bytes() == data and second["sha256"] == first["sha256"]
    sidecar = (tmp_path / "two" / f"{STEM}.zip.sha256").read_text(encoding="ascii")
    assert sidecar == f"{hashlib.sha256(data).hexdigest()}  {STEM}.zip\n"
    assert not [p for p in (tmp_path / "two").iterdir() if p.name.endswith(".tmp")]

    forced = build(cache, tmp_path / "three", manifest, "--no-reuse")
    assert forced["reused"] is False and Path(forced["zip"]).read_bytes() == data

    kept = kept_zip(cache)
    kept.unlink()  # not in place: the published zips may be links to it
    kept.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    again = build(cache, tmp_path / "four", manifest)
    assert again["reused"] is False and Path(again["zip"]).read_bytes() == data
    assert kept_zip(cache).read_bytes() == data  # kept again, as built


def test_a_changed_manifest_is_not_a_reuse(bundler_cache: Path, tmp_path: Path) -> None:
    cache = own_cache(bundler_cache, tmp_path / "cache")
    folder = tmp_path / "m"
    shutil.copytree(MANIFESTS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = folder / "quickstart-linux.toml"
    build(cache, tmp_path / "one", manifest)
    manifest.write_text(manifest.read_text(encoding="utf-8").replace('version = "1.0.0"', 'version = "1.0.1"', 1),
                        encoding="utf-8")
    changed = build(cache, tmp_path / "two", manifest)
    assert changed["reused"] is False and changed["zip"].endswith("quickstart-linux-1.0.1-linux_x86_64.zip")


def test_the_key_covers_the_code_templates_and_data_the_bundle_is_made_with() -> None:
    names = {path.name for _, path in reuse._own_files()}
    assert {"install.ps1.j2", "install.sh.j2", "identity.onnx", "engine.py", "selfcheck.py", "reuse.py"} <= names
    assert {"onnx", "cyclonedx-python-lib", "jinja2"} <= set(reuse._library_versions())
