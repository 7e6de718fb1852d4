"""Bad input and faults against the install engine, through the real install.sh (issue 11 "Bad input and
faults", issue 18 items 2, 4, 5 and the install half of 6).

Each case makes its own hostile input, runs the real front end and engine in a subprocess, and checks the
exit code, the one-line message, and that every file that existed before still exists with the same bytes.
The bundles are the small real ones of test_install_sh (a real wheel, the real pinned pypa installer).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from unit.shipped.test_install_sh import CODES, make_bundle, run_sh, write_sums

from bundler.shipped.ort_bundle.engine import engine


def snapshot(folder: Path) -> dict[str, str]:
    """Every file and link below `folder` with its bytes' hash (links by their target): what "untouched" means."""
    found = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            found[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".staging-" in p.name or ".previous-" in p.name)


def install(bundle: Path, target: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_sh(bundle / "install.sh", "--install-dir", str(target), "--log-path", str(target.parent / "log"), *args)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Version 1.0 and 2.0 of the same bundle; 2.0 has 400 more modules, so an upgrade takes a while."""
    work = tmp_path_factory.mktemp("bundles")
    return {"1.0": make_bundle(work / "v1"), "2.0": make_bundle(work / "v2", version="2.0", modules=400)}


# ---------------------------------------------------------------- the bundle


def test_an_altered_file_refuses_the_upgrade_and_changes_nothing(bundles: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "apps" / "tiny"
    assert install(bundles["1.0"], target).returncode == 0
    before = snapshot(tmp_path / "apps")
    bad = tmp_path / "bad"
    shutil.copytree(bundles["2.0"], bad)
    wheel = next((bad / "payload" / "wheels").glob("*.whl"))
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte inside a member: the zip still opens
    wheel.write_bytes(bytes(data))
    proc = install(bad, target)
    assert proc.returncode == CODES["integrity"], proc.stderr
    assert f"payload/wheels/{wheel.name}: FAILED" in proc.stderr
    after = snapshot(tmp_path / "apps")
    assert {k: v for k, v in after.items() if k != "log"} == {k: v for k, v in before.items() if k != "log"}


@pytest.mark.parametrize(("key", "value"), [
    ("to", "../outside.txt"), ("to", "..\\outside.txt"), ("to", "a\\..\\..\\outside.txt"), ("to", "/tmp/outside.txt"),
    ("to", "C:\\outside.txt"), ("from", "../../../etc/hostname"), ("from", "..\\..\\etc\\hostname"),
])
def test_a_plan_entry_that_leaves_its_root_is_refused(bundles: dict[str, Path], tmp_path: Path, key: str,
                                                      value: str) -> None:
    """Even with SHA256SUMS regenerated to cover it (as a hostile build would), the plan is refused before anything."""
    hostile = tmp_path / "hostile"
    shutil.copytree(bundles["1.0"], hostile)
    plan = json.loads((hostile / "install-plan.json").read_text())
    plan["copy"][0][key] = value
    (hostile / "install-plan.json").write_text(json.dumps(plan))
    write_sums(hostile)
    target = tmp_path / "apps" / "tiny"
    proc = install(hostile, target)
    assert proc.returncode == CODES["integrity"], proc.stderr
    assert f"key 'copy[0].{key}' {value!r} is not a relative path below its root" in proc.stderr
    assert not target.exists() and not (tmp_path / "outside.txt").exists() and leftovers(target.parent) == []


# ---------------------------------------------------------------- the install folder


@pytest.mark.parametrize(("receipt", "problem"), [
    ("{}", 'receipt.json has no "format" key; this program reads format 2'),
    ("not json {", "is not valid JSON"),
    ("[]", "expected a JSON object"),
    (None, "holds other-1.0, not an installation of tiny"),
])
def test_a_folder_that_is_not_ours_is_refused_and_untouched(bundles: dict[str, Path], tmp_path: Path,
                                                            receipt: str | None, problem: str) -> None:
    target = tmp_path / "apps" / "tiny"
    if receipt is None:  # a real receipt, of another bundle
        assert install(bundles["1.0"], target).returncode == 0
        data = json.loads((target / "receipt.json").read_text())
        data.update(name="other", install_id="other-1.0")
        (target / "receipt.json").write_text(json.dumps(data))
    else:
        target.mkdir(parents=True)
        (target / "receipt.json").write_text(receipt)
    (target / "data").mkdir()
    (target / "data" / "precious.txt").write_text("the user's\n")
    before = snapshot(target)
    for args in ((), ("--force",)):
        proc = install(bundles["2.0"], target, *args)
        assert proc.returncode == CODES["usage"], proc.stderr
        assert problem in proc.stderr and "nothing was changed" in proc.stderr
        assert snapshot(target) == before
    proc = run_sh(bundles["2.0"] / "uninstall.sh", "--install-dir", str(target))
    assert proc.returncode == CODES["usage"] and snapshot(target) == before


def test_an_install_path_with_a_line_break_is_refused_up_front(bundles: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "apps\nevil" / "tiny"
    proc = install(bundles["1.0"], target)
    assert proc.returncode == CODES["usage"] and "must not contain a line break" in proc.stderr
    direct = subprocess.run([sys.executable, "-I", "-B", str(bundles["1.0"] / "payload/ort_bundle/__main__.py"), "engine", "install",
                             "--bundle", str(bundles["1.0"]), "--install-dir", str(target)], capture_output=True, text=True)
    assert direct.returncode == CODES["usage"] and "contains a line break or control character" in direct.stderr
    assert not (tmp_path / "apps\nevil").exists()


def test_a_symlink_at_the_install_path_is_refused(bundles: dict[str, Path], tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("not ours\n")
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "tiny").symlink_to(elsewhere, target_is_directory=True)
    proc = install(bundles["1.0"], tmp_path / "apps" / "tiny")
    assert proc.returncode == CODES["usage"] and "is a symbolic link" in proc.stderr
    assert snapshot(elsewhere) == {"keep.txt": hashlib.sha256(b"not ours\n").hexdigest()}


def test_links_planted_at_staging_and_previous_names_are_removed_never_followed(bundles: dict[str, Path],
                                                                                tmp_path: Path) -> None:
    """The staging folder has an mkdtemp name nobody can predict; what looks like a leftover is unlinked, not entered."""
    target = tmp_path / "apps" / "tiny"
    assert install(bundles["1.0"], target).returncode == 0
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("not ours\n")
    for name in (".tiny.staging-planted", ".tiny.previous-planted"):
        (target.parent / name).symlink_to(victim, target_is_directory=True)
    proc = install(bundles["2.0"], target)
    assert proc.returncode == 0, proc.stderr
    assert snapshot(victim) == {"keep.txt": hashlib.sha256(b"not ours\n").hexdigest()}
    assert leftovers(target.parent) == [] and json.loads((target / "receipt.json").read_text())["version"] == "2.0"


def test_a_live_run_keeps_its_staging_folder_and_the_second_run_is_told_to_retry(bundles: dict[str, Path],
                                                                                  tmp_path: Path) -> None:
    """A live run holds the engine's lock (flock on `.tiny.lock` beside it, taken here as a running engine takes
    it); an install into a sibling folder meanwhile does not wait for it (the lock is per target)."""
    target = tmp_path / "apps" / "tiny"
    target.parent.mkdir(parents=True)
    live = target.parent / ".tiny.staging-live0000"
    live.mkdir()
    (live / "half-written").write_text("a live run's\n")
    fd = os.open(target.parent / ".tiny.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        proc = install(bundles["1.0"], target)
        sibling = install(bundles["1.0"], target.parent / "tiny-2", "--no-self-check")
    finally:
        os.close(fd)
    assert proc.returncode == CODES["install"] and "another installation into" in proc.stderr
    assert (live / "half-written").read_text() == "a live run's\n" and not target.exists()
    assert sibling.returncode == 0, sibling.stderr
    assert engine.audit(target.parent / "tiny-2").ok and not (target.parent / ".tiny-2.lock").exists()
    proc = install(bundles["1.0"], target)  # the live run is gone now: its leftover is cleaned
    assert proc.returncode == 0 and leftovers(target.parent) == []


def test_a_rerun_with_nothing_to_install_still_cleans_what_a_killed_run_left(bundles: dict[str, Path],
                                                                              tmp_path: Path) -> None:
    """A run killed after its stage was made (or after its swap, with the old tree beside the install) leaves a
    folder; the next run finds the install whole and has nothing to do, and removes the folder all the same
    (the SIGKILL test met this at random moments; here it is planted)."""
    target = tmp_path / "apps" / "tiny"
    assert install(bundles["1.0"], target, "--no-self-check").returncode == 0
    for name in (".tiny.staging-killed00", ".tiny.previous-killed00"):
        (target.parent / name / "venv").mkdir(parents=True)
    proc = install(bundles["1.0"], target, "--no-self-check")
    assert proc.returncode == 0 and "nothing to do" in proc.stderr + proc.stdout, proc.stderr
    assert leftovers(target.parent) == [] and engine.audit(target).ok


# ---------------------------------------------------------------- upgrades keep what is not ours


def test_upgrade_and_forced_reinstall_keep_user_files_and_a_cache_inside(bundles: dict[str, Path],
                                                                         tmp_path: Path) -> None:
    target = tmp_path / "apps" / "tiny"
    assert install(bundles["1.0"], target, "--cache-dir", "cache").returncode == 0
    mine = {"notes.txt": b"mine\n", "models/mine.onnx": b"user model", "cache/tensorrt/engine.bin": os.urandom(4096)}
    for rel, data in mine.items():
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        (target / rel).write_bytes(data)
    for args in ((), ("--force",)):
        proc = install(bundles["2.0"], target, *args)
        assert proc.returncode == 0, proc.stderr
        assert {rel: (target / rel).read_bytes() for rel in mine} == mine
        receipt = json.loads((target / "receipt.json").read_text())
        assert receipt["version"] == "2.0" and sorted(receipt["kept"]) == sorted(mine)
        assert not set(mine) & {entry["path"] for entry in receipt["files"]}
    audit = engine.audit(target)
    assert audit.ok and set(mine) <= set(audit.not_ours)
    site = next((target / "venv" / "lib").glob("python*/site-packages"))
    (site / "planted.pth").write_text("import os\n")  # not ours, in the environment: never carried over
    assert install(bundles["1.0"], target, "--force").returncode == 0
    assert not (next((target / "venv" / "lib").glob("python*/site-packages")) / "planted.pth").exists()
    assert {rel: (target / rel).read_bytes() for rel in mine} == mine and engine.audit(target).ok
    proc = run_sh(bundles["2.0"] / "uninstall.sh", "--install-dir", str(target))
    assert proc.returncode == 0 and sorted(snapshot(target)) == sorted(mine)


# ---------------------------------------------------------------- run.sh --verify


def test_verify_reports_changed_missing_and_extra_files(bundles: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "apps" / "tiny"
    assert install(bundles["1.0"], target).returncode == 0
    verify = [str(target / "run.sh"), "--verify"]
    ok = subprocess.run(verify, capture_output=True, text=True)
    assert ok.returncode == 0 and "Result: OK" in ok.stdout, ok.stdout + ok.stderr
    (target / "notes.txt").write_text("a user's file: reported, not a failure\n")
    assert subprocess.run(verify, capture_output=True, text=True).returncode == 0
    site = next((target / "venv" / "lib").glob("python*/site-packages"))
    (site / "tinypkg" / "__init__.py").write_text("VALUE = 666\n")
    (target / "models" / "m.onnx").unlink()
    (site / "evil.pth").write_text("import os\n")
    proc = subprocess.run([*verify, "--json"], capture_output=True, text=True)
    assert proc.returncode == CODES["integrity"], proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["changed"] == [f"{site.relative_to(target).as_posix()}/tinypkg/__init__.py"]
    assert report["missing"] == ["models/m.onnx"]
    assert report["extra"] == [f"{site.relative_to(target).as_posix()}/evil.pth"] and "notes.txt" in report["not_ours"]
    check = subprocess.run([str(target / "run.sh"), "--self-check"], capture_output=True, text=True)
    # What runs is the bytecode the install compiled (unchecked-hash, in the receipt), never a bytecode folder of
    # the cache (issue 27, section 5): the changed source is not run; --verify above is what reports it.
    assert check.returncode == 0, check.stderr


# ---------------------------------------------------------------- a full disk


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A 200 MB tmpfs: a real file system that fills up. Needs mount rights (root in CI); skipped otherwise."""
    mount = tmp_path / "disk"
    mount.mkdir()
    # mode=755: a tmpfs root is 1777 by default, a parent the engine refuses (others could plant leftovers there)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200m,mode=755", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip()}); the full-disk case needs mount rights")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_during_staging_is_a_clear_error_and_keeps_the_previous_install(
        bundles: dict[str, Path], small_disk: Path, tmp_path: Path) -> None:
    """The space check passes (the wheel is small); unpacking it needs 300 MB: ENOSPC in the middle of staging."""
    target = small_disk / "tiny"
    assert install(bundles["1.0"], target).returncode == 0
    before = snapshot(target)
    filling = make_bundle(tmp_path / "big", version="3.0", big_file=300 << 20)
    proc = install(filling, target)
    assert proc.returncode == CODES["install"], proc.stderr
    assert "No space left on device" in proc.stderr and "tinypkg-3.0-py3-none-any.whl" in proc.stderr
    assert snapshot(target) == before and leftovers(small_disk) == []


