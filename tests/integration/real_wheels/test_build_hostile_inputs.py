"""`build`, `reproduce`, `inspect` and `diff` against hostile inputs, round 2 (issue 27).

Real builds of the quickstart-linux manifest from the private cache of `test_hardening_build` (hard
links to the session's fetched inputs), real zips and tar archives made here; each case checks the exit
code, the one-line message and that nothing was written where it must not be.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fixtures.cli import MANIFESTS, run_cli
from fixtures.crafted_archives import sparse_tar, zeros_tar
from fixtures.hostile import Tmpfs, needs_mount, one_line, run, snapshot
from integration.real_wheels.test_build_faults import failed_build, leftovers, private_cache, sha256_of

pytestmark = pytest.mark.integration
__all__ = ["private_cache"]  # the module-scoped fixture, used here by name


def project_with(tmp_path: Path, key: str, line: str) -> Path:
    """A copy of the quickstart-linux manifest whose `key = {…}` input line is replaced by `line`."""
    project = tmp_path / "project"
    shutil.copytree(MANIFESTS, project, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = project / "quickstart-linux.toml"
    text = manifest.read_text(encoding="utf-8")
    start = text.index(f"{key} = {{")
    end = text.index("}", start) + 1
    manifest.write_text(text[:start] + line + text[end:], encoding="utf-8")
    return manifest


def empty_zip(path: Path) -> Path:
    zipfile.ZipFile(path, "w").close()
    return path


# -- minor: an empty zip ----------------------------------------------------------------------------------

def test_an_empty_zip_as_capi_is_a_build_failure_not_an_internal_error(private_cache: Path, tmp_path: Path) -> None:
    source = empty_zip(tmp_path / "empty.zip")
    manifest = project_with(tmp_path, "capi", f'capi = {{ path = "{source}", sha256 = "{sha256_of(source)}", allow_outside = true }}')
    run_cli("fetch", "-q", "--cache", str(private_cache), str(manifest))
    code, line = failed_build(private_cache, tmp_path / "out", manifest)
    assert code == 7 and "ort.capi: found no onnxruntime/capi/ folder" in line, line
    assert list((tmp_path / "out").iterdir()) == [] and leftovers(private_cache, tmp_path / "out") == []


@pytest.mark.parametrize("command", ["reproduce", "diff"])
def test_an_empty_zip_given_as_a_bundle_is_a_verification_failure(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path, command: str) -> None:
    bundle = empty_zip(tmp_path / "empty.zip")
    args = [str(bundle), str(bundle)] if command == "diff" else ["--offline", str(bundle)]
    code, err = run(capsys, command, "--cache", str(tmp_path / "cache"), *args)
    assert code == 8 and "expected one top folder" in one_line(err, command)


def test_an_empty_zip_is_inspected_as_an_empty_archive(tmp_path: Path) -> None:
    proc = run_cli("inspect", str(empty_zip(tmp_path / "empty.zip")))
    assert "archive with 0 files" in proc.stdout and not proc.stderr


# -- item 2: reproduce of a hostile bundle ------------------------------------------------------------------

def hostile_bundle(path: Path, record: dict[str, object]) -> Path:
    """A zip shaped like a bundle (one top folder, bundle.json, SHA256SUMS) whose bundle.json is `record`."""
    body = json.dumps(record).encode()
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("evil-1.0/bundle.json", body)
        archive.writestr("evil-1.0/SHA256SUMS", f"{hashlib.sha256(body).hexdigest()}  bundle.json\n")
        archive.writestr("evil-1.0/lock.toml", "format = 1\n")
    return path


@pytest.mark.parametrize("kind", ["absolute", "traversal"])
def test_reproduce_refuses_a_bundle_name_that_is_a_path_before_it_writes(capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Path, kind: str) -> None:
    outside = tmp_path / "home" / ".cargo"
    outside.mkdir(parents=True)
    name = str(outside / "config") if kind == "absolute" else "../../../../../../../.." + str(outside / "config")
    bundle = hostile_bundle(tmp_path / "evil.zip", {"name": name, "manifest": {"build": {"rustc-wrapper": "/x"}}})
    cache = tmp_path / "cache"
    code, err = run(capsys, "reproduce", "--offline", "--cache", str(cache), str(bundle))
    assert code == 8 and "bundle.json's name is" in one_line(err, "reproduce")
    assert list(outside.iterdir()) == []
    assert list((cache / "tmp").glob("reproduce-*")) == []


@pytest.mark.parametrize(("lock", "expected"), [("with\x00nul.toml", 8), ("a/\x1b[2J.toml", 8), ("a/CON", 8),
                                               ("../lock.toml", 9), ("/etc/lock.toml", 9), ("a\\..\\x", 9)])
def test_reproduce_refuses_a_recorded_lock_name_it_cannot_write_inside_its_scratch(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, lock: str, expected: int) -> None:
    manifest = {"bundle": {"name": "evil"}, "python": {"lock": lock}}
    bundle = hostile_bundle(tmp_path / "evil.zip", {"name": "evil", "manifest": manifest})
    before = snapshot(tmp_path)
    code, err = run(capsys, "reproduce", "--offline", "--cache", str(tmp_path / "cache"), str(bundle))
    assert code == expected and "python.lock is" in one_line(err, "reproduce")
    after = {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("cache")}
    assert after == before
    assert list((tmp_path / "cache" / "tmp").glob("reproduce-*")) == []


# -- item 3: a tar bomb as [python] runtime -------------------------------------------------------------------

def sparse_bomb(folder: Path) -> Path:
    """A ~200-byte `tar -S` archive whose one member is a 100 GiB sparse file (a hole, no disk used)."""
    tree = folder / "tree"
    (tree / "python" / "lib").mkdir(parents=True)
    subprocess.run(["truncate", "-s", "100G", str(tree / "python" / "lib" / "libpython3.11.so")], check=True)
    sparse_tar(folder / "bomb.tar.gz", tree)
    shutil.rmtree(tree)
    return folder / "bomb.tar.gz"


def ratio_bomb(folder: Path) -> Path:
    """A plain member of 1 GiB of zeros, gzip'd to about 1 MiB (ratio ~1000)."""
    return zeros_tar(folder / "bomb.tar.gz", {"python/lib/libpython3.11.so": 1 << 30})


