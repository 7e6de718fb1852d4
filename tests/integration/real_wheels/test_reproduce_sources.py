"""`reproduce` with an empty cache, the rebuilder's real case (issue 38, item 4).

The quickstart is built with its capi wheel pinned as a local `path`: the bundle ships a wheel rebuilt from it,
so the rebuild needs the original from elsewhere. With an empty cache the error named a scratch path inside the
cache (`…/tmp/reproduce-…/src/onnxruntime-….whl: file not found`); it now names the input, its file and sha256,
and that `--mirror DIR` supplies it, and the rebuild with that mirror is byte-identical.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fixtures.cli import run_cli
from fixtures.wheels import ORT_VERSION
from integration.real_wheels.test_first_use_messages import quickstart_copy

pytestmark = pytest.mark.integration

STEM = "quickstart-linux-1.0.0-linux_x86_64"
CAPI_SHA = "61139a29d536b71db6045c75462e593a53feecc19756dc222531971cd08e5efe"


@pytest.fixture(scope="module")
def local_capi_bundle(bundler_cache: Path, ort_linux_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("local-capi")
    manifest = quickstart_copy(root / "project")
    shutil.copy(ort_linux_wheel, root / "project")
    text = manifest.read_text(encoding="utf-8").replace(
        f'capi = {{ requirement = "onnxruntime=={ORT_VERSION}", sha256 = "{CAPI_SHA}" }}',
        f'capi = {{ path = "{ort_linux_wheel.name}", sha256 = "{CAPI_SHA}" }}')
    manifest.write_text(text, encoding="utf-8")
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(root / "dist"), str(manifest))
    return root / "dist" / f"{STEM}.zip"


def test_an_empty_cache_names_the_missing_input_and_the_mirror_option(local_capi_bundle: Path, tmp_path: Path,
                                                                      ort_linux_wheel: Path) -> None:
    cache = tmp_path / "empty-cache"
    proc = run_cli("reproduce", "-q", "--cache", str(cache), str(local_capi_bundle), check=False)
    assert proc.returncode == 4, proc.stderr
    assert (f"ort-bundler reproduce: error: {STEM}.zip: input ort.capi ({ort_linux_wheel.name}, sha256 {CAPI_SHA}) "
            f"is neither in the bundle nor in the cache ({cache})") in proc.stderr
    assert "give it with `--mirror DIR`, a folder holding that file" in proc.stderr
    assert "reproduce-" not in proc.stderr and "file not found" not in proc.stderr  # no scratch path

    mirror = tmp_path / "mirror"
    mirror.mkdir()
    shutil.copy(ort_linux_wheel, mirror)
    again = run_cli("reproduce", "--cache", str(tmp_path / "cache-2"), "--mirror", str(mirror), str(local_capi_bundle),
                    check=False)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "reproduced byte for byte" in again.stdout


def test_offline_with_an_empty_cache_names_every_input_the_network_would_bring(tmp_path: Path, bundler_cache: Path) -> None:
    out = tmp_path / "dist"
    manifest = quickstart_copy(tmp_path / "project")
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(out), str(manifest))
    proc = run_cli("reproduce", "-q", "--offline", "--cache", str(tmp_path / "empty"), str(out / f"{STEM}.zip"),
                   check=False)
    assert proc.returncode == 4, proc.stderr
    assert (f"input ort.capi (onnxruntime=={ORT_VERSION}, sha256 {CAPI_SHA}) is neither in the bundle nor in the "
            "cache") in proc.stderr
    assert f"names it as requirement 'onnxruntime=={ORT_VERSION}', and --offline forbids the network: give it with " \
           "`--mirror DIR`" in proc.stderr
