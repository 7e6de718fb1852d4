"""The Windows install and uninstall, whole, as install.cmd and uninstall.cmd (or the thin .ps1) hand them over.

Before this module, install.ps1 held these steps in about 440 lines of PowerShell that only a parser ever
checked. Here each is Python that the tests run under Wine on python.org's CPython: the switches, the
64-bit and Windows-version checks, the install lock, the log in its documented place, Mark-of-the-Web, the
install folder's rules and who may write its parent, the VC++ runtime (and VC_redist's exit codes), a
reboot another installer left pending, files in use, the engine's install itself, the detection value, the
Add/Remove Programs entry and the self-check deferred to a startup task. The scripts only find a Python.
This module holds the order of those steps; windows_install_dir holds the install folder's rules and
windows_registration what the install registers with Windows (detection value, Add/Remove Programs, the
startup task), each read by the step that needs it.

The order matters to an administrator: nothing on the machine changes before every refusal that can be
known up front has been made (switches, platform, folder, Python, space, signatures of the bundle).
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import contextlib
import ntpath
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, FrozenSet, Iterator, List, Mapping, Optional, Sequence, Tuple

from ...bundle_info import BUNDLE_FILE, BundleInfo, BundleInfoError
from ...cache_folder import windows_cache_dir_problem
from ...folder_trust import parse_descriptor, windows_problem
from ...records import INSTALL_EXIT_CODES, PLAN_FILE, RECEIPT_FILE, InstallPlan, Receipt, RecordError, log_file_name
from .. import disk_space
from ..engine_fs import EngineError, Log, read_receipt
from . import windows_host as host
from .windows_install_dir import absolute_install_dir, default_install_dir, install_budget, resolve_install_dir
from .windows_registration import (
    delete_selfcheck_task,
    recorded_install_dir,
    refuse_msi_route,
    register,
    register_selfcheck_task,
    registrations,
    unregister,
)

#: The switches of install.cmd/install.ps1 and of uninstall.cmd/uninstall.ps1: name -> takes a value.
INSTALL_SWITCHES = {"InstallDir": True, "PythonExe": True, "CacheDir": True, "LogPath": True, "SkipVCRedist": False,
                    "Force": False, "NoSelfCheck": False, "WhatIf": False}
UNINSTALL_SWITCHES = {"InstallDir": True, "PythonExe": True, "LogPath": True, "WhatIf": False}


@dataclass(frozen=True)
class Switches:
    values: Mapping[str, str]
    flags: FrozenSet[str]

    def value(self, name: str) -> Optional[str]:
        return self.values.get(name)


def parse_switches(argv: Sequence[str], spec: Mapping[str, bool], *, script: str) -> Switches:
    """PowerShell's way: `-Name value`, `-Name:value`, `-Flag`, names in any case. Anything else is refused."""
    canonical = {name.lower(): name for name in spec}
    values: Dict[str, str] = {}
    flags = set()
    items = list(argv)
    index = 0
    while index < len(items):
        token = items[index]
        name, colon, inline = token.partition(":")
        key = canonical.get(name[1:].lower()) if name.startswith("-") else None
        if key is None:
            raise EngineError("usage", f"{script}: unknown argument {token!r}; expected "
                                       f"{', '.join('-' + n for n in spec)} (see README-INSTALL.txt)")
        if spec[key]:
            if not colon:
                index += 1
                if index == len(items):
                    raise EngineError("usage", f"{script}: -{key} needs a value")
                inline = items[index]
            values[key] = inline
        elif not (colon and inline.lower() in ("$false", "false", "0")):
            flags.add(key)
        index += 1
    return Switches(values=values, flags=frozenset(flags))


def open_log(switches: Switches, install_id: str, kind: str, *, admin: bool, install_dir: str) -> Log:
    """The log in its documented place, named after the install and its folder (records.log_file_name), or
    -LogPath; checked before anything changes. A log that cannot be written is a missing prerequisite (a place
    to record what happened), not a usage error."""
    if "WhatIf" in switches.flags:
        return Log(None)
    chosen = switches.value("LogPath")
    path = Path(chosen) if chosen else host.default_log_folder(admin=admin) / log_file_name(install_id, install_dir, kind)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise EngineError("prerequisite", f"cannot write the log file {path} ({exc.strerror}); pass -LogPath to a "
                                          f"writable file") from None
    return Log(path)


