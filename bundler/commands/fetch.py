"""`ort-bundler fetch`: every input of the manifest and its lock, into the cache."""

from __future__ import annotations

from pathlib import Path

from bundler.manifest import Manifest
from bundler.runner import Runner, run
from bundler.sources.cache import Cache
from bundler.sources.fetch import FetchOptions, fetch_inputs
from bundler.sources.inputs import all_inputs, target_of


def fetch_manifest(manifest: Manifest, *, cache: Cache, options: FetchOptions, runner: Runner = run) -> dict[str, Path]:
    return fetch_inputs(all_inputs(manifest), cache=cache, target=target_of(manifest), options=options, runner=runner)
