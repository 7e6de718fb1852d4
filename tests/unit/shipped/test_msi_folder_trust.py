"""Issue 34, severe 7: the MSI's custom action refuses an INSTALLDIR others could write before it runs anything
there, and the MSI locks INSTALLDIR as the zip route's icacls line does.

Wine keeps no ACLs, so the security descriptors here are crafted (tests/unit/shipped/test_windows_setup.py's
`descriptor`, the bytes GetFileSecurityW returns) and handed to the action by a STAND-IN reader in place of
Windows' GetFileSecurityW. The real reader runs under Wine's msiexec in tests/integration/wine/test_msi.py, where
every install passes it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fixtures.cli import REPO
from unit.shipped.test_windows_setup import (
    ADMINS,
    AUTH_USERS,
    FULL,
    MODIFY,
    OI_CI,
    PROGRAM_FILES,
    READ_EXECUTE,
    SYSTEM,
    USERS,
    descriptor,
)

from bundler.platforms.windows.msi_source import INSTALLDIR_SDDL
from bundler.shipped.ort_bundle import folder_trust
from bundler.shipped.ort_bundle.engine.engine_fs import EngineError, Log
from bundler.shipped.ort_bundle.engine.windows.msi_action import CACHE_DIR_FILE, FolderSecurity, finish

SYSTEM_ACCOUNT = SYSTEM  # msiexec runs a deferred, no-impersonate action as SYSTEM
#: What the MSI's MsiLockPermissionsEx row leaves on INSTALLDIR (no inherited ACEs).
LOCKED = [(0, OI_CI, FULL, ADMINS), (0, OI_CI, FULL, SYSTEM), (0, OI_CI, READ_EXECUTE, USERS)]
#: A folder on a data volume: D:\ grants Authenticated Users Modify, inherited by what is made below it.
DATA_VOLUME = [*PROGRAM_FILES, (0, OI_CI, MODIFY, AUTH_USERS)]


def stand_in(acls: dict[Path, list[tuple[int, int, int, str]]]) -> FolderSecurity:
    """A STAND-IN for Windows' GetFileSecurityW: the crafted descriptor of each folder, owned by Administrators."""
    def read(folder: Path) -> bytes:
        read.asked.append(folder)  # type: ignore[attr-defined]
        return descriptor(ADMINS, acls[folder])
    read.asked = []  # type: ignore[attr-defined]
    return FolderSecurity(descriptor=read, current_user=lambda: SYSTEM_ACCOUNT)


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    """An INSTALLDIR as msiexec leaves it before the action: an install plan and a receipt (the self-check is
    never reached in these tests, so they only need to be there)."""
    root = tmp_path / "Data" / "app"
    root.mkdir(parents=True)
    (root / "install-plan.json").write_text("{}", encoding="utf-8")
    (root / "receipt.json").write_text(json.dumps({"files": []}), encoding="utf-8")
    return root


def test_a_parent_users_may_write_is_refused_before_anything_runs(installed: Path, tmp_path: Path) -> None:
    security = stand_in({installed.parent: DATA_VOLUME, installed: LOCKED})
    log_file = tmp_path / "msi.log"
    with pytest.raises(EngineError) as refused:
        finish(installed, cache_dir="C:\\cache", self_check=True, remove=False, log=Log(log_file), security=security)
    assert refused.value.code == "usage"
    message = str(refused.value)
    assert f"INSTALLDIR's parent {installed.parent} is not safe" in message and "S-1-5-11 may write it" in message
    assert "rolls the installation back" in message
    assert not log_file.exists()  # nothing ran, so nothing was logged (the self-check logs before it starts)
    assert not (installed / CACHE_DIR_FILE).exists()  # nothing recorded
    assert (installed / "receipt.json").read_text() == json.dumps({"files": []})  # the receipt untouched


