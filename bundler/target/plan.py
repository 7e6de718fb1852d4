"""Carry out a bundle's install plan, write the receipt, and undo an install from its receipt.

This file ships in every Linux bundle (as payload/installer/plan.py) and runs with the target's
Python before any virtual environment exists, so it uses the standard library only. install.sh and
uninstall.sh call its command line; the build's tests use its functions to lay out an install folder.
Every path it reads from the plan or a receipt is checked to stay below its root, because both files
come from outside this program.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

PLAN_FILE = "install-plan.json"
RECEIPT_FILE = "receipt.json"
SUMS_FILE = "SHA256SUMS"
PLAN_FORMAT = 1


class PlanError(ValueError):
    """A plan or receipt that cannot be carried out safely; the message names the entry."""


def safe_relative(path: str, *, what: str) -> PurePosixPath:
    """A relative '/' path that cannot leave its root (no '..', no drive, no absolute path)."""
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or "\\" in path or ":" in path or any(p in ("..", ".") for p in pure.parts):
        msg = f"{what} path {path!r} is not a relative path below its root"
        raise PlanError(msg)
    return pure


def inside(root: Path, relative: PurePosixPath, *, what: str) -> Path:
    """`root / relative`, refused when a link on the way leads outside `root` (the text check of
    safe_relative cannot see links that a user or another program put into the folder)."""
    path = root / relative
    real_root = os.path.realpath(root)
    real_parent = os.path.realpath(path.parent)
    if os.path.commonpath([real_root, real_parent]) != real_root:
        msg = f"{what} path {relative} leads outside {root} through a link"
        raise PlanError(msg)
    return path


def load_plan(bundle_root: Path) -> dict:
    """Read install-plan.json and check its shape, so later steps can index it without guessing."""
    path = bundle_root / PLAN_FILE
    try:
        plan = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        msg = f"{path} cannot be read as JSON: {exc}"
        raise PlanError(msg) from None
    if not isinstance(plan, dict) or plan.get("format") != PLAN_FORMAT:
        msg = f"{path} has format {plan.get('format') if isinstance(plan, dict) else None!r}; expected {PLAN_FORMAT}"
        raise PlanError(msg)
    for key in ("install_id", "venv", "copy", "dll_dirs"):
        if key not in plan:
            msg = f"{path} has no {key!r} entry"
            raise PlanError(msg)
    for entry in [*plan["copy"], *plan["venv"].get("site_packages_files", [])]:
        safe_relative(entry["from"], what=f"{PLAN_FILE} 'from'")
        safe_relative(entry["to"], what=f"{PLAN_FILE} 'to'")
    for key in ("dir", "wheels", "requirements"):
        safe_relative(plan["venv"][key], what=f"{PLAN_FILE} venv {key!r}")
    for folder in plan["dll_dirs"]:
        safe_relative(folder, what=f"{PLAN_FILE} 'dll_dirs'")
    return plan


def _copy_entries(entries: list[dict], source_root: Path, dest_root: Path) -> list[str]:
    created = []
    for entry in entries:
        source = inside(source_root, safe_relative(entry["from"], what="'from'"), what="'from'")
        target = inside(dest_root, safe_relative(entry["to"], what="'to'"), what="'to'")
        if not source.is_file():
            msg = f"{source} is listed in {PLAN_FILE} but is not in the bundle"
            raise PlanError(msg)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        shutil.copymode(source, target)
        created.append(entry["to"])
    return created


def apply_copies(plan: dict, bundle_root: Path, install_root: Path) -> list[str]:
    """Copy every plan 'copy' entry; returns the install-relative paths it created."""
    return _copy_entries(plan["copy"], bundle_root, install_root)


def site_packages_files(plan: dict, bundle_root: Path, site_packages: Path) -> list[str]:
    """Place the startup hook files into the venv's site-packages; returns their relative paths."""
    return _copy_entries(plan["venv"].get("site_packages_files", []), bundle_root, site_packages)


