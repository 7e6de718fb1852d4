"""The launchers' cache folder is checked before anything is put there (issue 34, moderate).

The cache folder holds TEMP, CUDA's kernel cache and TensorRT's engine cache for whoever runs the app, SYSTEM
and root included; a `--cache-dir`/`CACHEDIR` shared by every user was never checked. Now the launcher
(ort_bundle.launcher, through run.sh here) applies folder_trust's rule: the folder and what it holds owned by
root or the running user and writable by no one else, no folder above it writable by everyone unless sticky. A
folder shared on purpose is sticky (1777, as /tmp): each user then gets a private `user-<uid>` folder in it.
The second user is real: `setpriv` to uid 65534 plants the folders (needs root, as the suite runs here). The
cache precedence is one function (cache_folder.choose) for the launcher and the self-check.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from unit.shipped.test_launcher import context, install, report, start, venv  # noqa: F401  (venv: a fixture)

from bundler.assembly.render import INSTALL_EXIT_CODES
from bundler.shipped.ort_bundle import cache_folder

PREREQUISITE = INSTALL_EXIT_CODES["prerequisite"]
OTHER = 65534
needs_root = pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="plants as another user with setpriv: needs root on Linux")


def as_other(*command: str) -> None:
    """Run a command as uid/gid 65534, with no supplementary groups."""
    subprocess.run(["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups", *command], check=True,
                   capture_output=True)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder like /tmp (1777), reachable by every user (pytest's own temp folders are 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="ort-bundler-cache-", dir="/tmp"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@needs_root
def test_a_cache_folder_another_user_owns_or_can_write_is_refused(venv: Path, tmp_path: Path, shared: Path) -> None:
    run_sh = install(tmp_path / "root", venv, context())
    theirs = shared / "theirs"
    as_other("mkdir", "-m", "0755", str(theirs))
    refused = start(run_sh, ORT_BUNDLE_CACHE_DIR=str(theirs))
    assert refused.returncode == PREREQUISITE and refused.stdout == ""
    assert (f"run: the cache directory {theirs} (from ORT_BUNDLE_CACHE_DIR) is not safe to use: it is owned by uid "
            f"{OTHER}, not by root or the installing user") in refused.stderr
    assert not (theirs / "tmp").exists()  # nothing was put there
    writable = shared / "everyone"
    writable.mkdir(mode=0o777)
    writable.chmod(0o777)
    refused = start(run_sh, ORT_BUNDLE_CACHE_DIR=str(writable))
    assert refused.returncode == PREREQUISITE and "its mode drwxrwxrwx lets others write it" in refused.stderr
    below = shared / "their-tree"
    as_other("mkdir", "-m", "0755", str(below))
    refused = start(run_sh, ORT_BUNDLE_CACHE_DIR=str(below / "cache"))
    assert refused.returncode == PREREQUISITE and f"{below} above it is owned by uid {OTHER}" in refused.stderr
    as_other("ln", "-s", str(tmp_path), str(shared / "link"))
    refused = start(run_sh, ORT_BUNDLE_CACHE_DIR=str(shared / "link"))
    assert refused.returncode == PREREQUISITE and "a link or a file stands in its place" in refused.stderr


@needs_root
def test_cache_dir_txt_naming_a_shared_sticky_folder_gives_each_user_a_private_one(venv: Path, tmp_path: Path,
                                                                                   shared: Path) -> None:
    """What `install.sh --cache-dir` records, pointing at a folder every user may write (1777): the launcher works in
    `user-<uid>` inside it; a `user-0` another user made first is refused, never used."""
    root = tmp_path / "root"
    run_sh = install(root, venv, context())
    (root / "cache_dir.txt").write_text(f"{shared}\n", encoding="utf-8")
    env = report(start(run_sh))["env"]
    mine = shared / "user-0"
    assert env["TEMP"] == f"{mine}/tmp" and env["ORT_BUNDLE_CACHE_DIR"] == str(mine)
    assert stat.S_IMODE(mine.stat().st_mode) == 0o700 and stat.S_IMODE((mine / "cuda").stat().st_mode) == 0o700
    shutil.rmtree(mine)
    as_other("mkdir", "-m", "0700", str(mine))  # planted under the name the next root run would use
    refused = start(run_sh)
    assert refused.returncode == PREREQUISITE
    assert f"the cache directory {mine} (from cache_dir.txt) is not safe to use: it is owned by uid {OTHER}" in refused.stderr


@needs_root
def test_a_subfolder_planted_in_an_otherwise_private_cache_is_refused(venv: Path, tmp_path: Path, shared: Path) -> None:
    run_sh = install(tmp_path / "root", venv, context())
    cache = shared / "mine"
    cache.mkdir(mode=0o755)
    as_other("mkdir", str(shared / "planted"))
    (shared / "planted").rename(cache / "tensorrt")  # as if made before the folder was locked down
    refused = start(run_sh, ORT_BUNDLE_CACHE_DIR=str(cache))
    assert refused.returncode == PREREQUISITE and f"{cache}/tensorrt (from ORT_BUNDLE_CACHE_DIR)" in refused.stderr


def test_the_users_own_cache_is_made_private_whatever_the_umask(venv: Path, tmp_path: Path) -> None:
    """The single-user case keeps working: the per-user cache is made 0700 even under umask 002, and one an older
    launcher left group-writable is the user's own, so it is tightened rather than refused."""
    run_sh = install(tmp_path / "root", venv, context())
    xdg = tmp_path / "xdg"
    old = os.umask(0o002)
    try:
        env = report(start(run_sh, XDG_CACHE_HOME=str(xdg)))["env"]
    finally:
        os.umask(old)
    cache = xdg / "ort-bundles" / "demo"
    assert env["TEMP"] == f"{cache}/tmp" and stat.S_IMODE(cache.stat().st_mode) == 0o700
    cache.chmod(0o775)
    assert report(start(run_sh, XDG_CACHE_HOME=str(xdg)))["env"]["TEMP"] == f"{cache}/tmp"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o755


