"""Build and verify for real: the quickstart manifests, reproducibility, interruption, tampering."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli

pytestmark = pytest.mark.integration

LINUX_STEM = "quickstart-linux-1.0.0-linux_x86_64"
WIN_STEM = "quickstart-win-1.0.0-win_amd64"
#: What every Windows bundle carries for "Try it first in Windows Sandbox" (issue 28); its program is the shipped
#: package's (payload/ort_bundle/sandbox), which every bundle carries whole.
SANDBOX_FILES = ("try-in-sandbox.cmd",)
SANDBOX_MODULES = ("payload/ort_bundle/sandbox/sandbox.py", "payload/ort_bundle/sandbox/sandbox_render.py")


def copy_manifests(dest: Path) -> Path:
    """The manifests folder somewhere else, so paths relative to the manifest are exercised."""
    shutil.copytree(MANIFESTS, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def build(manifest: Path, out: Path, cache: Path, *, env: dict[str, str] | None = None) -> Path:
    """The real command; the zip's path is what `build --json` reports, not a guess at its name."""
    proc = run_cli("build", "--json", "--cache", str(cache), "-o", str(out), str(manifest), env=env)
    return Path(json.loads(proc.stdout)["zip"])


@pytest.fixture(scope="module")
def linux_zip(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    return build(MANIFESTS / "quickstart-linux.toml", out, bundler_cache)


def test_quickstart_bundles_have_the_documented_layout(linux_zip: Path, bundler_cache: Path,
                                                       tmp_path: Path) -> None:
    win_zip = build(MANIFESTS / "quickstart-win.toml", tmp_path, bundler_cache)
    for path, stem, scripts in ((linux_zip, LINUX_STEM, {"install.sh", "uninstall.sh", "apply-delta.sh"}),
                                (win_zip, WIN_STEM, {"install.ps1", "install.cmd", "uninstall.ps1", "uninstall.cmd",
                                                     "apply-delta.cmd", *SANDBOX_FILES})):
        with zipfile.ZipFile(path) as archive:
            names = {n[len(stem) + 1:] for n in archive.namelist() if not n.endswith("/")}
            assert all(n.startswith(stem + "/") for n in archive.namelist())
            record = json.loads(archive.read(f"{stem}/bundle.json"))
            sums = archive.read(f"{stem}/SHA256SUMS").decode()
        assert scripts <= names and set(SANDBOX_MODULES) <= names
        # try-in-sandbox.cmd (issue 28) and apply-delta (issue 39) run from the bundle: in SHA256SUMS, never installed
        plan = json.loads(zipfile.ZipFile(path).read(f"{stem}/install-plan.json"))
        assert not {entry["from"] for entry in plan["copy"]} & {*SANDBOX_FILES, "apply-delta.sh", "apply-delta.cmd"}
        if stem == LINUX_STEM:
            assert not names & set(SANDBOX_FILES)
        assert {"bundle.json", "install-plan.json", "SHA256SUMS", "README-INSTALL.txt",
                "payload/models/tiny-mlp.onnx", "payload/wheels/requirements.txt"} <= names
        assert record["ort"]["version"] == "1.23.1" and record["ort"]["route"] == "capi"
        assert record["manifest"]["bundle"]["name"] == stem.split("-1.0.0")[0]
        listed = {line.split("  ", 1)[1] for line in sums.splitlines()}
        assert listed == names - {"SHA256SUMS"}
        assert path.with_name(path.name + ".sha256").read_text() == f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}\n"
    with zipfile.ZipFile(win_zip) as archive:
        wheels = [n for n in archive.namelist() if n.endswith(".whl")]
    assert any(n.endswith("onnxruntime-1.23.1-cp311-cp311-win_amd64.whl") for n in wheels)
    assert any("pyreadline3" in n for n in wheels)  # the target's marker, not this machine's
    assert all(n.endswith(("-win_amd64.whl", "-any.whl")) for n in wheels)