def test_a_temp_folder_without_room_is_refused_before_anything_is_written(bundles: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    """Issue 22, m8: the temp folder's file system is checked too (the self-check's sessions and, on Windows,
    VC_redist write there). A real 8 MB tmpfs as TMPDIR, against the 64 MB the engine asks there."""
    temp = tmp_path / "temp"
    temp.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(temp)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip()}); the small temp folder needs mount rights")
    try:
        target = tmp_path / "apps" / "tiny"
        target.parent.mkdir()
        proc = run_sh(bundles["1.0"] / "install.sh", "--install-dir", str(target), "--log-path", str(tmp_path / "log"),
                      env={"TMPDIR": str(temp)})
        assert proc.returncode == CODES["prerequisite"], proc.stderr
        assert f"MB free on the file system of {temp}, where the temp folder needs 64 MB" in proc.stderr
        assert "nothing was changed" in proc.stderr
        assert list(target.parent.iterdir()) == []
    finally:
        subprocess.run(["umount", "-l", str(temp)], check=False)


# ---------------------------------------------------------------- SIGKILL


def run_killed(bundle: Path, target: Path, delay: float) -> None:
    process = subprocess.Popen(["sh", str(bundle / "install.sh"), "--install-dir", str(target), "--no-self-check"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(delay)
    try:
        os.killpg(process.pid, signal.SIGKILL)  # the engine and its bytecode workers
    except ProcessLookupError:
        pass  # it had already finished: the moment fell after the end
    process.wait()


@pytest.mark.slow
def test_sigkill_at_20_random_moments_of_an_upgrade_leaves_old_or_new_and_the_next_run_cleans_up(
        bundles: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "apps" / "tiny"
    start = time.monotonic()
    assert install(bundles["2.0"], target, "--no-self-check").returncode == 0  # how long one upgrade-sized run takes
    duration = time.monotonic() - start
    shutil.rmtree(target)
    rng = random.Random(11)
    outcomes = []
    for _ in range(20):
        assert install(bundles["1.0"], target, "--force", "--no-self-check").returncode == 0
        (target / "notes.txt").write_text("mine\n")
        old = snapshot(target)
        run_killed(bundles["2.0"], target, rng.uniform(0.05, duration))
        receipt = json.loads((target / "receipt.json").read_text())
        if receipt["version"] == "1.0":
            assert snapshot(target) == old, "the previous install changed"
        else:
            assert receipt["version"] == "2.0" and engine.audit(target).ok, "the new install is incomplete"
            assert (target / "notes.txt").read_text() == "mine\n"
        outcomes.append(receipt["version"])
        proc = install(bundles["2.0"], target, "--no-self-check")
        assert proc.returncode == 0, proc.stderr
        assert leftovers(target.parent) == [] and engine.audit(target).ok
        assert (target / "notes.txt").read_text() == "mine\n"
    assert "1.0" in outcomes, f"no kill landed before the swap: {outcomes}"
