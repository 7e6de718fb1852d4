"""What every self-check reads: the install folder and its bundle.json, and what the caller allows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional


@dataclass(frozen=True)
class Context:
    root: Path
    bundle: Dict[str, Any]
    allow_cpu_fallback: bool
    #: The cache folder the install is about to record in cache_dir.txt (the MSI's CACHEDIR: msi-finish writes the
    #: file only after the self-check passed), so the install-time check looks where the launchers will.
    pending_cache_dir: Optional[str] = None

    @property
    def gpu(self) -> Dict[str, Any]:
        return self.bundle.get("gpu") or {}

    def reinstall(self) -> str:
        """The repair a user of this platform types: each platform's installer, with its own spelling of force."""
        if self.bundle.get("platform") == "win_amd64":
            return f"Re-run the bundle's install.cmd with -Force to restore {self.root}."
        return f"Re-run the bundle's install.sh with --force to restore {self.root}."


def is_below(path: Path, folder: Path) -> bool:
    """Path.is_relative_to, which Python 3.8 (a supported target) lacks."""
    try:
        path.relative_to(folder)
    except ValueError:
        return False
    return True
