"""The folder the zip route's uninstall runs its interpreter copy from (issue 34 §8).

uninstall.cmd (which Intune and ConfigMgr run as SYSTEM) used to copy python.exe into
`%TEMP%\\ort-bundler-uninstall-%RANDOM%%RANDOM%`: C:\\Windows\\Temp for SYSTEM, where users may create folders, under a
guessable name; a folder made there first stopped the uninstall with exit 12. Now the installed interpreter runs
installer/uninstall_copy.py first, which makes the folder under a `secrets` name, skips a taken one, creates it
with the install's ACL in the same call and writes it again with icacls, as the install does. What Wine cannot
show (it enforces no ACL and does not run as SYSTEM) is checked here as written: the SDDL against the install's
icacls grants, the scripts' text, and both .ps1 files parsed as Windows PowerShell 5.1. The cmd route runs under
Wine in test_scripts_windows.py (the copy's folder, its removal).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from integration.wine.test_scripts_windows import CONTEXTS, parse_problems, powershell7_constructs

from bundler.assembly.render import render_scripts
from bundler.shipped.ort_bundle.engine import uninstall_copy
from bundler.shipped.ort_bundle.engine.engine_fs import EngineError
from bundler.shipped.ort_bundle.engine.windows import windows_host

#: SDDL trustee and rights for each icacls grant of windows_host.restrict_folder.
ICACLS_TO_SDDL = {"*S-1-5-32-544:(OI)(CI)F": "(A;OICI;FA;;;BA)", "*S-1-5-18:(OI)(CI)F": "(A;OICI;FA;;;SY)",
                  "*S-1-5-32-545:(OI)(CI)RX": "(A;OICI;0x1200a9;;;BU)"}


def test_a_taken_name_is_skipped_never_a_reason_to_stop(tmp_path: Path) -> None:
    """The old script stopped (exit 12) when its folder existed; a folder someone made first is now just skipped."""
    (tmp_path / "ort-bundler-uninstall-planted").mkdir()
    names = iter(["ort-bundler-uninstall-planted", "ort-bundler-uninstall-fresh"])
    folder = uninstall_copy.make_folder(tmp_path, create=uninstall_copy.create_plain, names=names)
    assert folder == tmp_path / "ort-bundler-uninstall-fresh" and (folder.stat().st_mode & 0o777) == 0o700
    assert list((tmp_path / "ort-bundler-uninstall-planted").iterdir()) == []  # not used, not touched
    drawn = [next(uninstall_copy.random_names()) for _ in range(3)]
    assert all(re.fullmatch(r"ort-bundler-uninstall-[0-9a-f]{16}", name) for name in drawn) and len(set(drawn)) == 3
    for index in range(uninstall_copy.ATTEMPTS):
        (tmp_path / f"taken-{index}").mkdir()
    with pytest.raises(EngineError, match=f"{uninstall_copy.ATTEMPTS} new folder names in {tmp_path} were all taken"):
        uninstall_copy.make_folder(tmp_path, create=uninstall_copy.create_plain,
                                   names=iter(f"taken-{i}" for i in range(100)))


def test_the_copy_holds_the_interpreter_folders_files_and_a_planted_file_refuses_it(tmp_path: Path) -> None:
    home = tmp_path / "python"
    (home / "Lib").mkdir(parents=True)
    for name in ("python.exe", "python311.dll", "python311.zip", "python311._pth"):
        (home / name).write_bytes(name.encode())
    base = tmp_path / "temp"
    base.mkdir()
    folder = uninstall_copy.copy_interpreter(home, base=base, admin=False)
    assert folder.parent == base and sorted(p.name for p in folder.iterdir()) == [
        "python.exe", "python311._pth", "python311.dll", "python311.zip"]

    def plant(made: Path) -> None:  # what an ACL that still let someone else write would allow
        (made / "VERSION.dll").write_bytes(b"planted")

    with pytest.raises(EngineError, match=r"made just now, already holds VERSION.dll: someone else can write it"):
        uninstall_copy.copy_interpreter(home, base=base, admin=False, restrict=plant)
    assert sorted(p.name for p in base.iterdir()) == [folder.name]  # the refused folder is gone
    assert uninstall_copy.main([str(tmp_path / "missing")]) == 10


def test_the_folder_is_created_with_the_installs_acl(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDDL the folder is created with grants exactly what restrict_folder's icacls lines grant (the install's
    rule), protected from inheritance (D:P, as /inheritance:r)."""
    seen: list[list[str]] = []
    monkeypatch.setattr(windows_host, "run_logged", lambda args, **_: (seen.append(args), (0, ""))[1])
    windows_host.restrict_folder(Path("C:/x"))
    [args] = seen
    assert args[:3] == ["icacls.exe", str(Path("C:/x")), "/inheritance:r"] and args[3] == "/grant:r"
    assert uninstall_copy.SDDL == "D:P" + "".join(ICACLS_TO_SDDL[grant] for grant in args[4:])


@pytest.mark.parametrize("name", ["runtime-script"])
def test_the_uninstall_scripts_use_that_folder_and_remove_it(name: str) -> None:
    scripts = render_scripts(CONTEXTS[name])
    cmd = scripts["uninstall.cmd"].decode("ascii")
    ps1 = scripts["uninstall.ps1"]
    for text in (cmd, ps1.decode("utf-8-sig")):
        assert "%RANDOM%" not in text and "%TEMP%" not in text and "GetTempPath" not in text and "NewGuid" not in text
        assert "installer\\ort_bundle\\__main__.py" in text and "uninstall-copy" in text
    assert 'rmdir /s /q "%ORT_BUNDLE_COPY%"' in cmd
    assert "Remove-Item -LiteralPath $InterpreterCopy -Recurse -Force" in ps1.decode("utf-8-sig")
    for script in ("uninstall.ps1", "install.ps1"):
        assert parse_problems(scripts[script]) == [] and powershell7_constructs(scripts[script]) == [], script
