"""The install engine's own decisions, run for real on the small bundle of test_install_sh: what a pending
reboot may excuse, the deferred self-check after it, deterministic bytecode, and the records it reads."""

from __future__ import annotations

import errno
import json
import re
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from unit.shipped.test_install_sh import make_bundle

from bundler.assembly.shipped_package import package_files
from bundler.shipped.ort_bundle.engine import disk_space, engine, installed
from bundler.shipped.ort_bundle.records import (
    INSTALL_EXIT_CODES,
    Check,
    InstallPlan,
    Receipt,
    RecordError,
    SelfcheckOutcome,
    SelfcheckReport,
)

#: A stand-in self-check that prints the report a real one would for a given failure (its JSON comes from
#: the shared definition), and exits 1 — or 0 once the marker file says the reboot has happened.
REPORTING_SELFCHECK = """\
import json, os, sys
marker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "rebooted")
if os.path.exists(marker):
    print(json.dumps({"format": 1, "ok": True, "root": "x", "checks": []}))
    sys.exit(0)
print(json.dumps({"format": 1, "ok": False, "root": "x", "checks": %s}))
sys.exit(1)
"""
DLL_FAILURE = {"id": "onnxruntime", "status": "fail", "message": "import onnxruntime failed: DLL load failed while "
               "importing onnxruntime_pybind11_state: The specified module could not be found.", "fix": "", "details": {}}
OLD_RUNTIME = {"id": "libraries", "status": "fail", "message": "C:\\Windows\\System32\\msvcp140.dll is version "
               "14.29.30133, older than the VC++ runtime 14.40.33810 the bundle needs", "fix": "", "details": {}}
MODEL_MISMATCH = {"id": "model:mlp", "status": "fail", "message": "output 'y' element 4 is 0.6, expected 0.5",
                  "fix": "", "details": {}}


def report(*checks: dict) -> SelfcheckReport:
    return SelfcheckReport.from_json({"format": 1, "ok": False, "root": "x", "checks": list(checks)})


def test_only_a_failure_the_pending_runtime_update_explains_is_excused() -> None:
    assert engine.reboot_explains(report(DLL_FAILURE))
    assert engine.reboot_explains(report(DLL_FAILURE, OLD_RUNTIME))
    assert not engine.reboot_explains(report(DLL_FAILURE, MODEL_MISMATCH))
    assert not engine.reboot_explains(report(MODEL_MISMATCH))
    assert not engine.reboot_explains(report({**DLL_FAILURE, "message": "import onnxruntime failed: No module named x"}))
    assert not engine.reboot_explains(None)  # no report at all: nothing to excuse


def bundle_with_selfcheck(root: Path, *checks: dict) -> Path:
    return make_bundle(root, selfcheck=REPORTING_SELFCHECK % json.dumps(list(checks)))


