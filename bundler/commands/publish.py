"""`ort-bundler publish BUNDLE.zip oci://HOST/REPO[:TAG]`: a verified release onto the team's registry."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bundler.commands.shared import add_registry_options, cache_of, open_registry
from bundler.errors import VerificationError

NAME = "publish"
HELP = "publish a bundle zip (with its .sha256, SBOM and signature) to an OCI registry under an immutable tag"
EXAMPLES = """examples:
  ort-bundler publish dist/app-1.0.0-win_amd64.zip oci://registry.example.com/team/app-win
  ort-bundler publish signed/app-1.0.0-win_amd64.zip oci://registry.example.com/team/app-win:1.0.0-signed
the tag defaults to the bundle's version (+ and other characters tags forbid become _); a tag that holds
another release is refused unless --force"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path)
    parser.add_argument("registry", metavar="oci://HOST[:PORT]/REPO[:TAG]")
    parser.add_argument("--force", action="store_true", help="replace a tag that holds another release")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_registry_options(parser)


def run(args: argparse.Namespace) -> int:
    from bundler.releases.registry import publish_bundle
    from bundler.signing.verify import verify_bundle

    registry = open_registry(args, args.registry, what="publish", tag=True)
    if registry.ref.digest:
        from bundler.errors import UsageError

        raise UsageError(f"publish: {registry.ref} names a digest; publish takes a tag (oci://HOST/REPO:TAG)")
    report = verify_bundle(args.bundle, cache=cache_of(args))  # a broken bundle is never published
    if not report.ok:
        raise VerificationError(f"{args.bundle.name}: does not verify, not published: " + "; ".join(report.findings()))
    from bundler.releases import attestations

    statements = attestations.collect(args.bundle)  # checked before anything is pushed
    result = publish_bundle(args.bundle, registry=registry, tag=registry.ref.tag, force=args.force)
    referrers = attestations.push(registry, statements, subject=result.digest)
    if args.json:
        print(json.dumps({**result.to_json(), "attestations": str(result.reference.with_tag(referrers)) if referrers else None}, indent=2))
    elif not args.quiet:
        how = "already published (same content)" if result.unchanged else "published"
        print(f"{how}: {result.reference} ({result.digest}): {', '.join(result.files)}")
        if referrers:
            print(f"provenance: {len(statements.files)} file(s) under {result.reference.with_tag(referrers)}")
    return 0
