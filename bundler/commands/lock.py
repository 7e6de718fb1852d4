"""`ort-bundler lock`: pin, for the target, what depends on more than the manifest's hashes.

Two things are resolved once, on the connected machine, and written into the lock file beside the
manifest: the ORT wheel's Python dependency closure for the target platform and Python, and each model's
gate record in the pinned ORT (signature and reference outputs), so that `build` ships the same bytes on
every machine however its CPU rounds.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bundler.assembly.models import pin_models
from bundler.assembly.ortenv import host_installable
from bundler.assembly.python_env import lock_requirements, ort_wheel
from bundler.errors import ManifestError, UsageError
from bundler.manifest import Manifest
from bundler.runner import Runner, run
from bundler.sources.cache import Cache
from bundler.sources.fetch import FetchOptions, fetch_inputs
from bundler.sources.inputs import lock_inputs, require_local_files, target_of
from bundler.sources.lock import Lock, PinnedModel, read_lock, write_lock
from bundler.sources.resolve import resolve, resolve_installer


def default_lock_path(manifest: Manifest) -> Path:
    return manifest.python.lock or manifest.path.with_name(manifest.path.stem + ".lock.toml")


def lock_manifest(manifest: Manifest, *, cache: Cache, options: FetchOptions, runner: Runner = run) -> tuple[Lock, Path]:
    """Resolve ORT's dependencies (plus [python] requirements) for the target, pin the models, write the lock file."""
    source = manifest.ort.python_source
    if source is None and not manifest.models:
        msg = (f"{manifest.path.name}: [ort] has neither 'wheel' nor 'capi' and there are no [[models]], "
               "so there is nothing to lock")
        raise UsageError(msg)
    target = target_of(manifest)
    inputs = ([source] if source is not None else []) + [i for model in manifest.models for i in model.inputs()]
    require_local_files(inputs, manifest.path.parent)
    files = fetch_inputs(inputs, cache=cache, target=target, options=options, runner=runner)
    with cache.scratch(prefix="lock-") as tmp:
        lock = Lock(target=target, requirements=(), wheels=())
        if source is not None:
            requires = ort_wheel(manifest, files, Path(tmp)).requires
            lock = resolve(lock_requirements(manifest, requires), target=target, runner=runner, work_dir=Path(tmp))
        lock = replace(lock, installer=resolve_installer(target=target, runner=runner, work_dir=Path(tmp)))
    path = default_lock_path(manifest)
    numpy = [i for i in lock_inputs(lock)  # for the gate's environment, when this host can install it
             if i.key == "lock:numpy" and manifest.models and host_installable(i.filename or "")]
    wheels = fetch_inputs(numpy, cache=cache, target=target, options=options, runner=runner) if numpy else {}
    lock = replace(lock, models=pin_models(manifest, files, cache, previous=_previous_pins(path),
                                           wheels=tuple(wheels.values())))
    write_lock(lock, path)
    return lock, path


def _previous_pins(path: Path) -> tuple[PinnedModel, ...]:
    """The models the existing lock pins, or none when there is no readable lock to keep them from."""
    if not path.is_file():
        return ()
    try:
        return read_lock(path).models
    except ManifestError:
        return ()
