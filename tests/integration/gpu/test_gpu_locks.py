"""Every GPU example manifest is locked again on every run, from the real wheels: the version-pair checks of `lock`
pass on each route, and the committed lock is the one `lock` writes today.

A lock that `lock` would no longer write is stale: two were, their model-gate records made before the gate's
reference inputs changed. What the package index may serve later (a newer numpy for `numpy>=1.21.6`, and with it
another licence row) must not fail this test: the wheels are compared by name, the licences not at all; the target,
the requirements and the models' gate records (made by the manifest's pinned ORT) are compared whole.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli
from fixtures.wheels import cache_root

pytestmark = pytest.mark.integration

ROUTES = ("quickstart-win-cuda11.8", "gpu-win-cuda12", "gpu-linux-cuda12", "gpu-win-directml")


def what_the_code_decides(lock: dict) -> dict:
    return {"target": lock["target"], "resolve": lock["resolve"], "model": lock["model"],
            "wheels": sorted(wheel["name"] for wheel in lock["wheel"]), "installer": lock["installer"]["name"],
            "gate": {**lock["gate"], "wheel": sorted(wheel["name"] for wheel in lock["gate"]["wheel"])}
            if "gate" in lock else None}  # a Linux target gates its models in its own wheels


@pytest.mark.parametrize("route", ROUTES)
def test_the_committed_lock_is_what_lock_writes_today(tmp_path: Path, route: str) -> None:
    copy = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, copy)  # the manifest's paths (app/, models/) are relative to its folder
    (copy / f"{route}.lock.toml").unlink()
    run_cli("lock", "-q", "--cache", str(cache_root() / "bundler-cache"), str(copy / f"{route}.toml"))
    written = tomllib.loads((copy / f"{route}.lock.toml").read_text(encoding="utf-8"))
    committed = tomllib.loads((MANIFESTS / f"{route}.lock.toml").read_text(encoding="utf-8"))
    assert what_the_code_decides(written) == what_the_code_decides(committed)
