"""The model gate's wheels pinned for the build machine (issue 27, minor: "the gate's `pip install
onnxruntime==V numpy` has no `--only-binary :all:` and no hashes: pin both").

When the build machine cannot install the bundle's own ORT and NumPy (a win_amd64 bundle built on Linux),
`lock` pins this machine's wheels of the same versions in the lock's [gate] table, `fetch` brings them held
to their hashes, and the gate's environment is made from exactly them. Unit tests cover the table's
format and when it applies; integration tests lock, fetch and build the Windows quickstart for real on
this Linux host, and check the table against `pip download` and sha256, done independently here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli

from bundler import runner as runners
from bundler.assembly import ortenv
from bundler.assembly.models import gate_wheels
from bundler.errors import BuildError, ManifestError
from bundler.manifest import load
from bundler.sources.cache import Cache
from bundler.sources.fetch import cached_inputs
from bundler.sources.gate import gate_inputs, gate_problem, host_target, pip_targets
from bundler.sources.inputs import all_inputs, load_lock
from bundler.sources.lock import GateWheels, Lock, LockedWheel, Target, lock_text, read_lock, write_lock
from bundler.sources.resolve import resolve_gate

HOST = host_target()
on_a_target_host = pytest.mark.skipif(HOST is None or HOST.platform != "linux_x86_64",
                                      reason="the Windows quickstart's [gate] table is pinned for linux_x86_64")
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
TAG = f"cp3{sys.version_info.minor}"
WIN = Target(platform="win_amd64", python="3.11")
ORT = LockedWheel(name="onnxruntime", version="1.23.1", sha256="a" * 64,
                  filename=f"onnxruntime-1.23.1-{TAG}-{TAG}-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl")
NUMPY = LockedWheel(name="numpy", version="2.4.6", sha256="b" * 64,
                    filename=f"numpy-2.4.6-{TAG}-{TAG}-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl")


def gate_lock(*, python: str = PYTHON, wheels: tuple[LockedWheel, ...] = (NUMPY, ORT)) -> Lock:
    gate = GateWheels(target=Target(platform="linux_x86_64", python=python), wheels=wheels)
    return Lock(target=WIN, requirements=(), wheels=(), gate=gate)


# --- the table in the lock file ---------------------------------------------------------------------------


def test_a_gate_table_reads_back_as_written_and_a_lock_without_one_is_written_without_one(tmp_path: Path) -> None:
    path = tmp_path / "app.lock.toml"
    write_lock(gate_lock(), path)
    text = path.read_text(encoding="utf-8")
    assert f'[gate]\nplatform = "linux_x86_64"\npython = "{PYTHON}"\n' in text
    assert text.index('name = "numpy"') < text.index('name = "onnxruntime"')  # sorted: the same lock, the same bytes
    read = read_lock(path)
    assert read == gate_lock() and lock_text(read) == text  # `reproduce` reads a bundle's lock.toml back byte for byte
    old = replace(read, gate=None)
    assert "gate" not in lock_text(old)  # a lock written before the table is written back unchanged


@pytest.mark.parametrize(("edit", "message"), [
    (('[[gate.wheel]]\nname = "onnxruntime"', '[[gate.whl]]\nname = "onnxruntime"'), "did you mean 'gate.wheel'"),
    (('platform = "linux_x86_64"', 'platform = "macosx_11_0_arm64"'), "key 'gate.platform' is 'macosx_11_0_arm64'"),
    (("a" * 64, "A" * 64), "key 'gate.wheel[1].sha256' is 'AAAA"),
    (('name = "numpy"', 'name = "scipy"'), "key 'gate.wheel[0].filename' is 'numpy-2.4.6"),
])
def test_a_malformed_gate_table_is_refused_naming_the_key(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    path = tmp_path / "app.lock.toml"
    write_lock(gate_lock(), path)
    text = path.read_text(encoding="utf-8")
    assert edit[0] in text
    path.write_text(text.replace(edit[0], edit[1], 1), encoding="utf-8")
    with pytest.raises(ManifestError) as caught:
        read_lock(path)
    assert message in str(caught.value) and caught.value.return_code == 3


def test_a_gate_table_needs_both_wheels_each_for_its_own_platform(tmp_path: Path) -> None:
    path = tmp_path / "app.lock.toml"
    write_lock(gate_lock(wheels=(NUMPY,)), path)
    with pytest.raises(ManifestError, match=r"key 'gate.wheel' holds \['numpy'\], expected one wheel each of numpy "
                                            "and onnxruntime"):
        read_lock(path)
    windows = replace(ORT, filename=f"onnxruntime-1.23.1-{TAG}-{TAG}-win_amd64.whl")
    write_lock(gate_lock(wheels=(windows, NUMPY)), path)
    with pytest.raises(ManifestError, match=r"gate.wheel\[1\].filename' is 'onnxruntime-1.23.1-.*-win_amd64.whl', "
                                            r"expected a wheel for linux_x86_64 / Python 3.\d+"):
        read_lock(path)


def test_a_gate_table_for_another_ort_version_than_the_manifests_asks_to_lock_again(tmp_path: Path) -> None:
    folder = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    lock_path = folder / "quickstart-win.lock.toml"
    lock = read_lock(lock_path)
    assert lock.gate is not None
    older = tuple(replace(w, version="1.22.0", filename=w.filename.replace("1.23.1", "1.22.0"))
                  if w.name == "onnxruntime" else w for w in lock.gate.wheels)
    write_lock(replace(lock, gate=replace(lock.gate, wheels=older)), lock_path)
    with pytest.raises(ManifestError, match=r"\[gate\] pins onnxruntime 1.22.0 for the model gate, but the manifest "
                                            r"pins 1.23.1; run `ort-bundler lock quickstart-win.toml` again"):
        load_lock(load(folder / "quickstart-win.toml"))


# --- where the table applies ------------------------------------------------------------------------------


@on_a_target_host
def test_the_gate_wheels_are_inputs_on_the_kind_of_machine_they_were_pinned_for_only() -> None:
    here = gate_lock()
    assert gate_problem(here) is None
    assert [(i.key, i.location, i.sha256, i.filename) for i in gate_inputs(here)] == [
        ("gate:numpy", "numpy==2.4.6", ("b" * 64,), NUMPY.filename),
        ("gate:onnxruntime", "onnxruntime==1.23.1", ("a" * 64,), ORT.filename)]
    assert pip_targets(here) == {"gate:numpy": here.gate.target, "gate:onnxruntime": here.gate.target}

    other = "3.9" if PYTHON != "3.9" else "3.10"
    elsewhere = gate_lock(python=other, wheels=tuple(replace(w, filename=w.filename.replace(TAG, "cp3" + other[2:]))
                                                     for w in (ORT, NUMPY)))
    assert gate_inputs(elsewhere) == [] and pip_targets(elsewhere) == {}
    assert gate_problem(elsewhere) == (f"its [gate] table pins them for linux_x86_64 / Python {other}, this machine is "
                                       f"linux_x86_64 / Python {PYTHON}")
    assert gate_inputs(replace(here, gate=None)) == []
    assert "the lock has no [gate] table" in (gate_problem(replace(here, gate=None)) or "")


def test_the_gate_pins_the_bundles_numpy_when_its_ort_imports_with_it() -> None:
    assert ortenv.gate_requirements("1.23.1", "2.4.6") == ["onnxruntime==1.23.1", "numpy==2.4.6"]
    assert ortenv.gate_requirements("1.18.1", "1.26.4") == ["onnxruntime==1.18.1", "numpy==1.26.4"]
    assert ortenv.gate_requirements("1.18.1", "2.1.0") == ["onnxruntime==1.18.1", "numpy<2"]  # built against NumPy 1
    assert ortenv.gate_requirements("1.23.1", None) == ["onnxruntime==1.23.1", "numpy"]


def test_without_pinned_wheels_the_gate_warns_that_its_wheels_are_not_hash_pinned(
        caplog: pytest.LogCaptureFixture) -> None:
    manifest = load(MANIFESTS / "quickstart-win.toml")
    lock = replace(read_lock(MANIFESTS / "quickstart-win.lock.toml"), gate=None)
    with caplog.at_level(logging.WARNING):
        assert gate_wheels(manifest, {}, lock) == ()
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning.startswith("warning: the model gate's wheels are not hash-pinned: the lock has no [gate] table")
    assert "pip installs onnxruntime==1.23.1 numpy from the index" in warning
    assert "`ort-bundler lock quickstart-win.toml` on this kind of machine pins them" in warning


def fake_pip(wheels: tuple[LockedWheel, ...], commands: list[list[str]]):
    """A pip that writes the report the real one writes for `wheels`, and keeps its command lines."""
    def pip(cmd, *, cwd=None, env=None):
        commands.append(list(cmd))
        install = [{"metadata": {"name": w.name, "version": w.version},
                    "download_info": {"url": f"https://index.invalid/files/{w.filename}",
                                      "archive_info": {"hashes": {"sha256": w.sha256}}}} for w in wheels]
        Path(cmd[cmd.index("--report") + 1]).write_text(json.dumps({"install": install}), encoding="utf-8")
        return ""
    return pip


def test_resolving_the_gate_asks_pip_for_this_machines_wheels_only_with_its_own_configuration(tmp_path: Path) -> None:
    commands: list[list[str]] = []
    host = gate_lock().gate.target
    gate = resolve_gate(["onnxruntime==1.23.1", "numpy==2.4.6"], host=host, runner=fake_pip((ORT, NUMPY), commands),
                        work_dir=tmp_path)
    assert gate == gate_lock().gate
    [command] = commands
    assert {"--dry-run", "--no-deps", "--ignore-installed"} <= set(command)
    assert command[command.index("--only-binary") + 1] == ":all:"
    assert not {"--platform", "--index-url", "--extra-index-url", "-i"} & set(command)  # pip's own configuration

    windows = replace(ORT, filename=f"onnxruntime-1.23.1-{TAG}-{TAG}-win_amd64.whl")  # not for this machine
    with pytest.raises(BuildError, match="do not fit"):
        resolve_gate(["onnxruntime==1.23.1", "numpy==2.4.6"], host=host, runner=fake_pip((windows, NUMPY), []),
                     work_dir=tmp_path)
    with pytest.raises(BuildError, match=r"pip resolved \['numpy'\] for onnxruntime==1.23.1 numpy==2.4.6"):
        resolve_gate(["onnxruntime==1.23.1", "numpy==2.4.6"], host=host, runner=fake_pip((NUMPY,), []),
                     work_dir=tmp_path)


def test_when_the_bundles_numpy_has_no_wheel_here_the_gate_pins_one_its_ort_imports_with(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A bundle for an older Python than this one: its NumPy may have no wheel for this interpreter."""
    from bundler.operations.lock import _resolve_gate

    manifest = load(MANIFESTS / "quickstart-win-cuda11.8.toml")  # ORT 1.18.1, built against NumPy 1
    lock = read_lock(MANIFESTS / "quickstart-win-cuda11.8.lock.toml")
    ort = replace(ORT, version="1.18.1", filename=ORT.filename.replace("1.23.1", "1.18.1"))
    numpy = replace(NUMPY, version="1.26.0", filename=NUMPY.filename.replace("2.4.6", "1.26.0"))
    commands: list[list[str]] = []
    resolved = fake_pip((numpy, ort), commands)

    def pip(cmd, *, cwd=None, env=None):
        if "numpy==1.26.4" in cmd:
            commands.append(list(cmd))
            raise BuildError("ERROR: No matching distribution found for numpy==1.26.4")
        return resolved(cmd, cwd=cwd, env=env)

    host = gate_lock().gate.target
    with caplog.at_level(logging.WARNING):
        gate = _resolve_gate(manifest, lock, host=host, runner=pip, work_dir=tmp_path)
    assert [c[-2:] for c in commands] == [["onnxruntime==1.18.1", "numpy==1.26.4"], ["onnxruntime==1.18.1", "numpy<2"]]
    assert gate == GateWheels(target=host, wheels=(numpy, ort))
    assert "numpy==1.26.4 has no wheel for this machine" in caplog.text and "pins numpy<2" in caplog.text