@needs_mount
@pytest.mark.parametrize("make", [sparse_bomb, ratio_bomb], ids=["sparse-100GiB", "ratio-1GiB"])
def test_a_tar_bomb_as_the_python_runtime_is_refused_before_a_byte_is_written(
        private_cache: Path, tmp_path: Path, make: Callable[[Path], Path]) -> None:
    from integration.real_wheels.test_runtime_build import runtime_manifest

    bomb = make(tmp_path)
    manifest = runtime_manifest(tmp_path, "quickstart-linux.toml", bomb)
    cache = tmp_path / "cache"
    subprocess.run(["cp", "-al", str(private_cache), str(cache)], check=True)
    run_cli("fetch", "-q", "--cache", str(cache), str(manifest))
    shutil.rmtree(cache / "tmp", ignore_errors=True)
    scratch = Tmpfs(cache / "tmp", "400m")  # before the fix the re-packing filled this, never the real disk
    try:
        code, line = failed_build(cache, tmp_path / "out", manifest)
        assert code == 6 and "bomb.tar.gz" in line and "libpython3.11.so" in line, line
        assert "sparse-file bomb" in line or "above the limit" in line, line
        assert leftovers(cache, tmp_path / "out") == []
    finally:
        scratch.close()


# -- item 6: the build-reuse store ----------------------------------------------------------------------------

def own_cache(bundler_cache: Path, root: Path) -> Path:
    """A cache of its own whose inputs and isolated ORT environments are the session's (linked, not copied)."""
    root.mkdir()
    for name in ("sha256", "ort-envs"):
        (bundler_cache / name).mkdir(exist_ok=True)
        (root / name).symlink_to(bundler_cache / name)
    return root


