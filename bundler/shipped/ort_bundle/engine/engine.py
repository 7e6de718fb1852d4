"""The install engine: carries out install-plan.json, writes the receipt, audits and uninstalls.

One program for Linux and Windows, shipped in every bundle in payload/ort_bundle/engine/ (started
through payload/ort_bundle/__main__.py) and copied into every install as installer/ort_bundle/. This module holds
the install itself and the command line; bundle_check (the bundle folder against SHA256SUMS),
target_folder (the install folder: ours or empty, a safe parent, what carries over), disk_space (room
on every file system written), image (what goes where in the installed tree, also built here by
`make-image` for the MSI), engine_fs (the tree, the lock, the swap, the receipt), engine_env (venv,
wheels, bytecode, self-check run), installed (audit, uninstall) and msi_action (the MSI's custom
action) hold the rest. It runs with the target's
Python before any environment exists, so it uses the standard library only (Python 3.8+); the wheels
are installed with pypa's `installer`, imported from the pinned wheel the bundle ships. install.sh
and install.ps1 are thin front ends: they find the Python and do what must happen outside it (on
Windows: elevation, VC++ runtime, registry, Add/Remove Programs), then run this.

The install, in order: verify the bundle folder holds only the files SHA256SUMS lists, each with its
sha256; check the target folder is ours (a valid receipt naming this bundle) or empty; under a lock,
clean what a killed run left; stage in a fresh `mkdtemp` folder beside the target; create the
environment without pip; install the wheels with console scripts for the FINAL folder; compile
bytecode in parallel; copy the plan's files; carry over files that are not ours (logging what is
not carried over); write the receipt (every file with its sha256); run the self-check; swap the stage
in atomically (Linux: one renameat2 exchange); remove the old install. Any failure before the swap
removes the stage and leaves the previous install as it was.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from ..records import INSTALL_EXIT_CODES, RECEIPT_FILE, InstallPlan, Receipt, SelfcheckOutcome
from . import disk_space
from .bundle_check import PrivateCopy, load_plan, private_copy, verify_bundle
from .engine_env import make_venv, reboot_explains, run_selfcheck, selfcheck_env
from .engine_fs import (
    PREVIOUS,
    STAGING,
    WINDOWS,
    EngineError,
    Log,
    entry_sha256,
    hash_tree,
    journal_path,
    leftovers,
    native,
    recover,
    remove_tree,
    swap,
    target_lock,
    walk,
    walk_folders,
    write_receipt,
)
from .image import MakeEnvironment, make_image, populate
from .installed import VERIFY_CHANGED, VERIFY_OK, Audit, audit, detection_state, record_after_reboot, uninstall
from .target_folder import carry_over, check_cache_dir_posix, check_parent_posix, check_target

#: What the tests and the other engine modules use from here, re-exported for one import path.
__all__ = ["PREVIOUS", "STAGING", "Audit", "EngineError", "Log", "Options", "audit", "entry_sha256", "install",
           "leftovers", "load_plan", "main", "make_venv", "reboot_explains", "run_selfcheck", "selfcheck_env",
           "uninstall", "verify_bundle", "walk"]


@dataclass(frozen=True)
class Options:
    bundle: Path
    install_dir: Path
    force: bool = False
    self_check: bool = True
    cache_dir: Optional[str] = None
    dry_run: bool = False
    reboot_pending: bool = False  # Windows: VC_redist asked for a reboot before this run
    restrict_acl: bool = False  # Windows per-machine: Administrators/SYSTEM write, users read
    #: The bundle's identity when this run has verified the bundle already (windows_setup does, before VC_redist
    #: runs): every file is read once.
    verified: Optional[str] = None


def installed_python(plan: InstallPlan, target: Path) -> str:
    """What runs the installed code: the bundled interpreter in its final place, else the Python that made the venv."""
    if plan.venv.runtime:
        return str(native(target, f"{plan.venv.dir}/{plan.venv.interpreter}"))
    return sys.executable


def selfcheck_outcome(plan: InstallPlan, options: Options, stage: Path, log: Log) -> SelfcheckOutcome:
    if not options.self_check:
        return SelfcheckOutcome(ran=False)
    log("running the self-check in the staged installation")
    code, report = run_selfcheck(plan, stage, log)
    failed = tuple(check.id for check in report.failed()) if report else ()
    outcome = SelfcheckOutcome(ran=True, exit_code=code, passed=code == 0, failed_checks=failed)
    if code == 0:
        return outcome
    if options.reboot_pending and reboot_explains(report):
        log(f"warning: the self-check failed ({', '.join(failed)}) in a way the pending VC++ runtime update "
            f"explains; it runs again after the reboot")
        return replace(outcome, deferred_until_reboot=True)
    detail = f" (failed: {', '.join(failed)})" if failed else ""
    raise EngineError("selfcheck", f"the self-check failed with exit code {code}{detail}; the previous installation "
                                   f"is untouched")


def check_python(plan: InstallPlan) -> None:
    found = "%d.%d" % sys.version_info[:2]
    if found != plan.python:
        raise EngineError("prerequisite", f"{sys.executable} is Python {found} but this bundle's wheels need Python "
                                          f"{plan.python}; pass the path of a Python {plan.python}")


def check_space(plan: InstallPlan, bundle: Path, target: Path) -> None:
    needed = sum((bundle / w).stat().st_size for w in plan.venv.wheels) * 4
    needed += sum((bundle / e.source).stat().st_size for e in (*plan.copy, *plan.venv.runtime)) + (100 << 20)
    needed += sum((bundle / rel).stat().st_size for rel in set(plan.inputs()))  # the private copy beside the stage
    disk_space.check([disk_space.Need(target.parent, needed, "the install"), disk_space.temp_need()])


def install(options: Options, log: Log, *, make_environment: MakeEnvironment = make_venv) -> str:
    """The whole install; returns 'installed', 'unchanged' or 'deferred' (self-check after the reboot)."""
    plan = load_plan(options.bundle)
    bundle_sha256 = options.verified or verify_bundle(options.bundle, plan, log)
    if make_environment is make_venv:
        check_python(plan)
    target = options.install_dir
    previous = check_target(target, plan)
    if previous is not None and previous.bundle_sha256 == bundle_sha256 and not options.force:
        damage = audit(target)
        owed = detection_state(previous.selfcheck) is None
        if damage.ok and owed:
            log(f"{plan.install_id} from this bundle is installed in {target} but its self-check has not passed yet "
                f"(deferred until after a reboot); installing it again")
        elif damage.ok:
            if not options.dry_run:
                clean_leftovers(target, log)
            log(f"{plan.install_id} from this bundle is already installed in {target} and every file matches its "
                f"receipt; nothing to do (--force reinstalls)")
            return "unchanged"
        else:
            log(f"{plan.install_id} is installed in {target} but damaged ({len(damage.changed)} changed, "
                f"{len(damage.missing)} missing, {len(damage.extra)} added where only the bundle's files belong); "
                f"installing it again")
    check_cache_dir_posix(options.cache_dir, target)
    check_space(plan, options.bundle, target)
    if options.dry_run:
        log(f"dry run: would install {plan.install_id} into {target}"
            + (f", replacing {previous.install_id} and keeping files that are not ours" if previous else ""))
        log("dry run: nothing was changed")
        return "unchanged"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EngineError("install", f"cannot create {target.parent}: {exc.strerror}") from None
    check_parent_posix(target)
    with target_lock(target):
        recover(target, log)
        previous = check_target(target, plan)  # what recover() restored, if anything
        return _install_locked(plan, options, log, previous, bundle_sha256, make_environment)


def clean_leftovers(target: Path, log: Log) -> None:
    """A re-run with nothing to install still removes what a killed run left beside the install (a stage, an
    old tree swapped out), under the lock, so a run in progress keeps its own and this one is told to retry."""
    staging, previous = leftovers(target)
    if staging or previous or os.path.lexists(journal_path(target)):
        with target_lock(target):
            recover(target, log)


def _restrict(options: Options) -> Optional[Callable[[Path], None]]:
    """Windows per-machine: what drops a new folder's inherited "Users: Modify" (Administrators/SYSTEM write)."""
    if not options.restrict_acl:
        return None
    from .windows.windows_host import restrict_folder  # Windows only

    return restrict_folder


