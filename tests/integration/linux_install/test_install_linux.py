"""The whole flow, for real, on linux_x86_64: lock (committed), fetch, build, unzip, install.sh,
self-check, run a model through run.sh, tamper, fail midway, re-run, uninstall."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest
from fixtures.cli import MANIFESTS, run_cli
from unit.shipped.test_install_sh import UNLISTED_BYTECODE

pytestmark = pytest.mark.integration

STEM = "quickstart-linux-1.0.0-linux_x86_64"
OK, INTEGRITY, INSTALL, SELFCHECK = 0, 11, 13, 14


def sh(script: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(script), *args], capture_output=True, text=True, env=env, timeout=600)


def unzip(zip_path: Path, dest: Path) -> Path:
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(dest)
    for script in (dest / STEM).glob("*.sh"):
        script.chmod(0o755)
    return dest / STEM


def tree(root: Path) -> dict[str, str]:
    """Every file under root with its sha256: what "untouched" is compared against."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def bundle_zip(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(out), str(MANIFESTS / "quickstart-linux.toml"))
    return out / f"{STEM}.zip"


@pytest.fixture(scope="module")
def installed(bundle_zip: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(bundle folder, install root) after one real install."""
    work = tmp_path_factory.mktemp("install")
    bundle = unzip(bundle_zip, work)
    root = work / "opt" / "quick start"
    proc = sh(bundle / "install.sh", "--install-dir", str(root), "--log-path", str(work / "install.log"))
    assert proc.returncode == OK, proc.stdout + proc.stderr + (work / "install.log").read_text()
    return bundle, root


def test_install_runs_the_self_check_and_the_entry_point(installed: tuple[Path, Path]) -> None:
    _, root = installed
    receipt = json.loads((root / "receipt.json").read_text())
    assert receipt["selfcheck"]["passed"] is True and receipt["install_id"] == "quickstart-linux-1.0.0"
    check = subprocess.run([str(root / "run.sh"), "--self-check", "--json"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    report = json.loads(check.stdout)
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert statuses["onnxruntime"] == statuses["identity"] == statuses["model:tiny-mlp"] == "pass"
    run = subprocess.run([str(root / "run.sh")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert f"onnxruntime 1.23.1 from {root}/venv/" in run.stdout
    assert "y [[0.5312, 0.0, 1.6562], [0.0312, 0.0, 2.1562]]" in run.stdout  # relu(x @ W + b), computed by ORT


def cache_line(log: str) -> str:
    [line] = [line for line in log.splitlines() if "self-check: PASS cache:" in line or "self-check: WARN cache:" in line]
    return line


def test_the_install_time_self_check_measures_the_cache_folder_the_launchers_use(
        installed: tuple[Path, Path], bundle_zip: Path, tmp_path: Path) -> None:
    """Issue 26, defect 3: with --cache-dir the install-time check measures that folder (not the temp folder), as
    run.sh --self-check does after the install; without one it says it measured the temp folder, and why; the
    MSI's CACHEDIR, handed to the check before msi-finish writes cache_dir.txt, is measured too."""
    extracted, _ = installed
    plain = cache_line((extracted.parent / "install.log").read_text())
    assert "in the temp folder" in plain and "unknown at install time" in plain, plain

    bundle = unzip(bundle_zip, tmp_path / "bundle")
    root, cache = tmp_path / "opt" / "app", tmp_path / "chosen cache"
    env = {k: v for k, v in os.environ.items() if k != "ORT_BUNDLE_CACHE_DIR"}
    proc = sh(bundle / "install.sh", "--install-dir", str(root), "--cache-dir", str(cache),
              "--log-path", str(tmp_path / "install.log"), env=env)
    assert proc.returncode == OK, proc.stdout + proc.stderr
    line = cache_line((tmp_path / "install.log").read_text())
    assert f"for the cache directory {cache} (from cache_dir.txt)" in line, line
    after = subprocess.run([str(root / "run.sh"), "--self-check", "--json"], capture_output=True, text=True, env=env)
    check = next(c for c in json.loads(after.stdout)["checks"] if c["id"] == "cache")
    assert check["details"]["cache_dir"] == str(cache)

    msi_cache = tmp_path / "msi cache"
    finish = subprocess.run([sys.executable, "-I", "-B", str(root / "installer" / "ort_bundle" / "__main__.py"), "engine", "msi-finish", "--root",
                             str(root), "--cache-dir", str(msi_cache), "--log-file", str(tmp_path / "msi.log")],
                            capture_output=True, text=True, env=env, timeout=600)
    assert finish.returncode == OK, finish.stderr
    assert f"for the cache directory {msi_cache} (from the MSI's CACHEDIR" in cache_line((tmp_path / "msi.log").read_text())
    assert (root / "cache_dir.txt").read_text() == f"{msi_cache}\n"
    # and the receipt names the log msi-finish wrote, as the zip route's install names its own (issue 26, defect 1)
    assert json.loads((root / "receipt.json").read_text())["install_log"] == str(tmp_path / "msi.log")


def test_rerun_of_the_same_bundle_is_a_no_op(installed: tuple[Path, Path]) -> None:
    bundle, root = installed
    before = tree(root)
    proc = sh(bundle / "install.sh", "--install-dir", str(root))
    assert proc.returncode == OK, proc.stderr
    assert tree(root) == before


def test_tampered_payload_is_refused_and_nothing_is_installed(bundle_zip: Path, tmp_path: Path) -> None:
    bundle = unzip(bundle_zip, tmp_path)
    model = bundle / "payload" / "models" / "tiny-mlp.onnx"
    model.write_bytes(model.read_bytes() + b"\0")
    root = tmp_path / "root"
    proc = sh(bundle / "install.sh", "--install-dir", str(root))
    assert proc.returncode == INTEGRITY
    assert "payload/models/tiny-mlp.onnx" in proc.stdout + proc.stderr
    assert not root.exists()


def test_failure_midway_leaves_the_previous_install_working(installed: tuple[Path, Path], bundle_zip: Path,
                                                            tmp_path: Path) -> None:
    """A bundle whose wheel is broken (its sums regenerated, as if built from a bad input) fails in pip."""
    _, good_root = installed
    root = tmp_path / "root"
    shutil.copytree(good_root, root, symlinks=True)
    bundle = unzip(bundle_zip, tmp_path / "bad")
    wheel = next((bundle / "payload" / "wheels").glob("flatbuffers-*.whl"))
    wheel.write_bytes(b"not a wheel")
    sums = bundle / "SHA256SUMS"
    text = sums.read_text()
    rel = str(wheel.relative_to(bundle))
    old = next(line for line in text.splitlines() if line.endswith(rel)).split()[0]
    sums.write_text(text.replace(old, hashlib.sha256(b"not a wheel").hexdigest()))
    before = tree(root)
    proc = sh(bundle / "install.sh", "--install-dir", str(root), "--force")
    assert proc.returncode == INSTALL, proc.stdout + proc.stderr
    assert tree(root) == before
    assert not [p for p in root.parent.iterdir() if p.name != "root" and p.name.startswith(".")]  # no staging left
    run = subprocess.run([str(root / "run.sh"), "--self-check"], capture_output=True, text=True)
    assert run.returncode == 0 and "Result: PASSED" in run.stdout, run.stdout + run.stderr


def quickstart_model():
    """The quickstart's model as built by its script (to derive a changed copy from)."""
    sys.path.insert(0, str(MANIFESTS / "models"))
    try:
        from make_models import tiny_mlp
    finally:
        sys.path.remove(str(MANIFESTS / "models"))
    return tiny_mlp()


def test_self_check_catches_a_stray_onnxruntime_a_missing_model_and_a_changed_model(
        installed: tuple[Path, Path], tmp_path: Path) -> None:
    _, root = installed
    selfcheck = [str(root / "run.sh"), "--self-check", "--json"]

    stray = tmp_path / "stray"
    (stray / "onnxruntime").mkdir(parents=True)
    (stray / "onnxruntime" / "__init__.py").write_text("__version__ = '0.0.0'\n")
    env = {**os.environ, "PYTHONPATH": str(stray)}
    # Through the launcher the self-check runs isolated (-I, issue 34 §3): PYTHONPATH cannot bring the stray in.
    proc = subprocess.run(selfcheck, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Started without the launcher, by an interpreter that honours PYTHONPATH, the check names the stray.
    direct = [str(root / "venv" / "bin" / "python"), str(root / "installer" / "ort_bundle" / "__main__.py"), "selfcheck",
              "--json"]
    proc = subprocess.run(direct, capture_output=True, text=True, env=env)
    assert proc.returncode != 0
    failed = {c["id"]: c["message"] for c in json.loads(proc.stdout)["checks"] if c["status"] == "fail"}
    assert str(stray) in failed["onnxruntime"]

    model = root / "models" / "tiny-mlp.onnx"
    original = model.read_bytes()
    try:
        model.unlink()
        proc = subprocess.run(selfcheck, capture_output=True, text=True)
        failed = {c["id"]: c["message"] for c in json.loads(proc.stdout)["checks"] if c["status"] == "fail"}
        assert proc.returncode != 0 and "tiny-mlp" in failed["model:tiny-mlp"]

        changed = quickstart_model()  # same model, other bias: loads, runs, answers differently
        changed.graph.initializer[1].raw_data = bytes(reversed(changed.graph.initializer[1].raw_data))
        model.write_bytes(changed.SerializeToString())
        proc = subprocess.run(selfcheck, capture_output=True, text=True)
        failed = {c["id"]: c["message"] for c in json.loads(proc.stdout)["checks"] if c["status"] == "fail"}
        assert proc.returncode != 0 and "model:tiny-mlp" in failed
    finally:
        model.write_bytes(original)
    assert subprocess.run(selfcheck, capture_output=True, text=True).returncode == 0


def test_uninstall_removes_exactly_what_the_install_created(bundle_zip: Path, tmp_path: Path) -> None:
    bundle = unzip(bundle_zip, tmp_path)
    parent = tmp_path / "opt"
    parent.mkdir()
    (parent / "keep.txt").write_text("not ours\n")
    root = parent / "app"
    assert sh(bundle / "install.sh", "--install-dir", str(root), "--no-self-check").returncode == OK
    (root / "user-data.txt").write_text("made by the user after the install\n")
    proc = sh(bundle / "uninstall.sh", "--install-dir", str(root))
    assert proc.returncode == OK, proc.stdout + proc.stderr
    assert sorted(p.name for p in parent.iterdir()) == ["app", "keep.txt"]
    assert sorted(p.name for p in root.iterdir()) == ["user-data.txt"]


def record_problems(site_packages: Path) -> list[str]:
    """Every installed distribution's RECORD against the files on disk (hash and size), as pip would audit it."""
    import base64
    import csv

    problems = []
    for record in sorted(site_packages.glob("*.dist-info/RECORD")):
        for row in csv.reader(record.read_text(encoding="utf-8").splitlines()):
            path, digest, size = row
            file = (site_packages / path).resolve()
            if not digest:
                continue
            algorithm, _, expected = digest.partition("=")
            data = file.read_bytes() if file.is_file() else None
            actual = base64.urlsafe_b64encode(hashlib.new(algorithm, data).digest()).rstrip(b"=").decode() if data is not None else None
            if actual != expected or (size and int(size) != len(data or b"")):
                problems.append(f"{record.parent.name}: {path}")
    return problems


def test_the_environment_is_exactly_what_the_bundle_pins(installed: tuple[Path, Path]) -> None:
    """No pip or setuptools (the lock pins neither); every RECORD matches; scripts and pyvenv.cfg name the final folder."""
    bundle, root = installed
    site = root / "venv" / "lib" / "python3.11" / "site-packages"
    installed_names = sorted(p.name.split("-")[0].lower() for p in site.glob("*.dist-info"))
    pinned = sorted(line.split("==")[0].lower().replace("-", "_") for line in
                    (bundle / "payload" / "wheels" / "requirements.txt").read_text().splitlines())
    assert installed_names == pinned and "pip" not in installed_names and "setuptools" not in installed_names
    assert record_problems(site) == []
    scripts = [p for p in (root / "venv" / "bin").iterdir() if p.is_file() and not p.is_symlink()]
    texts = {p.name: p.read_bytes() for p in scripts}
    assert all(b".staging" not in data for data in [*texts.values(), (root / "venv" / "pyvenv.cfg").read_bytes()])
    assert {"coloredlogs", "humanfriendly", "f2py", "numpy-config", "isympy"} <= set(texts)
    assert texts["isympy"].startswith(f"#!{root}/venv/bin/python".encode()) or str(root).encode() in texts["isympy"]
    assert str(root).encode() in texts["activate"]
    proc = subprocess.run([str(root / "venv" / "bin" / "numpy-config"), "--version"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    unlisted = subprocess.run([str(root / "venv" / "bin" / "python"), "-I", "-c", UNLISTED_BYTECODE, str(site)],
                              capture_output=True, text=True, check=True)
    found = json.loads(unlisted.stdout)  # issue 26: RECORD lists the bytecode, as pip's does
    plan = json.loads((root / "install-plan.json").read_text())
    own = [PurePosixPath(e["to"]) for e in plan["venv"]["site_packages_files"] if e["to"].endswith(".py")]
    # what the plan itself puts into site-packages (the hook, ort_bundle) belongs to no distribution
    assert found["unlisted"] == sorted(str(p.parent / "__pycache__" / f"{p.stem}.{sys.implementation.cache_tag}.pyc")
                                       for p in own)
    assert len(found["pycs"]) > 1000 and found["absent"] == []
    receipt = {e["path"]: e["sha256"] for e in json.loads((root / "receipt.json").read_text())["files"]}
    for record in site.glob("*.dist-info/RECORD"):
        assert receipt[record.relative_to(root).as_posix()] == hashlib.sha256(record.read_bytes()).hexdigest()
    verify = subprocess.run([str(root / "run.sh"), "--verify"], capture_output=True, text=True)
    assert verify.returncode == 0 and "Result: OK" in verify.stdout, verify.stdout + verify.stderr


def test_the_install_folder_holds_an_uninstall_sh_that_needs_no_bundle(bundle_zip: Path, tmp_path: Path) -> None:
    """Issue 38 §6: a Linux install keeps uninstall.sh, as a Windows one keeps uninstall.cmd; run from there after
    the bundle is gone, it removes the install (the engine runs from a private copy it removes afterwards)."""
    bundle = unzip(bundle_zip, tmp_path / "unpacked")
    root = tmp_path / "opt" / "app"
    assert sh(bundle / "install.sh", "--install-dir", str(root), "--no-self-check").returncode == OK
    receipt = json.loads((root / "receipt.json").read_text(encoding="utf-8"))
    assert "uninstall.sh" in {entry["path"] for entry in receipt["files"]}
    shutil.rmtree(tmp_path / "unpacked")
    (root / "user-data.txt").write_text("made by the user after the install\n")
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    dry = subprocess.run(["sh", str(root / "uninstall.sh"), "--dry-run"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=600)
    assert dry.returncode == OK and (root / "receipt.json").is_file(), dry.stderr
    proc = subprocess.run([str(root / "uninstall.sh"), "--log-path", str(tmp_path / "uninstall.log")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == OK, proc.stdout + proc.stderr
    assert sorted(p.name for p in root.iterdir()) == ["user-data.txt"]
    assert list(temp.iterdir()) == []  # the private copy of the engine is gone too
    assert "removed from" in (tmp_path / "uninstall.log").read_text(encoding="utf-8")
