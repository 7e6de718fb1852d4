"""The locked wheels are read beside `add_python` and done before the next part (issue 26, Speed).

On a fresh cache (the inputs only, as a first build has them), the part after `add_python` already finds
every locked wheel's binaries extracted into the derived folder and its facts read: no later part extracts
a wheel while another thread does.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import MANIFESTS, part_inputs

from bundler.assembly import licenses
from bundler.assembly.assembly import Assembly, BuildInputs
from bundler.assembly.parts import add_all
from bundler.assembly.python_env import add_python
from bundler.manifest import load
from bundler.readers.wheel_binaries import FOLDER, INDEX
from bundler.sources.cache import Cache
from bundler.sources.fetch import cached_inputs
from bundler.sources.inputs import all_inputs, load_lock

pytestmark = pytest.mark.integration


def fresh_cache(inputs: Path, dest: Path) -> Cache:
    """The inputs of the shared test cache, hard-linked, and no derived artifact."""
    for path in sorted((inputs / "sha256").rglob("*")):
        target = dest / path.relative_to(inputs)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            os.link(path, target)
    return Cache(dest)


@pytest.mark.parametrize("with_python", [True, False])
def test_the_part_after_add_python_finds_every_locked_wheel_read(bundler_cache: Path, tmp_path: Path,
                                                                 with_python: bool) -> None:
    manifest = load(MANIFESTS / "quickstart-win.toml")
    cache = fresh_cache(bundler_cache, tmp_path / "cache")
    lock = load_lock(manifest)
    assert lock is not None
    licenses._FACTS.clear()  # this process's memory of earlier tests' wheels
    seen: list[tuple[bool, bool]] = []

    def probe(assembly: Assembly, build: BuildInputs) -> None:
        store = build.cache.work_dir("derived")
        extracted = all((store / FOLDER / wheel.sha256 / INDEX).is_file() for wheel in lock.wheels)
        seen.append((extracted, {wheel.sha256 for wheel in lock.wheels} <= licenses._FACTS.keys()))

    files = cached_inputs(all_inputs(manifest), cache)
    build = part_inputs(manifest, lock=lock, files=files, work=tmp_path / "work", cache=cache)
    add_all(Assembly(), build, parts=(add_python, probe) if with_python else (probe,))
    assert seen == [(True, True)]
