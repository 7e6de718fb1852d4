"""The Windows install folder: the rules Windows and ONNX Runtime set for its path, and its length budget.

The budget is the bundle's own: MAX_PATH less the deepest path the bundle writes (bytecode included) and
what the swap's previous-install folder adds to the folder's leaf. windows_setup checks -InstallDir against
these before anything on the machine changes. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import ntpath
import os
import re
import zipfile
from pathlib import Path
from typing import Optional

from ...records import InstallPlan
from ..engine_fs import PREVIOUS, EngineError

#: MAX_PATH less its terminating NUL: the longest path an application that is not long-path aware can open.
MAX_PATH = 259
#: What the previous-install folder adds to the install folder's leaf during the swap (".<leaf>.previous-" and
#: 12 hex digits); the staging folder adds less (18).
SWAP_EXTRA = 1 + len(PREVIOUS) + 12
_RESERVED = re.compile(r"(CON|PRN|AUX|NUL|COM[0-9]|LPT[0-9])(\..*)?\Z", re.IGNORECASE)


def install_dir_problem(full: str, *, budget: int) -> Optional[str]:
    """Why Windows or ONNX Runtime cannot use `full` (an absolute path) as the install folder, or None."""
    if not re.match(r"[A-Za-z]:\\.", full):
        return "must be a folder on a drive letter, like C:\\Program Files\\app"
    if any(ord(c) < 0x20 or ord(c) > 0x7E for c in full):
        return "contains non-ASCII or control characters; ONNX Runtime cannot load its providers from such a path"
    if ";" in full:
        return "contains ';', which splits PATH, where the launchers put its DLL folders"
    for part in full[3:].split("\\"):
        if _RESERVED.match(part) or re.search(r'[<>:"/|?*]', part) or part.endswith((".", " ")):
            return f"contains '{part}', a name Windows reserves or cannot store"
    if len(full) > budget:
        return (f"is {len(full)} characters long; this bundle's deepest file and the swap's previous-install folder "
                f"allow at most {budget} below MAX_PATH")
    return None


def absolute_install_dir(raw: str) -> str:
    """The install folder as an absolute path without a trailing backslash: what the receipt and the log's name use."""
    return ntpath.abspath(raw).rstrip("\\") if os.name == "nt" else ntpath.normpath(raw).rstrip("\\")


def resolve_install_dir(raw: str, *, budget: int) -> Path:
    if not raw:
        raise EngineError("usage", "-InstallDir must not be empty")
    if '"' in raw:
        # install.cmd -InstallDir "C:\x\" -Force: the backslash escapes the closing quote.
        raise EngineError("usage", f"-InstallDir {raw!r} contains a double quote: a folder written as \"C:\\x\\\" ends in "
                                   f"\\\" which escapes the quote; drop the trailing backslash")
    full = absolute_install_dir(raw)
    problem = install_dir_problem(full, budget=budget)
    if problem:
        raise EngineError("usage", f"-InstallDir '{full}' {problem}; nothing was changed")
    return Path(full)


def deepest_path(plan: InstallPlan, bundle: Path) -> int:
    """The longest install-relative path this bundle writes, bytecode included, read from the plan and the
    wheels' own member lists (the budget is the bundle's, not a constant)."""
    site = f"{plan.venv.dir}/{plan.venv.site_packages}"
    tag = "cpython-" + plan.python.replace(".", "")
    paths = [e.target for e in (*plan.copy, *plan.venv.runtime)]
    paths += [f"{site}/{e.target}" for e in plan.venv.site_packages_files]
    for wheel in plan.venv.wheels:
        with zipfile.ZipFile(bundle / wheel) as archive:
            for name in archive.namelist():
                parts = name.split("/")
                if parts[0].endswith(".data") and len(parts) > 2:
                    name = "/".join(parts[2:])
                paths.append(f"{site}/{name}")
                folder, _, leaf = name.rpartition("/")
                if leaf.endswith(".py"):
                    paths.append(f"{site}/{folder + '/' if folder else ''}__pycache__/{leaf[:-3]}.{tag}.pyc")
    return max(len(path) for path in paths)


def install_budget(plan: InstallPlan, bundle: Path) -> int:
    return MAX_PATH - 1 - deepest_path(plan, bundle) - SWAP_EXTRA


def default_install_dir(name: str) -> str:
    return ntpath.join(os.environ.get("ProgramFiles", "C:\\Program Files"), name)
