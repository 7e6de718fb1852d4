"""`ort-bundler apply OLD.zip DELTA -o DIR`: the new release zip rebuilt from the old one and a delta.

The very applier every bundle ships (bundler/shipped/ort_bundle/delta_apply.py, `ort_bundle.delta_apply` in an
installation) does the work, so what the far side runs with `run.sh --apply` or a plain `python3` is what
is tested here; this command only turns its refusals into ort-bundler's errors (same exit codes).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bundler.errors import (
    BundleError,
    DeltaDamagedError,
    DeltaOtherBundleError,
    DeltaOutsideOldError,
    DeltaOversizeError,
    DeltaWrongOldError,
    InputUnavailableError,
    UsageError,
)
from bundler.shipped.ort_bundle import delta_apply

NAME = "apply"
HELP = "rebuild a new release zip from the old release's zip and a delta made by `ort-bundler delta`"
EXAMPLES = """examples:
  ort-bundler apply app-1.0.0-win_amd64.zip app-1.0.0-to-1.1.0-win_amd64.delta -o releases/
on a machine without ort-bundler, the old release's own applier does the same:
  ./run.sh --apply OLD.zip DELTA -o DIR        (an installed Linux bundle)
  run.cmd --apply OLD.zip DELTA -o DIR         (an installed Windows bundle)
  python3 -I delta_apply.py OLD.zip DELTA -o DIR   (payload/ort_bundle/delta_apply.py of the old zip)
the result is renamed into place only when its sha256 is the one the delta records; compare that with the
sha256 published for the release, or run `ort-bundler verify --trust CA.pem` on the result
exit codes: 20 damaged or truncated delta, 21 a declared size over the limits, 22 a delta for another bundle,
23 OLD is not the zip the delta was made from, 24 the delta copies bytes from outside OLD"""

ERRORS: dict[str, type[BundleError]] = {
    "usage": UsageError, "unavailable": InputUnavailableError, "damaged": DeltaDamagedError,
    "oversize": DeltaOversizeError, "other_bundle": DeltaOtherBundleError, "wrong_old": DeltaWrongOldError,
    "outside_old": DeltaOutsideOldError,
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", type=Path, help="the old release's zip, exactly as published")
    parser.add_argument("delta", type=Path, help="the .delta file")
    parser.add_argument("-o", "--output", type=Path, default=Path("."), help="folder for the new zip (default: .)")


def run(args: argparse.Namespace) -> int:
    try:
        header, result = delta_apply.apply_delta(str(args.old), str(args.delta), str(args.output))
    except delta_apply.DeltaError as exc:
        raise ERRORS[exc.kind](str(exc)) from None
    if not args.quiet:
        print(f"rebuilt {result}: {header.new.describe()} (was {header.old.version}), sha256 {header.new.sha256}")
    return 0