@contextlib.contextmanager
def logged_errors(log: Log) -> Iterator[None]:
    """Whatever stops the run is written to its log file too, once, as one line with its exit code's class."""
    try:
        yield
    except EngineError as exc:
        log.error(str(exc))
        raise EngineError(exc.code, str(exc), logged=True) from None
    except OSError as exc:
        log.error(f"{exc.filename or ''}: {exc.strerror or exc}")
        raise EngineError("install", f"{exc.filename or ''}: {exc.strerror or exc}", logged=True) from None


def read_bundle_info(bundle: Path) -> BundleInfo:
    try:
        return BundleInfo.read(bundle / BUNDLE_FILE)
    except BundleInfoError as exc:
        raise EngineError("integrity", f"{exc}; extract the bundle again") from None


def check_parent(target: Path, *, admin: bool, log: Log) -> None:
    """The install's parent must not be writable by anyone but administrators, SYSTEM and this account: a
    standard user who could write it could plant what an administrator's run adopts or runs. A parent we
    create gets that ACL from the start."""
    parent = target.parent
    if not parent.exists():
        try:
            parent.mkdir(parents=True)
        except OSError as exc:
            raise EngineError("install", f"cannot create {parent}: {exc.strerror}") from None
        if admin:
            host.restrict_folder(parent)
        log(f"created {parent}")
    problem = windows_problem(parse_descriptor(host.folder_security(parent)), current_user=host.current_user_sid())
    if problem:
        raise EngineError("usage", f"-InstallDir's parent {parent} is not safe to install into: {problem}; choose a "
                                   f"folder only administrators can write, such as one under %ProgramFiles% (nothing "
                                   f"was changed)")


def check_machine_python(*, admin: bool) -> None:
    """A per-machine install must not build on a Python in someone's profile: other users and SYSTEM could
    not run it, and its owner could change it (python.org's "Install Now" installs per user)."""
    if not admin:
        return
    executable = os.path.normcase(os.path.abspath(sys.executable))
    for variable in ("USERPROFILE", "LOCALAPPDATA", "APPDATA"):
        folder = os.environ.get(variable)
        if folder and executable.startswith(os.path.normcase(folder.rstrip("\\")) + "\\"):
            raise EngineError("prerequisite", f"{sys.executable} lives in a user profile ({folder}); a per-machine "
                                              f"install needs a Python installed for all users: install it with "
                                              f"'Install for all users' and pass -PythonExe")


def version_tuple(text: str) -> Tuple[int, int, int]:
    major, minor, build = ([int(p) for p in re.findall(r"\d+", text)[:3]] + [0, 0, 0])[:3]
    return major, minor, build


def vc_runtime(info: BundleInfo, bundle: Path, switches: Switches, *, admin: bool, log: Log) -> bool:
    """The VC++ runtime the bundle's binaries need; runs the bundled VC_redist when it is missing or older.
    True when VC_redist asked for a reboot."""
    if not info.vc_runtime_min:
        return False
    wanted = version_tuple(info.vc_runtime_min)
    installed = host.vc_runtime_version()
    found = ".".join(map(str, installed)) if installed else "none"
    if installed is not None and installed >= wanted:
        log(f"VC++ x64 runtime {found} is installed (this bundle needs {info.vc_runtime_min})")
        return False
    if "SkipVCRedist" in switches.flags:
        log(f"warning: VC++ x64 runtime {found} is older than {info.vc_runtime_min}; -SkipVCRedist: not installing it")
        return False
    if not info.vc_redist:
        raise EngineError("prerequisite", f"the VC++ x64 runtime {info.vc_runtime_min} or newer is needed (installed: "
                                          f"{found}) and this bundle ships no VC_redist.x64.exe; install it first")
    if not admin:
        raise EngineError("prerequisite", f"the VC++ x64 runtime {info.vc_runtime_min} must be installed (installed: "
                                          f"{found}), which needs administrator rights; run install.cmd as "
                                          f"administrator or pass -SkipVCRedist")
    exe = bundle.joinpath(*str(info.vc_redist["file"]).split("/"))
    if "WhatIf" in switches.flags:
        log(f"what if: would run {exe} /install /quiet /norestart")
        return False
    # VC_redist unpacks itself into the temp folder: about twice its size, with room to spare.
    disk_space.check([disk_space.temp_need(exe.stat().st_size * 3 + disk_space.TEMP_MARGIN)])
    vc_log = Path(tempfile.gettempdir()) / f"{info.name}-{info.version}-vc_redist.log"
    log(f"running {exe} /install /quiet /norestart (its log: {vc_log})")
    return vc_redist_outcome(host.run_vc_redist(exe, vc_log), vc_log, log)


