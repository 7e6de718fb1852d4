"""The hooks and the session fixtures every tier shares; helpers to import live in tests/fixtures/.

The real artifacts come through tests/fixtures/wheels.py (pip's own configuration, a test cache paid for
once); the CLI and the repository's paths through tests/fixtures/cli.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from filelock import FileLock
from fixtures.cli import MANIFESTS, run_cli
from fixtures.wheels import ORT_VERSION, cache_root, pip_download

#: Marks that keep a test out of the inner loop's tier.
NOT_FAST = ("integration", "wine", "slow")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`-m fast` is everything that is neither `integration`, `wine` nor `slow`, decided here so no test joins
    the inner loop by forgetting a mark; a test that uses a Wine prefix is `wine` whether it says so or not."""
    for item in items:
        if "wine" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.wine)
        if not any(item.get_closest_marker(name) for name in NOT_FAST):
            item.add_marker(pytest.mark.fast)


@pytest.fixture(scope="session")
def ort_win_wheel() -> Path:
    """The real onnxruntime 1.23.1 cp311 win_amd64 wheel: real PE files (DLLs, PYD)."""
    return pip_download(f"onnxruntime=={ORT_VERSION}", "win_amd64")


@pytest.fixture(scope="session")
def ort_linux_wheel() -> Path:
    """The real onnxruntime 1.23.1 cp311 manylinux wheel."""
    return pip_download(f"onnxruntime=={ORT_VERSION}", "linux_x86_64")


@pytest.fixture(scope="session")
def bundler_cache() -> Path:
    """One ort-bundler cache for the whole test run, holding the quickstart inputs (fetched for real)."""
    cache = cache_root() / "bundler-cache"
    cache.mkdir(exist_ok=True)
    with FileLock(cache_root() / "bundler-cache.fetch.lock"):  # the first worker fetches, the others find it there
        for name in ("quickstart-linux.toml", "quickstart-win.toml"):
            run_cli("fetch", "-q", "--cache", str(cache), str(MANIFESTS / name))
    return cache