def test_the_launcher_and_the_self_check_share_one_precedence(tmp_path: Path) -> None:
    root = str(tmp_path)
    assert cache_folder.choose(root, {}, None) is None  # the self-check at install time: no user known
    default = cache_folder.choose(root, {"XDG_CACHE_HOME": "/x"}, None, name="demo")
    assert default == cache_folder.CacheChoice(path="/x/ort-bundles/demo", source=cache_folder.PER_USER)
    assert cache_folder.choose(root, {}, "rel", name="demo") == cache_folder.CacheChoice(
        path=f"{root}/rel", source="the bundle's [launch] cache_dir")
    (tmp_path / "cache_dir.txt").write_text("/recorded\n", encoding="utf-8")
    assert cache_folder.choose(root, {}, "rel").path == "/recorded"
    assert cache_folder.choose(root, {}, "rel", pending="/msi").path == "/msi"
    assert cache_folder.choose(root, {"ORT_BUNDLE_CACHE_DIR": "/env"}, "rel", pending="/msi").path == "/env"


@needs_root
def test_install_refuses_a_cache_dir_another_user_owns_or_can_write(tmp_path: Path, shared: Path) -> None:
    """`install.sh --cache-dir` says so before anything is installed; a sticky shared folder is accepted."""
    from unit.shipped.test_install_sh import make_bundle

    from bundler.shipped.ort_bundle.engine import engine

    bundle = make_bundle(tmp_path / "bundle")
    theirs = shared / "theirs"
    as_other("mkdir", "-m", "0755", str(theirs))
    target = tmp_path / "apps" / "tiny"

    def install(cache: Path) -> str:
        return engine.install(engine.Options(bundle=bundle, install_dir=target, self_check=False,
                                             cache_dir=str(cache)), engine.Log(None))

    with pytest.raises(engine.EngineError, match=f"--cache-dir {theirs}: {theirs} is not safe as a cache folder: "
                                                 f"it is owned by uid {OTHER}") as refused:
        install(theirs)
    assert refused.value.code == "usage" and not target.exists()
    writable = shared / "everyone"
    writable.mkdir()
    writable.chmod(0o777)
    with pytest.raises(engine.EngineError, match="lets others write it"):
        install(writable)
    assert install(shared) == "installed" and (target / "cache_dir.txt").read_text() == f"{shared}\n"