def vc_redist_outcome(code: int, vc_log: Path, log: Log) -> bool:
    """VC_redist's exit code as the install goes on: 0 and 1638 (same or newer present) are success, 3010
    and 1641 a reboot, 1618 another install running (retry), anything else a failure."""
    log(f"VC_redist.x64.exe exited with {code}")
    if code in (0, 1638):
        return False
    if code in (3010, 1641):
        return True
    if code == 1618:
        raise EngineError("retry", "another installation is in progress (VC_redist.x64.exe returned 1618); retry later")
    raise EngineError("install", f"VC_redist.x64.exe failed with exit code {code}; see {vc_log}")


#: The uninstall scripts themselves: cmd.exe holds the running one open (sharing deletion), so they are no
#: sign of a program in use.
RUNNING_SCRIPTS = ("uninstall.cmd", "uninstall.ps1")


def check_files_free(root: Path, receipt: Optional[Receipt], log: Log) -> None:
    """Before a swap or a removal: every installed file must be free, or nothing is changed (exit 15). The
    folder rename alone proves nothing: Wine (and some filters) rename a folder that holds a running exe."""
    if receipt is None:
        return
    busy = host.files_in_use([root.joinpath(*entry.path.split("/")) for entry in receipt.files
                              if entry.path not in RUNNING_SCRIPTS])
    if busy:
        raise EngineError("in_use", in_use_message(root, busy, host.file_holders(busy)))
    log(f"no file of {root} is in use")


def in_use_message(root: Path, busy: List[Path], holders: List[Tuple[str, int]]) -> str:
    """Exit 15's sentence: the files, and the programs holding them where Restart Manager could tell."""
    shown = ", ".join(str(path) for path in busy[:3]) + (f" and {len(busy) - 3} more" if len(busy) > 3 else "")
    held = (", ".join(f"{name} (pid {pid})" for name, pid in sorted(set(holders), key=lambda h: h[1]))
            if holders else f"a program from {root}")
    return f"files in use: {shown} (in use by {held}); close the programs and retry; nothing was changed"


def installed_interpreter(plan: InstallPlan, target: Path) -> str:
    if plan.venv.runtime:
        return str(target.joinpath(*f"{plan.venv.dir}/{plan.venv.interpreter}".split("/")))
    return sys.executable


def install_main(bundle: Path, argv: Sequence[str]) -> int:
    """install.cmd / install.ps1: every step, in order; the return value is the installer's exit code."""
    from .. import engine

    switches = parse_switches(argv, INSTALL_SWITCHES, script="install.cmd")
    host.check_platform()
    info = read_bundle_info(bundle)
    if switches.value("PythonExe") and info.python_runtime:
        raise EngineError("usage", "-PythonExe applies only to bundles without a bundled Python; this bundle carries its own")
    admin = host.is_admin()
    with host.InstallLock(info.name, admin=admin):
        raw_dir = switches.value("InstallDir") or default_install_dir(info.name)
        log = open_log(switches, f"{info.name}-{info.version}", "install", admin=admin,
                       install_dir=absolute_install_dir(raw_dir))
        with logged_errors(log):
            return _install(engine, bundle, info, switches, admin=admin, log=log)