# --- integration: the Windows quickstart locked, fetched and built on this Linux host ----------------------


def copy_manifests(dest: Path) -> Path:
    shutil.copytree(MANIFESTS, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def linked_cache(bundler_cache: Path, dest: Path) -> Path:
    """The test cache's inputs, hard-linked (nothing here writes to them): mismatch notes stay in this copy."""
    dest.mkdir(parents=True)
    shutil.copytree(bundler_cache / "sha256", dest / "sha256", copy_function=os.link)
    return dest


@pytest.fixture(scope="module")
def relocked(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Lock:
    """`ort-bundler lock` of the win_amd64 quickstart on this host, into a copy of the manifests."""
    folder = copy_manifests(tmp_path_factory.mktemp("relock") / "manifests")
    proc = run_cli("lock", "--cache", str(bundler_cache), str(folder / "quickstart-win.toml"))
    assert "for the model gate on this kind of machine, ORT and NumPy for linux_x86_64" in proc.stdout
    text = (folder / "quickstart-win.lock.toml").read_text(encoding="utf-8")
    assert "://" not in text  # no index URL anywhere in the lock
    return read_lock(folder / "quickstart-win.lock.toml")


@pytest.mark.integration
@on_a_target_host
def test_the_lock_of_a_windows_bundle_on_linux_pins_this_machines_ort_and_numpy_as_pip_downloads_them(
        relocked: Lock, tmp_path: Path) -> None:
    gate = relocked.gate
    assert gate is not None and gate.target == Target(platform="linux_x86_64", python=PYTHON)
    numpy = next(w for w in relocked.wheels if w.name == "numpy")  # the bundle's own NumPy, of win_amd64
    assert {(w.name, w.version) for w in gate.wheels} == {("onnxruntime", "1.23.1"), ("numpy", numpy.version)}
    # Independently: what this machine's pip downloads for those versions, hashed here.
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet",
                    "-d", str(tmp_path), "onnxruntime==1.23.1", f"numpy=={numpy.version}"], check=True)
    downloaded = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.glob("*.whl")}
    assert {w.filename: w.sha256 for w in gate.wheels} == downloaded
    assert read_lock(MANIFESTS / "quickstart-win.lock.toml").gate == gate  # the committed example is current


