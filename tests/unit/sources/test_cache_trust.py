"""A cache another local user could write is refused, never read or run; a single user's cache works as before.

The other user is real: uid/gid 65534 (nobody), through `setpriv --reuid=65534 --regid=65534 --clear-groups`
(the tests run as root), planting files and folders as an attacker on the same machine would. Caches that
user must reach live in folders directly under /tmp (sticky, as on any machine); the flows are the real CLI in
a subprocess over the session's real inputs (hard links into a cache of each test's own: no bytes copied, and
the session's cache is never changed).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli
from fixtures.models import make_identity_model

from bundler.assembly import ortenv
from bundler.assembly.modelgate import ModelInput, gate_models
from bundler.errors import InputUnavailableError
from bundler.sources.cache import Cache

OTHER = 65534  # nobody / nogroup
pytestmark = pytest.mark.skipif(os.name == "nt" or os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="a second user is played with setpriv, which needs root")
MANIFEST = MANIFESTS / "quickstart-linux.toml"
ZIP = "quickstart-linux-1.0.0-linux_x86_64.zip"


def as_other(script: str) -> None:
    """Run a shell script as the other user (uid and gid 65534, no supplementary groups)."""
    subprocess.run(["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups", "sh", "-ec", script],
                   check=True)


@pytest.fixture
def public() -> Iterator[Path]:
    """A folder directly under /tmp that the other user may enter (mode 0755), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="ort-bundler-trust-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def theirs(folder: Path) -> Path:
    """A folder the other user made first (made here and given to them: they cannot write in `public`)."""
    folder.mkdir(mode=0o755)
    os.chown(folder, OTHER, OTHER)
    return folder


def plant_environment(env: Path, proof: Path, marker: str) -> None:
    """The attack: a model-gate environment whose `python` writes `proof` when the builder runs it."""
    as_other(f"mkdir -p {env}/bin && printf '#!/bin/sh\\necho ran > {proof}\\n' > {env}/bin/python && "
             f"chmod 755 {env}/bin/python && printf '{marker}' > {env}/.ort-bundler-ready")


def cache_with_inputs(bundler_cache: Path, root: Path) -> Path:
    """A cache of its own holding the session's inputs (hard links, so nothing is copied; only folders are ever
    changed here) and its model-gate environments (a link to the session's)."""
    root.mkdir(mode=0o755)
    shutil.copytree(bundler_cache / "sha256", root / "sha256", copy_function=os.link)
    (bundler_cache / "ort-envs").mkdir(exist_ok=True)
    (root / "ort-envs").symlink_to(bundler_cache / "ort-envs")
    return root


