"""What a SIGKILLed run leaves is cleaned by the next one, and what a live run holds is not (issue 18, item 6).

The owners here are real child processes that take a scratch folder or a locked temporary file and then
wait; the test kills them with SIGKILL (so no `finally` runs) and checks that cleaning removes exactly
what the dead one left, while the same cleaning beside a live owner removes nothing.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bundler.sources.cache import Cache
from bundler.writer.members import Member, MemberCache
from bundler.writer.temps import remove_dead_temps
from bundler.writer.zipwriter import prepare_destination, write_zip

OWNER = """
import sys, time
from pathlib import Path
from bundler.sources.cache import Cache
from bundler.writer.temps import locked_temp
kind, where = sys.argv[1], Path(sys.argv[2])
if kind == "scratch":
    with Cache(where).scratch(prefix="build-") as folder:
        (folder / "big.bin").write_bytes(b"x" * 100000)
        print(folder, flush=True)
        time.sleep(120)
else:
    fd, name = locked_temp(where, prefix=".app-1.0.0-linux_x86_64.zip.")
    import os
    os.write(fd, b"PK partial zip")
    print(name, flush=True)
    time.sleep(120)
"""


def start_owner(kind: str, where: Path) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen([sys.executable, "-c", OWNER, kind, str(where)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line, "the owner process did not start"
    return proc, Path(line)


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def test_a_live_scratch_folder_survives_cleaning_and_a_dead_one_goes(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    live, live_folder = start_owner("scratch", cache.root)
    dead, dead_folder = start_owner("scratch", cache.root)
    try:
        kill(dead)
        assert dead_folder.is_dir() and (cache.root / "tmp" / f"{dead_folder.name}.lock").exists()
        removed = cache.remove_dead_scratch()
        assert removed == [dead_folder]
        assert sorted(p.name for p in (cache.root / "tmp").iterdir()) == [live_folder.name, f"{live_folder.name}.lock"]
        assert (live_folder / "big.bin").stat().st_size == 100000
        with cache.scratch(prefix="build-") as mine:  # taking scratch space cleans too, and spares the live one
            assert mine.is_dir() and live_folder.is_dir()
    finally:
        kill(live)
    assert cache.remove_dead_scratch() == [live_folder]
    assert list((cache.root / "tmp").iterdir()) == []


def test_old_build_folders_without_a_lock_and_orphan_locks_are_removed(tmp_path: Path) -> None:
    """Versions before the lock left `tmp/build-XXXXXXXX` (mkdtemp); another command's folder stays."""
    tmp = tmp_path / "cache" / "tmp"
    (tmp / "build-k3j_2a8x" / "wheel").mkdir(parents=True)
    (tmp / "build-k3j_2a8x" / "wheel" / "x.whl").write_bytes(b"65 MB in real life")
    (tmp / "build-0123456789abcdef.lock").write_bytes(b"")  # a dead run killed after its folder went
    (tmp / "lock-zz9_qq1p").mkdir()  # `ort-bundler lock`'s own temporary folder: not ours to judge
    Cache(tmp_path / "cache").remove_dead_scratch()
    assert sorted(p.name for p in tmp.iterdir()) == ["lock-zz9_qq1p"]


def test_a_live_zip_temp_survives_cleaning_and_a_dead_one_goes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    live, live_temp = start_owner("temp", out)
    dead, dead_temp = start_owner("temp", out)
    try:
        kill(dead)
        removed = remove_dead_temps(out, ".app-1.0.0-linux_x86_64.zip.*.tmp")
        assert removed == [dead_temp]
        assert live_temp.read_bytes() == b"PK partial zip"
    finally:
        kill(live)
    prepare_destination(out / "app-1.0.0-linux_x86_64.zip")
    assert list(out.iterdir()) == []


def test_a_newborn_empty_temp_is_left_for_later(tmp_path: Path) -> None:
    """An empty temp file a moment old may be a live writer's before it took its lock: not removed yet."""
    young = tmp_path / ".a.zip.x1.tmp"
    young.write_bytes(b"")
    old = tmp_path / ".a.zip.x2.tmp"
    old.write_bytes(b"")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    assert remove_dead_temps(tmp_path, ".a.zip.*.tmp") == [old]
    assert young.exists()


def test_dead_member_temps_are_cleaned_by_the_next_zip(tmp_path: Path) -> None:
    members = MemberCache(tmp_path / "mc")
    folder = tmp_path / "mc" / "deflate-6"
    folder.mkdir(parents=True)
    dead = folder / ".tmp-abc123"
    dead.write_bytes(b"half a member")
    os.utime(dead, (time.time() - 3600, time.time() - 3600))
    write_zip([Member(name="a/x.txt", data=b"hello " * 100)], tmp_path / "a.zip", epoch=0, member_cache=members)
    assert not dead.exists()


def test_a_stray_file_in_the_member_cache_is_ignored(tmp_path: Path) -> None:
    """Names the member cache never writes (extra dots, non-hex fields, a folder) neither crash nor get used."""
    source = tmp_path / "payload.bin"
    source.write_bytes(b"payload " * 10000)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    folder = tmp_path / "mc" / "deflate-6"
    folder.mkdir(parents=True)
    (folder / f"{digest}.zz.10.{'0' * 64}").write_bytes(b"junk")
    (folder / f"{digest}.00000000.80000.{'0' * 64}.bak").write_bytes(b"junk")
    (folder / f"{digest}.00000000.1.{'1' * 64}").mkdir()
    member = Member(name="top/payload.bin", source=source, sha256=digest)
    write_zip([member], tmp_path / "a.zip", epoch=0, member_cache=MemberCache(tmp_path / "mc"))
    write_zip([member], tmp_path / "b.zip", epoch=0, member_cache=MemberCache(tmp_path / "fresh"))
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()


def test_the_sidecar_is_replaced_after_the_zip_and_kept_when_writing_fails(tmp_path: Path) -> None:
    dest, sidecar = tmp_path / "out" / "a.zip", tmp_path / "out" / "a.zip.sha256"
    digest = write_zip([Member(name="a/x", data=b"one")], dest, epoch=0, member_cache=MemberCache(tmp_path / "mc"),
                       sidecar=sidecar)
    assert sidecar.read_text() == f"{digest}  a.zip\n"
    proc = subprocess.run(["sha256sum", "-c", sidecar.name], cwd=dest.parent, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    old = (dest.read_bytes(), sidecar.read_bytes())
    bad = Member(name="a/y", source=tmp_path / "gone.bin", sha256="0" * 64)
    with pytest.raises(FileNotFoundError):
        write_zip([bad], dest, epoch=0, member_cache=MemberCache(tmp_path / "mc"), sidecar=sidecar)
    assert (dest.read_bytes(), sidecar.read_bytes()) == old
    assert sorted(p.name for p in dest.parent.iterdir()) == ["a.zip", "a.zip.sha256"]
