"""`ort-bundler build`: the bundle zip from the manifest and the cache only (the work: `bundler.operations.build`)."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from bundler.commands.shared import cache_of, say
from bundler.errors import UsageError

if TYPE_CHECKING:
    from bundler.manifest import Manifest

NAME = "build"
HELP = "build the bundle zip from the cache only"
EXAMPLES = """examples:
  ort-bundler build manifests/quickstart-linux.toml
  ort-bundler build app.toml -o out/"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path)
    parser.add_argument("-o", "--output", type=Path, default=Path("dist"), help="output folder (default: dist)")
    parser.add_argument("-j", "--jobs", type=int, default=None, help="compression threads (default: CPU count)")
    parser.add_argument("--no-reuse", action="store_true",
                        help="assemble the bundle even when the cache holds the one built from exactly the same inputs")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    from bundler.manifest import load
    from bundler.operations.build import build, warn_environment_epoch

    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs: found {args.jobs}, expected a positive number")
    manifest = load(args.manifest)
    warn_absent_local_files(manifest)
    warn_environment_epoch(manifest, os.environ)
    result = build(manifest, cache=cache_of(args), out_dir=args.output, jobs=args.jobs,
                   quiet=args.quiet or args.json, reuse=not args.no_reuse)
    if args.json:
        print(json.dumps({"zip": str(result.zip_path), "sha256": result.sha256, "size": result.size,
                          "reused": result.reused}, indent=2))
    else:
        how = " (the same inputs as a build before: its zip, reused)" if result.reused else ""
        say(args, f"wrote {result.zip_path} ({result.size:,} bytes){how}\nsha256 {result.sha256}")
    return 0


def warn_absent_local_files(manifest: Manifest) -> None:
    """build reads the cache only, so a wrong `path` whose pinned bytes are cached still builds, and so does one
    outside the manifest's folder that fetch will refuse: say the manifest is wrong (a warning, not an error:
    the bundle is right, the manifest is not). Not in `build` itself, which
    `reproduce` runs on a manifest whose local files are deliberately absent."""
    from bundler.sources.inputs import absent_local_files, outside_folder

    inputs = manifest.inputs()
    for problem in [*outside_folder(inputs, manifest.path.parent), *absent_local_files(inputs)]:
        logging.getLogger("bundler").warning("warning: %s (this build used the cached file)", problem)
