"""`ort-bundler verify`: check a finished bundle or the MSI `package --msi` wrote.

The checks themselves are the trust code's (`bundler.signing.verify` for a bundle) and Windows'
(`bundler.platforms.windows.msi_verify` for an MSI), which `sign`, `publish`, `pull`, `package` and `report` run too; this is their command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bundler.commands.shared import cache_of
from bundler.errors import VerificationError

if TYPE_CHECKING:
    from bundler.platforms.windows.msi_verify import MsiReport
    from bundler.signing.verify import Report

NAME = "verify"
HELP = ("check a finished bundle (structure, bundle.json, every SHA256SUMS entry) or the MSI package --msi wrote "
        "(its files against its receipt, its signature)")
EXAMPLES = """examples:
  ort-bundler verify dist/quickstart-linux-1.0.0-linux_x86_64.zip --json
  ort-bundler verify --trust our-root-ca.pem signed/app-1.0.0-win_amd64.zip
  ort-bundler verify --trust our-root-ca.pem packages/app-1.0.0-win_amd64.msi"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--trust", type=Path, metavar="CA.pem",
                        help="check every signature against these anchor certificates; an unsigned bundle then fails")


def run(args: argparse.Namespace) -> int:
    from bundler.signing.verify import verify_bundle

    if args.bundle.suffix.lower() == ".msi":
        from bundler.platforms.windows.msi_verify import verify_msi

        report: Report | MsiReport = verify_msi(args.bundle, trust=args.trust)
    else:
        report = verify_bundle(args.bundle, trust=args.trust, cache=cache_of(args))
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif not report.ok or not args.quiet:
        print(report.summary(), file=sys.stdout if report.ok else sys.stderr)
    return 0 if report.ok else VerificationError.return_code
