"""Delta bundles on real quickstart releases (issue 39): two versions built for real (lock through pip, fetch,
build), `ort-bundler delta`, then the delta carried alone to a folder holding only the old zip and applied
there by the old release's own applier: the file the old zip ships, run by a plain Python 3.8 (the oldest
target) that cannot import ort-bundler, and `run.sh --apply` of the old release installed for real. The
result is the new release byte for byte, `sha256sum -c` agrees, and a signed pair gives the signed zip that
`verify --trust` accepts. The applier never compresses: it runs with Python's compressors made to raise."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli
from integration.linux_install.test_install_linux import sh, unzip
from integration.real_wheels.test_diff import variant
from integration.real_wheels.test_sign import CACHE, pki, sign  # noqa: F401 (the test PKI fixture)
from unit.shipped.test_selfcheck import oldest_python

pytestmark = pytest.mark.integration

OLD_STEM = "quickstart-linux-1.0.0-linux_x86_64"
NEW_STEM = "quickstart-linux-1.1.0-linux_x86_64"
SHIPPED_APPLIER = f"{OLD_STEM}/payload/ort_bundle/delta_apply.py"
NO_COMPRESSION = """
import lzma, runpy, sys, zlib
def refuse(*args, **kwargs):
    raise AssertionError("the applier called a compressor")
zlib.compress = zlib.compressobj = lzma.compress = lzma.LZMACompressor = refuse
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def releases(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """1.0.0, and 1.1.0 with a wheel added (six), another model under the same name and one env variable."""
    out = tmp_path_factory.mktemp("releases")
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(out / "old"), str(MANIFESTS / "quickstart-linux.toml"))
    manifest = variant(out / "variant")
    manifest.write_text(manifest.read_text(encoding="utf-8").replace('version = "1.0.0"', 'version = "1.1.0"', 1),
                        encoding="utf-8")
    for command in ("lock", "fetch"):
        run_cli(command, "-q", "--cache", str(bundler_cache), str(manifest))
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(out / "new"), str(manifest))
    return out / "old" / f"{OLD_STEM}.zip", out / "new" / f"{NEW_STEM}.zip"


