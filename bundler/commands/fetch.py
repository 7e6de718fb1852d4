"""`ort-bundler fetch`: every pinned input into the cache (the work: `bundler.operations.fetch`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from bundler.commands.shared import add_registry_options, cache_of, mirror_arg, open_registry, say
from bundler.errors import UsageError

if TYPE_CHECKING:
    from bundler.manifest import Manifest
    from bundler.sources.oci_inputs import RegistryMirror

NAME = "fetch"
HELP = "download every pinned input into the cache, verifying hashes as they stream"
EXAMPLES = """examples:
  ort-bundler fetch manifests/quickstart-linux.toml
  ort-bundler fetch app.toml --offline
  ort-bundler fetch app.toml --mirror /media/usb/inputs"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--offline", action="store_true", help="use only the cache; never the network")
    parser.add_argument("--mirror", type=mirror_arg, metavar="DIR|oci://HOST/REPO",
                        help="look for inputs in DIR (by file name or sha256), or by digest in a registry "
                             "(see `cache push`), never the network")
    parser.add_argument("-j", "--jobs", type=int, default=4, help="parallel downloads (default 4)")
    parser.add_argument("--json", action="store_true", help="print what was fetched as JSON")
    add_registry_options(parser)


def run(args: argparse.Namespace) -> int:
    from bundler.manifest import load
    from bundler.operations.fetch import fetch_manifest
    from bundler.sources.fetch import FetchOptions

    if args.jobs < 1:
        raise UsageError(f"--jobs: found {args.jobs}, expected a positive number")
    if args.offline and args.mirror:
        raise UsageError("--offline and --mirror: choose one (both never use the network)")
    mirror = args.mirror if isinstance(args.mirror, Path) else None
    if mirror and not mirror.is_dir():
        raise UsageError(f"--mirror: {args.mirror} is not a directory")
    manifest = load(args.manifest)
    registry = registry_mirror(args, args.mirror, manifest) if isinstance(args.mirror, str) else None
    options = FetchOptions(offline=args.offline, mirror=mirror, registry=registry, jobs=args.jobs,
                           quiet=args.quiet or args.json)
    files = fetch_manifest(manifest, cache=cache_of(args), options=options)
    if args.json:
        print(json.dumps({key: str(path) for key, path in sorted(files.items())}, indent=2))
    else:
        say(args, f"{len(files)} inputs in the cache {cache_of(args).root}")
    return 0


def registry_mirror(args: argparse.Namespace, text: str, manifest: Manifest) -> RegistryMirror:
    """`--mirror oci://HOST/REPO`: the registry, and the file names its inputs tag for this manifest gives."""
    from bundler.sources.oci_inputs import open_mirror

    return open_mirror(open_registry(args, text, what="--mirror", tag=False), manifest)
