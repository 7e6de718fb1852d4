"""The CUDA 11.8 quickstart names its 1.5 GB of wheels before its small local files (the launch script comes
last): fetch must still check every local file before it downloads anything, so a wrong local file costs
nothing. A runner that fails on any call stands in for pip: it must never be reached."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS

from bundler.errors import InputUnavailableError
from bundler.manifest import load
from bundler.operations.fetch import fetch_manifest
from bundler.sources.cache import Cache
from bundler.sources.fetch import FetchOptions

QUICKSTART = "quickstart-win-cuda11.8"


def no_download(*args: object, **kwargs: object) -> None:
    msg = f"pip was called before the local files were checked: {args}"
    raise AssertionError(msg)


@pytest.fixture
def copied(tmp_path: Path) -> Path:
    folder = tmp_path / "manifests"
    folder.mkdir()
    for name in (f"{QUICKSTART}.toml", f"{QUICKSTART}.lock.toml"):
        shutil.copy2(MANIFESTS / name, folder / name)
    shutil.copytree(MANIFESTS / "models", folder / "models")
    shutil.copytree(MANIFESTS / "app", folder / "app")
    return folder / f"{QUICKSTART}.toml"


def test_the_quickstarts_last_local_file_is_checked_before_any_download(copied: Path, tmp_path: Path) -> None:
    manifest = load(copied)
    assert [i.key for i in manifest.inputs()][-1] == "launch.script"  # the order this test is about
    (copied.parent / "app" / "infer.py").unlink()
    with pytest.raises(InputUnavailableError, match=r"^launch\.script: .*app/infer\.py does not exist"):
        fetch_manifest(manifest, cache=Cache(tmp_path / "cache"), options=FetchOptions(quiet=True),
                       runner=no_download)
    assert not list((tmp_path / "cache").rglob("*.whl"))
