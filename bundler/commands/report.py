"""`ort-bundler report BUNDLE.zip [--against OLD.zip] -o report.html`: the release review page.

Someone signs a release off before it reaches an air-gapped site. This writes what they need to look at as one
self-contained HTML file (no network, no script; it opens from a USB stick): what the bundle is, whether it
verifies and who signed what, its contents, its DLL closure as a picture, GPU providers, models with their
reference outputs, licences and SBOM components, build provenance, and with `--against` what changed.

The bundle is opened through the same safe reader `diff` and `reproduce` use and verified as `verify` does; a
bundle that fails still gets its page (a reviewer must see why it failed), with the failure at the top. The
same inputs give the same bytes: the page names files, never the folders they were read from, and holds no time.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundler.commands.shared import cache_of
from bundler.errors import InputUnavailableError, UsageError

if TYPE_CHECKING:
    from bundler.readers.bundlezip import BundleZip
    from bundler.sources.cache import Cache

NAME = "report"
HELP = "write a release review page: one offline HTML file with contents, closure, signatures, models and changes"
EXAMPLES = """examples:
  ort-bundler report dist/app-1.1.0-win_amd64.zip -o review.html
  ort-bundler report dist/app-1.1.0-win_amd64.zip --against dist/app-1.0.0-win_amd64.zip -o review.html
  ort-bundler report signed/app-1.1.0-win_amd64.zip --trust our-root-ca.pem -o review.html
the page runs no script and loads nothing: open it in any browser, offline"""
#: Where `build` puts the bundle's provenance statement (in-toto Statement v1): bundler.assembly.provenance.PROVENANCE_MEMBER.
PROVENANCE_MEMBER = "provenance.intoto.json"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path, help="the bundle zip to review")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the HTML file to write")
    parser.add_argument("--against", type=Path, metavar="OLD.zip", help="an earlier release: show what changed")
    parser.add_argument("--trust", type=Path, metavar="CA.pem",
                        help="anchors the bundle's signature must chain to (shown as trusted or not)")


def run(args: argparse.Namespace) -> int:
    written = write_report(args.bundle, args.output, against=args.against, trust=args.trust, cache=cache_of(args))
    if not args.quiet:
        print(f"wrote {args.output} ({written:,} bytes)")
    return 0


def write_report(bundle: Path, output: Path, *, against: Path | None, trust: Path | None, cache: Cache) -> int:
    from bundler.atomic import write_atomic
    from bundler.hashing import file_sha256
    from bundler.operations.diff import diff_bundles
    from bundler.readers.bundlezip import open_bundle
    from bundler.review.page import render_page
    from bundler.review.view import Sources, review
    from bundler.signing.verify import verify_bundle

    for path, what in ((bundle, "the bundle"), (against, "--against")):
        if path is not None and not path.is_file():
            msg = f"{path}: not found, expected {what} zip"
            raise InputUnavailableError(msg)
    if output.exists() and output.is_dir():
        msg = f"-o {output}: found a folder, expected the HTML file to write"
        raise UsageError(msg)
    opened = open_bundle(bundle)
    verification = verify_bundle(bundle, trust=trust, cache=cache).to_json()
    diff = diff_bundles(against, bundle).to_json() if against is not None else None
    page = render_page(review(Sources(
        zip_name=bundle.name, zip_sha256=file_sha256(bundle), zip_size=bundle.stat().st_size,
        members=[(name, opened.infos[name].file_size) for name in opened.names],
        bundle=opened.record, sbom=_json_member(opened, "sbom.cdx.json") or {}, verification=verification,
        provenance=_json_member(opened, PROVENANCE_MEMBER), diff=diff)))
    write_atomic(output, page)
    return len(page)


def _json_member(bundle: BundleZip, name: str) -> dict[str, Any] | None:
    """A JSON member as data, None when absent or not a JSON object (the page then says it is missing)."""
    if name not in bundle.infos:
        return None
    try:
        data = json.loads(bundle.read(name))
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None