def _install(engine, bundle: Path, info: BundleInfo, switches: Switches, *, admin: bool, log: Log) -> int:  # type: ignore[no-untyped-def]
    log(f"installing {info.name}-{info.version} from {bundle} with {sys.executable} "
        f"({'administrator' if admin else 'standard user'})")
    refuse_msi_route(info.name)
    plan = engine.load_plan(bundle)
    # Every file against SHA256SUMS and nothing unlisted, before any of the bundle runs (VC_redist, the engine).
    verified = engine.verify_bundle(bundle, plan, log)
    target = resolve_install_dir(switches.value("InstallDir") or default_install_dir(info.name),
                                 budget=install_budget(plan, bundle))
    cache_dir = switches.value("CacheDir")
    problem = windows_cache_dir_problem(cache_dir) if cache_dir is not None else None
    if problem:
        raise EngineError("usage", f"-CacheDir '{cache_dir}' {problem} (the launchers cannot use it otherwise)")
    protected = [os.environ.get(v) for v in ("ProgramFiles", "ProgramFiles(x86)", "SystemRoot", "ProgramData")]
    if not admin and any(p and _below(target, p) for p in protected):
        raise EngineError("prerequisite", f"installing into {target} needs administrator rights; run install.cmd as "
                                          f"administrator or choose another -InstallDir")
    if not info.python_runtime:
        check_machine_python(admin=admin)
    whatif = "WhatIf" in switches.flags
    if not whatif:
        removed = host.remove_mark_of_the_web(p for p in bundle.rglob("*") if p.is_file())
        log(f"removed the Mark-of-the-Web from {removed} files" if removed else "no file carries a Mark-of-the-Web")
    reboot = vc_runtime(info, bundle, switches, admin=admin, log=log)
    pending = host.pending_reboot()
    if pending:
        log(f"a reboot is already pending ({'; '.join(pending)}): a self-check failure it explains is deferred")
    if not whatif:
        check_parent(target, admin=admin, log=log)
    check_files_free(target, read_receipt(target) if target.is_dir() else None, log)
    options = engine.Options(bundle=bundle, install_dir=target, force="Force" in switches.flags,
                             self_check="NoSelfCheck" not in switches.flags, cache_dir=cache_dir, dry_run=whatif,
                             reboot_pending=reboot or bool(pending), restrict_acl=admin, verified=verified)
    outcome = engine.install(options, log)
    if whatif:
        return INSTALL_EXIT_CODES["ok"]
    receipt = read_receipt(target)
    if receipt is None:  # the engine installed it or found it whole: someone removed it since
        raise EngineError("install", f"{target / RECEIPT_FILE} vanished right after the install; run it again")
    python = installed_interpreter(plan, target)
    register(info, target, receipt.bundle_sha256, python, admin=admin, log=log, selfcheck=receipt.selfcheck)
    delete_selfcheck_task(info.name, log)
    if outcome == "deferred":
        register_selfcheck_task(target, python, info.name, log)
    if reboot or outcome == "deferred":
        log("done; a reboot is required (exit 3010)")
        return INSTALL_EXIT_CODES["reboot"]
    log(f"done: {info.name}-{info.version} is installed in {target}")
    return INSTALL_EXIT_CODES["ok"]


def _below(path: Path, folder: str) -> bool:
    return ntpath.normcase(str(path)).startswith(ntpath.normcase(folder.rstrip("\\")) + "\\")


def uninstall_main(script_dir: Path, argv: Sequence[str]) -> int:
    """uninstall.cmd / uninstall.ps1, from the install folder (Add/Remove Programs runs that copy) or from the
    bundle. The folder: -InstallDir, else the one this script lives in, else the one the detection value
    records, else the default. "Not installed" is success, as Intune and ConfigMgr expect."""
    from ..installed import leftover_names, uninstall

    switches = parse_switches(argv, UNINSTALL_SWITCHES, script="uninstall.cmd")
    host.check_platform()
    name, install_id = _identity(script_dir)
    chosen = switches.value("InstallDir")
    if chosen:
        root = Path(ntpath.abspath(chosen) if os.name == "nt" else chosen)
    elif (script_dir / RECEIPT_FILE).is_file():
        root = script_dir
    else:
        root = Path(recorded_install_dir(name) or default_install_dir(name))
    admin = host.is_admin()
    with host.InstallLock(name, admin=admin):
        log = open_log(switches, install_id, "uninstall", admin=admin, install_dir=str(root))
        with logged_errors(log):
            refuse_msi_route(name)
            receipt = read_receipt(root) if root.is_dir() else None
            whatif = "WhatIf" in switches.flags
            keys = registrations(name, root)
            if receipt is not None:
                check_files_free(root, receipt, log)
                removed = uninstall(root, log, name=name, dry_run=whatif)
                log(f"{'would remove' if whatif else 'removed'} {len(removed)} files from {root}")
            else:
                log(f"nothing to uninstall: {root} holds no installation of {name}")
            if not whatif:
                unregister(keys, log)
                delete_selfcheck_task(name, log)
                kept = leftover_names(root)
                if kept:
                    more = f" and {len(kept) - 5} more" if len(kept) > 5 else ""
                    log(f"kept {root}: it holds {', '.join(kept[:5])}{more}, which the installer did not create")
                elif root.is_dir():
                    log(f"left the empty folder {root}: a program has it open (as its current folder?)")
    return INSTALL_EXIT_CODES["ok"]


def _identity(script_dir: Path) -> Tuple[str, str]:
    """(name, install id) from the installed plan or, run from a bundle, its bundle.json."""
    try:
        plan = InstallPlan.loads((script_dir / PLAN_FILE).read_text(encoding="utf-8"), source=str(script_dir / PLAN_FILE))
        return plan.name, plan.install_id
    except (OSError, RecordError):
        info = read_bundle_info(script_dir)
        return info.name, f"{info.name}-{info.version}"
