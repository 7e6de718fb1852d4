"""`ort-bundler reproduce`: rebuild a bundle from what it records and compare the bytes (the work:
`bundler.operations.reproduce`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bundler.commands.shared import cache_of
from bundler.errors import UsageError, VerificationError

NAME = "reproduce"
HELP = "rebuild a bundle from the manifest and lock it records and compare the bytes"
EXAMPLES = """examples:
  ort-bundler reproduce dist/quickstart-linux-1.0.0-linux_x86_64.zip
  ort-bundler reproduce release.zip --mirror /media/usb/inputs -o rebuilt/ --json
exit 0 when the rebuild is byte-identical, 8 when members differ (each named, with its reason)"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path)
    sources = parser.add_mutually_exclusive_group()
    sources.add_argument("--mirror", type=Path, help="look for inputs the bundle lacks in DIR, never the network")
    sources.add_argument("--offline", action="store_true", help="inputs the bundle lacks come from the cache only")
    parser.add_argument("-o", "--output", type=Path, default=None, help="keep the rebuilt zip in this folder")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from bundler.operations.reproduce import reproduce
    from bundler.sources.fetch import FetchOptions

    if args.mirror and not args.mirror.is_dir():
        raise UsageError(f"--mirror: {args.mirror} is not a directory")
    options = FetchOptions(offline=args.offline, mirror=args.mirror, quiet=args.quiet or args.json)
    report = reproduce(args.bundle, cache=cache_of(args), options=options, keep=args.output)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif not report.identical or not args.quiet:
        print(report.summary(), file=sys.stdout if report.identical else sys.stderr)
    return 0 if report.identical else VerificationError.return_code
