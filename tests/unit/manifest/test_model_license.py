"""`[[models]] license`: optional, an SPDX expression checked when the manifest is read, and what the SBOM says."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.cli import REPO

from bundler.assembly.sbom import model_component
from bundler.errors import ManifestError
from bundler.manifest import load

MODEL_SHA = "db67a4b8fc5f6964f6329c9db9dde717e7c0f1892abde30b0c141e1fbd2ece3a"


def manifest_with(tmp_path: Path, license_line: str) -> Path:
    path = tmp_path / "bundle.toml"
    path.write_text(f"""
[bundle]
name = "demo"
version = "1.0.0"
platform = "linux_x86_64"
python = "3.11"

[ort]
version = "1.23.1"
archive = {{ path = "onnxruntime-1.23.1.tgz", sha256 = "{'a' * 64}" }}

[[models]]
name = "net"
path = "net.onnx"
sha256 = "{MODEL_SHA}"
{license_line}
""", encoding="utf-8")
    return path


@pytest.mark.parametrize(("written", "kept"), [
    ("", None),
    ('license = "apache-2.0"', "Apache-2.0"),  # normalised through the SPDX index
    ('license = "MIT OR CC-BY-4.0"', "MIT OR CC-BY-4.0"),
    ('license = "LicenseRef-acme-model-terms"', "LicenseRef-acme-model-terms"),  # SPDX's form for unlisted licences
])
def test_model_licence_is_optional_and_normalised(tmp_path: Path, written: str, kept: str | None) -> None:
    [model] = load(manifest_with(tmp_path, written)).models
    assert model.license == kept


@pytest.mark.parametrize("written", ['license = "MIT License"', 'license = "BSD"', "license = 3"])
def test_a_model_licence_that_is_not_spdx_is_a_manifest_error(tmp_path: Path, written: str) -> None:
    with pytest.raises(ManifestError) as caught:
        load(manifest_with(tmp_path, written))
    assert caught.value.return_code == 3
    assert "bundle.toml: models[0].license: found " in str(caught.value)
    assert "expected an SPDX licence expression such as 'MIT'" in str(caught.value)


def test_a_bad_model_licence_exits_3_naming_the_key(tmp_path: Path) -> None:
    path = manifest_with(tmp_path, 'license = "Proprietary"')
    done = subprocess.run([sys.executable, "-m", "bundler", "build", str(path), "--cache", str(tmp_path / "c")],
                          capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 3
    assert "models[0].license: found 'Proprietary'" in done.stderr
    assert not (tmp_path / "c" / "derived").exists()


def test_the_sbom_states_the_model_licence_or_marks_it_unknown(tmp_path: Path) -> None:
    sha = hashlib.sha256(b"model").hexdigest()
    licensed = model_component("payload/models/net.onnx", sha, manifest=load(manifest_with(tmp_path, 'license = "MIT"')))
    assert [lic.id for lic in licensed.licenses] == ["MIT"]
    bare = model_component("payload/models/net.onnx", sha, manifest=load(manifest_with(tmp_path, "")))
    [unknown] = bare.licenses
    assert unknown.name == "unknown"
    assert [(p.name, p.value) for p in unknown.properties] == [
        ("ort-bundler:spdx", "unknown: the manifest gives no [[models]] license")]
