"""Shared helpers for the hardening tests (issue 18): snapshots of folders, and the CLI run in-process.

Each hostile case asserts three things: the exit code, the one-line message, and that nothing outside
the folders the command may write changed. `snapshot` records every path under a folder with its bytes'
hash, so "nothing changed" is a comparison of two dicts rather than a hope.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from bundler.cli import main


def snapshot(root: Path) -> dict[str, str]:
    """Every file, folder and link under root -> its sha256, 'dir' or 'link:<target>'."""
    found: dict[str, str] = {}
    if not root.exists():
        return found
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = f"link:{os.readlink(path)}"
            elif path.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """`ort-bundler ARGS` in this process: its exit code and its stderr (the error line)."""
    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().err


def one_line(err: str, command: str) -> str:
    """The error printed by `ort-bundler COMMAND`: exactly one line of the documented form."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got {lines!r}"
    assert lines[0].startswith(f"ort-bundler {command}: error: "), lines[0]
    assert "Traceback" not in err
    return lines[0]


def can_mount() -> bool:
    """Whether this process may mount a tmpfs (root with CAP_SYS_ADMIN): the real full or read-only disk."""
    probe = Path("/tmp") / f"ort-bundler-mount-probe-{os.getpid()}"
    probe.mkdir(exist_ok=True)
    try:
        ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)],
                            capture_output=True).returncode == 0
        if ok:
            subprocess.run(["umount", str(probe)], check=True)
        return ok
    except FileNotFoundError:
        return False
    finally:
        probe.rmdir()


needs_mount = pytest.mark.skipif(not can_mount(), reason="needs permission to mount a tmpfs (a real small or "
                                                          "read-only file system)")


class Tmpfs:
    """A real tmpfs of `size` mounted at `path` for one test; `read_only()` remounts it read-only. Its root has
    mode 0755, as a user's own folder has (tmpfs's default, 1777, is one no cache may be: cache_trust)."""

    def __init__(self, path: Path, size: str) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], check=True)

    def read_only(self) -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(self.path)], check=True)

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=True)
