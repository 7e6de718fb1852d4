"""`ort-bundler delta OLD.zip NEW.zip -o DIR`: the new release as a few megabytes to carry into an air gap.

The delta records both zips' sha256 and the new zip's `.sha256` line, and describes the new zip as copies of
the old zip's stored bytes and inserted bytes (bundler/writer/delta.py writes it, bundler/writer/delta_match.py
finds the matches; the format is the applier's, bundler/shipped/ort_bundle/delta_apply.py). What changed is reported
twice, in the same words: the members the delta carries anew, and `diff`'s changes by kind.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundler.errors import UsageError, VerificationError
from bundler.hashing import CHUNK
from bundler.shipped.ort_bundle.delta_apply import Release

if TYPE_CHECKING:
    from bundler.readers.bundlezip import BundleZip

NAME = "delta"
HELP = "write what turns one release zip into the next: a .delta file the old release's applier applies"
EXAMPLES = """examples:
  ort-bundler delta app-1.0.0-win_amd64.zip app-1.1.0-win_amd64.zip -o deltas/
  ort-bundler delta old.zip new.zip -o deltas/ --json
writes DIR/<name>-<old version>-to-<new version>-<platform>.delta and its .sha256; on the far side:
  ort-bundler apply OLD.zip DELTA -o DIR, run.sh --apply …, or python3 -I delta_apply.py …"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", type=Path, help="the release the far side has")
    parser.add_argument("new", type=Path, help="the release to carry there")
    parser.add_argument("-o", "--output", type=Path, default=Path("."), help="folder for the delta (default: .)")
    parser.add_argument("--json", action="store_true", help="print the result and what changed as JSON")


def run(args: argparse.Namespace) -> int:
    from bundler.operations.diff import diff_bundles
    from bundler.readers.bundlezip import open_bundle
    from bundler.writer.delta import plan, write_delta

    old_bundle, new_bundle = open_bundle(args.old), open_bundle(args.new)
    old, new = release(old_bundle), release(new_bundle)
    if old.name != new.name:
        raise UsageError(f"{args.old.name} is bundle {old.name!r} and {args.new.name} is {new.name!r}: a delta is "
                         "between two releases of one bundle")
    steps = plan(args.old, args.new)
    dest = args.output / f"{new.name}-{old.version}-to-{new.version}-{new.platform}.delta"
    members = steps.members.to_json()
    written = write_delta(steps, new_path=args.new, old=old, new=new, new_line=sha256_line(args.new, new),
                          dest=dest, extra={})
    report: dict[str, Any] = {
        "delta": str(written.path), "sha256": written.sha256, "size": written.size, "old": old.__dict__,
        "new": new.__dict__, "ratio": round(written.size / max(new.size, 1), 6), "ops": written.ops,
        "copied": written.copied, "inserted": written.inserted, "members": members}
    if args.json:
        report["changes"] = diff_bundles(args.old, args.new).to_json()["changes"]
        print(json.dumps(report, indent=2))
    elif not args.quiet:
        print(f"wrote {written.path} ({written.size:,} bytes, {100 * report['ratio']:.2f} % of {args.new.name}'s "
              f"{new.size:,}): {len(members['changed'])} member(s) changed, {len(members['added'])} added, "
              f"{len(members['removed'])} removed\nsha256 {written.sha256}")
    return 0


def release(bundle: BundleZip) -> Release:
    """What the delta records of one side: read from the zip's bundle.json, its top folder and its bytes."""
    record = bundle.record
    return Release(file=bundle.path.name, top=bundle.top, name=str(record.get("name")),
                   version=str(record.get("version")), platform=str(record.get("platform")),
                   sha256=file_sha256(bundle.path), size=bundle.path.stat().st_size)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def sha256_line(path: Path, new: Release) -> str:
    """The new zip's published `.sha256` line: the file beside it when there is one (it must name this zip and
    hash), else the line `build` writes."""
    line = f"{new.sha256}  {new.file}\n"
    sidecar = path.with_name(path.name + ".sha256")
    if sidecar.is_file() and sidecar.read_text(encoding="utf-8") != line:
        raise VerificationError(f"{sidecar}: found {sidecar.read_text(encoding='utf-8')[:120]!r}, expected {line!r} "
                                f"(the sha256 of {path.name} and its name)")
    return line
