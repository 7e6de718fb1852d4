"""`ort-bundler diff OLD NEW`: what changed between two bundles, in plain words (the work:
`bundler.operations.diff`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

NAME = "diff"
HELP = "what changed between two bundles, in plain words"
EXAMPLES = """examples:
  ort-bundler diff app-1.0.0-win_amd64.zip app-1.1.0-win_amd64.zip
  ort-bundler diff old.zip new.zip --scripts
  ort-bundler diff old.zip new.zip --json
exit 0 when the bundles are the same, 1 when they differ (as diff(1) and `git diff --exit-code`), above 1 on an \
error (an internal error: 70)"""

# `diff`'s own answer is 1 ("they differ", as diff(1)); its internal error takes EX_SOFTWARE (sysexits.h) so a
# script never reads a crash as a difference. Every documented error code is above 1 already.
DIFFERS = 1
INTERNAL_ERROR = 70


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--scripts", action="store_true", help="show a unified diff of every changed script")
    parser.add_argument("--json", action="store_true", help="print the changes as JSON")


def run(args: argparse.Namespace) -> int:
    """0 when the bundles are the same, 1 when they differ: scripts and CI gate on it as on diff(1)."""
    from bundler.operations.diff import diff_bundles

    report = diff_bundles(args.old, args.new, scripts=args.scripts)
    print(json.dumps(report.to_json(), indent=2) if args.json else report.summary())
    return 0 if report.identical else DIFFERS
