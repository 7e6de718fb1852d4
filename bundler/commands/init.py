"""`ort-bundler init`: write a commented starter manifest (the work: `bundler.operations.init`)."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from bundler.commands.shared import say

NAME = "init"
HELP = "write a commented starter manifest, pinning local files with --from"
EXAMPLES = """examples:
  ort-bundler init
  ort-bundler init --from onnxruntime-1.23.1-cp311-cp311-win_amd64.whl model.onnx -o app.toml"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="from_files", nargs="+", type=Path, default=[], metavar="FILE",
                        help="local files to pin: an ORT wheel, ORT release archive, VC_redist.x64.exe, .onnx models")
    parser.add_argument("-o", "--output", type=Path, default=Path("ort-bundle.toml"), help="manifest to write")
    parser.add_argument("--force", action="store_true", help="overwrite an existing manifest")
    parser.add_argument("--json", action="store_true", help="print what was written as JSON")


def run(args: argparse.Namespace) -> int:
    from bundler.operations.init import write_starter

    starter = write_starter(args.output, args.from_files, force=args.force)
    for warning in starter.warnings:
        logging.getLogger("bundler").warning("warning: %s", warning)
    if args.json:
        print(json.dumps(starter.to_json(), indent=2))
        return 0
    path = starter.path
    say(args, f"wrote {path}; edit it, then run `ort-bundler lock {path}` and `ort-bundler fetch {path}`")
    return 0