@pytest.fixture(scope="module")
def made(releases: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    old, new = releases
    out = tmp_path_factory.mktemp("deltas")
    report = json.loads(run_cli("delta", "--json", str(old), str(new), "-o", str(out)).stdout)
    delta = out / "quickstart-linux-1.0.0-to-1.1.0-linux_x86_64.delta"
    assert report["delta"] == str(delta) and delta.is_file()
    return delta, report


def far_side(tmp_path: Path, old: Path, delta: Path) -> Path:
    """A folder holding only what crosses the air gap and what is already there: the old zip and the delta."""
    far = tmp_path / "far"
    far.mkdir()
    shutil.copy2(old, far / old.name)
    shutil.copy2(delta, far / delta.name)
    return far


def shipped_applier(old: Path, dest: Path) -> Path:
    with zipfile.ZipFile(old) as archive:
        dest.write_bytes(archive.read(SHIPPED_APPLIER))
    return dest


def test_the_old_releases_applier_on_a_plain_python_rebuilds_the_new_release(releases, made, tmp_path) -> None:
    old, new = releases
    delta, _ = made
    far = far_side(tmp_path, old, delta)
    applier = shipped_applier(old, tmp_path / "delta_apply.py")
    python = oldest_python() or sys.executable
    plain = {"PATH": os.environ["PATH"]}
    assert subprocess.run([python, "-I", "-S", "-c", "import bundler"], capture_output=True, env=plain).returncode != 0
    proc = subprocess.run([python, "-I", "-S", str(applier), old.name, delta.name, "-o", "result"], cwd=far,
                          capture_output=True, text=True, env=plain)
    assert proc.returncode == 0, proc.stderr
    assert "quickstart-linux 1.1.0 for linux_x86_64 (was 1.0.0)" in proc.stdout
    result = far / "result" / new.name
    assert sha256(result) == sha256(new)
    check = subprocess.run(["sha256sum", "-c", f"{new.name}.sha256"], cwd=far / "result", capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.strip() == f"{new.name}: OK", check.stdout + check.stderr
    assert (far / "result" / f"{new.name}.sha256").read_bytes() == new.with_name(f"{new.name}.sha256").read_bytes()


def test_the_delta_carries_little_more_than_the_changed_members(releases, made) -> None:
    """At most the stored bytes of the members that are new or changed, plus 64 KiB (the issue's bound)."""
    old, new = releases
    delta, report = made
    with zipfile.ZipFile(new) as archive:
        stored = {info.filename.split("/", 1)[1]: info.compress_size for info in archive.infolist()}
    carried = sum(stored[name] for name in (*report["members"]["added"], *report["members"]["changed"]))
    assert delta.stat().st_size <= carried + 64 * 1024, (delta.stat().st_size, carried)
    assert report["copied"] > 0.95 * new.stat().st_size


def test_the_applier_never_compresses(releases, made, tmp_path) -> None:
    old, new = releases
    delta, _ = made
    applier = shipped_applier(old, tmp_path / "delta_apply.py")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", NO_COMPRESSION, str(applier), str(old), str(delta),
                           "-o", str(tmp_path / "out")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert sha256(tmp_path / "out" / new.name) == sha256(new)
    # The guard bites: the same harness around a script that compresses fails.
    (tmp_path / "compresses.py").write_text("import zlib\nzlib.compress(b'x')\n")
    bitten = subprocess.run([sys.executable, "-I", "-S", "-c", NO_COMPRESSION, str(tmp_path / "compresses.py")],
                            capture_output=True, text=True)
    assert bitten.returncode != 0 and "called a compressor" in bitten.stderr


def test_delta_json_and_diff_agree_on_what_changed(releases, made) -> None:
    old, new = releases
    _, report = made
    differs = run_cli("diff", "--json", str(old), str(new), check=False)
    assert differs.returncode == 1, differs.stderr  # diff(1)'s convention: 1 when the bundles differ
    diff = json.loads(differs.stdout)
    assert report["changes"] == diff["changes"]
    assert [(c["kind"], c["change"], c["subject"]) for c in diff["changes"]] == [
        ("bundle", "changed", "version"), ("wheel", "added", "six"), ("model", "changed", "tiny-mlp"),
        ("environment", "added", "APP_MODE")]
    # The members, as zipfile reads them: what the delta says it carries anew is what differs in content.
    with zipfile.ZipFile(old) as before, zipfile.ZipFile(new) as after:
        was = {i.filename.split("/", 1)[1]: (i.CRC, i.file_size) for i in before.infolist()}
        now = {i.filename.split("/", 1)[1]: (i.CRC, i.file_size) for i in after.infolist()}
    members = report["members"]
    assert members["added"] == sorted(set(now) - set(was))
    assert members["removed"] == sorted(set(was) - set(now))
    assert members["changed"] == sorted(name for name in set(now) & set(was) if now[name] != was[name])
    assert any(name.startswith("payload/wheels/six-1.17.0") for name in members["added"])
    assert "payload/models/tiny-mlp.onnx" in members["changed"]


@pytest.fixture(scope="module")
def installed_old(releases: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The old release, installed for real with its install.sh: what the far side already has."""
    work = tmp_path_factory.mktemp("installed")
    bundle = unzip(releases[0], work)
    root = work / "opt" / "app"
    proc = sh(bundle / "install.sh", "--install-dir", str(root), "--log-path", str(work / "install.log"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


def test_run_sh_apply_of_the_installed_old_release_rebuilds_the_new_one(releases, made, installed_old, tmp_path):
    old, new = releases
    delta, _ = made
    far = far_side(tmp_path, old, delta)
    proc = subprocess.run([str(installed_old / "run.sh"), "--apply", old.name, delta.name, "-o", "result"], cwd=far,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sha256(far / "result" / new.name) == sha256(new)
    wrong = subprocess.run([str(installed_old / "run.sh"), "--apply", str(new), delta.name, "-o", "again"], cwd=far,
                           capture_output=True, text=True)
    assert wrong.returncode == 23 and not (far / "again").exists(), wrong.stderr


def test_a_delta_between_signed_releases_gives_the_signed_zip_that_verify_trust_accepts(
        releases, pki, tmp_path) -> None:
    old, new = releases
    for zip_path, folder in ((old, "signed-old"), (new, "signed-new")):
        sign(zip_path, tmp_path / folder, pki["good"])
    signed_old, signed_new = tmp_path / "signed-old" / old.name, tmp_path / "signed-new" / new.name
    run_cli("delta", "-q", str(signed_old), str(signed_new), "-o", str(tmp_path / "deltas"))
    delta = tmp_path / "deltas" / "quickstart-linux-1.0.0-to-1.1.0-linux_x86_64.delta"
    run_cli("apply", "-q", str(signed_old), str(delta), "-o", str(tmp_path / "result"))
    result = tmp_path / "result" / new.name
    assert sha256(result) == sha256(signed_new) != sha256(new)
    proc = run_cli("verify", "--cache", str(CACHE), "--trust", str(pki["good"].root), str(result), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # An unsigned old release is not the signed one the delta was made from.
    wrong = run_cli("apply", str(old), str(delta), "-o", str(tmp_path / "again"), check=False)
    assert wrong.returncode == 23 and "sha256" in wrong.stderr


def test_delta_refuses_what_is_not_two_releases_of_one_bundle(releases, tmp_path) -> None:
    old, new = releases
    out = tmp_path / "out"

    def refused(code: int, first: Path, second: Path, words: str) -> None:
        proc = run_cli("delta", str(first), str(second), "-o", str(out), check=False)
        assert proc.returncode == code and words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()

    with zipfile.ZipFile(tmp_path / "plain.zip", "w") as plain:
        plain.writestr("folder/file.txt", "not a bundle")
    refused(8, tmp_path / "plain.zip", new, "expected a bundle made by `ort-bundler build`")
    other = tmp_path / old.name
    with zipfile.ZipFile(old) as source, zipfile.ZipFile(other, "w", zipfile.ZIP_DEFLATED) as dest:
        for info in source.infolist():
            data = source.read(info)
            dest.writestr(info, data.replace(b'"name": "quickstart-linux"', b'"name": "another-app"')
                          if info.filename.endswith("/bundle.json") else data)
    refused(2, other, new, "a delta is between two releases of one bundle")
    (tmp_path / "copy").mkdir()
    shutil.copy2(new, tmp_path / "copy" / new.name)
    (tmp_path / "copy" / f"{new.name}.sha256").write_text(f"{'0' * 64}  {new.name}\n")
    refused(8, old, tmp_path / "copy" / new.name, ".sha256")
