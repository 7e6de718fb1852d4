"""What the engine does with an installed folder: audit every file against the receipt (`run --verify`),
remove exactly what the receipt lists, and record the deferred self-check after a reboot.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from ..records import INSTALL_EXIT_CODES, PLAN_FILE, RECEIPT_FILE, InstallPlan, RecordError, SelfcheckOutcome
from .engine_env import run_selfcheck
from .engine_fs import (
    WINDOWS,
    EngineError,
    Log,
    entry_sha256,
    inside,
    leftovers,
    native,
    read_receipt,
    remove_tree,
    target_lock,
    walk,
    write_receipt,
)

#: Files the product itself writes into its folder after the install, the product's to remove with it: `run --tune`'s
#: tuning file (tuning_file.TUNING_FILE, not imported: the engine ships without the ort_bundle modules).
PRODUCT_FILES = ("tuning.json",)
#: What a `run --tune` killed while writing leaves beside its file: TuningFile.write's temporary file, named by
#: mkstemp ".tuning.json.<random>.tmp" (the prefix and suffix here), equally the product's to remove.
PRODUCT_TEMPORARY = tuple((f".{name}.", ".tmp") for name in PRODUCT_FILES)

#: Exit codes of `verify`: every installed file matches its receipt, or something changed.
VERIFY_OK = 0


VERIFY_CHANGED = INSTALL_EXIT_CODES["integrity"]


@dataclass(frozen=True)
class Audit:
    changed: Tuple[str, ...]
    missing: Tuple[str, ...]
    extra: Tuple[str, ...]  # in the environment: could change what runs, so they fail the audit
    not_ours: Tuple[str, ...]  # elsewhere: user files and caches, reported only

    @property
    def ok(self) -> bool:
        return not (self.changed or self.missing or self.extra)


def audit(root: Path) -> Audit:
    """Every installed file against the receipt: changed, missing, and files nobody installed."""
    receipt = read_receipt(root)
    if receipt is None:
        raise EngineError("usage", f"{root} holds no {RECEIPT_FILE}; it is not an installation")
    listed = {entry.path: entry.sha256 for entry in receipt.files}
    present = set(walk(root)) - {RECEIPT_FILE}
    both = sorted(present & set(listed))
    with ThreadPoolExecutor(max_workers=4) as pool:  # hashlib releases the GIL: the disk sets the pace
        digests = list(pool.map(lambda rel: entry_sha256(native(root, rel)), both))
    changed = tuple(rel for rel, digest in zip(both, digests) if digest != listed[rel])
    guarded = _guarded_folders(root)
    unlisted = sorted(present - set(listed))
    extra = tuple(rel for rel in unlisted if any(rel.startswith(folder + "/") for folder in guarded))
    not_ours = tuple(rel for rel in unlisted if rel not in extra)
    return Audit(changed=changed, missing=tuple(sorted(set(listed) - present)), extra=extra, not_ours=not_ours)


#: Folders of the install that hold code it runs (besides the environment and the DLL folders): a file added
#: there could run as whoever runs the self-check or the uninstall.
CODE_FOLDERS = ("installer", "selfcheck")


def guarded_folders(plan: InstallPlan) -> Tuple[str, ...]:
    """Where only the bundle's files belong: the environment, the DLL folders and the code folders."""
    return (plan.venv.dir, *plan.dll_dirs, *CODE_FOLDERS)


def _guarded_folders(root: Path) -> Tuple[str, ...]:
    """guarded_folders() of the installed copy of the plan."""
    try:
        plan = InstallPlan.loads((root / PLAN_FILE).read_text(encoding="utf-8"), source=str(root / PLAN_FILE))
    except (OSError, RecordError):
        return ("venv", *CODE_FOLDERS)
    return guarded_folders(plan)


