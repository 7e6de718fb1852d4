"""The one way ort-bundler runs another program.

Every subprocess (pip, compilers, signing tools) goes through a `Runner`, so that a failure always reaches
the user as a `BuildError` carrying the program's own last words, and so that tests and callers can swap
the runner for another implementation of the same protocol.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from bundler.errors import BuildError

logger = logging.getLogger(__name__)

TAIL_LINES = 20


class Runner(Protocol):
    """Runs `cmd` (never through a shell) and returns its standard output, or raises `BuildError`."""

    def __call__(self, cmd: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str: ...


def run(cmd: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str:
    """The default runner: logs the command, captures stdout and stderr, and returns stdout.

    `env`, when given, is the complete environment of the child, as with `subprocess`; callers that want
    to add a variable merge it with `os.environ` themselves, so nothing here depends on global state.
    """
    argv = [str(part) for part in cmd]
    shown = shlex.join(argv)
    logger.info("running %s", shown)
    try:
        completed = subprocess.run(
            argv, cwd=cwd, env=None if env is None else dict(env), capture_output=True,
            text=True, encoding="utf-8", errors="replace", check=False,
        )
    except OSError as exc:
        msg = f"Could not start {shown}: {exc.strerror or exc}; expected {argv[0]!r} to be an executable program."
        raise BuildError(msg) from exc
    if completed.returncode != 0:
        msg = (f"Command {shown} exited with code {completed.returncode}, expected 0; "
               f"its last lines of output were:\n{output_tail(completed.stdout, completed.stderr)}")
        raise BuildError(msg)
    if completed.stderr.strip():
        logger.debug("%s wrote to stderr:\n%s", argv[0], completed.stderr.rstrip())
    return completed.stdout


def output_tail(stdout: str, stderr: str, *, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a failed program's output, stderr last because that is where errors go."""
    combined = [line for line in (stdout + "\n" + stderr).splitlines() if line.strip()]
    return "\n".join(combined[-lines:]) or "(no output)"
