"""`ort-bundler lock`: resolve what depends on more than the manifest's hashes into a lock file (the work:
`bundler.operations.lock`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from bundler.commands.shared import cache_of, say

if TYPE_CHECKING:
    from bundler.sources.lock import Lock

NAME = "lock"
HELP = "resolve the Python dependency closure for the target platform into a lock file"
EXAMPLES = """examples:
  ort-bundler lock manifests/quickstart-win.toml"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--json", action="store_true", help="print what was locked as JSON")


def run(args: argparse.Namespace) -> int:
    from bundler.manifest import load
    from bundler.operations.lock import lock_manifest
    from bundler.sources.fetch import FetchOptions

    manifest = load(args.manifest)
    lock, path = lock_manifest(manifest, cache=cache_of(args), options=FetchOptions(quiet=args.quiet or args.json))
    if args.json:
        print(json.dumps(lock_json(lock, path), indent=2))
        return 0
    say(args, f"locked {len(lock.wheels)} wheels for {lock.target.platform} / Python {lock.target.python} in {path}")
    if lock.gate is not None:
        say(args, f"and, for the model gate on this kind of machine, ORT and NumPy for {lock.gate.target.platform} / "
                  f"Python {lock.gate.target.python} ([gate])")
    if manifest.python.lock is None:
        say(args, f"add this to {manifest.path.name} so build uses it:\n[python]\nlock = \"{path.name}\"")
    return 0


def lock_json(lock: Lock, path: Path) -> dict[str, object]:
    """`lock --json`: the lock file and what it pins, for scripts (issue 38, item 8d)."""
    return {"lock": str(path), "target": {"platform": lock.target.platform, "python": lock.target.python},
            "wheels": [{"name": w.name, "version": w.version, "filename": w.filename, "sha256": w.sha256}
                       for w in lock.wheels],
            "installer": lock.installer.filename if lock.installer else None,
            "models": [{"name": m.name, "sha256": m.sha256, "ort_version": m.ort_version} for m in lock.models],
            "gate": ({"platform": lock.gate.target.platform, "python": lock.gate.target.python}
                     if lock.gate is not None else None)}
