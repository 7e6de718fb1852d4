"""`python -m ort_bundle.infer [MODEL]`: one inference of a bundled model, the entry point `ort-bundler init` writes.

A starter manifest had no `[launch]`, so the installed `run.sh` started a bare Python that printed nothing
and exited 0, while the README promised one inference (issue 26). `init` now writes
`[launch] module = "ort_bundle.infer"`: the launcher runs this module, which runs the first bundled model
(or the one named) once, on the self-check's deterministic inputs (`synth.py`) and with the session options
`run --tune` chose, and prints what ran and what came out. It says plainly that it is a stand-in for the
user's own application, and it fails plainly (exit 2) when the bundle has no model to run. Standard
library plus the installed onnxruntime and numpy; Python 3.8+.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from .bundle_info import BundleInfo
from .sessions import session_options
from .synth import synthesize_inputs
from .tuning import read_install, session_providers

EXIT_OK, EXIT_NOTHING, EXIT_FAILED = 0, 2, 1
STAND_IN = ("this is ort-bundler's default entry point ([launch] module = \"ort_bundle.infer\" in the manifest); "
            "replace it with your application: module = \"myapp.main\", or script = { path = \"app.py\", sha256 = \"...\" }")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="run", description="One inference of a bundled model.")
    parser.add_argument("model", nargs="?", help="the [[models]] name (default: the first model)")
    parser.add_argument("--root", type=Path, default=None, help="the installation folder (default: this environment's)")
    args = parser.parse_args(argv)
    root, bundle = read_install(args.root, prog="run")
    if bundle is None:
        return EXIT_FAILED
    if not bundle.models:
        print(f"run: no entry point is configured and {root / 'bundle.json'} lists no [[models]] to run one "
              f"inference of; {STAND_IN}", file=sys.stderr)
        return EXIT_NOTHING
    names = [str(record["name"]) for record in bundle.models]
    name = args.model or names[0]
    if name not in names:
        print(f"run: there is no model '{name}' in this bundle; expected one of {', '.join(names)}", file=sys.stderr)
        return EXIT_NOTHING
    return infer(root, bundle, next(r for r in bundle.models if r["name"] == name))


def infer(root: Path, bundle: BundleInfo, record: Dict[str, Any]) -> int:
    import onnxruntime as ort

    name = str(record["name"])
    feeds = synthesize_inputs(record["inputs"], record.get("shapes"))
    providers = session_providers(ort, bundle)
    try:
        session = ort.InferenceSession(str(root / record["file"]), session_options(name, root=root), providers=providers)
        outputs = session.run(None, feeds)
    except Exception as exc:  # ORT raises a family of pybind classes; the reason is the finding
        print(f"run: model '{name}' ({record['file']}) did not run: {' '.join(str(exc).split())}; run --self-check",
              file=sys.stderr)
        return EXIT_FAILED
    print(f"model '{name}' ({record['file']}): one inference with onnxruntime {ort.__version__} on "
          f"{session.get_providers()[0]}")
    for meta, value in zip(session.get_outputs(), outputs):
        print(f"  output {meta.name}: {getattr(value, 'dtype', type(value).__name__)} {list(getattr(value, 'shape', []))}")
    print(STAND_IN)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