def _install_locked(plan: InstallPlan, options: Options, log: Log, previous: Optional[Receipt], bundle_sha256: str,
                    make_environment: MakeEnvironment) -> str:
    """The install from a private copy of what it uses (issue 34 §4): the bundle folder is not read again after
    each file was hashed into that copy, so a file swapped in the bundle folder meanwhile is never installed."""
    target = options.install_dir
    with private_copy(options.bundle, plan, bundle_sha256, target.parent, log, prefix=f".{target.name}{STAGING}bundle-",
                      restrict=_restrict(options)) as copy:
        stage = Path(tempfile.mkdtemp(prefix=f".{target.name}{STAGING}", dir=str(target.parent)))
        try:
            receipt = _build_stage(copy, options, log, previous, stage, make_environment)
            old = swap(stage, target)
        except BaseException:
            with contextlib.suppress(OSError):
                remove_tree(stage)
            raise
    if old is not None:
        try:
            remove_tree(old)
        except OSError as exc:
            log(f"warning: could not remove the previous installation {old}: {exc}; the next run removes it")
    log(f"installed {plan.install_id} into {target} (receipt: {target / RECEIPT_FILE})")
    return "deferred" if receipt.selfcheck.deferred_until_reboot else "installed"


def _build_stage(copy: PrivateCopy, options: Options, log: Log, previous: Optional[Receipt], stage: Path,
                 make_environment: MakeEnvironment) -> Receipt:
    """The install in `stage`, from the private copy only; its receipt records the sha256 each copied file was
    compared with (never a second reading of it) and the identity of the SHA256SUMS it was compared against."""
    target, plan = options.install_dir, copy.plan
    if not WINDOWS:
        os.chmod(stage, 0o755)
    restrict = _restrict(options)
    if restrict is not None:
        restrict(stage)  # the stage drops the inherited "Users: Modify"
    known = populate(plan, copy.folder, stage, target, log, make_environment=make_environment,
                     cache_dir=options.cache_dir, compared=copy.sums)
    kept = carry_over(previous, target, stage, plan, log)
    receipt = Receipt(install_id=plan.install_id, name=plan.name, version=plan.version, platform=plan.platform,
                      bundle_sha256=copy.identity, installed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      install_dir=str(target), python_executable=installed_python(plan, target),
                      python_version="%d.%d.%d" % sys.version_info[:3], selfcheck=SelfcheckOutcome(ran=False),
                      reboot_required=options.reboot_pending, files=hash_tree(stage, (RECEIPT_FILE, *kept), known),
                      folders=walk_folders(stage), kept=kept,
                      install_log=os.path.abspath(log.path) if log.path is not None else None)
    write_receipt(stage, receipt)
    receipt = replace(receipt, selfcheck=selfcheck_outcome(plan, options, stage, log))
    write_receipt(stage, receipt)
    return receipt


