"""What the MSI runs after it has copied the install image: `engine.py msi-finish`.

Windows Installer copies files and writes registry values itself; what it cannot do is prove the
installation works. The MSI therefore runs this as a deferred custom action, without impersonation (as
SYSTEM, like the copy), on the interpreter it has just installed, before InstallFinalize: a non-zero exit
makes msiexec roll the whole transaction back, so a machine never keeps an install whose self-check failed.
It writes into the install folder only `cache_dir.txt` (the CACHEDIR property), after the self-check
passed and never on a failing run (a rollback would leave it behind), and removes it when the MSI is
removed (wixl 0.101 has no RemoveFile). Its log goes where the zip route's goes: %SystemRoot%\\Logs\\Software\\<id>-msi.log,
and, as the zip route's install does, the receipt records where (its `install_log`: the support bundle takes
this install's log, not another's of the same name): the image's receipt was made on the build machine,
which knew no log.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from pathlib import Path
from typing import Optional

from .engine_env import run_selfcheck
from .engine_fs import EngineError, Log, read_receipt, write_receipt
from .records import PLAN_FILE, RECEIPT_FILE, InstallPlan, RecordError

#: The file the launchers read the model cache folder from (the zip route writes it at install).
CACHE_DIR_FILE = "cache_dir.txt"


def finish(root: Path, *, cache_dir: Optional[str], self_check: bool, remove: bool, log: Log) -> int:
    """Self-check the installed tree in `root`, then record CACHEDIR; the exit code msiexec acts on. With
    `remove` (the MSI is being removed) only cache_dir.txt goes, the one file the MSI's tables do not list."""
    if log.path is not None:
        with contextlib.suppress(OSError):
            log.path.parent.mkdir(parents=True, exist_ok=True)
    if remove:
        with contextlib.suppress(FileNotFoundError):
            (root / CACHE_DIR_FILE).unlink()
        return 0
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
    return 0


def _record_log(root: Path, log: Log) -> None:
    """The receipt names this install's log, written like cache_dir.txt only once the self-check passed."""
    if log.path is None:
        return
    receipt = read_receipt(root)
    if receipt is None:
        raise EngineError("integrity", f"{root / RECEIPT_FILE} is missing; the MSI's files are incomplete")
    write_receipt(root, replace(receipt, install_log=os.path.abspath(log.path)))
