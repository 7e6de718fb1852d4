"""The install image: the tree an install puts into its folder, defined once for both routes.

The engine builds it in its staging folder on the target (install.sh, install.cmd); `ort-bundler package`
builds the same tree on the build machine with this same code (`engine.py make-image`) for the MSI, which
then only copies it. So that an MSI can install anywhere (`INSTALLDIR` is the admin's to choose), the
tree of a bundle with its own interpreter names no absolute path: the console-script launchers find the
interpreter relative to themselves (`<launcher_dir>`, which pypa installer's launchers resolve), bytecode
names its source by an install-relative path (CPython replaces it by the real path on import), and the
image's receipt records the install folder as "." (the folder holding it). Standard library only, 3.8+.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path, PureWindowsPath
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

from ..bundle_info import BUNDLE_FILE, BundleInfo, BundleInfoError
from ..records import PLAN_FILE, RECEIPT_FILE, InstallPlan, Receipt, SelfcheckOutcome
from .engine_env import compile_site_files, install_wheels, make_venv, relocate_venv
from .engine_fs import WINDOWS, EngineError, Log, hash_tree, inside, native, walk_folders, write_receipt

#: Creates the environment: (staging venv folder, final venv folder). The default runs the target's
#: `python -m venv --without-pip`; bundles with their own interpreter copy it instead.
MakeEnvironment = Callable[[Path, Path], None]

#: What the image's receipt says where an install would say its folder: the folder holding the receipt.
IMAGE_FOLDER = "."


def copy_entries(entries: Sequence[Tuple[str, str]], source_root: Path, dest_root: Path,
                 compared: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """Place the plan's (from, to) entries; returns {written path: sha256} for each source `compared` ({bundle
    path: the sha256 it was compared with as it was copied into the private folder}) names, for the receipt.

    `source_root` is the private copy, which goes when the install ends: on Linux and macOS a file's first target
    is a hard link to it, not a second copy (the GPU libraries are 1.5 GB); a further target, or a file system
    without links, gets a copy. Windows copies: a link would keep the private folder's security descriptor."""
    written = {}
    for source_rel, target_rel in entries:
        source = inside(source_root, source_rel, what=f"{PLAN_FILE} 'from'")
        target = inside(dest_root, target_rel, what=f"{PLAN_FILE} 'to'")
        target.parent.mkdir(parents=True, exist_ok=True)
        if WINDOWS or not _linked(source, target):
            shutil.copyfile(source, target)
        if not WINDOWS:
            os.chmod(target, 0o755 if target_rel.endswith(".sh") else 0o644)
        if compared is not None and source_rel in compared:
            written[os.path.normpath(str(target))] = compared[source_rel]
    return written


def _linked(source: Path, target: Path) -> bool:
    """Whether `target` is now the only other name of `source`, a file of the private copy not placed before."""
    try:
        if os.stat(source).st_nlink != 1:
            return False
        os.link(source, target)
    except OSError:
        return False
    return True