def parser() -> argparse.ArgumentParser:
    main_parser = argparse.ArgumentParser(prog="engine.py", description=__doc__.splitlines()[0])
    sub = main_parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("install", help="install the bundle")
    run.add_argument("--bundle", type=Path, required=True)
    run.add_argument("--install-dir", type=Path, required=True)
    run.add_argument("--cache-dir")
    run.add_argument("--log-file", type=Path)
    for flag in ("--force", "--no-self-check", "--dry-run", "--reboot-pending", "--restrict-acl"):
        run.add_argument(flag, action="store_true")
    remove = sub.add_parser("uninstall", help="remove what the receipt lists")
    remove.add_argument("--install-dir", type=Path, required=True)
    remove.add_argument("--bundle", type=Path, help="only remove an installation of this bundle")
    remove.add_argument("--log-file", type=Path)
    remove.add_argument("--dry-run", action="store_true")
    verify = sub.add_parser("verify", help=f"audit every installed file against the receipt (exit {VERIFY_OK} or "
                                           f"{VERIFY_CHANGED})")
    verify.add_argument("--root", type=Path, required=True)
    verify.add_argument("--json", action="store_true")
    after = sub.add_parser("after-reboot", help="run the deferred self-check and record it in the receipt")
    after.add_argument("--root", type=Path, required=True)
    after.add_argument("--log-file", type=Path)
    after.add_argument("--task", help="Windows: the one-shot startup task that ran this, deleted when done")
    image = sub.add_parser("make-image", help="build the tree an install holds into a new folder (for the MSI)")
    image.add_argument("--bundle", type=Path, required=True)
    image.add_argument("--out", type=Path, required=True)
    image.add_argument("--epoch", type=int, required=True, help="the time the image's receipt records")
    finish = sub.add_parser("msi-finish", help="the MSI's custom action: self-check the installed tree, record CACHEDIR")
    finish.add_argument("--root", type=Path, required=True)
    finish.add_argument("--cache-dir", default="")
    finish.add_argument("--no-self-check", action="store_true")
    finish.add_argument("--remove", action="store_true", help="the MSI is being removed: delete cache_dir.txt")
    finish.add_argument("--log-file", type=Path)
    for command in FRONT_ENDS:
        sub.add_parser(command, help=f"{FRONT_ENDS[command]} FOLDER SWITCHES...: what the Windows scripts hand over to")
    return main_parser