def kept_zip(cache: Path) -> Path:
    from bundler.writer.reuse import STORE

    [kept] = (cache / STORE).glob("*/*/quickstart-linux-1.0.0-linux_x86_64.zip")
    return kept


def reuse_build(cache: Path, out: Path) -> dict[str, Any]:
    proc = run_cli("build", "--json", "--cache", str(cache), "-o", str(out), str(MANIFESTS / "quickstart-linux.toml"))
    return dict(json.loads(proc.stdout))


def trojaned(data: bytes, dest: Path) -> bytes:
    """The bundle with its entry point replaced by the attacker's, every other member as it was."""
    source = dest.with_suffix(".orig")
    source.write_bytes(data)
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            body = b"import os; os.system('id')\n" if info.filename.endswith("/payload/app/infer.py") else old.read(info)
            new.writestr(info, body)
    source.unlink()
    return dest.read_bytes()


@pytest.mark.parametrize("record", ["rewritten", "old-mac-kept"])
def test_a_kept_zip_replaced_together_with_its_record_is_never_published(bundler_cache: Path, tmp_path: Path,
                                                                        record: str) -> None:
    from bundler.writer.reuse import RECORD

    cache = own_cache(bundler_cache, tmp_path / "cache")
    first = reuse_build(cache, tmp_path / "one")
    data = Path(first["zip"]).read_bytes()
    kept = kept_zip(cache)
    evil = trojaned(data, tmp_path / "evil.zip")
    kept.unlink()
    kept.write_bytes(evil)
    digest, name, mac = (kept.parent / RECORD).read_text(encoding="ascii").split()
    forged = hashlib.sha256(evil).hexdigest()
    (kept.parent / RECORD).write_text(f"{forged}  {name}\n" if record == "rewritten" else f"{forged}  {name}  {mac}\n",
                                      encoding="ascii")
    again = reuse_build(cache, tmp_path / "two")
    assert again["reused"] is False and again["sha256"] == digest
    assert Path(again["zip"]).read_bytes() == data
    assert kept_zip(cache).read_bytes() == data  # kept again, as built


def test_the_published_zip_is_never_a_link_to_the_kept_one(bundler_cache: Path, tmp_path: Path) -> None:
    cache = own_cache(bundler_cache, tmp_path / "cache")
    published = [Path(reuse_build(cache, tmp_path / out)["zip"]) for out in ("one", "two")]  # assembled, then reused
    data = published[0].read_bytes()
    kept = kept_zip(cache)
    with kept.open("ab") as tail:
        tail.write(b"\0")
    for path in published:
        assert path.stat().st_nlink == 1 and path.read_bytes() == data


def test_a_reuse_secret_others_can_read_or_replace_turns_reuse_off(bundler_cache: Path, tmp_path: Path) -> None:
    from bundler.writer.reuse import SECRET, STORE

    cache = own_cache(bundler_cache, tmp_path / "cache")
    data = Path(reuse_build(cache, tmp_path / "one")["zip"]).read_bytes()
    (cache / STORE / SECRET).chmod(0o644)
    again = reuse_build(cache, tmp_path / "two")
    assert again["reused"] is False and Path(again["zip"]).read_bytes() == data


@pytest.mark.parametrize("planted", ["link", "folder", "short"])
def test_a_reuse_secret_that_is_not_a_private_file_is_never_used(tmp_path: Path, planted: str) -> None:
    from bundler.sources.cache import Cache
    from bundler.writer.reuse import SECRET, STORE, _secret

    path = tmp_path / STORE / SECRET
    path.parent.mkdir()
    decoy = tmp_path / "decoy"
    decoy.write_bytes(b"k" * 32)
    {"link": lambda: path.symlink_to(decoy), "folder": path.mkdir,
     "short": lambda: path.write_bytes(b"k" * 8)}[planted]()
    if planted == "short":
        path.chmod(0o600)  # private, but not a secret this version made
    assert _secret(Cache(tmp_path), create=True) is None
