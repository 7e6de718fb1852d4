"""`lock` and `fetch` for a whole manifest: what each command does beyond parsing its arguments."""

from __future__ import annotations

import tempfile
from pathlib import Path

from .build import all_inputs, target_of
from .cache import Cache
from .errors import UsageError
from .fetch import FetchOptions, fetch_inputs
from .lock import Lock, resolve, write_lock
from .manifest import Manifest
from .parts import lock_requirements, ort_wheel
from .runner import Runner, run


def default_lock_path(manifest: Manifest) -> Path:
    return manifest.python.lock or manifest.path.with_name(manifest.path.stem + ".lock.toml")


def lock_manifest(manifest: Manifest, *, cache: Cache, options: FetchOptions, runner: Runner = run) -> tuple[Lock, Path]:
    """Resolve ORT's dependencies (plus [python] requirements) for the target and write the lock file."""
    source = manifest.ort.python_source
    if source is None:
        msg = f"{manifest.path.name}: [ort] has neither 'wheel' nor 'capi', so there is no Python closure to lock"
        raise UsageError(msg)
    target = target_of(manifest)
    files = fetch_inputs([source], cache=cache, target=target, options=options, runner=runner)
    with tempfile.TemporaryDirectory(dir=cache.work_dir("tmp"), prefix="lock-") as tmp:
        _, requires = ort_wheel(manifest, files, Path(tmp))
        lock = resolve(lock_requirements(manifest, requires), target=target, runner=runner, work_dir=Path(tmp))
    path = default_lock_path(manifest)
    write_lock(lock, path)
    return lock, path


def fetch_manifest(manifest: Manifest, *, cache: Cache, options: FetchOptions, runner: Runner = run) -> dict[str, Path]:
    return fetch_inputs(all_inputs(manifest), cache=cache, target=target_of(manifest), options=options, runner=runner)
