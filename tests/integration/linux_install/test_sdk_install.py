"""The SDK end to end: a manifest with the ORT release archive is fetched, built, installed with the
real install.sh, and a CMake project links the installed SDK and runs.

The Linux release archive cannot be downloaded here, so it is a STAND-IN assembled in the official layout
around the real libonnxruntime.so.1.23.1 of the Linux wheel, with a minimal stand-in header (sdk_fixtures).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli
from fixtures.sdk import STANDIN_HEADER_MINIMAL, linux_release_archive, wheel_member
from unit.assembly.test_sdk import cmake, consumer_project

pytestmark = pytest.mark.integration
STEM = "quickstart-linux-1.0.0-linux_x86_64"


def test_install_places_the_sdk_and_a_cmake_project_uses_it(bundler_cache: Path, ort_linux_wheel: Path,
                                                            tmp_path: Path) -> None:
    if shutil.which("cmake") is None:
        pytest.fail("cmake is not installed (.ci/run installs it)")
    library = wheel_member(ort_linux_wheel, "onnxruntime/capi/libonnxruntime.so.1.23.1", tmp_path / "lib")
    archive = linux_release_archive(tmp_path, library, header=STANDIN_HEADER_MINIMAL)
    folder = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = folder / "quickstart-linux.toml"
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    manifest.write_text(manifest.read_text().replace(
        '[python]', f'archive = {{ path = "{archive}", sha256 = "{sha}", allow_outside = true }}\n\n[python]'))
    run_cli("fetch", "-q", "--cache", str(bundler_cache), str(manifest))
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(tmp_path / "dist"), str(manifest))
    with zipfile.ZipFile(tmp_path / "dist" / f"{STEM}.zip") as bundle:
        bundle.extractall(tmp_path / "unzipped")
        record = json.loads(bundle.read(f"{STEM}/bundle.json"))
    assert record["ort_archive"]["version"] == "1.23.1"
    root = tmp_path / "opt" / "ort app"
    proc = subprocess.run(["sh", str(tmp_path / "unzipped" / STEM / "install.sh"), "--install-dir", str(root)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    receipt = json.loads((root / "receipt.json").read_text())
    installed = {entry["path"] for entry in receipt["files"]}  # receipt format 2: every file with its sha256
    assert "sdk/lib/cmake/onnxruntime/onnxruntimeConfig.cmake" in installed
    assert "sdk/lib/libonnxruntime.so.1.23.1" in installed
    config = root / "sdk" / "lib" / "cmake" / "onnxruntime" / "onnxruntimeConfig.cmake"
    assert config.is_file()

    project = consumer_project(tmp_path / "consumer", "1.23")
    build = tmp_path / "build"
    configured = cmake("-S", str(project), "-B", str(build), f"-DCMAKE_PREFIX_PATH={root}/sdk")
    assert configured.returncode == 0, configured.stdout + configured.stderr
    built = cmake("--build", str(build))
    assert built.returncode == 0, built.stdout + built.stderr
    run = subprocess.run([str(build / "consumer")], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "1.23.1", run.stdout + run.stderr
    too_new = cmake("-S", str(consumer_project(tmp_path / "too-new", "1.24")), "-B", str(tmp_path / "b2"),
                    f"-DCMAKE_PREFIX_PATH={root}/sdk")
    assert too_new.returncode != 0 and "1.23.1" in too_new.stdout + too_new.stderr
