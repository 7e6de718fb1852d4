"""The unpacked bundle folder as the engine reads it: its install plan, and every file against SHA256SUMS.

Nothing of the bundle runs before verify_bundle has passed: the folder holds only the files SHA256SUMS
lists, each with its sha256, and SHA256SUMS covers every file the plan uses. The engine's install and
make-image, and windows_setup before VC_redist runs, call it.

What is installed is never read from the bundle folder again after that check (issue 34 §4: a bundle
folder another user can write could swap a file between the check and the copy): `private_copy` reads
each file the plan uses exactly once, hashing it while writing it into a private folder the engine made,
compares that hash with SHA256SUMS (itself read once: its bytes are both the identity and the list), and
the install is built from that folder only. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, Optional

from ..records import PLAN_FILE, SUMS_FILE, InstallPlan, RecordError, safe_relative
from .engine_fs import EngineError, Log, file_sha256, native
from .trust import unlisted, unlisted_message


def load_plan(bundle: Path) -> InstallPlan:
    try:
        return InstallPlan.loads((bundle / PLAN_FILE).read_text(encoding="utf-8"), source=str(bundle / PLAN_FILE))
    except OSError as exc:
        raise EngineError("integrity", f"{bundle / PLAN_FILE} cannot be read ({exc.strerror}); extract the bundle again") from None
    except RecordError as exc:
        raise EngineError("integrity", str(exc)) from None


def parse_sums(data: bytes) -> Dict[str, str]:
    """SHA256SUMS's bytes as {path: hex}, every path checked to stay inside the bundle."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise EngineError("integrity", f"{SUMS_FILE} is not UTF-8 text; extract the bundle again") from None
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
    try:
        sums_data = (bundle / SUMS_FILE).read_bytes()
    except OSError:
        raise EngineError("integrity", f"{bundle / SUMS_FILE} is missing; the bundle is incomplete: extract it again") from None
    sums = parse_sums(sums_data)
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
    return hashlib.sha256(sums_data).hexdigest()  # the bytes just parsed, not a second read


def _bundle_file_sha256(bundle: Path, relative: str) -> Optional[str]:
    path = bundle / relative
    if path.is_symlink() or not path.is_file():
        return None
    return file_sha256(path)


@dataclass(frozen=True)
class PrivateCopy:
    """The bundle's files as compared with SHA256SUMS, in a folder only this run writes: what the install reads."""

    folder: Path
    plan: InstallPlan  # read from the copy's install-plan.json: the bytes that were compared
    identity: str  # the sha256 of the SHA256SUMS bytes the copy was compared with
    sums: Dict[str, str]  # {bundle path: sha256} of every file in the copy, as compared


def _copy_hashed(source: Path, dest: Path) -> str:
    """Copy one file, hashing the very bytes written; refuse anything but a regular file (a FIFO or device would
    hand out other bytes on another read, or block). Links are followed only to a regular file: what counts is
    that the bytes hashed are the bytes kept."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(str(source), flags)
    except OSError as exc:
        raise EngineError("integrity", f"{source} cannot be read ({exc.strerror}); extract the bundle again") from None
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as reader:
        if not stat.S_ISREG(os.fstat(reader.fileno()).st_mode):
            raise EngineError("integrity", f"{source} is not a regular file; extract the bundle again")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "xb") as writer:
            for block in iter(lambda: reader.read(1 << 20), b""):
                digest.update(block)
                writer.write(block)
    return digest.hexdigest()


@contextlib.contextmanager
def private_copy(bundle: Path, plan: InstallPlan, identity: str, parent: Path, log: Log, *,
                 prefix: str, restrict: Optional[Callable[[Path], None]] = None) -> Iterator[PrivateCopy]:
    """A new folder in `parent` (mkdtemp: a name no one can guess or hold, mode 0700; `restrict` locks its ACL on
    Windows before anything is written) holding SHA256SUMS and every file the plan uses, each hashed while it was
    copied and compared with SHA256SUMS; removed on leaving. The bundle must still be the one checked before
    (`identity`) and its plan the one loaded before (`plan`): else nothing is installed."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=str(parent)))
    try:
        if restrict is not None:
            restrict(folder)
        yield _fill(bundle, plan, identity, folder, log)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(folder)


def _fill(bundle: Path, plan: InstallPlan, identity: str, folder: Path, log: Log) -> PrivateCopy:
    changed = "changed since it was checked (someone else can write the bundle folder?); nothing was installed"
    sums_data = (bundle / SUMS_FILE).read_bytes()
    if hashlib.sha256(sums_data).hexdigest() != identity:
        raise EngineError("integrity", f"{bundle / SUMS_FILE} {changed}")
    (folder / SUMS_FILE).write_bytes(sums_data)
    sums = parse_sums(sums_data)
    wanted = sorted(set(plan.inputs()))
    uncovered = [path for path in wanted if path not in sums]
    if uncovered:
        raise EngineError("integrity", f"{SUMS_FILE} does not cover {', '.join(uncovered)}, which {PLAN_FILE} uses")
    with ThreadPoolExecutor(max_workers=4) as pool:
        digests = dict(zip(wanted, pool.map(lambda rel: _copy_hashed(native(bundle, rel), native(folder, rel)), wanted)))
    failed = [rel for rel in wanted if digests[rel] != sums[rel]]
    if failed:
        raise EngineError("integrity", f"{', '.join(failed[:5])} {changed}")
    copied = load_plan(folder)
    if copied != plan:
        raise EngineError("integrity", f"{bundle / PLAN_FILE} {changed}")
    log(f"copied the {len(wanted)} files the install uses into {folder}, each compared with {SUMS_FILE} as it was read")
    return PrivateCopy(folder=folder, plan=copied, identity=identity, sums={rel: sums[rel] for rel in wanted})
