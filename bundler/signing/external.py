"""`--signer COMMAND`: hand each signature to the organisation's own tool (signtool, an HSM, a signing service).

The contract, for every file that gets a signature:

    COMMAND... INPUT OUTPUT

`COMMAND` is split like a POSIX shell would split it (no shell runs it), then the two paths are
appended. The environment variable `ORT_BUNDLER_SIGN_KIND` says what is wanted:

- `authenticode`: INPUT is a PowerShell script (`.ps1`); OUTPUT must be the same script with an
  Authenticode signature block appended (what `signtool sign /fd sha256` or `Set-AuthenticodeSignature`
  produce). Nothing before the block may change.
- `cms`: INPUT is `SHA256SUMS`; OUTPUT (`SHA256SUMS.p7s`) must be a DER-encoded detached CMS/PKCS#7
  SignedData over INPUT's bytes (e.g. `signtool sign /p7 DIR /p7ce DetachedSignedData /p7co
  1.2.840.113549.1.7.1`, or `openssl cms -sign -binary -outform DER`).

The command must exit 0. Its output is then parsed and its signature checked against INPUT (not yet
against a trust anchor: that is `verify --trust`'s job), so a tool that writes something else is
caught here. Whether two runs give the same bytes is up to the tool.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from bundler.errors import UsageError
from bundler.runner import Runner

KIND_VARIABLE = "ORT_BUNDLER_SIGN_KIND"


def parse_command(command: str) -> tuple[str, ...]:
    try:
        parts = tuple(shlex.split(command))
    except ValueError as exc:
        msg = f"--signer {command!r}: cannot be split into a program and arguments ({exc})"
        raise UsageError(msg) from None
    if not parts:
        msg = "--signer: the command is empty; expected a program that takes INPUT and OUTPUT paths"
        raise UsageError(msg)
    return parts


def run_signer(command: Sequence[str], source: Path, dest: Path, *, kind: str, runner: Runner) -> None:
    """Run the user's signer for one file; the outcome is checked by the caller."""
    runner([*command, str(source), str(dest)], env={**os.environ, KIND_VARIABLE: kind})
    if not dest.is_file():
        msg = f"--signer {shlex.join(command)} exited 0 but wrote no {dest.name}; it must write OUTPUT (its 2nd argument)"
        raise UsageError(msg)