@pytest.mark.integration
@on_a_target_host
def test_a_tampered_gate_hash_fails_fetch_and_build_with_exit_5_naming_the_file(bundler_cache: Path,
                                                                                tmp_path: Path) -> None:
    folder = copy_manifests(tmp_path / "manifests")
    lock_path = folder / "quickstart-win.lock.toml"
    ort = next(w for w in read_lock(lock_path).gate.wheels if w.name == "onnxruntime")
    lock_path.write_text(lock_path.read_text(encoding="utf-8").replace(ort.sha256, "0" * 64), encoding="utf-8")
    cache = linked_cache(bundler_cache, tmp_path / "cache")
    manifest = str(folder / "quickstart-win.toml")
    fetched = run_cli("fetch", "-q", "--cache", str(cache), manifest, check=False)
    assert fetched.returncode == 5, fetched.stderr
    assert f"gate:onnxruntime: hash mismatch for onnxruntime==1.23.1 ({ort.filename})" in fetched.stderr
    assert f"expected sha256 {'0' * 64}, got {ort.sha256}" in fetched.stderr
    built = run_cli("build", "-q", "--cache", str(cache), "-o", str(tmp_path / "out"), manifest, check=False)
    assert built.returncode == 5, built.stderr
    assert ort.filename in built.stderr and not (tmp_path / "out").exists()