def build(cache: Path, out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return run_cli("build", "-q", *options, "--cache", str(cache), "-o", str(out), str(MANIFEST), check=False)


def pinned_hashes() -> set[str]:
    manifest = tomllib.loads(MANIFEST.read_text(encoding="utf-8"))
    lock = tomllib.loads(MANIFEST.with_name("quickstart-linux.lock.toml").read_text(encoding="utf-8"))
    return {manifest["ort"]["capi"]["sha256"], *(wheel["sha256"] for wheel in lock["wheel"])}


# -- severe 5: a planted model-gate environment is refused, never run -------------------------------------------

@pytest.mark.parametrize("afterwards", ["still open", "closed again"])
def test_a_gate_environment_another_user_planted_is_refused_and_never_run(public: Path, tmp_path: Path,
                                                                          afterwards: str) -> None:
    """ort-envs/ was writable by others (a umask of 000, a careless chmod); the other user plants the environment
    whose name anyone can work out (`environment_dir`) with its ready marker. Whether or not the folder was
    closed again since, the gate refuses before it reads the marker, and the planted interpreter never runs."""
    cache = Cache(public / "cache")
    envs = cache.work_dir("ort-envs")
    envs.chmod(0o777)
    proof = public / "proof"
    plant_environment(ortenv.environment_dir("1.23.1", work_dir=envs), proof,
                      "".join(f"{line}\\n" for line in ortenv.isolated_requirements("1.23.1")))
    if afterwards == "closed again":
        envs.chmod(0o755)
    model = make_identity_model(tmp_path / "m.onnx")
    with pytest.raises(InputUnavailableError) as caught:
        gate_models([ModelInput(name="m", path=model, sha256=hashlib.sha256(model.read_bytes()).hexdigest())],
                    ort_version="1.23.1", work_dir=envs)
    assert not proof.exists()
    message = str(caught.value)
    if afterwards == "still open":
        assert message.startswith(f"the cache folder {envs} (owner root, uid 0, mode drwxrwxrwx) is writable by "
                                  "other users, but it must be owned by you (root, uid 0) or root and writable by no "
                                  "one else: ")
    else:
        planted = ortenv.environment_dir("1.23.1", work_dir=envs)
        assert message.startswith(f"the cache folder {planted} (owner nobody, uid 65534, mode drwxr-xr-x) is owned "
                                  "by another user, but it must be owned by you")
    assert "--cache DIR" in message and "\n" not in message


@pytest.mark.integration
def test_build_refuses_a_cache_another_user_made_and_never_runs_its_gate_environment(
        bundler_cache: Path, public: Path, tmp_path: Path) -> None:
    """`--cache /tmp/shared`, made first by the other user, holding the bundle's real inputs and the gate
    environment named for the bundle's own ORT and NumPy wheels (as the public lock gives them)."""
    cache = public / "shared"
    theirs(cache)
    shutil.copytree(bundler_cache / "sha256", cache / "sha256", copy_function=os.link)
    subprocess.run(["find", str(cache / "sha256"), "-type", "d", "-exec", "chown", f"{OTHER}:{OTHER}", "{}", "+"],
                   check=True)  # the folders theirs (the files stay hard links of the session's: never changed)
    wheels = ortenv.host_wheels(path for path in cache.glob("sha256/*/*/*.whl") if path.parent.name in pinned_hashes())
    assert len(wheels) == 2
    proof = public / "proof"
    as_other(f"mkdir -m 755 {cache}/ort-envs")
    plant_environment(ortenv.environment_dir("1.23.1", work_dir=cache / "ort-envs", wheels=wheels), proof,
                      "".join(f"{path.name} {path.parent.name}\\n" for path in wheels))
    proc = build(cache, tmp_path / "out")
    assert proc.returncode == 4, proc.stderr
    assert not proof.exists() and not (tmp_path / "out" / ZIP).exists()
    assert f"the cache folder {cache} (owner nobody, uid 65534, mode drwxr-xr-x) is owned by another user" in proc.stderr


# -- severe 5: the stores used by name ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built_cache(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache under /tmp in which the quickstart was built once: every store exists and holds entries."""
    folder = Path(tempfile.mkdtemp(prefix="ort-bundler-trust-built-", dir="/tmp"))
    cache = cache_with_inputs(bundler_cache, folder / "cache")
    proc = build(cache, tmp_path_factory.mktemp("built"))
    assert proc.returncode == 0, proc.stderr
    yield cache
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.integration
@pytest.mark.parametrize("store", ["gate-results", "derived", "members", "templates", "bundles"])
@pytest.mark.parametrize("attack", ["open folder", "planted file"])
def test_a_store_another_user_could_write_is_refused(built_cache: Path, public: Path, tmp_path: Path, store: str,
                                                     attack: str) -> None:
    """Each store whose entries the build uses by name: writable by others, or holding a file the other user put
    there while it was (and closed again since), makes `build` stop with exit 4 naming it (`--no-reuse` but for
    the kept bundles: a bundle kept from the same inputs is otherwise published before any other store opens)."""
    cache = public / "cache"
    shutil.copytree(built_cache, cache, symlinks=True, copy_function=os.link)
    folder = cache / store
    folder.chmod(0o777)
    if attack == "planted file":
        as_other(f"printf 'passed\\n' > {folder}/planted")
        folder.chmod(0o755)
    proc = build(cache, tmp_path / "out", *([] if store == "bundles" else ["--no-reuse"]))
    assert proc.returncode == 4, proc.stderr
    if attack == "open folder":
        assert f"the cache folder {folder} (owner root, uid 0, mode drwxrwxrwx) is writable by other users" in proc.stderr
    else:
        assert (f"the cache file {folder}/planted (owner nobody, uid 65534, mode -rw-r--r--) is owned by another user"
                in proc.stderr)
    assert not (tmp_path / "out" / ZIP).exists()


@pytest.mark.integration
def test_the_stores_of_a_cache_its_user_alone_writes_are_used(built_cache: Path, public: Path, tmp_path: Path) -> None:
    """The same copy, untouched: built again from its stores (the kept bundle is reused)."""
    cache = public / "cache"
    shutil.copytree(built_cache, cache, symlinks=True, copy_function=os.link)
    proc = run_cli("build", "--json", "--cache", str(cache), "-o", str(tmp_path / "out"), str(MANIFEST))
    assert '"reused": true' in proc.stdout


# -- moderate: fetch --offline over a replaced input ---------------------------------------------------------------

@pytest.mark.integration
@pytest.mark.parametrize("afterwards", ["still open", "closed again"])
def test_fetch_offline_refuses_an_input_another_user_replaced(bundler_cache: Path, public: Path,
                                                              afterwards: str) -> None:
    cache = cache_with_inputs(bundler_cache, public / "cache")
    sha256 = tomllib.loads(MANIFEST.read_text(encoding="utf-8"))["models"][0]["sha256"]
    entry = cache / "sha256" / sha256[:2] / sha256
    entry.chmod(0o777)
    as_other(f"rm {entry}/tiny-mlp.onnx && printf 'not the model' > {entry}/tiny-mlp.onnx")
    if afterwards == "closed again":
        entry.chmod(0o755)
    proc = run_cli("fetch", "--offline", "-q", "--cache", str(cache), str(MANIFEST), check=False)
    assert proc.returncode == 4, proc.stderr
    if afterwards == "still open":
        assert f"the cache folder {entry} (owner root, uid 0, mode drwxrwxrwx) is writable by other users" in proc.stderr
    else:
        assert (f"the cache file {entry}/tiny-mlp.onnx (owner nobody, uid 65534, mode -rw-r--r--) is owned by another "
                "user" in proc.stderr)


@pytest.mark.integration
def test_fetch_offline_names_a_cache_another_user_owns_once(bundler_cache: Path, public: Path) -> None:
    """The cache itself theirs: one sentence, not one per input."""
    cache = cache_with_inputs(bundler_cache, public / "cache")
    os.chown(cache, OTHER, OTHER)
    proc = run_cli("fetch", "--offline", "-q", "--cache", str(cache), str(MANIFEST), check=False)
    assert proc.returncode == 4
    assert proc.stderr.count("is owned by another user") == 1, proc.stderr
    assert f"the cache folder {cache} (owner nobody, uid 65534, mode drwxr-xr-x) is owned by another user" in proc.stderr


# -- the rule itself: owner, modes, the folders above ----------------------------------------------------------------

def test_a_cache_folder_another_user_owns_is_refused(public: Path) -> None:
    theirs(public / "cache")
    with pytest.raises(InputUnavailableError, match=r"^the cache folder .*/cache \(owner nobody, uid 65534, mode "
                                                    r"drwxr-xr-x\) is owned by another user"):
        Cache(public / "cache").work_dir("tmp")


@pytest.mark.parametrize(("mode", "refused"), [(0o777, True), (0o775, True), (0o1777, False), (0o755, False)])
def test_a_folder_above_the_cache_others_can_write_is_refused_unless_sticky(public: Path, mode: int,
                                                                            refused: bool) -> None:
    above = public / "above"
    above.mkdir()
    os.chown(above, 0, OTHER)  # a group with another member than the owner: group write is someone else's
    above.chmod(mode)
    cache = Cache(above / "cache")
    if not refused:
        assert cache.work_dir("tmp").is_dir()
        return
    with pytest.raises(InputUnavailableError) as caught:
        cache.work_dir("tmp")
    assert str(caught.value).startswith(f"the folder above the cache {above} (owner root, uid 0, mode "
                                        f"{stat.filemode(stat.S_IFDIR | mode)}) is writable by other users, but it must "
                                        "be owned by you (root, uid 0) or root and writable by no one else unless it is "
                                        "sticky (as /tmp is): ")


def test_a_sticky_cache_folder_is_still_refused(public: Path) -> None:
    """Sticky is enough above the cache, never for the cache itself: others could add names to it."""
    (public / "cache").mkdir(mode=0o755)
    (public / "cache").chmod(0o1777)
    with pytest.raises(InputUnavailableError, match=r"^the cache folder .* is writable by other users"):
        Cache(public / "cache").work_dir("derived")


@pytest.mark.parametrize(("group", "refused"), [(OTHER, True), (0, False)])
def test_group_write_is_harmless_only_for_the_owner_s_private_group(public: Path, group: int, refused: bool) -> None:
    """As Debian's ssh decides it: a umask of 002 with a user-private group (root's group has root alone here)
    leaves the cache usable; a group with another member is someone else's write."""
    cache = public / "cache"
    Cache(cache).work_dir("derived")
    os.chown(cache / "derived", 0, group)
    (cache / "derived").chmod(0o775)
    if refused:
        with pytest.raises(InputUnavailableError, match=r"derived \(owner root, uid 0, mode drwxrwxr-x\) is writable"):
            Cache(cache).work_dir("derived")
    else:
        assert Cache(cache).work_dir("derived") == cache / "derived"


def test_a_cache_reached_through_a_link_is_judged_where_the_link_leads(public: Path) -> None:
    target = public / "elsewhere"
    theirs(target)
    (public / "cache").mkdir(mode=0o755)
    (public / "cache" / "derived").symlink_to(target)
    with pytest.raises(InputUnavailableError, match=rf"^the cache folder {target} \(owner nobody"):
        Cache(public / "cache").work_dir("derived")


def test_the_folders_the_cache_makes_are_never_writable_by_others_whatever_the_umask(public: Path) -> None:
    previous = os.umask(0)
    try:
        cache = Cache(public / "new" / "cache")
        folders = [cache.work_dir("derived"), cache.work_dir("tmp"), cache.root, cache.root.parent]
        with cache.scratch(prefix="test-") as scratch:
            assert stat.S_IMODE(scratch.stat().st_mode) == 0o700
        with cache.temporary() as tmp:
            tmp.write_bytes(b"x")
            adopted = cache.adopt(tmp, sha256="ab" * 32, filename="f")
        folders += [adopted.parent, adopted.parent.parent]
    finally:
        os.umask(previous)
    assert all(not folder.stat().st_mode & 0o022 for folder in folders)
    assert cache.find("ab" * 32) == adopted


# -- nothing that worked stops working ---------------------------------------------------------------------------------

@pytest.mark.integration
@pytest.mark.parametrize("where", ["default cache", "--cache /tmp/…"])
def test_the_single_user_flow_still_works(bundler_cache: Path, tmp_path: Path, where: str) -> None:
    """lock, fetch, fetch --offline, build, build again (reused) of the quickstart, in a fresh cache: the default
    one (under XDG_CACHE_HOME, as platformdirs finds it) or one `--cache` makes directly under /tmp; run under a
    umask of 002, as Debian and Ubuntu give a user with a private group."""
    folder = tmp_path / "m"
    shutil.copytree(MANIFESTS, folder, ignore=shutil.ignore_patterns("quickstart-win*"))
    manifest = folder / "quickstart-linux.toml"
    mirror = tmp_path / "mirror"  # the session's inputs by sha256: fetch copies and hashes them, nothing is downloaded
    mirror.mkdir()
    for path in bundler_cache.glob("sha256/*/*/*"):
        if not (mirror / path.parent.name).exists():
            os.link(path, mirror / path.parent.name)
    env = {key: value for key, value in os.environ.items() if key != "ORT_BUNDLER_CACHE"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    under_tmp = Path("/tmp") / f"ort-bundler-flow-{os.urandom(6).hex()}"
    cache_args = [] if where == "default cache" else ["--cache", str(under_tmp)]
    cache = tmp_path / "xdg" / "ort-bundler" if where == "default cache" else under_tmp

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", "bundler", *args], capture_output=True, text=True, env=env,
                              umask=0o002)
        assert proc.returncode == 0, f"{' '.join(args)}: {proc.stderr}"
        return proc

    try:
        cli("fetch", "-q", *cache_args, "--mirror", str(mirror), str(manifest))
        cli("lock", "-q", *cache_args, str(manifest))
        cli("fetch", "-q", "--offline", *cache_args, str(manifest))
        first = cli("build", "--json", *cache_args, "-o", str(tmp_path / "one"), str(manifest))
        again = cli("build", "--json", *cache_args, "-o", str(tmp_path / "two"), str(manifest))
        assert '"reused": false' in first.stdout and '"reused": true' in again.stdout
        assert (tmp_path / "one" / ZIP).read_bytes() == (tmp_path / "two" / ZIP).read_bytes()
        assert (cache / "ort-envs").is_dir() and (cache / "sha256").is_dir()
    finally:
        shutil.rmtree(under_tmp, ignore_errors=True)
