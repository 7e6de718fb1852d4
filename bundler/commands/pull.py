"""`ort-bundler pull oci://HOST/REPO:TAG -o DIR`: a released bundle back, every digest checked, then verified."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bundler.commands.shared import add_registry_options, cache_of, open_registry
from bundler.errors import VerificationError

NAME = "pull"
HELP = "bring a published bundle back from an OCI registry, check every digest and verify it"
EXAMPLES = """examples:
  ort-bundler pull oci://registry.example.com/team/app-win:1.0.0 -o releases/
  ort-bundler pull oci://registry.example.com/team/app-win:1.0.0 -o releases/ --trust our-root-ca.pem
only the release's own files land in DIR (the zip, its .sha256, and the SBOM and signature equal to the zip's
own members), and only once every file matched its digest and the bundle verified; any other layer is refused by
name, and a file DIR already holds is not replaced unless --force"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("registry", metavar="oci://HOST[:PORT]/REPO:TAG")
    parser.add_argument("-o", "--output", type=Path, default=Path("."), help="folder for the files (default: .)")
    parser.add_argument("--trust", type=Path, metavar="CA.pem", help="passed to verify: check the signatures "
                        "against these anchors; an unsigned bundle then fails")
    parser.add_argument("--force", action="store_true", help="replace files DIR already holds under the release's "
                        "names (never a folder)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_registry_options(parser)


def run(args: argparse.Namespace) -> int:
    from bundler.releases.pull import pull_bundle
    from bundler.signing.verify import verify_bundle

    registry = open_registry(args, args.registry, what="pull", tag=True)

    def check(zip_path: Path) -> None:
        report = verify_bundle(zip_path, trust=args.trust, cache=cache_of(args))
        if not report.ok:
            raise VerificationError(f"{registry.ref}: {zip_path.name} does not verify, nothing kept: "
                                    + "; ".join(report.findings()))

    result = pull_bundle(registry, args.output, check=check, force=args.force)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    elif not args.quiet:
        print(f"pulled {result.reference} ({result.digest}), verified: {result.zip_path}")
    return 0
