"""`ort-bundler lock`: resolve the ORT wheel's dependency closure for the target and write the lock file."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from bundler.assembly.python_env import lock_requirements, ort_wheel
from bundler.errors import UsageError
from bundler.manifest import Manifest
from bundler.runner import Runner, run
from bundler.sources.cache import Cache
from bundler.sources.fetch import FetchOptions, fetch_inputs
from bundler.sources.inputs import target_of
from bundler.sources.lock import Lock, resolve, resolve_installer, write_lock


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
        lock = dataclasses.replace(lock, installer=resolve_installer(target=target, runner=runner, work_dir=Path(tmp)))
    path = default_lock_path(manifest)
    write_lock(lock, path)
    return lock, path


