"""Which inputs a manifest needs: its own, plus every wheel its lock file pins, for the manifest's target."""

from __future__ import annotations

from bundler.errors import ManifestError
from bundler.manifest import Input, Manifest
from bundler.sources.lock import Lock, Target, read_lock


def target_of(manifest: Manifest) -> Target:
    return Target(platform=manifest.bundle.platform, python=manifest.bundle.python)


def load_lock(manifest: Manifest) -> Lock | None:
    """The lock the manifest references, checked against the manifest's target."""
    path = manifest.python.lock
    if path is None:
        return None
    if not path.is_file():
        msg = f"{manifest.path.name}: python.lock: {path.name} does not exist; run `ort-bundler lock {manifest.path.name}`"
        raise ManifestError(msg)
    lock = read_lock(path)
    target = target_of(manifest)
    if lock.target != target:
        msg = (f"{path.name}: locked for {lock.target.platform} / Python {lock.target.python}, but the manifest targets "
               f"{target.platform} / Python {target.python}; run `ort-bundler lock {manifest.path.name}` again")
        raise ManifestError(msg)
    return lock


#: The input key of the install engine's pinned pypa installer wheel (the lock's [installer] table).
INSTALLER_KEY = "lock-installer:installer"


def lock_inputs(lock: Lock | None) -> list[Input]:
    if lock is None:
        return []
    wheels = [*lock.wheels, *([lock.installer] if lock.installer else [])]
    return [Input(key=INSTALLER_KEY if w is lock.installer else f"lock:{w.name}", kind="requirement",
                  location=f"{w.name}=={w.version}", sha256=(w.sha256,), filename=w.filename) for w in wheels]


def all_inputs(manifest: Manifest) -> list[Input]:
    return manifest.inputs() + lock_inputs(load_lock(manifest))