#: Windows: `engine.py windows-install --bundle DIR -InstallDir … -Force …` (install.cmd/.ps1) and
#: `windows-uninstall --script-dir DIR …` (uninstall.cmd/.ps1). The script's switches follow the folder
#: as the user typed them, in PowerShell's form, which argparse would take for its own options.
FRONT_ENDS = {"windows-install": "--bundle", "windows-uninstall": "--script-dir"}


def _front_end(args_list: List[str], log: Log) -> int:
    command = args_list[0]
    if args_list[1:2] != [FRONT_ENDS[command]] or len(args_list) < 3:
        raise EngineError("usage", f"engine.py {command} needs {FRONT_ENDS[command]} FOLDER before the switches")
    folder, switches = Path(os.path.abspath(args_list[2])), args_list[3:]
    if command == "windows-install":
        from .windows.windows_setup import install_main

        return install_main(folder, switches)
    from .windows.windows_setup import uninstall_main

    return uninstall_main(folder, switches)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Exit codes are INSTALL_EXIT_CODES; `verify` exits 0 or 11. Progress goes to stdout, the error to stderr
    as one line."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] and args_list[0] in FRONT_ENDS:
        return _run_logged(lambda log: _front_end(args_list, log), Log(None))
    try:
        args = parser().parse_args(args_list)
    except SystemExit as exc:
        return 0 if exc.code == 0 else INSTALL_EXIT_CODES["usage"]
    log = Log(getattr(args, "log_file", None))
    return _run_logged(lambda log: _dispatch(args, log), log)