def place_runtime(plan: InstallPlan, bundle: Path, stage: Path,
                  compared: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The bundled interpreter's files ([python] runtime) are the environment: copied, not created. Its
    bin/ keeps the executable bit even when the bundle was unpacked by a tool that drops modes."""
    written = copy_entries([(e.source, e.target) for e in plan.venv.runtime], bundle, stage, compared)
    if not WINDOWS:
        for entry in plan.venv.runtime:
            if entry.target.startswith(f"{plan.venv.dir}/bin/"):
                os.chmod(native(stage, entry.target), 0o755)
    return written


def place_files(plan: InstallPlan, bundle: Path, stage: Path, stage_venv: Path, cache_dir: Optional[str],
                compared: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    written = copy_entries([(e.source, e.target) for e in plan.copy], bundle, stage, compared)
    written.update(copy_entries([(e.source, e.target) for e in plan.venv.site_packages_files], bundle,
                                native(stage_venv, plan.venv.site_packages), compared))
    written.update(copy_entries([(PLAN_FILE, PLAN_FILE)], bundle, stage, compared))
    if cache_dir:
        (stage / "cache_dir.txt").write_text(cache_dir + "\n", encoding="utf-8")
    return written


def relocatable(plan: InstallPlan) -> bool:
    """A Windows bundle with its own interpreter: its tree works from any folder, so the MSI can carry it."""
    return bool(plan.venv.runtime) and plan.venv.script_kind.startswith("win")


def launcher_interpreter(plan: InstallPlan, final_venv: Path) -> str:
    """What the console-script launchers run: for a relocatable tree the interpreter relative to the launcher
    (`<launcher_dir>\\..\\python.exe`), else the final interpreter's absolute path."""
    if not relocatable(plan):
        return str(native(final_venv, plan.venv.interpreter))
    relative = os.path.relpath(PureWindowsPath(plan.venv.interpreter), PureWindowsPath(plan.venv.scripts))
    return "<launcher_dir>\\" + str(PureWindowsPath(relative.replace("/", "\\")))


def populate(plan: InstallPlan, bundle: Path, stage: Path, final_root: Path, log: Log, *,
             make_environment: MakeEnvironment = make_venv, cache_dir: Optional[str] = None,
             compared: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """Everything the plan puts into the folder, built in `stage` for the folder `final_root`; returns
    {staged path: sha256} of the files written here, so the receipt need not read them again: for a file copied
    as it is, the sha256 it was compared with (`compared`, {bundle path: sha256}) when given."""
    stage_venv, final_venv = native(stage, plan.venv.dir), native(final_root, plan.venv.dir)
    copied: Dict[str, str] = {}
    if plan.venv.runtime:
        log(f"placing the bundled interpreter in {stage_venv}")
        copied = place_runtime(plan, bundle, stage, compared)
    else:
        log(f"creating the environment in {stage_venv}")
        make_environment(stage_venv, final_venv)
        relocate_venv(stage_venv, final_venv, plan.venv.scripts)
    known = install_wheels(plan, bundle, stage_venv, final_venv, launcher_interpreter(plan, final_venv), log)
    known.update(copied)
    known.update(place_files(plan, bundle, stage, stage_venv, cache_dir, compared))
    known.update(compile_site_files(plan, stage_venv, final_venv))
    return known


def make_image(plan: InstallPlan, bundle: Path, bundle_sha256: str, out: Path, epoch: int, log: Log,
               compared: Optional[Mapping[str, str]] = None) -> Receipt:
    """The tree an install of this bundle holds, in the new folder `out`, with its receipt: only for a
    relocatable bundle, and with the target's Python minor version (bytecode is per minor version)."""
    if not relocatable(plan):
        raise EngineError("usage", "only a Windows bundle with its own interpreter ([python] runtime) makes an "
                                   "install image: any other bundle's tree depends on the target machine")
    found = "%d.%d" % sys.version_info[:2]
    if found != plan.python:
        raise EngineError("prerequisite", f"{sys.executable} is Python {found}; the image's bytecode needs Python "
                                          f"{plan.python}")
    try:
        info = BundleInfo.read(bundle / BUNDLE_FILE)
    except BundleInfoError as exc:
        raise EngineError("integrity", str(exc)) from None
    out.mkdir()
    known = populate(plan, bundle, out, Path(IMAGE_FOLDER), log, compared=compared)
    runtime = info.python_runtime or {}
    receipt = Receipt(install_id=plan.install_id, name=plan.name, version=plan.version, platform=plan.platform,
                      bundle_sha256=bundle_sha256, installed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)),
                      install_dir=IMAGE_FOLDER, python_executable=f"{plan.venv.dir}/{plan.venv.interpreter}",
                      python_version=str(runtime.get("version") or plan.python), selfcheck=SelfcheckOutcome(ran=False),
                      reboot_required=False, files=hash_tree(out, (RECEIPT_FILE,), known), folders=walk_folders(out))
    write_receipt(out, receipt)
    log(f"install image of {plan.install_id} made in {out}: {len(receipt.files)} files")
    return receipt