def plan_value(plan: dict, key: str) -> list[str]:
    """A plan value by dotted key, as lines: the shell scripts read the plan through this."""
    value = plan
    for part in key.split("."):
        value = value[part]
    return [str(item) for item in value] if isinstance(value, list) else [str(value)]


def read_sums(bundle_root: Path) -> dict[str, str]:
    """SHA256SUMS as {path: hex}; the format `sha256sum -c` reads."""
    sums = {}
    for number, line in enumerate((bundle_root / SUMS_FILE).read_text(encoding="utf-8").splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            msg = f"{SUMS_FILE} line {number} is not '<sha256>  <path>': {line!r}"
            raise PlanError(msg)
        sums[name] = digest.lower()
    return sums


def unverified_inputs(plan: dict, bundle_root: Path) -> list[str]:
    """Plan inputs that SHA256SUMS does not cover: the installer must not use an unverified file."""
    listed = read_sums(bundle_root)
    needed = [PLAN_FILE, plan["venv"]["requirements"]]
    needed += [e["from"] for e in [*plan["copy"], *plan["venv"].get("site_packages_files", [])]]
    return sorted({path for path in needed if path not in listed})


def bundle_sha256(bundle_root: Path) -> str:
    """The bundle's identity after extraction: the hash of SHA256SUMS, which pins every other file."""
    return hashlib.sha256((bundle_root / SUMS_FILE).read_bytes()).hexdigest()


def write_receipt(install_root: Path, receipt: dict) -> Path:
    """Write receipt.json, the record that uninstall trusts and detection rules read."""
    path = install_root / RECEIPT_FILE
    path.write_text(json.dumps(receipt, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def read_receipt(install_root: Path) -> dict | None:
    """The receipt of an earlier install, or None when the folder holds none."""
    path = install_root / RECEIPT_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        msg = f"{path} is not valid JSON; remove the folder by hand or reinstall with --force"
        raise PlanError(msg) from None


def remove_installed(install_root: Path, *, dry_run: bool) -> list[str]:
    """Delete exactly what the receipt lists (a trailing '/' marks a whole created tree).

    Folders are removed only when they end up empty, so files a user added stay where they are.
    Returns the install-relative paths removed (or that would be, with dry_run).
    """
    receipt = read_receipt(install_root)
    if receipt is None:
        msg = f"{install_root} has no {RECEIPT_FILE}; it is not an installation made by this bundle's installer"
        raise PlanError(msg)
    # The receipt goes last: if anything before it cannot be removed, uninstall can simply run again.
    created = [e for e in receipt["created"] if e != RECEIPT_FILE] + [RECEIPT_FILE]
    entries = [(entry, inside(install_root, safe_relative(entry.rstrip("/"), what=RECEIPT_FILE), what=RECEIPT_FILE))
               for entry in created]
    removed = []
    for entry, path in entries:
        if not (path.exists() or path.is_symlink()):
            continue
        removed.append(entry)
        if dry_run:
            continue
        if entry.endswith("/") and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    if not dry_run:
        _remove_empty_parents([path for _, path in entries], install_root)
    return removed


def _remove_empty_parents(paths: list[Path], install_root: Path) -> None:
    parents = {parent for path in paths for parent in path.parents if install_root in parent.parents}
    for folder in sorted(parents, key=lambda p: len(p.parts), reverse=True):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    if install_root.is_dir() and not any(install_root.iterdir()):
        install_root.rmdir()


def _receipt_from_args(args: argparse.Namespace) -> dict:
    plan = load_plan(args.bundle)
    created = [line for line in args.created.read_text(encoding="utf-8").splitlines() if line]
    return {
        "format": 1,
        "name": args.name,
        "version": args.version,
        "install_id": plan["install_id"],
        "platform": args.platform,
        "bundle_sha256": bundle_sha256(args.bundle),
        "installed_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "install_dir": args.install_dir,
        "python": {"executable": args.python_exe, "version": "%d.%d.%d" % sys.version_info[:3]},
        "selfcheck": {"ran": args.selfcheck_exit is not None, "exit_code": args.selfcheck_exit,
                      "passed": None if args.selfcheck_exit is None else args.selfcheck_exit == 0},
        "created": sorted({*created, RECEIPT_FILE}),
    }


def relocate_venv(venv: Path, old: str) -> list[str]:
    """Point the venv's scripts at the folder it now lives in.

    The venv is built in the staging folder and renamed into place; pip's console scripts and the
    activate scripts name the folder they were created in. The launchers do not use them (they start
    venv/bin/python directly), but a user running venv/bin/pip would otherwise reach a vanished path.
    """
    new = str(venv)
    changed = []
    for script in sorted((venv / "bin").iterdir()):
        if script.is_symlink() or not script.is_file():
            continue
        data = script.read_bytes()
        if old.encode() in data and b"\0" not in data[:1024]:
            script.write_bytes(data.replace(old.encode(), new.encode()))
            changed.append(script.name)
    return changed


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="plan.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="list plan inputs that SHA256SUMS does not cover")
    check.add_argument("bundle", type=Path)
    copy = sub.add_parser("copy", help="copy the plan's files into an install root")
    copy.add_argument("bundle", type=Path)
    copy.add_argument("install_root", type=Path)
    site = sub.add_parser("site-packages", help="place the startup hook into site-packages")
    site.add_argument("bundle", type=Path)
    site.add_argument("site_packages", type=Path)
    receipt = sub.add_parser("receipt", help="write receipt.json")
    receipt.add_argument("bundle", type=Path)
    receipt.add_argument("install_root", type=Path)
    for option in ("--name", "--version", "--platform", "--install-dir", "--python-exe"):
        receipt.add_argument(option, required=True)
    receipt.add_argument("--created", type=Path, required=True, help="file listing created paths, one a line")
    receipt.add_argument("--selfcheck-exit", type=int, default=None)
    same = sub.add_parser("same-install", help="exit 0 when install_root holds this bundle's install, else 3")
    same.add_argument("bundle", type=Path)
    same.add_argument("install_root", type=Path)
    get = sub.add_parser("get", help="print one plan value (lists one item a line)")
    get.add_argument("bundle", type=Path)
    get.add_argument("key", choices=["install_id", "venv.dir", "venv.wheels", "venv.requirements", "dll_dirs"])
    relocate = sub.add_parser("relocate", help="point the venv's scripts at its new folder after the swap")
    relocate.add_argument("venv", type=Path)
    relocate.add_argument("old", help="the venv's folder when it was created")
    remove = sub.add_parser("remove", help="remove what the receipt lists")
    remove.add_argument("install_root", type=Path)
    remove.add_argument("--dry-run", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command line for the shell scripts: prints created/removed paths, one a line.

    Exit 0 on success, 1 with a one-line message on stderr on failure, and 3 from `same-install`
    when the install root does not hold this bundle.
    """
    args = _parser().parse_args(argv)
    try:
        lines = _run(args)
    except (PlanError, OSError) as exc:
        print(f"plan.py {args.command}: {exc}", file=sys.stderr)
        return 1
    if lines is None:
        return 3
    for line in lines:
        print(line)
    return 0


def _run(args: argparse.Namespace) -> list[str] | None:
    if args.command == "check":
        missing = unverified_inputs(load_plan(args.bundle), args.bundle)
        if missing:
            msg = f"{SUMS_FILE} does not cover {', '.join(missing)}"
            raise PlanError(msg)
        return []
    if args.command == "copy":
        return apply_copies(load_plan(args.bundle), args.bundle, args.install_root)
    if args.command == "site-packages":
        return site_packages_files(load_plan(args.bundle), args.bundle, args.site_packages)
    if args.command == "receipt":
        return [str(write_receipt(args.install_root, _receipt_from_args(args)))]
    if args.command == "get":
        return plan_value(load_plan(args.bundle), args.key)
    if args.command == "same-install":
        receipt = read_receipt(args.install_root)
        same = receipt is not None and receipt.get("bundle_sha256") == bundle_sha256(args.bundle)
        return [] if same else None
    if args.command == "relocate":
        return relocate_venv(args.venv, args.old)
    return remove_installed(args.install_root, dry_run=args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
