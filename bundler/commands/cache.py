"""`ort-bundler cache push MANIFEST oci://HOST/REPO`: a manifest's inputs, from the cache to a team's registry."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bundler.commands.shared import add_registry_options, cache_of, common_parent, open_registry

NAME = "cache"
GROUP = True  # `cache` only groups its subcommands: `cache push` takes the options every command takes
HELP = "share the cache through an OCI registry: `cache push` uploads a manifest's inputs"
EXAMPLES = """examples:
  ort-bundler cache push manifests/quickstart-win.toml oci://registry.example.com/team/ort-inputs
  ort-bundler fetch manifests/quickstart-win.toml --mirror oci://registry.example.com/team/ort-inputs"""


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cache_command", required=True, metavar="SUBCOMMAND")
    push = sub.add_parser("push", parents=[common_parent()], help="upload every input of MANIFEST and its lock "
                          "(fetched first) as blobs, and tag them <name>-<version>-inputs", epilog=EXAMPLES,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    push.add_argument("manifest", type=Path)
    push.add_argument("registry", metavar="oci://HOST[:PORT]/REPO", help="the registry repository to push to")
    push.add_argument("--json", action="store_true", help="print what was pushed as JSON")
    add_registry_options(push)


def run(args: argparse.Namespace) -> int:
    from bundler.manifest import load
    from bundler.sources.inputs import all_inputs
    from bundler.sources.oci_inputs import push_inputs

    registry = open_registry(args, args.registry, what="cache push", tag=False)
    manifest = load(args.manifest)
    report = push_inputs(all_inputs(manifest), manifest, cache=cache_of(args), registry=registry)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif not args.quiet:
        print(f"pushed {len(report.uploaded)} inputs ({report.uploaded_bytes:,} bytes), {len(report.present)} already "
              f"there; tagged {report.reference} ({report.digest})")
    return 0