def _run_logged(action: Callable[[Log], int], log: Log) -> int:
    """Every failure ends in a documented exit code and one logged line with its reason. A Python warning (pypa
    installer's on a wheel that ships __pycache__ files, for one) is a progress line too: Python would print it on
    stderr, which a PowerShell 5.1 host can turn into a terminating error."""
    warnings.showwarning = lambda message, category, *_, **__: log(f"warning: {category.__name__}: {message}")
    try:
        return action(log)
    except EngineError as exc:
        if not exc.logged:
            log.error(str(exc))
        code = INSTALL_EXIT_CODES[exc.code]
        return INSTALL_EXIT_CODES["install"] if code > 255 and not WINDOWS else code
    except OSError as exc:  # one that names no file (Wine's "Internal error" in a CI run) still says what it was
        where = str(exc.filename) if exc.filename else "a file operation of the install failed"
        log.error(f"{where}: {exc.strerror or exc}; nothing was changed in the installation")
        return INSTALL_EXIT_CODES["install"]
    except Exception as exc:  # a defect of this program must still end in a documented code, with its reason
        log.error(f"the install engine failed unexpectedly: {type(exc).__name__}: {exc}")
        return INSTALL_EXIT_CODES["install"]


def _dispatch(args: argparse.Namespace, log: Log) -> int:
    folder = str(getattr(args, "install_dir", None) or getattr(args, "root", ""))
    if any(ord(c) < 0x20 or c == "\x7f" for c in folder):
        raise EngineError("usage", f"the install folder {folder!r} contains a line break or control character; "
                                   f"choose a plain path")
    if args.command == "install":
        options = Options(bundle=args.bundle.resolve(), install_dir=Path(os.path.abspath(args.install_dir)),
                          force=args.force, self_check=not args.no_self_check, cache_dir=args.cache_dir,
                          dry_run=args.dry_run, reboot_pending=args.reboot_pending, restrict_acl=args.restrict_acl)
        outcome = install(options, log)
        return INSTALL_EXIT_CODES["reboot"] if outcome == "deferred" else 0
    if args.command == "uninstall":
        name = load_plan(args.bundle.resolve()).name if args.bundle else None
        removed = uninstall(Path(os.path.abspath(args.install_dir)), log, name=name, dry_run=args.dry_run)
        verb = "would remove" if args.dry_run else "removed"
        if removed:
            log(f"{verb} from {args.install_dir}: {len(removed)} files")
        if args.dry_run:
            log("dry run: nothing was changed")
        return 0
    if args.command == "make-image":
        bundle, out = args.bundle.resolve(), Path(os.path.abspath(args.out))
        plan = load_plan(bundle)
        identity = verify_bundle(bundle, plan, log)
        with private_copy(bundle, plan, identity, out.parent, log, prefix=f".{out.name}.bundle-") as copy:
            make_image(copy.plan, copy.folder, copy.identity, out, args.epoch, log, compared=copy.sums)
        return 0
    if args.command == "msi-finish":
        from .windows.msi_action import finish

        return finish(Path(os.path.abspath(args.root)), cache_dir=args.cache_dir.strip() or None,
                      self_check=not args.no_self_check, remove=args.remove, log=log)
    if args.command == "after-reboot":
        return record_after_reboot(Path(os.path.abspath(args.root)), log, task=args.task)

    return _verify(Path(os.path.abspath(args.root)), as_json=args.json)


def _verify(root: Path, *, as_json: bool) -> int:
    result = audit(root)
    if as_json:
        print(json.dumps({"ok": result.ok, "changed": list(result.changed), "missing": list(result.missing),
                          "extra": list(result.extra), "not_ours": list(result.not_ours)}, indent=2))
    else:
        for label, items in (("CHANGED", result.changed), ("MISSING", result.missing), ("EXTRA", result.extra),
                             ("not ours", result.not_ours)):
            for item in items:
                print(f"{label:8} {item}")
        print(f"Result: {'OK' if result.ok else 'FAILED'} ({len(result.changed)} changed, {len(result.missing)} "
              f"missing, {len(result.extra)} extra in the environment, {len(result.not_ours)} not installed by us)")
    return VERIFY_OK if result.ok else VERIFY_CHANGED


if __name__ == "__main__":
    sys.exit(main())