def test_an_installdir_the_lock_did_not_reach_is_refused(installed: Path) -> None:
    """The parent is Program Files-like, but INSTALLDIR still inherits a user write grant: the
    MsiLockPermissionsEx row was not applied (an older Windows Installer, a stripped table)."""
    security = stand_in({installed.parent: PROGRAM_FILES, installed: DATA_VOLUME})
    with pytest.raises(EngineError, match=re.escape(f"INSTALLDIR {installed} is not safe")):
        finish(installed, cache_dir=None, self_check=False, remove=False, log=Log(None), security=security)


def test_an_unreadable_descriptor_is_a_refusal_not_a_pass(installed: Path) -> None:
    security = FolderSecurity(descriptor=lambda folder: b"\x01" * 12, current_user=lambda: SYSTEM_ACCOUNT)
    with pytest.raises(EngineError, match="security descriptor cannot be read"):
        finish(installed, cache_dir=None, self_check=False, remove=False, log=Log(None), security=security)


def test_safe_folders_pass_the_check_and_the_action_goes_on(installed: Path) -> None:
    """Both folders as a default install leaves them: the check passes and the action reads the install plan
    next (here a stub plan, so it stops there: the check is what is shown, the rest runs under Wine)."""
    security = stand_in({installed.parent: PROGRAM_FILES, installed: LOCKED})
    with pytest.raises(EngineError) as stopped:
        finish(installed, cache_dir=None, self_check=False, remove=False, log=Log(None), security=security)
    assert stopped.value.code == "integrity" and "install-plan.json" in str(stopped.value)
    assert security.descriptor.asked == [installed.parent, installed]  # type: ignore[attr-defined]


def test_removal_is_never_refused(installed: Path) -> None:
    (installed / CACHE_DIR_FILE).write_text("C:\\cache\n", encoding="utf-8")
    security = stand_in({installed.parent: DATA_VOLUME, installed: DATA_VOLUME})
    assert finish(installed, cache_dir=None, self_check=False, remove=True, log=Log(None), security=security) == 0
    assert not (installed / CACHE_DIR_FILE).exists()


# -- the lock the MSI writes ---------------------------------------------------------------------------------------

#: The zip route's line (bundler/shipped/ort_bundle/windows_host.restrict_folder) and what each of its parts means in SDDL.
ICACLS = ["/inheritance:r", "/grant:r", "*S-1-5-32-544:(OI)(CI)F", "*S-1-5-18:(OI)(CI)F", "*S-1-5-32-545:(OI)(CI)RX"]
SDDL_SIDS = {"BA": ADMINS, "SY": SYSTEM, "BU": USERS}
SDDL_RIGHTS = {"FA": "F", "0x1200a9": "RX"}


def test_the_msi_s_sddl_grants_what_the_zip_route_s_icacls_line_grants() -> None:
    dacl = re.fullmatch(r"O:(?P<owner>[A-Z]+)D:(?P<flags>[A-Z]*)(?P<aces>(\([^)]*\))+)", INSTALLDIR_SDDL)
    assert dacl is not None and dacl["flags"] == "P"  # protected: nothing inherited (icacls /inheritance:r)
    assert dacl["owner"] == "BA"  # Administrators own it: whoever made the folder before cannot reopen it
    grants = []
    for ace in re.findall(r"\(([^)]*)\)", dacl["aces"]):
        kind, flags, rights, _, _, sid = ace.split(";")
        assert kind == "A" and flags == "OICI"
        grants.append(f"*{SDDL_SIDS[sid]}:(OI)(CI){SDDL_RIGHTS[rights]}")
    assert ["/inheritance:r", "/grant:r", *grants] == ICACLS
    # and the engine's own rule accepts the folder it leaves
    locked = folder_trust.parse_descriptor(descriptor(SYSTEM, LOCKED))
    assert folder_trust.windows_problem(locked, current_user=SYSTEM_ACCOUNT) is None


def test_the_zip_route_still_writes_that_icacls_line() -> None:
    """The comparison above is with the zip route's line as it stands in its source."""
    source = (REPO / "bundler" / "shipped" / "ort_bundle" / "engine" / "windows" / "windows_host.py").read_text(encoding="utf-8")
    body = source[source.index("def restrict_folder"):source.index("def schtasks")]
    assert all(f'"{part}"' in body for part in ICACLS), body
