"""`build` against hostile inputs, bad output paths, full and read-only disks, and SIGKILL (issue 18).

Real builds of the quickstart-linux manifest from a private cache (hard links to the session's fetched
inputs, so nothing here can change the shared one). Disks are real: tmpfs mounts, full or read-only.
The SIGKILL loop kills `build` at 20 random moments and checks, after each kill, that the previous zip
and its `.sha256` still agree and, after each following complete build, that nothing is left over: no
scratch folder in the cache's tmp/, no hidden `.zip.*.tmp` beside the zip, no half-written member.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli
from fixtures.hostile import Tmpfs, needs_mount, snapshot
from fixtures.wheels import cache_root

from bundler.assembly.modelgate import GATE_PREFIX

pytestmark = pytest.mark.integration

STEM = "quickstart-linux-1.0.0-linux_x86_64"


@pytest.fixture(scope="module")
def private_cache(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache of hard links to the fetched inputs, its isolated ORT environment and gate results; warmed once."""
    cache = tmp_path_factory.mktemp("hardening") / "cache"
    cache.mkdir()
    for name in ("sha256", "gate-results"):
        if (bundler_cache / name).is_dir():
            subprocess.run(["cp", "-al", str(bundler_cache / name), str(cache / name)], check=True)
    # Not the `gate-*` folders and locks: another worker's model gate makes and removes them in the shared ort-envs
    # meanwhile (`cp -al` failed on one that vanished mid-copy), and this cache's builds make their own.
    if (bundler_cache / "ort-envs").is_dir():
        shutil.copytree(bundler_cache / "ort-envs", cache / "ort-envs", symlinks=True, copy_function=os.link,
                        ignore=shutil.ignore_patterns(f"{GATE_PREFIX}*"))
    build(cache, cache.parent / "warm")
    return cache


def build_cmd(cache: Path, out: Path, manifest: Path = MANIFESTS / "quickstart-linux.toml", *,
              reuse: bool = False) -> list[str]:
    """The build, assembled every time unless `reuse`: what these tests attack is the assembly."""
    return [sys.executable, "-m", "bundler", "build", "-q", "--cache", str(cache), "-o", str(out),
            *([] if reuse else ["--no-reuse"]), str(manifest)]


