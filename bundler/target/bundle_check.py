"""The unpacked bundle folder as the engine reads it: its install plan, and every file against SHA256SUMS.

Nothing of the bundle runs before verify_bundle has passed: the folder holds only the files SHA256SUMS
lists, each with its sha256, and SHA256SUMS covers every file the plan uses. The engine's install and
make-image, and windows_setup before VC_redist runs, call it. Standard library only, Python 3.8+.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Optional

from .engine_fs import EngineError, Log, file_sha256
from .records import PLAN_FILE, SUMS_FILE, InstallPlan, RecordError, safe_relative
from .trust import unlisted, unlisted_message


def load_plan(bundle: Path) -> InstallPlan:
    try:
        return InstallPlan.loads((bundle / PLAN_FILE).read_text(encoding="utf-8"), source=str(bundle / PLAN_FILE))
    except OSError as exc:
        raise EngineError("integrity", f"{bundle / PLAN_FILE} cannot be read ({exc.strerror}); extract the bundle again") from None
    except RecordError as exc:
        raise EngineError("integrity", str(exc)) from None


def read_sums(bundle: Path) -> Dict[str, str]:
    """SHA256SUMS as {path: hex}, every path checked to stay inside the bundle."""
    try:
        text = (bundle / SUMS_FILE).read_text(encoding="utf-8")
    except OSError:
        raise EngineError("integrity", f"{bundle / SUMS_FILE} is missing; the bundle is incomplete: extract it again") from None
    sums = {}
    for number, line in enumerate(text.splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            raise EngineError("integrity", f"{SUMS_FILE} line {number} is {line!r}, expected '<sha256>  <path>'")
        try:
            sums[safe_relative(name, what=f"{SUMS_FILE} line {number}")] = digest.lower()
        except RecordError as exc:
            raise EngineError("integrity", str(exc)) from None
    return sums


def verify_bundle(bundle: Path, plan: InstallPlan, log: Log) -> str:
    """Nothing but the listed files in the bundle folder, and every one against SHA256SUMS, before anything
    changes; returns the bundle's identity (the sha256 of SHA256SUMS, which pins every other file)."""
    sums = read_sums(bundle)
    uncovered = sorted({path for path in plan.inputs() if path not in sums})
    if uncovered:
        raise EngineError("integrity", f"{SUMS_FILE} does not cover {', '.join(uncovered)}, which {PLAN_FILE} uses")
    extra = unlisted(bundle, sums)
    if extra:
        raise EngineError("integrity", unlisted_message(extra))
    with ThreadPoolExecutor(max_workers=4) as pool:
        actual = dict(zip(sums, pool.map(lambda rel: _bundle_file_sha256(bundle, rel), sums)))
    failed = [f"{rel}: FAILED ({'missing' if actual[rel] is None else 'sha256 ' + str(actual[rel])}, "
              f"expected {sums[rel]})" for rel in sorted(sums) if actual[rel] != sums[rel]]
    if failed:
        more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
        raise EngineError("integrity", f"bundle files do not match {SUMS_FILE}: {'; '.join(failed[:5])}{more}; "
                                       f"extract the bundle again from its zip")
    log(f"verified {len(sums)} files against {SUMS_FILE}")
    return file_sha256(bundle / SUMS_FILE)


def _bundle_file_sha256(bundle: Path, relative: str) -> Optional[str]:
    path = bundle / relative
    if path.is_symlink() or not path.is_file():
        return None
    return file_sha256(path)