@pytest.mark.integration
@on_a_target_host
def test_the_gate_environment_is_made_from_the_gate_wheels_with_require_hashes_and_no_index(
        bundler_cache: Path, tmp_path: Path) -> None:
    manifest = load(MANIFESTS / "quickstart-win.toml")
    lock = load_lock(manifest)
    files = cached_inputs(all_inputs(manifest), Cache(bundler_cache))  # the fixture fetched the gate's wheels too
    wheels = gate_wheels(manifest, files, lock)
    assert wheels == (files["gate:onnxruntime"], files["gate:numpy"])
    commands: list[list[str]] = []

    def recorded(cmd, *, cwd=None, env=None):  # the real runner; the commands kept for the assertion
        commands.append([str(part) for part in cmd])
        return runners.run(cmd, cwd=cwd, env=env)

    python = ortenv.isolated_python("1.23.1", runner=recorded, work_dir=tmp_path / "envs", wheels=wheels)
    install = commands[-1]
    assert {"--require-hashes", "--no-index", "--no-deps"} <= set(install)
    assert install[install.index("--only-binary") + 1] == ":all:"
    listed = Path(install[install.index("-r") + 1]).read_text(encoding="utf-8").splitlines()
    assert sorted(line.split(" --hash=sha256:")[1] for line in listed) == sorted(w.sha256 for w in lock.gate.wheels)
    imported = runners.run([str(python), "-I", "-c", "import onnxruntime, numpy; print(onnxruntime.__version__, "
                                                     "numpy.__version__)"]).split()
    assert imported == ["1.23.1", next(w.version for w in lock.gate.wheels if w.name == "numpy")]


@pytest.mark.integration
@on_a_target_host
def test_a_lock_without_the_gate_table_still_builds_with_the_warning_and_one_with_it_without(
        bundler_cache: Path, tmp_path: Path) -> None:
    folder = copy_manifests(tmp_path / "manifests")
    lock_path = folder / "quickstart-win.lock.toml"
    pinned = run_cli("build", "--no-reuse", "--cache", str(bundler_cache), "-o", str(tmp_path / "pinned"),
                     str(folder / "quickstart-win.toml"))
    assert "not hash-pinned" not in pinned.stderr
    with zipfile.ZipFile(next((tmp_path / "pinned").glob("*.zip"))) as archive:
        carried = archive.read("quickstart-win-1.0.0-win_amd64/lock.toml").decode("utf-8")
    assert carried == lock_path.read_text(encoding="utf-8") and "[gate]" in carried  # as `reproduce` reads it

    write_lock(replace(read_lock(lock_path), gate=None), lock_path)  # the lock as written before the table
    unpinned = run_cli("build", "--no-reuse", "--cache", str(bundler_cache), "-o", str(tmp_path / "unpinned"),
                       str(folder / "quickstart-win.toml"))
    assert "warning: the model gate's wheels are not hash-pinned: the lock has no [gate] table" in unpinned.stderr
    assert list((tmp_path / "unpinned").glob("*.zip"))