def build(cache: Path, out: Path, manifest: Path = MANIFESTS / "quickstart-linux.toml",
          ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(build_cmd(cache, out, manifest), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc


def failed_build(cache: Path, out: Path, manifest: Path = MANIFESTS / "quickstart-linux.toml") -> tuple[int, str]:
    proc = subprocess.run(build_cmd(cache, out, manifest), capture_output=True, text=True)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ort-bundler build: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.returncode, lines[0]


#: What a complete build leaves in its output folder: the zip, its sidecar and the builder's provenance statement.
COMPLETE = (f"{STEM}.zip", f"{STEM}.zip.intoto.jsonl", f"{STEM}.zip.sha256")


def leftovers(cache: Path, out: Path) -> list[str]:
    """Everything a dead build could leave that a complete one must not."""
    found = [f"tmp/{p.name}" for p in (cache / "tmp").iterdir()] if (cache / "tmp").is_dir() else []
    found += [f"members/{p.parent.name}/{p.name}" for p in (cache / "members").glob("deflate-*/.tmp-*")]
    found += [f"out/{p.name}" for p in out.iterdir() if p.name not in COMPLETE]
    return found


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- item 6: SIGKILL at random moments ---------------------------------------------------------------

def test_sigkill_at_20_random_moments_leaves_nothing_after_the_next_build(private_cache: Path,
                                                                         tmp_path: Path) -> None:
    out = tmp_path / "out"
    started = time.monotonic()
    build(private_cache, out)
    duration = time.monotonic() - started
    reference = sha256_of(out / f"{STEM}.zip")
    legacy = private_cache / "tmp" / "build-k3j_2a8x"  # what versions before the lock left, 65 MB each
    legacy.mkdir(parents=True)
    (legacy / "ort.whl").write_bytes(b"\0" * 1024)
    moments = [random.Random(18).uniform(0.0, duration) for _ in range(20)]
    killed = 0
    for index, moment in enumerate(moments):
        proc = subprocess.Popen(build_cmd(private_cache, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(moment)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        proc.wait()
        # The zip under its final name is always whole, and its sidecar was never removed first.
        assert sha256_of(out / f"{STEM}.zip") == reference, f"kill {index} at {moment:.2f} s"
        assert (out / f"{STEM}.zip.sha256").read_text() == f"{reference}  {STEM}.zip\n", f"kill {index}"
        if index % 4 == 3:
            build(private_cache, out)
            assert leftovers(private_cache, out) == [], f"after the build following kill {index} at {moment:.2f} s"
            assert sha256_of(out / f"{STEM}.zip") == reference
    assert killed >= 15, f"only {killed} of 20 builds were still running when killed (build takes {duration:.1f} s)"
    check = subprocess.run(["sha256sum", "-c", f"{STEM}.zip.sha256"], cwd=out, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_two_builds_at_once_leave_each_other_alone(private_cache: Path, tmp_path: Path) -> None:
    """Each build cleans what dead builds left when it starts; a live one's folders are not dead."""
    out = tmp_path / "out"
    first = subprocess.Popen(build_cmd(private_cache, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    second = subprocess.run(build_cmd(private_cache, out), capture_output=True, text=True)
    stdout, stderr = first.communicate()
    assert first.returncode == 0, stderr
    assert second.returncode == 0, second.stderr
    assert leftovers(private_cache, out) == []
    assert run_cli("verify", str(out / f"{STEM}.zip")).returncode == 0


# -- item 11: the output path ------------------------------------------------------------------------

def test_o_naming_an_existing_file_is_refused_with_exit_7(private_cache: Path, tmp_path: Path) -> None:
    target = tmp_path / "dist"
    target.write_bytes(b"the user's file")
    code, line = failed_build(private_cache, target)
    assert code == 7
    assert f"{target}: the output folder is a file; expected a folder" in line
    assert target.read_bytes() == b"the user's file"
    assert list((private_cache / "tmp").iterdir()) == []  # refused before any scratch space was taken


def test_a_folder_where_the_zip_goes_is_refused_with_exit_7(private_cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / f"{STEM}.zip" / "inside").mkdir(parents=True)
    (out / f"{STEM}.zip" / "inside" / "keep.txt").write_text("mine", encoding="utf-8")
    before = snapshot(tmp_path)
    code, line = failed_build(private_cache, out)
    assert code == 7
    assert f"{out / (STEM + '.zip')}: a folder stands where the bundle zip goes" in line
    assert snapshot(tmp_path) == before


# -- item 11: full and read-only disks ----------------------------------------------------------------

@needs_mount
@pytest.mark.parametrize("reuse", [False, True])
def test_a_disk_that_fills_during_the_zip_write_keeps_the_old_zip(private_cache: Path, tmp_path: Path,
                                                                  reuse: bool) -> None:
    """Also when the zip is a kept one, copied to another file system (the tmpfs) as it is published."""
    disk = Tmpfs(tmp_path / "out", "60m")
    try:
        build(private_cache, disk.path)
        old = snapshot(disk.path)
        assert (disk.path / f"{STEM}.zip").stat().st_size > 30 * 1024**2  # a second copy cannot fit beside it
        proc = subprocess.run(build_cmd(private_cache, disk.path, reuse=reuse), capture_output=True, text=True)
        lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("licences: ")]
        assert proc.returncode == 7 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert f"{disk.path / (STEM + '.zip')}: the bundle cannot be written: No space left on device" in lines[0]
        assert snapshot(disk.path) == old  # the old zip and its sidecar as they were, no temporary file
    finally:
        disk.close()


def capi_unpacked_size(wheel: Path) -> int:
    """What the build writes of the capi wheel before it builds the wheel: only the files it reads (`ON_DISK`)."""
    from bundler.readers.capi import ON_DISK

    with zipfile.ZipFile(wheel) as archive:
        return sum(info.file_size for info in archive.infolist() if ON_DISK.search(info.filename))


@needs_mount
@pytest.mark.parametrize("room", ["extract", "wheel"])
def test_a_disk_that_fills_during_the_wheel_build_is_named(private_cache: Path, tmp_path: Path,
                                                           ort_linux_wheel: Path, room: str) -> None:
    """The cache's tmp/ (where the build unpacks the capi source and builds the wheel) on a small disk."""
    size = 4 if room == "extract" else capi_unpacked_size(ort_linux_wheel) // 1024**2 + 6
    shutil.rmtree(private_cache / "tmp", ignore_errors=True)
    shutil.rmtree(private_cache / "derived", ignore_errors=True)  # the warm-up stored the built wheel: build it again
    disk = Tmpfs(private_cache / "tmp", f"{size}m")
    try:
        code, line = failed_build(private_cache, tmp_path / "out")
        assert code == 7
        if room == "extract":  # unpacking the capi source
            assert "ort.capi: entry 'onnxruntime/" in line and ": No space left on device" in line
        else:  # writing the rebuilt wheel
            assert line.endswith("build: a write failed (No space left on device); free space on the disk of the "
                                 "cache (--cache) or of the output folder (-o), or choose others")
        assert list(disk.path.iterdir()) == []  # the build's scratch folder went with the failure
        assert list((tmp_path / "out").iterdir()) == []
    finally:
        disk.close()


@needs_mount
def test_a_read_only_cache_is_named_by_build(private_cache: Path, tmp_path: Path) -> None:
    view = tmp_path / "ro-cache"
    view.mkdir()
    subprocess.run(["mount", "--bind", str(private_cache), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        before = snapshot(private_cache / "tmp")
        code, line = failed_build(view, tmp_path / "out")
        assert code == 4
        assert f"the cache folder {view}" in line and "cannot be written (Read-only file system)" in line
        assert snapshot(private_cache / "tmp") == before
        assert list((tmp_path / "out").iterdir()) == []
    finally:
        subprocess.run(["umount", str(view)], check=True)


@needs_mount
def test_a_read_only_cache_holding_the_kept_bundle_still_serves_a_rebuild(private_cache: Path,
                                                                           tmp_path: Path) -> None:
    """Reusing writes nothing to the cache: a shared, read-only cache that kept the bundle publishes it."""
    expected = sha256_of(private_cache.parent / "warm" / f"{STEM}.zip")
    view = tmp_path / "ro-cache"
    view.mkdir()
    subprocess.run(["mount", "--bind", str(private_cache), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        proc = subprocess.run(build_cmd(view, tmp_path / "out", reuse=True), capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    finally:
        subprocess.run(["umount", str(view)], check=True)
    assert sha256_of(tmp_path / "out" / f"{STEM}.zip") == expected
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(COMPLETE)


def test_sigkill_while_a_kept_bundle_is_published_leaves_nothing_after_the_next_build(private_cache: Path,
                                                                                     tmp_path: Path) -> None:
    out = tmp_path / "out"
    subprocess.run(build_cmd(private_cache, out, reuse=True), check=True, capture_output=True)
    reference = sha256_of(out / f"{STEM}.zip")
    for moment in [random.Random(6).uniform(0.1, 0.6) for _ in range(6)]:
        proc = subprocess.Popen(build_cmd(private_cache, out, reuse=True), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(moment)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert sha256_of(out / f"{STEM}.zip") == reference, f"kill at {moment:.2f} s"
    subprocess.run(build_cmd(private_cache, out, reuse=True), check=True, capture_output=True)
    assert leftovers(private_cache, out) == [] and sha256_of(out / f"{STEM}.zip") == reference


# -- item 3: a capi source whose METADATA names a path ------------------------------------------------

def evil_capi(wheel: Path, dest: Path, name: str) -> Path:
    """The real ORT wheel as a capi zip whose dist-info METADATA says `Name: <name>`."""
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith(".dist-info/METADATA"):
                data = data.replace(b"\nName: onnxruntime\n", f"\nName: {name}\n".encode(), 1)
                assert f"Name: {name}".encode() in data
            out.writestr(info, data)
    return dest


@pytest.mark.parametrize("kind", ["absolute", "traversal"])
def test_a_capi_name_that_is_a_path_stops_the_build_before_it_writes(private_cache: Path, tmp_path: Path,
                                                                      ort_linux_wheel: Path, kind: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    project = tmp_path / "project"
    shutil.copytree(MANIFESTS, project, ignore=shutil.ignore_patterns("__pycache__"))
    name = str(outside / "pwned") if kind == "absolute" else "../../../../../../../.." + str(outside / "pwned")
    source = evil_capi(ort_linux_wheel, project / "evil.zip", name)
    manifest = project / "quickstart-linux.toml"
    text = manifest.read_text(encoding="utf-8")
    start = text.index("capi = {")
    end = text.index("}", start) + 1
    manifest.write_text(text[:start] + f'capi = {{ path = "evil.zip", sha256 = "{sha256_of(source)}" }}'
                        + text[end:], encoding="utf-8")
    run_cli("fetch", "-q", "--cache", str(private_cache), str(manifest))
    code, line = failed_build(private_cache, tmp_path / "out", manifest)
    assert code == 7
    assert "the distribution name: found the distribution name '" in line and "expected letters and digits" in line
    assert list(outside.iterdir()) == []
    assert list((tmp_path / "out").iterdir()) == []
    assert leftovers(private_cache, tmp_path / "out") == []


def test_the_shared_test_cache_is_not_the_private_one(private_cache: Path) -> None:
    """The tests above mount over and fill their cache: it must be the private copy, never the session's."""
    assert not private_cache.is_relative_to(cache_root())
