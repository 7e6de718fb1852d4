"""Issue 40: an MSI that 4117c23's code built (before `[bundle] upgrade_code`, in ort-bundler's own GUID
namespace) is upgraded by one today's code builds from a manifest without the key: Wine's msiexec leaves one
product installed, the new one, with the detection value its self-check wrote.

It builds the old MSI with 4117c23's own code, checked out from this repository's history into a temporary
worktree, so it needs that history and about six minutes: it runs with ORT_BUNDLER_BIG=1, as the
DirectML strict install does. Run by hand on 2026-12-06: exit 0 for both installs, one Add/Remove Programs entry (1.0.1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.cli import REPO
from fixtures.windows_bundles import manifest
from fixtures.windows_python import WindowsPython, windows_python  # noqa: F401  (fixture)
from fixtures.wine import Wine, wine  # noqa: F401  (fixture)

pytestmark = [pytest.mark.integration, pytest.mark.wine,
              pytest.mark.skipif(os.environ.get("ORT_BUNDLER_BIG") != "1",
                                 reason="builds 4117c23 from history, about 6 min; set ORT_BUNDLER_BIG=1")]
OLD = "4117c23"
VC_KEY = "HKLM\\SOFTWARE\\Microsoft\\VisualStudio\\14.0\\VC\\Runtimes\\x64"
UNINSTALL = "HKLM\\SOFTWARE\\Microsoft\\Windows\\CurrentVersion\\Uninstall\\{code}"


def msi_of(tree: Path, version: str, runtime: Path, cache: Path, work: Path) -> dict:
    """`package --msi` of a bundle that the ort-bundler in `tree` locked, built and packaged itself."""
    def cli(*args: str) -> str:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        done = subprocess.run([sys.executable, "-m", "bundler", *args], cwd=tree, env=env, capture_output=True,
                              text=True)
        assert done.returncode == 0, f"{tree}: {args[0]}: {done.stderr[-3000:]}"
        return done.stdout

    folder = work / version
    folder.mkdir()
    first = manifest(folder, name="winold", version=version, runtime=runtime, lock=None)
    cli("lock", str(first))
    path = manifest(folder, name="winold", version=version, runtime=runtime, lock=first.with_suffix(".lock.toml"))
    cli("fetch", "-q", "--cache", str(cache), str(path))
    built = json.loads(cli("build", "--json", "--cache", str(cache), "-o", str(folder / "dist"), str(path)))
    return json.loads(cli("package", "--json", "--cache", str(cache), "-o", str(folder / "pkg"), built["zip"],
                          "--msi"))["msi"]


def test_an_msi_built_by_4117c23_is_upgraded_to_one_product(wine: Wine, windows_python: WindowsPython,
                                                            bundler_cache: Path, tmp_path: Path) -> None:
    old_tree = tmp_path / "old"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(old_tree), OLD], check=True,
                   capture_output=True)
    try:
        (old_tree / "bundler" / "templates").symlink_to("../templates")  # its templates, as its package maps them
        old = msi_of(old_tree, "1.0.0", windows_python.embed_zip, bundler_cache, tmp_path)
        new = msi_of(REPO, "1.0.1", windows_python.embed_zip, bundler_cache, tmp_path)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old_tree)], check=False,
                       capture_output=True)
    assert old["upgrade_code"] == new["upgrade_code"] and old["product_code"] != new["product_code"]
    for name, value in (("Installed", 1), ("Major", 14), ("Minor", 44), ("Bld", 35208)):
        wine.reg_add(VC_KEY, name, value)  # STAND-IN: Wine has no VC_redist
    for msi in (old, new):
        done = wine.run(["msiexec", "/i", wine.to_windows(Path(msi["path"])), "/qn"], timeout=900)
        assert done.returncode == 0, done.stdout + done.stderr
    assert wine.reg_query(UNINSTALL.format(code=old["product_code"])) is None
    entry = wine.reg_query(UNINSTALL.format(code=new["product_code"]))
    assert entry is not None and entry["DisplayVersion"] == "1.0.1"
    detection = wine.reg_query("HKLM\\SOFTWARE\\ort-bundler\\winold")
    assert detection is not None and detection["Version"] == detection["CheckedVersion"] == "1.0.1"