@pytest.mark.parametrize("checks", [(DLL_FAILURE,), (DLL_FAILURE, OLD_RUNTIME)])
def test_an_explained_failure_is_deferred_and_really_runs_after_the_reboot(tmp_path: Path, checks: tuple) -> None:
    bundle = bundle_with_selfcheck(tmp_path / "bundle", *checks)
    target = tmp_path / "apps" / "tiny"
    options = engine.Options(bundle=bundle, install_dir=target, reboot_pending=True)
    assert engine.install(options, engine.Log(None)) == "deferred"
    receipt = Receipt.loads((target / "receipt.json").read_text())
    assert receipt.reboot_required and receipt.selfcheck.deferred_until_reboot and receipt.selfcheck.after_reboot is None
    assert receipt.selfcheck.failed_checks == tuple(c["id"] for c in checks)
    # What the RunOnce value runs at the next logon (install.ps1 writes this command line).
    (target / "rebooted").write_text("")
    log = tmp_path / "after.log"
    proc = subprocess.run([sys.executable, "-I", "-B", str(target / "installer" / "ort_bundle" / "__main__.py"), "engine", "after-reboot",
                           "--root", str(target), "--log-file", str(log)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert Receipt.loads((target / "receipt.json").read_text()).selfcheck.after_reboot is True
    assert "the self-check after the reboot passed" in log.read_text()


def test_detection_is_withheld_while_the_self_check_is_owed_and_a_rerun_then_installs_again(tmp_path: Path) -> None:
    """Issue 40: the detection value follows the self-check. While the check is deferred past the reboot (or failed
    there) nothing may say "installed"; a re-run of the same bundle runs the install and its check again instead of
    reporting "nothing to do" over an unchecked install."""
    owed = SelfcheckOutcome(ran=True, exit_code=1, passed=False, deferred_until_reboot=True)
    assert installed.detection_state(owed) is None
    assert installed.detection_state(replace(owed, after_reboot=False)) is None
    assert installed.detection_state(replace(owed, after_reboot=True)) == "passed after the reboot"
    assert installed.detection_state(SelfcheckOutcome(ran=True, exit_code=0, passed=True)) == "passed"
    assert installed.detection_state(SelfcheckOutcome(ran=False)) == "skipped"  # -NoSelfCheck: the administrator's choice
    bundle = bundle_with_selfcheck(tmp_path / "bundle", DLL_FAILURE)
    target = tmp_path / "apps" / "tiny"
    assert engine.install(engine.Options(bundle=bundle, install_dir=target, reboot_pending=True), engine.Log(None)) == "deferred"
    log = tmp_path / "again.log"
    again = engine.install(engine.Options(bundle=bundle, install_dir=target, reboot_pending=True), engine.Log(log))
    assert again == "deferred" and "its self-check has not passed yet" in log.read_text(), log.read_text()


def test_a_reboot_never_excuses_an_unrelated_failure_and_the_previous_install_stays(tmp_path: Path) -> None:
    target = tmp_path / "apps" / "tiny"
    assert engine.install(engine.Options(bundle=make_bundle(tmp_path / "v1"), install_dir=target), engine.Log(None))
    before = {p: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    bundle = bundle_with_selfcheck(tmp_path / "v2", DLL_FAILURE, MODEL_MISMATCH)
    with pytest.raises(engine.EngineError, match=r"self-check failed with exit code 1 \(failed: onnxruntime, model:mlp\)"):
        engine.install(engine.Options(bundle=bundle, install_dir=target, reboot_pending=True, force=True),
                       engine.Log(None))
    assert {p: p.read_bytes() for p in target.rglob("*") if p.is_file()} == before
    assert engine.leftovers(target) == ([], [])


def test_bytecode_is_deterministic_and_names_the_final_folder(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "bundle", modules=50)
    target = tmp_path / "apps" / "tiny"
    pycs = []
    for _ in range(2):
        engine.install(engine.Options(bundle=bundle, install_dir=target, force=True, self_check=False), engine.Log(None))
        receipt = Receipt.loads((target / "receipt.json").read_text())
        pycs.append({f.path: f.sha256 for f in receipt.files if f.path.endswith(".pyc")})
    # __init__ and 50 modules of the wheel, the DLL hook and the ort_bundle package's modules (the launcher among them)
    modules = [relative for relative in package_files() if relative.endswith(".py")]
    assert len(pycs[0]) == 52 + len(modules) and pycs[0] == pycs[1]
    [pyc] = [p for p in target.rglob("mod0007.cpython-*.pyc")]
    assert pyc.read_bytes()[4:8] == (0b01).to_bytes(4, "little")  # hash-based, unchecked: no timestamp
    assert str(target).encode() in pyc.read_bytes() and b".staging" not in pyc.read_bytes()


def test_the_plan_reads_back_through_its_definition_and_refuses_what_is_off(tmp_path: Path) -> None:
    plan = engine.load_plan(make_bundle(tmp_path / "bundle"))
    assert InstallPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    data = plan.to_json()
    for change, problem in ((lambda d: d.update(format=1), "has format 1; this program reads format 2"),
                            (lambda d: d["venv"].update(script_kind="win32"), "expected 'posix' or 'win-amd64'"),
                            (lambda d: d["venv"].update(wheels="payload/wheels"), "expected a list of relative paths"),
                            (lambda d: d.pop("installer_wheel"), "key 'installer_wheel' is missing")):
        hostile = json.loads(json.dumps(data))
        change(hostile)
        with pytest.raises(RecordError, match=problem):
            InstallPlan.from_json(hostile)


def test_the_receipt_records_the_log_in_an_optional_key_of_format_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) \
        -> None:
    """Issue 26, defect 1: `install_log` (absolute, even for a relative --log-file) is optional: a receipt without it,
    as older engines wrote, reads back with None and is written back without the key; the format stays 2."""
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "tiny"
    engine.install(engine.Options(bundle=make_bundle(tmp_path / "bundle"), install_dir=target, self_check=False),
                   engine.Log(Path("install.log")))
    data = json.loads((target / "receipt.json").read_text())
    assert data["format"] == 2 and data["install_log"] == str(tmp_path / "install.log")
    assert Receipt.from_json(data).install_log == str(tmp_path / "install.log")
    del data["install_log"]
    older = Receipt.from_json(data)
    assert older.install_log is None and older.to_json() == data


def test_a_receipt_with_a_bad_entry_is_not_ours(tmp_path: Path) -> None:
    target = tmp_path / "tiny"
    engine.install(engine.Options(bundle=make_bundle(tmp_path / "bundle"), install_dir=target, self_check=False),
                   engine.Log(None))
    good = json.loads((target / "receipt.json").read_text())
    for change in (lambda r: r.update(files="venv"), lambda r: r["files"][0].update(path="../../etc/passwd"),
                   lambda r: r["files"][0].update(sha256="xyz"), lambda r: r.update(folders=["..\\up"])):
        hostile = json.loads(json.dumps(good))
        change(hostile)
        (target / "receipt.json").write_text(json.dumps(hostile))
        with pytest.raises(engine.EngineError, match="holds a receipt.json this installer did not write"):
            engine.uninstall(target, engine.Log(None), name="tiny", dry_run=False)
    assert (target / "venv").is_dir()


def test_the_shipped_self_check_report_is_read_through_the_shared_definition() -> None:
    check = Check(id="files", status="fail", message="m", fix="f", details={"changed": ["a"]})
    data = SelfcheckReport(ok=False, root="/r", checks=(check,)).to_json()
    assert SelfcheckReport.from_json(json.loads(json.dumps(data))).checks == (check,)


def test_the_engine_installs_on_the_oldest_supported_python_with_the_installer_its_lock_pins(tmp_path: Path) -> None:
    """Python 3.8 (the oldest target) through the real install.sh, with installer 0.7.0 (the newest release for 3.8,
    what `ort-bundler lock` pins for such a target): install, verify, uninstall."""
    from unit.shipped.test_install_sh import run_sh
    from unit.shipped.test_selfcheck import oldest_python

    python = oldest_python()
    if python is None:
        pytest.skip("no Python 3.8 on this machine")
    bundle = make_bundle(tmp_path / "bundle", python="3.8", installer="installer==0.7.0")
    target = tmp_path / "apps" / "tiny"
    proc = run_sh(bundle / "install.sh", "--install-dir", str(target), "--python", python, "--log-path",
                  str(tmp_path / "log"))
    assert proc.returncode == 0, proc.stderr
    tool = subprocess.run([str(target / "venv" / "bin" / "tinytool")], capture_output=True, text=True)
    assert tool.returncode == 0 and tool.stdout.strip() == "tinytool 42", tool.stderr
    assert list((target / "venv" / "lib" / "python3.8" / "site-packages" / "tinypkg" / "__pycache__").glob("*.cpython-38.pyc"))
    verify = subprocess.run([str(target / "run.sh"), "--verify"], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert run_sh(bundle / "uninstall.sh", "--install-dir", str(target), "--python", python).returncode == 0
    assert not target.exists()


def test_room_is_summed_per_file_system_and_each_short_one_is_named() -> None:
    """Issue 22, m8: the install and the temp folder share one disk's free space when they are on one disk."""
    needs = [disk_space.Need(Path("/"), 300 << 20, "the install"), disk_space.Need(Path("/"), 64 << 20, "the temp folder")]
    one_disk = disk_space.shortfalls(needs, device=lambda p: 1, free=lambda p: 350 << 20)
    assert one_disk == ["only 350 MB free on the file system of /, where the install needs 300 MB and the temp folder "
                        "needs 64 MB (364 MB in all)"]
    assert disk_space.shortfalls(needs, device=lambda p: 1, free=lambda p: 364 << 20) == []
    two_disks = disk_space.shortfalls([needs[0], disk_space.Need(Path("/tmp"), 64 << 20, "the temp folder")],
                                      device=lambda p: len(str(p)), free=lambda p: 350 << 20)
    assert two_disks == []


def test_a_warning_of_pypa_installer_is_a_note_in_the_log_not_a_python_warning(tmp_path: Path) -> None:
    """Issue 38 §8a: numpy's Windows wheel carries a __pycache__ file, which pypa installer skips with a
    RuntimeWarning; the admin's log and console get one plain note instead of a warning with a source path."""
    from unit.shipped.test_install_sh import run_sh

    bundle = make_bundle(tmp_path / "bundle", pycache=True)
    log = tmp_path / "install.log"
    proc = run_sh(bundle / "install.sh", "--install-dir", str(tmp_path / "apps" / "tiny"), "--log-path", str(log))

    assert proc.returncode == 0, proc.stderr
    text = log.read_text(encoding="utf-8")
    assert "Warning" not in text + proc.stdout + proc.stderr
    assert ("note (pypa installer, not an error): Skip installing tinypkg/__pycache__/stale.cpython-311.pyc from "
            "tinypkg.") in text


def test_the_install_shows_each_wheel_in_place_with_the_bytes_so_far(tmp_path: Path) -> None:
    """Issue 37: install.cmd was silent for 107 s while a GPU bundle's wheels unpacked; each wheel now gets a line
    on the console and in the log, counting wheels and megabytes, the last one at the total. Wheels are counted as
    they finish (they unpack in parallel), so the names come in any order, each once."""
    from unit.shipped.test_install_sh import run_sh

    bundle = make_bundle(tmp_path / "bundle")
    log = tmp_path / "install.log"
    proc = run_sh(bundle / "install.sh", "--install-dir", str(tmp_path / "apps" / "tiny"), "--log-path", str(log))

    assert proc.returncode == 0, proc.stderr
    plan = json.loads((bundle / "install-plan.json").read_text(encoding="utf-8"))
    wheels = plan["venv"]["wheels"]
    for text in (proc.stdout, log.read_text(encoding="utf-8")):
        lines = re.findall(r"installed wheel (\d+)/(\d+) (\S+) \(([\d.]+) of ([\d.]+) MB\)", text)
        assert [(int(i), int(n)) for i, n, *_ in lines] == [(i, len(wheels)) for i in range(1, len(wheels) + 1)], text
        assert sorted(name for _, _, name, _, _ in lines) == sorted(Path(w).name for w in wheels)
        total = sum((bundle / w).stat().st_size for w in wheels) / 1e6
        assert lines[-1][3] == lines[-1][4] == f"{total:.1f}"


def test_progress_and_warnings_go_to_stdout_and_only_the_error_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 40: a PowerShell 5.1 host that captures native stderr (ISE, remoting, 2>&1) makes each line there an
    error record, fatal under $ErrorActionPreference = 'Stop'. Progress and warnings (Python's own included) are
    stdout; the one sentence that says why the run failed is stderr."""
    def action(log: engine.Log) -> int:
        log("verifying the bundle")
        warnings.warn("Skip installing x/__pycache__/y.pyc from x", RuntimeWarning, stacklevel=1)
        raise engine.EngineError("install", "installing payload/wheels/x.whl failed; nothing was changed")

    with warnings.catch_warnings():  # the test run turns warnings into errors; the engine's own run does not
        warnings.simplefilter("always")
        assert engine._run_logged(action, engine.Log(None)) == INSTALL_EXIT_CODES["install"]
    out, err = capsys.readouterr()
    assert "verifying the bundle" in out and "warning: RuntimeWarning: Skip installing x/__pycache__/y.pyc" in out
    [line] = err.splitlines()
    assert line.endswith(" ERROR: installing payload/wheels/x.whl failed; nothing was changed")


@pytest.mark.parametrize(("error", "said"), [
    (OSError(errno.EIO, "Internal error"), "a file operation of the install failed: Internal error"),
    (OSError(errno.ENOENT, "No such file or directory", "C:\\x\\y.pyd"), "C:\\x\\y.pyd: No such file or directory"),
], ids=["no file named", "a file named"])
def test_an_os_error_is_one_sentence_that_says_what_failed(capsys: pytest.CaptureFixture[str], error: OSError,
                                                           said: str) -> None:
    """Under Wine a CI run once failed with "ERROR: : Internal error": an OSError that names no file."""
    def action(log: engine.Log) -> int:
        raise error

    assert engine._run_logged(action, engine.Log(None)) == INSTALL_EXIT_CODES["install"]
    [line] = capsys.readouterr().err.splitlines()
    assert line.endswith(f" ERROR: {said}; nothing was changed in the installation")


SECOND_INSTALL = """
import shutil, sys
from pathlib import Path
from bundler.shipped.ort_bundle.engine.engine_env import _import_installer
first, second = Path(sys.argv[1]), Path(sys.argv[2])
assert Path(_import_installer(first).__file__).is_relative_to(first)
first.unlink()  # the first install's staging folder is gone
module = _import_installer(second)
import installer.scripts
assert Path(module.__file__).is_relative_to(second) and Path(installer.scripts.__file__).is_relative_to(second)
print("from the second wheel")
"""


def test_a_second_install_in_one_process_imports_installer_from_its_own_wheel(tmp_path: Path) -> None:
    """The first install's installer, imported from a staging folder since deleted, failed the second install
    when it read a script launcher from its wheel (a Windows install of a wheel with console scripts)."""
    from fixtures.wheels import pip_download

    wheel = pip_download("installer==1.1.0", "any")
    copies = [tmp_path / name / wheel.name for name in ("first", "second")]
    for copy in copies:
        copy.parent.mkdir()
        copy.write_bytes(wheel.read_bytes())
    proc = subprocess.run([sys.executable, "-c", SECOND_INSTALL, *map(str, copies)], capture_output=True, text=True)
    assert proc.returncode == 0 and "from the second wheel" in proc.stdout, proc.stderr
