"""A renamed bundle verifies when its content is intact (issue 38, item 3).

Browsers and shares rename downloads (`app (1).zip`, `app-signed.zip`); `verify` said FAILED (exit 8) for
such a bundle, signed and `--trust`ed ones included. The bundle's identity is its content (SHA256SUMS, the
signature over it, bundle.json's name and version against the top folder), so a renamed bundle passes and the
name is printed as a note. A renamed bundle whose content changed still fails.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli
from fixtures.signing_pki import Pki

STEM = "quickstart-linux-1.0.0-linux_x86_64"


@pytest.fixture(scope="module")
def built(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Pki]:
    out = tmp_path_factory.mktemp("renamed")
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(out / "dist"), str(MANIFESTS / "quickstart-linux.toml"))
    pki = Pki.make(out / "pki", "good")
    run_cli("sign", "-q", "--cache", str(bundler_cache), str(out / "dist" / f"{STEM}.zip"), "-o", str(out / "signed"),
            "--cert", str(pki.cert), "--key", str(pki.key), "--chain", str(pki.chain))
    return out / "dist" / f"{STEM}.zip", out / "signed" / f"{STEM}.zip", pki


def renamed(source: Path, folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(source, folder / name))


@pytest.mark.integration
@pytest.mark.parametrize("name", ["app (1).zip", "app-signed.zip", f"{STEM} (2).zip"])
def test_a_renamed_unsigned_bundle_passes_with_a_note(built, tmp_path: Path, bundler_cache: Path, name: str) -> None:
    plain, _, _ = built
    copy = renamed(plain, tmp_path, name)
    proc = run_cli("verify", "--cache", str(bundler_cache), str(copy), check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{name}: OK")
    assert f"note: the file is named '{name}' but holds the bundle '{STEM}'" in proc.stdout
    report = json.loads(run_cli("verify", "--json", "--cache", str(bundler_cache), str(copy)).stdout)
    assert report["ok"] is True and report["notes"] == [
        f"the file is named '{name}' but holds the bundle '{STEM}' (renamed after the build; its content is what "
        "was checked)"]


@pytest.mark.integration
@pytest.mark.parametrize("name", ["app (1).zip", "app-signed.zip"])
def test_a_renamed_signed_bundle_passes_against_its_trust_anchor(built, tmp_path: Path, bundler_cache: Path,
                                                                  name: str) -> None:
    _, signed, pki = built
    copy = renamed(signed, tmp_path, name)
    proc = run_cli("verify", "--cache", str(bundler_cache), "--trust", str(pki.root), str(copy), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "note: the file is named" in proc.stdout
    assert "SHA256SUMS.p7s (cms): ok, signed by good Code Signing, chain reaches the anchor" in proc.stdout


@pytest.mark.integration
def test_the_build_s_own_name_has_no_note(built, bundler_cache: Path) -> None:
    plain, signed, pki = built
    assert "note:" not in run_cli("verify", "--cache", str(bundler_cache), str(plain)).stdout
    assert "note:" not in run_cli("verify", "--cache", str(bundler_cache), "--trust", str(pki.root), str(signed)).stdout


@pytest.mark.integration
def test_a_renamed_bundle_whose_content_changed_still_fails(built, tmp_path: Path, bundler_cache: Path) -> None:
    plain, _, _ = built
    edited = tmp_path / "app (1).zip"
    with zipfile.ZipFile(plain) as old, zipfile.ZipFile(edited, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            data = old.read(info)
            new.writestr(info, data + b"\n# added\n" if info.filename.endswith("/install.sh") else data)
    proc = run_cli("verify", "--cache", str(bundler_cache), str(edited), check=False)
    assert proc.returncode == 8
    assert "altered (hash differs): install.sh" in proc.stderr and "note: the file is named" in proc.stderr
