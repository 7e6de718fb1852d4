"""`ort-bundler fetch`: every input of the manifest and its lock, into the cache."""

from __future__ import annotations

from pathlib import Path

from bundler.manifest import Manifest
from bundler.runner import Runner, run
from bundler.sources.cache import Cache
from bundler.sources.fetch import FetchOptions, fetch_inputs
from bundler.sources.gate import pip_targets
from bundler.sources.inputs import all_inputs, load_lock, require_local_files, require_local_pins, target_of


def fetch_manifest(manifest: Manifest, *, cache: Cache, options: FetchOptions, runner: Runner = run) -> dict[str, Path]:
    """Every input into the cache; a local file the manifest names must exist even when its hash is cached,
    unless a mirror (a folder or a registry) is where the inputs come from: the manifest's own files may then
    be absent on this machine by design (the air-gapped side). One that is there and differs from its pin is
    exit 5 either way, before anything is fetched."""
    inputs = all_inputs(manifest)
    if options.mirror is None and options.registry is None:
        require_local_files(inputs, manifest.path.parent)
    require_local_pins(inputs, manifest.path.parent)
    return fetch_inputs(inputs, cache=cache, target=target_of(manifest), options=options, runner=runner,
                        targets=pip_targets(load_lock(manifest)))