def test_sha256sums_checks_with_sha256sum(linux_zip: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(linux_zip) as archive:
        archive.extractall(tmp_path)
    proc = subprocess.run(["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=tmp_path / LINUX_STEM,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": OK") >= 15


def test_build_is_byte_identical_across_directory_user_umask_tz_and_locale(linux_zip: Path, bundler_cache: Path,
                                                                            tmp_path: Path) -> None:
    elsewhere = copy_manifests(tmp_path / "some where" / "else")
    env = {**os.environ, "TZ": "Pacific/Chatham", "LANG": "de_DE.UTF-8", "LC_ALL": "C", "SOURCE_DATE_EPOCH": "1"}
    script = (f"import os, sys, runpy; os.umask(0o077); sys.argv = ['bundler', 'build', '-q', '--cache', "
              f"{str(tmp_path / 'cache')!r}, '-o', {str(tmp_path / 'out')!r}, {str(elsewhere / 'quickstart-linux.toml')!r}];"
              "runpy.run_module('bundler', run_name='__main__')")
    shutil.copytree(bundler_cache / "sha256", tmp_path / "cache" / "sha256")  # same inputs, cold member cache
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    again = tmp_path / "out" / linux_zip.name
    assert again.read_bytes() == linux_zip.read_bytes()


def test_sigkilled_build_leaves_no_zip_and_the_next_build_succeeds(bundler_cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cache = tmp_path / "cache"
    shutil.copytree(bundler_cache / "sha256", cache / "sha256")  # cold member cache: the build takes seconds
    proc = subprocess.Popen([sys.executable, "-m", "bundler", "build", "-q", "--cache", str(cache), "-o", str(out),
                             str(MANIFESTS / "quickstart-linux.toml")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and not any(out.glob(".*.tmp")):
            time.sleep(0.01)
        assert any(out.glob(".*.tmp")), "the build never started writing its temporary zip"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not (out / f"{LINUX_STEM}.zip").exists()
    assert not (out / f"{LINUX_STEM}.zip.sha256").exists()
    run_cli("build", "-q", "--cache", str(cache), "-o", str(out), str(MANIFESTS / "quickstart-linux.toml"))
    assert run_cli("verify", str(out / f"{LINUX_STEM}.zip")).returncode == 0


def rewrite(src: Path, dest: Path, *, drop: str | None = None, change: str | None = None,
            add: str | None = None) -> Path:
    """A copy of a bundle with one member removed, altered or added (the tampering verify must catch)."""
    with zipfile.ZipFile(src) as old, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            if info.filename == f"{LINUX_STEM}/{drop}":
                continue
            data = old.read(info)
            if info.filename == f"{LINUX_STEM}/{change}":
                data = data.replace(b"x", b"y", 1) + b"\n"
            new.writestr(info, data)
        if add:
            new.writestr(f"{LINUX_STEM}/{add}", b"surprise\n")
    return dest


@pytest.mark.parametrize(("kind", "member"), [("missing", "payload/models/tiny-mlp.onnx"),
                                               ("altered", "payload/app/infer.py"),
                                               ("extra", "payload/models/extra.onnx")])
def test_verify_catches_missing_altered_and_extra_files(linux_zip: Path, tmp_path: Path, kind: str, member: str) -> None:
    target = tmp_path / linux_zip.name
    rewrite(linux_zip, target, drop=member if kind == "missing" else None,
            change=member if kind == "altered" else None, add=member if kind == "extra" else None)
    proc = run_cli("verify", "--json", str(target), check=False)
    assert proc.returncode == 8
    report = json.loads(proc.stdout)
    assert report[kind] == [member] and not report["ok"]


def test_verify_passes_a_good_bundle_and_rejects_a_truncated_one(linux_zip: Path, tmp_path: Path) -> None:
    report = json.loads(run_cli("verify", "--json", str(linux_zip)).stdout)
    assert report["ok"] and report["files"] >= 15
    truncated = tmp_path / linux_zip.name
    truncated.write_bytes(linux_zip.read_bytes()[: linux_zip.stat().st_size // 2])
    proc = run_cli("verify", str(truncated), check=False)
    assert proc.returncode == 8 and "not a readable zip" in proc.stderr


def test_build_without_fetch_lists_every_missing_input(tmp_path: Path) -> None:
    proc = run_cli("build", "--cache", str(tmp_path / "empty"), "-o", str(tmp_path / "out"),
                   str(MANIFESTS / "quickstart-linux.toml"), check=False)
    assert proc.returncode == 4
    assert "run `ort-bundler fetch` first" in proc.stderr
    for key in ("ort.capi", "models[0]", "launch.script", "lock:numpy", "lock:sympy"):
        assert key in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_verify_reports_duplicate_and_encrypted_entries(linux_zip: Path, tmp_path: Path) -> None:
    doubled = tmp_path / "doubled" / linux_zip.name
    doubled.parent.mkdir()
    with zipfile.ZipFile(linux_zip) as old, zipfile.ZipFile(doubled, "w") as new, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile warns about the duplicate we write on purpose
        new.writestr(f"{LINUX_STEM}/payload/app/infer.py", b"print('evil')\n")  # first copy wins in some tools
        for info in old.infolist():
            new.writestr(info, old.read(info))
    proc = run_cli("verify", "--json", str(doubled), check=False)
    assert proc.returncode == 8
    assert any("appears twice" in p for p in json.loads(proc.stdout)["problems"])

    flagged = tmp_path / "flagged" / linux_zip.name
    flagged.parent.mkdir()
    data = bytearray(linux_zip.read_bytes())
    name = f"{LINUX_STEM}/payload/app/infer.py".encode()
    for signature, flag_offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # local and central headers
        start = 0
        while (start := data.find(signature, start)) != -1:
            name_offset = 30 if signature == b"PK\x03\x04" else 46
            if data[start + name_offset:start + name_offset + len(name)] == name:
                data[start + flag_offset] |= 0x1
            start += 4
    flagged.write_bytes(bytes(data))
    proc = run_cli("verify", "--json", str(flagged), check=False)
    assert proc.returncode == 8 and "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    assert any("marked encrypted" in p for p in report["problems"])
    assert report["altered"] == ["payload/app/infer.py"]


def test_a_corrupt_cached_archive_input_fails_the_build(bundler_cache: Path, tmp_path: Path) -> None:
    """Inputs the build only unpacks (here the capi wheel) are hashed again from the cache."""
    from bundler.manifest import load
    from bundler.sources.cache import Cache

    cache = tmp_path / "cache"
    shutil.copytree(bundler_cache / "sha256", cache / "sha256")
    capi = load(MANIFESTS / "quickstart-linux.toml").ort.capi
    cached = Cache(cache).find_any(capi.sha256, capi.filename)
    data = bytearray(cached.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cached.write_bytes(bytes(data))
    proc = run_cli("build", "--cache", str(cache), "-o", str(tmp_path / "out"),
                   str(MANIFESTS / "quickstart-linux.toml"), check=False)
    assert proc.returncode == 5
    assert "(for ort.capi); the cache is corrupt" in proc.stderr
