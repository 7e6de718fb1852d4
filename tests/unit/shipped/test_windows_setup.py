"""The Windows install's decisions, as plain logic: switches, the install folder's rules and budget, VC_redist's
exit codes, the startup task, and who may write a folder (on crafted security descriptors: Wine runs everything
as one administrator, so the owner and ACL decisions cannot be shown there; on Linux, for real, with another user).
"""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from xml.etree import ElementTree

import pytest

from bundler.shipped.ort_bundle import folder_trust
from bundler.shipped.ort_bundle.engine.engine import EngineError
from bundler.shipped.ort_bundle.engine.engine_fs import Log
from bundler.shipped.ort_bundle.engine.windows import (
    windows_host,
    windows_install_dir,
    windows_registration,
    windows_setup,
)
from bundler.shipped.ort_bundle.records import INSTALL_EXIT_CODES, InstallPlan

# -- switches ------------------------------------------------------------------------------------------------


def test_switches_are_read_as_powershell_reads_them() -> None:
    switches = windows_setup.parse_switches(["-installdir", "C:\\a b", "-Force", "-NoSelfCheck:$false", "-LogPath:C:\\l.log"],
                                            windows_setup.INSTALL_SWITCHES, script="install.cmd")
    assert dict(switches.values) == {"InstallDir": "C:\\a b", "LogPath": "C:\\l.log"}
    assert switches.flags == frozenset({"Force"})


@pytest.mark.parametrize(("argv", "message"), [
    (["-Confirm"], "unknown argument '-Confirm'"),
    (["C:\\x"], "unknown argument 'C:"),
    (["-InstallDir"], "-InstallDir needs a value"),
    (["-SkipVCRedist"], "unknown argument '-SkipVCRedist'"),  # not a switch of uninstall
])
def test_a_bad_switch_is_a_usage_error_naming_it(argv: list[str], message: str) -> None:
    with pytest.raises(EngineError, match=message) as caught:
        windows_setup.parse_switches(argv, windows_setup.UNINSTALL_SWITCHES, script="uninstall.cmd")
    assert caught.value.code == "usage"


# -- the install folder ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("folder", "problem"), [
    ("\\\\server\\share\\app", "drive letter"),
    ("C:\\Program Files\\caf\u00e9", "non-ASCII"),
    ("C:\\apps;x\\app", "';'"),
    ("C:\\apps\\NUL.txt\\app", "'NUL.txt'"),
    ("C:\\apps\\com1", "'com1'"),
    ("C:\\apps\\trailing.", "'trailing.'"),
    ("C:\\apps\\a|b", "'a|b'"),
    ("C:\\" + "x" * 90, "is 93 characters long; this bundle's deepest file"),
])
def test_install_folders_windows_cannot_use_are_refused(folder: str, problem: str) -> None:
    found = windows_install_dir.install_dir_problem(folder, budget=80)
    assert found is not None and problem in found


def test_a_quote_in_install_dir_is_refused_as_the_trailing_backslash_mistake() -> None:
    """`install.cmd -InstallDir "C:\\x\\" -Force`: the C runtime turns \\" into a quote and the rest joins the value."""
    with pytest.raises(EngineError, match="drop the trailing backslash") as caught:
        windows_install_dir.resolve_install_dir('C:\\x" -Force', budget=100)
    assert caught.value.code == "usage"
    assert windows_install_dir.resolve_install_dir("C:\\Program Files\\app\\", budget=100) == Path("C:\\Program Files\\app")


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_the_path_budget_is_the_bundles_deepest_file_with_its_bytecode_and_the_swap(tmp_path: Path) -> None:
    deep = "pkg/" + "d" * 40 + "/module_with_a_long_name.py"
    _wheel(tmp_path / "a.whl", {deep: b"x = 1\n", "pkg-1.0.data/scripts/tool": b"#!python\n"})
    plan = InstallPlan.from_json({
        "format": 2, "install_id": "app-1.0.0", "name": "app", "version": "1.0.0", "platform": "win_amd64",
        "python": "3.11", "dll_path_variable": "PATH", "installer_wheel": "installer.whl", "dll_dirs": [],
        "copy": [{"from": "payload/models/m.onnx", "to": "models/m.onnx"}],
        "venv": {"dir": "python", "site_packages": "Lib/site-packages", "interpreter": "python.exe", "scripts": "Scripts",
                 "script_kind": "win-amd64", "requirements": "payload/wheels/requirements.txt", "wheels": ["a.whl"],
                 "site_packages_files": [], "runtime": []}})
    pyc = f"python/Lib/site-packages/pkg/{'d' * 40}/__pycache__/module_with_a_long_name.cpython-311.pyc"
    assert windows_install_dir.deepest_path(plan, tmp_path) == len(pyc)
    assert windows_install_dir.install_budget(plan, tmp_path) == 259 - 1 - len(pyc) - windows_install_dir.SWAP_EXTRA
    assert windows_install_dir.SWAP_EXTRA == len(".app.previous-") - len("app") + 12 == 23


