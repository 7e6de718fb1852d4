"""`ort-bundler inspect PATH`: explain one artifact the way the build sees it (the work:
`bundler.operations.inspect`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

NAME = "inspect"
HELP = "explain one artifact: ORT archive, wheel, DLL/PYD, or ONNX model"
EXAMPLES = """examples:
  ort-bundler inspect onnxruntime.dll
  ort-bundler inspect model.onnx --json"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path)
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")


def run(args: argparse.Namespace) -> int:
    from bundler.operations.inspect import describe, inspect_path

    findings = inspect_path(args.path)
    print(json.dumps(findings, indent=2, sort_keys=True) if args.json else describe(findings))
    return 0