def uninstall(install_dir: Path, log: Log, *, name: Optional[str], dry_run: bool) -> List[str]:
    """Remove exactly what the receipt lists and the files the product wrote (PRODUCT_FILES), then folders that
    end up empty; files not ours stay."""
    if install_dir.is_symlink():
        raise EngineError("usage", f"{install_dir} is a symbolic link; nothing was changed")
    receipt = read_receipt(install_dir) if install_dir.is_dir() else None
    if receipt is None:
        log(f"nothing to uninstall: {install_dir} holds no installation")
        return []
    if name is not None and receipt.name != name:
        raise EngineError("usage", f"{install_dir} holds {receipt.install_id}, not {name}; nothing was changed")
    paths = [(entry.path, inside(install_dir, entry.path, what=RECEIPT_FILE)) for entry in receipt.files]
    present = [(rel, path) for rel, path in paths if os.path.lexists(path)]
    listed = {entry.path for entry in receipt.files}
    made = [(rel, install_dir / rel) for rel in (*PRODUCT_FILES, *_temporary_files(install_dir)) if rel not in listed]
    present += [(rel, path) for rel, path in made if os.path.islink(path) or os.path.isfile(path)]
    if dry_run:
        return [rel for rel, _ in present]
    with target_lock(install_dir):
        for leftover in sum(leftovers(install_dir), []):
            remove_tree(leftover)
            log(f"removed {leftover}, left by an interrupted run")
        for _, path in present:
            _remove(path, install_dir)
        folders = [inside(install_dir, rel + "/x", what=RECEIPT_FILE).parent for rel in receipt.folders]
        _remove_empty_folders([path for _, path in paths] + [folder / "x" for folder in folders], install_dir)
        (install_dir / RECEIPT_FILE).unlink()
        with contextlib.suppress(OSError):
            install_dir.rmdir()
    return [rel for rel, _ in present] + [RECEIPT_FILE]


def _remove(path: Path, install_dir: Path) -> None:
    """Unlink one file. Windows: a file of the install folder itself is first renamed out of it, beside it: the
    uninstall.cmd that cmd.exe is running from that folder is still open (Wine's cmd.exe keeps it open to the end),
    so deleting it in place would leave it there until cmd.exe exits, and the folder with it (issue 38 §8e)."""
    if WINDOWS and path.parent == install_dir:
        aside = install_dir.parent / f".{install_dir.name}.removed-{os.urandom(6).hex()}"
        try:
            os.replace(path, aside)
        except OSError:
            pass  # another volume or a file in use: deleted in place, as before
        else:
            path = aside
    path.unlink()


def leftover_names(install_dir: Path) -> List[str]:
    """What is still in the install folder after the uninstall: files and folders the installer did not create."""
    try:
        return sorted(os.listdir(install_dir))
    except OSError:
        return []


def _temporary_files(install_dir: Path) -> List[str]:
    return sorted(name for name in os.listdir(install_dir)
                  if any(name.startswith(prefix) and name.endswith(suffix) for prefix, suffix in PRODUCT_TEMPORARY))


def _remove_empty_folders(paths: Sequence[Path], root: Path) -> None:
    folders = {parent for path in paths for parent in path.parents if root in parent.parents}
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        if folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir()):
            folder.rmdir()


def detection_state(outcome: SelfcheckOutcome) -> Optional[str]:
    """What the detection value says of the self-check: "passed", "passed after the reboot" or "skipped" (-NoSelfCheck:
    the administrator's decision); None while the check is owed (deferred until after a reboot, or failed there),
    when nothing may tell Intune or ConfigMgr that the install is there."""
    if not outcome.ran:
        return "skipped"
    if outcome.passed:
        return "passed"
    if outcome.deferred_until_reboot and outcome.after_reboot:
        return "passed after the reboot"
    return None


def record_after_reboot(root: Path, log: Log, *, task: Optional[str] = None) -> int:
    """The deferred self-check, run once at the first startup after the reboot by a one-shot scheduled task
    (as SYSTEM, who can write the receipt and the log): its result goes into the receipt, then the task goes."""
    receipt = read_receipt(root)
    if receipt is None:
        raise EngineError("usage", f"{root} holds no {RECEIPT_FILE}")
    plan = InstallPlan.loads((root / PLAN_FILE).read_text(encoding="utf-8"), source=str(root / PLAN_FILE))
    code, _ = run_selfcheck(plan, root, log)
    outcome = replace(receipt.selfcheck, after_reboot=code == 0)
    write_receipt(root, replace(receipt, selfcheck=outcome))
    log(f"the self-check after the reboot {'passed' if code == 0 else f'failed with exit code {code}'}")
    if code == 0 and WINDOWS:
        from .windows.windows_registration import record_checked

        record_checked(receipt.name, receipt.version, root, log)
    if task:
        from .windows.windows_host import schtasks

        done, output = schtasks("/delete", "/tn", task, "/f")
        log(f"removed the scheduled task {task}" if done == 0 else
            f"warning: could not remove the scheduled task {task}: {output}")
    return 0 if code == 0 else INSTALL_EXIT_CODES["selfcheck"]
