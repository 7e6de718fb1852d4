"""Reading the locked wheels beside the first parts of a build, before the parts that need what they hold.

The parts run one after another (bundler/assembly/parts.py). On a first build of the Windows quickstart,
the parts after `add_python` spent about a quarter of a second reading the wheels the lock pins: their
DLLs and PYDs inflated for the DLL closure and the signature policy (`wheel_binaries`), their METADATA and
licence texts for the licence index and the SBOM (`wheel_facts`). Those wheels are inputs, known before any
part runs, and both results are kept by the wheel's sha256 (in the cache's derived folder and in memory), so
this runs on a thread of its own while `add_python` builds the ORT wheel, and `add_all` waits for it before
the next part: the later parts find the same results, keyed by the same hash, already made.
"""

from __future__ import annotations

from bundler.assembly.assembly import BuildInputs
from bundler.assembly.licenses import WHEELS, wheel_facts
from bundler.readers.wheel_binaries import wheel_binaries


def read_locked_wheels(build: BuildInputs) -> None:
    """What the later parts read from each locked wheel, under the bundle path `add_python` gives it."""
    if build.lock is None or build.manifest.ort.python_source is None:
        return  # no Python environment: `add_python` adds no wheel
    store = build.cache.work_dir("derived")
    for locked in build.lock.wheels:
        path = build.files.get(f"lock:{locked.name}")
        if path is None:
            continue  # `add_python` reports the missing input
        label = f"{WHEELS}{locked.filename}"
        wheel_facts(path, locked.sha256, label=label, store=store)
        if build.target.windows:
            wheel_binaries(label, path, locked.sha256, store=store)
