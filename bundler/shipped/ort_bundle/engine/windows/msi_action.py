"""What the MSI runs after it has copied the install image: `engine.py msi-finish`.

Windows Installer copies files and writes registry values itself; what it cannot do is prove the
installation works. The MSI therefore runs this as a deferred custom action, without impersonation (as
SYSTEM, like the copy), on the interpreter it has just installed, before InstallFinalize: a non-zero exit
makes msiexec roll the whole transaction back, so a machine never keeps an install whose self-check failed.
It writes into the install folder only `cache_dir.txt` (the CACHEDIR property), after the self-check
passed and never on a failing run (a rollback would leave it behind), and removes it when the MSI is
removed (wixl 0.101 has no RemoveFile). Likewise the detection value's `CheckedVersion` and `SelfCheck`, which the
Win32 app's detection rule requires beside the product code: written last, once everything else succeeded,
removed on uninstall. Its log goes where the zip route's goes: %SystemRoot%\\Logs\\Software\\<id>-msi.log,
and, as the zip route's install does, the receipt records where (its `install_log`: the support bundle takes
this install's log, not another's of the same name): the image's receipt was made on the build machine,
which knew no log.

Before it starts anything else from the folder (the self-check imports the bundle's packages and loads its
DLLs), it refuses, and so rolls the install back, when INSTALLDIR's parent or INSTALLDIR itself could be
written by anyone but Administrators, SYSTEM, TrustedInstaller or the installing account: the rule and the
descriptor parsing are the zip route's (folder_trust.py, as windows_setup.check_parent applies them). The
MSI's MsiLockPermissionsEx row has locked INSTALLDIR by then (CreateFolders runs before InstallFiles), so
INSTALLDIR failing the rule means that lock did not happen. A folder another account made and filled before
the install never gets this far: the MSI's own check (msi_source.planted_file_check) ends a first install
into a folder that holds anything, from the installer's script host, before python.exe is even copied.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

from ...folder_trust import DescriptorError, parse_descriptor, posix_problem, windows_problem
from ...records import PLAN_FILE, RECEIPT_FILE, InstallPlan, RecordError
from ..engine_env import run_selfcheck
from ..engine_fs import WINDOWS, EngineError, Log, read_receipt, write_receipt

#: The file the launchers read the model cache folder from (the zip route writes it at install).
CACHE_DIR_FILE = "cache_dir.txt"


@dataclass(frozen=True)
class FolderSecurity:
    """Who may write a folder, as the action reads it: Windows' GetFileSecurityW and the process token by
    default (windows_host); a test hands in crafted descriptors, since Wine keeps no ACLs."""

    descriptor: Callable[[Path], bytes]  # the folder's self-relative security descriptor
    current_user: Callable[[], Optional[str]]  # the SID of the installing account (SYSTEM under msiexec)


def windows_security() -> FolderSecurity:
    from .windows_host import current_user_sid, folder_security

    return FolderSecurity(descriptor=folder_security, current_user=current_user_sid)


def check_folders(root: Path, security: Optional[FolderSecurity]) -> None:
    """Refuse an INSTALLDIR whose parent, or which itself, others could write (see the module docstring). Without
    a `security` reader off Windows (the engine's own tests run msi-finish on Linux) the POSIX rule applies."""
    user = security.current_user() if security is not None else None
    for folder, what in ((root.parent, "INSTALLDIR's parent"), (root, "INSTALLDIR")):
        if security is None:
            problem = posix_problem(os.stat(folder), euid=os.geteuid())
        else:
            try:
                problem = windows_problem(parse_descriptor(security.descriptor(folder)), current_user=user)
            except DescriptorError as exc:
                problem = f"its security descriptor cannot be read ({exc})"
        if problem:
            raise EngineError("usage", f"{what} {folder} is not safe to run the installed code from as SYSTEM: "
                                       f"{problem}; install into a folder only administrators can write, such as "
                                       f"one under %ProgramFiles% (Windows Installer rolls the installation back)")


def finish(root: Path, *, cache_dir: Optional[str], self_check: bool, remove: bool, log: Log,
           security: Optional[FolderSecurity] = None) -> int:
    """Check who may write the folder, self-check the installed tree in `root`, then record CACHEDIR; the exit
    code msiexec acts on. With `remove` (the MSI is being removed) only cache_dir.txt goes, the one file the
    MSI's tables do not list; removal is never refused, as it only deletes."""
    if log.path is not None:
        with contextlib.suppress(OSError):
            log.path.parent.mkdir(parents=True, exist_ok=True)
    if remove:
        with contextlib.suppress(FileNotFoundError):
            (root / CACHE_DIR_FILE).unlink()
        if WINDOWS:
            _forget_detection(root, log)
        return 0
    check_folders(root, security or (windows_security() if WINDOWS else None))
    log(f"{root} and its parent are writable only by administrators, SYSTEM and the installing account")
    try:
        plan = InstallPlan.loads((root / PLAN_FILE).read_text(encoding="utf-8"), source=str(root / PLAN_FILE))
    except (OSError, RecordError) as exc:
        raise EngineError("integrity", f"{root / PLAN_FILE} cannot be used ({exc}); the MSI's files are incomplete") from None
    if self_check:
        log(f"running the self-check of {plan.install_id} in {root}")
        code, report = run_selfcheck(plan, root, log, cache_dir=cache_dir)
        if code != 0:
            failed = ", ".join(check.id for check in report.failed()) if report else ""
            raise EngineError("selfcheck", f"the self-check failed with exit code {code}"
                                           + (f" (failed: {failed})" if failed else "")
                                           + "; Windows Installer rolls the installation back")
        log("the self-check passed")
    else:
        log("the self-check was skipped (NOSELFCHECK=1)")
    target = root / CACHE_DIR_FILE
    if cache_dir:
        target.write_text(cache_dir + "\n", encoding="utf-8")
        log(f"model cache folder: {cache_dir}")
    elif target.exists():
        target.unlink()  # a repair or upgrade without CACHEDIR goes back to the default
    _record_log(root, log)
    if WINDOWS:
        from .windows_host import DETECTION_KEY
        from .windows_registration import write_checked

        write_checked("HKLM", DETECTION_KEY.format(name=plan.name), plan.version, "passed" if self_check else "skipped",
                      log, zip_route=False)
    return 0


def _forget_detection(root: Path, log: Log) -> None:
    """The values this action wrote beside the MSI's Registry table go with the MSI, and so does the key once it is
    empty (Windows Installer removed its own values first: RemoveRegistryValues runs before this action)."""
    from . import windows_host as host
    from .windows_registration import CHECKED_VALUES

    receipt = None
    with contextlib.suppress(EngineError):
        receipt = read_receipt(root)
    if receipt is None:
        log(f"{root / RECEIPT_FILE} is gone: the detection value's CheckedVersion is left to the next install")
        return
    key = host.DETECTION_KEY.format(name=receipt.name)
    host.delete_values(host.hive("HKLM"), key, CHECKED_VALUES[1:])  # Version is the MSI's own value
    host.delete_key_if_empty(host.hive("HKLM"), key)
    log(f"removed CheckedVersion and SelfCheck from HKLM\\{key}")


def _record_log(root: Path, log: Log) -> None:
    """The receipt names this install's log, written like cache_dir.txt only once the self-check passed."""
    if log.path is None:
        return
    receipt = read_receipt(root)
    if receipt is None:
        raise EngineError("integrity", f"{root / RECEIPT_FILE} is missing; the MSI's files are incomplete")
    write_receipt(root, replace(receipt, install_log=os.path.abspath(log.path)))