# -- VC_redist ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "reboot", "error"), [
    (0, False, None), (1638, False, None), (3010, True, None), (1641, True, None), (1618, None, "retry"),
    (1603, None, "install"), (5, None, "install")])
def test_vc_redist_exit_codes(tmp_path: Path, code: int, reboot: bool | None, error: str | None) -> None:
    log = Log(tmp_path / "log.txt")
    if error is None:
        assert windows_setup.vc_redist_outcome(code, tmp_path / "vc.log", log) is reboot
    else:
        with pytest.raises(EngineError) as caught:
            windows_setup.vc_redist_outcome(code, tmp_path / "vc.log", log)
        assert caught.value.code == error and str(code) in str(caught.value)
    assert f"VC_redist.x64.exe exited with {code}" in (tmp_path / "log.txt").read_text()


# -- the log ---------------------------------------------------------------------------------------------------


def test_the_default_log_is_named_after_the_install_and_its_folder(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26: <install id>-<first 8 hex of sha256 of the folder's absolute path>-<kind>.log, as install.sh names
    it; two folders, two logs; -LogPath still wins and -WhatIf writes none."""
    monkeypatch.setenv("ProgramData", str(tmp_path))  # the unelevated default folder: %ProgramData%\Logs\Software
    none = windows_setup.parse_switches([], windows_setup.INSTALL_SWITCHES, script="install.cmd")
    folder = windows_install_dir.absolute_install_dir("C:\\Program Files\\app\\")
    assert folder == "C:\\Program Files\\app"
    log = windows_setup.open_log(none, "app-1.0.0", "install", admin=False, install_dir=folder)
    digest = hashlib.sha256(b"C:\\Program Files\\app").hexdigest()[:8]
    assert log.path == tmp_path / "Logs" / "Software" / f"app-1.0.0-{digest}-install.log" and log.path.is_file()
    other = windows_setup.open_log(none, "app-1.0.0", "install", admin=False, install_dir="D:\\app")
    assert other.path is not None and other.path != log.path and other.path.parent == log.path.parent
    chosen = windows_setup.parse_switches(["-LogPath", str(tmp_path / "mine.log")], windows_setup.INSTALL_SWITCHES,
                                          script="install.cmd")
    assert windows_setup.open_log(chosen, "app-1.0.0", "install", admin=False, install_dir=folder).path == \
        tmp_path / "mine.log"
    whatif = windows_setup.parse_switches(["-WhatIf"], windows_setup.INSTALL_SWITCHES, script="install.cmd")
    assert windows_setup.open_log(whatif, "app-1.0.0", "install", admin=False, install_dir=folder).path is None


# -- the startup self-check task ---------------------------------------------------------------------------------


def test_the_startup_task_runs_the_deferred_self_check_as_system_at_boot(tmp_path: Path) -> None:
    root = Path("C:\\Program Files\\app")
    command, arguments = windows_registration.selfcheck_task_command(root, "C:\\Program Files\\app\\python\\python.exe", "app",
                                                              Log(Path("C:\\Windows\\Logs\\Software\\app-1.0.0-install.log")))
    xml = ElementTree.fromstring(windows_registration.task_xml(command, arguments).split("\n", 1)[1])
    ns = {"t": "http://schemas.microsoft.com/windows/2004/02/mit/task"}
    assert xml.find("t:Triggers/t:BootTrigger", ns) is not None
    assert xml.findtext("t:Principals/t:Principal/t:UserId", namespaces=ns) == "S-1-5-18"
    assert xml.findtext("t:Actions/t:Exec/t:Command", namespaces=ns) == command
    assert xml.findtext("t:Actions/t:Exec/t:Arguments", namespaces=ns) == (
        '-I -B "C:\\Program Files\\app\\installer\\ort_bundle\\__main__.py" engine after-reboot --root "C:\\Program Files\\app" '
        '--task "ort-bundler-app-selfcheck" --log-file "C:\\Windows\\Logs\\Software\\app-1.0.0-install.log"')


# -- who may write a folder: crafted security descriptors --------------------------------------------------------

ADMINS, SYSTEM, USERS, AUTH_USERS, EVERYONE = "S-1-5-32-544", "S-1-5-18", "S-1-5-32-545", "S-1-5-11", "S-1-1-0"
INSTALLER = "S-1-5-21-1-2-3-500"
FULL, READ_EXECUTE, MODIFY, ADD_SUBDIR = 0x1F01FF, 0x1200A9, 0x1301BF, 0x4
OI_CI, INHERIT_ONLY = 0x03, 0x08


def sid_bytes(text: str) -> bytes:
    parts = [int(p) for p in text.split("-")[1:]]
    revision, authority, subs = parts[0], parts[1], parts[2:]
    return bytes([revision, len(subs)]) + authority.to_bytes(6, "big") + struct.pack(f"<{len(subs)}I", *subs)


def descriptor(owner: str | None, aces: list[tuple[int, int, int, str]] | None) -> bytes:
    """A self-relative SECURITY_DESCRIPTOR as GetFileSecurityW returns it: header, owner SID, DACL."""
    body, owner_at, dacl_at = b"", 0, 0
    if owner is not None:
        owner_at = 20
        body += sid_bytes(owner)
    control = 0x8000
    if aces is not None:
        control |= 0x0004
        dacl_at = 20 + len(body)
        entries = b""
        for kind, flags, mask, sid in aces:
            raw = sid_bytes(sid)
            entries += struct.pack("<BBHI", kind, flags, 8 + len(raw), mask) + raw
        body += struct.pack("<BBHHH", 2, 0, 8 + len(entries), len(aces), 0) + entries
    return struct.pack("<BBHIIII", 1, 0, control, owner_at, 0, 0, dacl_at) + body


PROGRAM_FILES = [(0, OI_CI, FULL, SYSTEM), (0, OI_CI, FULL, ADMINS), (0, OI_CI, READ_EXECUTE, USERS),
                 (0, OI_CI | INHERIT_ONLY, MODIFY, "S-1-3-0")]


@pytest.mark.parametrize(("owner", "aces", "problem"), [
    (ADMINS, PROGRAM_FILES, None),
    ("S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464", PROGRAM_FILES, None),  # TrustedInstaller
    (INSTALLER, PROGRAM_FILES, None),  # the account running the install (an administrator, or Wine's one user)
    ("S-1-5-21-1-2-3-1001", PROGRAM_FILES, "owned by S-1-5-21-1-2-3-1001"),  # C:\ort made by a standard user
    (ADMINS, [*PROGRAM_FILES, (0, OI_CI, MODIFY, AUTH_USERS)], "S-1-5-11 may write it"),  # inherited from C:\
    (ADMINS, [*PROGRAM_FILES, (0, 0, ADD_SUBDIR, USERS)], "S-1-5-32-545 may write it"),
    (ADMINS, [*PROGRAM_FILES, (0, OI_CI, 0x10000000, EVERYONE)], "S-1-1-0 may write it"),  # GENERIC_ALL
    (ADMINS, [(1, 0, FULL, EVERYONE), *PROGRAM_FILES], None),  # a deny ACE grants nothing
    (ADMINS, None, "no access control list"),
    (None, PROGRAM_FILES, "owned by nobody"),
])
def test_who_may_write_a_folder_is_read_from_its_security_descriptor(owner, aces, problem) -> None:  # type: ignore[no-untyped-def]
    found = folder_trust.windows_problem(folder_trust.parse_descriptor(descriptor(owner, aces)), current_user=INSTALLER)
    assert (found is None) if problem is None else (found is not None and problem in found), found


def test_wines_descriptor_of_program_files_is_accepted() -> None:
    """The bytes Wine 8's GetFileSecurityW returned for C:\\Program Files here: owned by its one user (an
    administrator), which has full access with SYSTEM; Everyone may read."""
    wine = bytes.fromhex(
        "0100048014000000000000000000000030000000010500000000000515000000000000000000000000000000e803000002005400"
        "0300000000031400ff011f0001010000000000051200000000032400ff011f00010500000000000515000000000000000000000000"
        "000000e803000000031400a9001200010100000000000100000000")
    parsed = folder_trust.parse_descriptor(wine)
    assert parsed.owner == "S-1-5-21-0-0-0-1000"
    assert folder_trust.windows_problem(parsed, current_user="S-1-5-21-0-0-0-1000") is None
    assert "owned by" in str(folder_trust.windows_problem(parsed, current_user="S-1-5-21-9-9-9-1001"))


@pytest.mark.parametrize("data", [b"", b"\x01" * 19, descriptor(ADMINS, PROGRAM_FILES)[:40]])
def test_a_truncated_descriptor_is_an_error_not_a_pass(data: bytes) -> None:
    with pytest.raises(folder_trust.DescriptorError):
        folder_trust.windows_problem(folder_trust.parse_descriptor(data), current_user=None)


# -- POSIX, for real: a parent another user can write --------------------------------------------------------------


def test_a_parent_writable_by_others_or_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    problem = folder_trust.posix_problem(os.stat(shared), euid=os.geteuid())
    assert problem is not None and "lets others write it" in problem
    os.chmod(shared, 0o755)
    assert folder_trust.posix_problem(os.stat(shared), euid=os.geteuid()) is None
    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    os.chown(shared, 65534, 65534)  # nobody: a folder another (non-root) user made in advance
    problem = folder_trust.posix_problem(os.stat(shared), euid=0)
    assert problem is not None and "owned by uid 65534" in problem


def test_the_engine_refuses_to_install_below_a_world_writable_folder(tmp_path: Path) -> None:
    """On Linux as on Windows (issue 27 §4): nothing is created, and the exit code is usage."""
    from bundler.shipped.ort_bundle.engine import target_folder

    shared = tmp_path / "tmp-like"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    with pytest.raises(EngineError) as caught:
        target_folder.check_parent_posix(shared / "app")
    assert caught.value.code == "usage" and "lets others write it" in str(caught.value)
    assert list(shared.iterdir()) == []


def test_the_engine_cli_maps_a_bad_switch_to_usage_without_a_traceback(tmp_path: Path) -> None:
    """`engine.py windows-install --bundle DIR -Bogus` on any system: one line, exit 10."""
    proc = subprocess.run([sys.executable, "-c", "import sys; from bundler.shipped.ort_bundle.engine.engine import main; "
                           "sys.exit(main(sys.argv[1:]))", "windows-install", "--bundle", str(tmp_path), "-Bogus"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == INSTALL_EXIT_CODES["usage"], proc.stderr
    assert "unknown argument '-Bogus'" in proc.stderr and "Traceback" not in proc.stderr


# -- files in use --------------------------------------------------------------------------------------------


def test_files_in_use_name_the_programs_restart_manager_found_and_otherwise_the_folder() -> None:
    """Exit 15's sentence. Restart Manager names the holders on Windows; under Wine it finds none, so the
    Wine install test sees the second form: both are decided here, on crafted records."""
    root = Path("C:/ort/app")
    busy = [root / f"f{i}.dll" for i in range(5)]
    named = windows_setup.in_use_message(root, busy, [("python.exe", 4321), ("Service Host", 812), ("python.exe", 4321)])
    assert named.startswith(f"files in use: {busy[0]}, {busy[1]}, {busy[2]} and 2 more (in use by Service Host (pid "
                            f"812), python.exe (pid 4321)); close the programs and retry")
    assert named.endswith("nothing was changed")
    unnamed = windows_setup.in_use_message(root, busy[:1], [])
    assert unnamed == f"files in use: {busy[0]} (in use by a program from {root}); close the programs and retry; nothing was changed"


# -- the install lock ------------------------------------------------------------------------------------------


def test_the_install_lock_lives_where_only_the_installing_principal_writes_and_only_it_may_open_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 40: `Global\\ort-bundler-<name>` could be created first by any user, with a DACL that kept every install
    at 1618. The lock is a file in a folder standard users cannot create in (per machine) or in the user's own profile
    (per user), with a protected DACL: a standard user cannot open it even to read (an open without sharing would
    hold it as well as a lock does). Wine keeps no ACLs: what Windows does with this DACL is the docs' check."""
    monkeypatch.setenv("SystemRoot", "C:\\Windows")
    monkeypatch.setenv("LOCALAPPDATA", "C:\\Users\\ann\\AppData\\Local")
    machine = windows_host.InstallLock("app", admin=True)
    user = windows_host.InstallLock("app", admin=False)
    assert str(machine.path).replace("/", "\\") == "C:\\Windows\\Logs\\Software\\ort-bundler-app.lock"
    assert str(user.path).replace("/", "\\") == "C:\\Users\\ann\\AppData\\Local\\ort-bundler\\ort-bundler-app.lock"
    assert windows_host.lock_sddl(admin=True, user_sid="S-1-5-21-1-2-3-1001") == "D:P(A;;FA;;;BA)(A;;FA;;;SY)"
    assert windows_host.lock_sddl(admin=False, user_sid="S-1-5-21-1-2-3-1001") == \
        "D:P(A;;FA;;;BA)(A;;FA;;;SY)(A;;FA;;;S-1-5-21-1-2-3-1001)"  # no BU/AU/WD ACE, nothing inherited ("P")
    shipped = Path(windows_host.__file__).read_text(encoding="utf-8")
    assert "CreateMutexW" not in shipped and "Global\\\\ort-bundler-{name}" not in shipped
