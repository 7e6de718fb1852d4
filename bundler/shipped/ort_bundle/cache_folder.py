"""Which cache folder an installation uses: the one precedence, for the launcher and the self-check alike.

First found: the ORT_BUNDLE_CACHE_DIR variable (the launcher exports its choice, so everything it starts sees
the same folder), then, at install time only, the cache folder the MSI is about to record (CACHEDIR), then the
install's cache_dir.txt (the installer's cache switch), then the bundle's [launch] cache_dir, then the user's own
cache (`~/.cache/ort-bundles/NAME`, `%LOCALAPPDATA%\\ort-bundles\\NAME`). A relative path lies below the install.
The launcher (ort_bundle.launcher) and the self-check (ort_bundle.selfcheck) both call `choose`; the launcher
then checks who may write the folder (folder_trust's rule) before anything is put there.

Standard library only, Python 3.8 syntax, no import of another module of the package: it ships in the `ort_bundle`
package.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional

CACHE_DIR_ENV = "ORT_BUNDLE_CACHE_DIR"
#: The file the launchers read the install's cache folder from (install --cache-dir, the MSI's CACHEDIR).
CACHE_DIR_FILE = "cache_dir.txt"
#: What `source` says for the user's own cache: the one folder nobody else configured for this user.
PER_USER = "the per-user cache"


#: What a cache folder on Windows may not hold: cmd.exe expands `%` and ends a quote at `"` in the launchers, `;`
#: splits the PATH-like lists they build, and `< > | ? *` are not allowed in a Windows path at all.
WINDOWS_CACHE_DIR_FORBIDDEN = '"%<>|?*;'


def windows_cache_dir_problem(value: str) -> Optional[str]:
    """Why the launchers could not use `value` as a Windows cache folder, or None: the one rule for the manifest's
    [launch] cache_dir (checked at build) and install.cmd's -CacheDir (checked by the engine)."""
    if any(c in WINDOWS_CACHE_DIR_FORBIDDEN for c in value) or any(ord(c) < 0x20 or ord(c) > 0x7E for c in value):
        return f"must be printable ASCII without any of {' '.join(WINDOWS_CACHE_DIR_FORBIDDEN)}"
    return None


@dataclass(frozen=True)
class CacheChoice:
    path: str  # absolute, normalised
    source: str  # where the choice came from, in words, for messages


def recorded(root: str) -> Optional[str]:
    """The first line of the install's cache_dir.txt, None when there is none (or it is empty or unreadable)."""
    try:
        with open(os.path.join(root, CACHE_DIR_FILE), encoding="utf-8") as handle:
            return handle.readline().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def per_user(name: str, environ: Mapping[str, str], *, windows: bool = os.name == "nt") -> str:
    """The user's own cache folder for bundle `name`."""
    if windows:
        base = environ.get("LOCALAPPDATA") or os.path.join(os.path.expanduser("~"), "AppData", "Local")
    else:
        base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ort-bundles", name)


def choose(root: str, environ: Mapping[str, str], bundle_default: Optional[str], *, name: Optional[str] = None,
           pending: Optional[str] = None) -> Optional[CacheChoice]:
    """The cache folder, first found in the order above; None when nothing names one and no `name` is given
    (the self-check at install time: each user's own cache is unknown then)."""
    candidates = ((environ.get(CACHE_DIR_ENV), CACHE_DIR_ENV),
                  (pending, f"the MSI's CACHEDIR, which it records in {CACHE_DIR_FILE}"),
                  (recorded(root), CACHE_DIR_FILE),
                  (bundle_default, "the bundle's [launch] cache_dir"),
                  (per_user(name, environ) if name else None, PER_USER))
    for value, source in candidates:
        if value and isinstance(value, str):
            return CacheChoice(path=os.path.normpath(os.path.join(root, value)), source=source)  # join keeps an absolute path
    return None
