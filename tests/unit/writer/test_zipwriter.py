"""The reproducible zip writer on its own: validity, method choice, member cache, ZIP64, refusals."""

from __future__ import annotations

import hashlib
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from bundler.errors import BuildError, HashMismatchError
from bundler.writer.members import DEFLATED, STORED, Member, MemberCache
from bundler.writer.zipwriter import write_zip


def file_member(name: str, path: Path) -> Member:
    return Member(name=name, source=path, sha256=hashlib.sha256(path.read_bytes()).hexdigest())


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path / "in"
    folder.mkdir()
    files = {"text.txt": ("line of text\n" * 20000).encode(), "random.bin": os.urandom(400_000),
             "already.whl": b"PK" + os.urandom(5000), "empty.txt": b""}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return {name: folder / name for name in files}


def test_output_is_a_valid_zip_with_fixed_metadata(inputs: dict[str, Path], tmp_path: Path) -> None:
    members = [file_member(f"top/payload/{n}", p) for n, p in inputs.items()]
    members += [Member(name="top/run.sh", data=b"#!/bin/sh\necho hi\n", executable=True),
                Member(name="top/naïve.txt", data=b"utf-8 name")]
    seen: list[int] = []
    dest = tmp_path / "out" / "b.zip"
    write_zip(members, dest, epoch=1767225600, member_cache=MemberCache(tmp_path / "mc"), progress=seen.append)
    assert sum(seen) == sum(m.size for m in members)
    assert subprocess.run(["unzip", "-tq", str(dest)], capture_output=True).returncode == 0
    with zipfile.ZipFile(dest) as archive:
        assert archive.testzip() is None
        infos = {i.filename: i for i in archive.infolist()}
        assert [n for n in archive.namelist()] == sorted(archive.namelist())
        assert "top/" in infos and "top/payload/" in infos
        assert infos["top/payload/text.txt"].compress_type == DEFLATED
        assert infos["top/payload/random.bin"].compress_type == STORED  # the trial saw incompressible data
        assert infos["top/payload/already.whl"].compress_type == STORED  # compressed formats are stored
        assert infos["top/run.sh"].external_attr >> 16 == 0o100755
        assert infos["top/payload/text.txt"].external_attr >> 16 == 0o100644
        assert infos["top/naïve.txt"].flag_bits & 0x800
        assert {i.date_time for i in infos.values()} == {(2026, 1, 1, 0, 0, 0)}
        for name, path in inputs.items():
            assert archive.read(f"top/payload/{name}") == path.read_bytes()
    assert not [p for p in dest.parent.iterdir() if p.name != "b.zip"]


def test_the_digest_taken_while_writing_is_the_zips_as_sha256sum_reads_it(tmp_path: Path) -> None:
    """The sha256 is taken on a thread that reads behind the writer, while stored members get their CRC
    patched into their header after their bytes: `sha256sum -c` on the sidecar proves it saw the final bytes.
    The two large members take long enough to copy that the thread reads while one is being written (a
    buffered reader there kept the header from before its patch, and this test failed 3 times in 3)."""
    folder = tmp_path / "in"
    folder.mkdir()
    members = []
    for index, size in enumerate([0, 1, 8191, 8192, 8193, 65_536, 400_000, (1 << 20) + 7, 24 << 20, 24 << 20]):
        path = folder / f"stored-{index}.bin"
        path.write_bytes(os.urandom(size))  # incompressible: stored, its CRC patched in once it is copied
        members.append(file_member(f"top/{path.name}", path))
        members.append(Member(name=f"top/generated-{index}.txt", data=b"text\n" * (index * 300)))
    dest, sidecar = tmp_path / "out" / "b.zip", tmp_path / "out" / "b.zip.sha256"
    digest = write_zip(members, dest, epoch=1767225600, member_cache=MemberCache(tmp_path / "mc"), sidecar=sidecar)
    assert digest == hashlib.sha256(dest.read_bytes()).hexdigest()
    check = subprocess.run(["sha256sum", "-c", sidecar.name], cwd=dest.parent, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_rebuild_reuses_compressed_members_and_is_identical(inputs: dict[str, Path], tmp_path: Path) -> None:
    members = [file_member(f"top/{n}", p) for n, p in inputs.items()]
    cache = MemberCache(tmp_path / "mc")
    write_zip(members, tmp_path / "a.zip", epoch=0, member_cache=cache)
    cached = {p.name.split(".")[0] for p in (tmp_path / "mc").rglob("*.*.*")}
    digest = {n: hashlib.sha256(p.read_bytes()).hexdigest() for n, p in inputs.items()}
    assert digest["text.txt"] in cached  # deflated members are cached ...
    assert digest["random.bin"] not in cached and digest["already.whl"] not in cached  # ... stored ones are copied
    inputs["text.txt"].write_bytes(b"")  # proof that the rebuild does not read the source again
    write_zip(members, tmp_path / "b.zip", epoch=0, member_cache=cache)
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()


def test_a_source_whose_hash_differs_is_refused_and_nothing_is_written(inputs: dict[str, Path], tmp_path: Path) -> None:
    for name in ("text.txt", "random.bin"):  # the deflating worker and the storing writer both check
        bad = Member(name=f"top/{name}", source=inputs[name], sha256="0" * 64)
        with pytest.raises(HashMismatchError, match=f"{name}: sha256 is [0-9a-f]{{64}}, expected 0{{64}}"):
            write_zip([bad], tmp_path / "out" / "x.zip", epoch=0, member_cache=MemberCache(tmp_path / "mc"))
        assert not list((tmp_path / "out").iterdir())
        assert not list((tmp_path / "mc").rglob("*.*.*"))


def test_zip64_end_records_when_there_are_more_than_65535_entries(tmp_path: Path) -> None:
    members = [Member(name=f"top/{i:05d}.txt", data=b"x") for i in range(66000)]
    dest = tmp_path / "many.zip"
    write_zip(members, dest, epoch=0, member_cache=MemberCache(tmp_path / "mc"))
    with zipfile.ZipFile(dest) as archive:
        assert len(archive.infolist()) == 66001  # plus the top folder
        assert archive.read("top/65999.txt") == b"x"
    assert b"PK\x06\x06" in dest.read_bytes()[-200:]  # the ZIP64 end of central directory record


@pytest.mark.parametrize("name", ["/abs.txt", "top\\win.txt"])
def test_names_must_be_relative_posix_paths(name: str, tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="not a relative POSIX path"):
        write_zip([Member(name=name, data=b"")], tmp_path / "x.zip", epoch=0, member_cache=MemberCache(tmp_path))


def test_a_damaged_member_cache_entry_is_refused_removed_and_rebuilt(inputs: dict[str, Path], tmp_path: Path) -> None:
    members = [file_member("top/text.txt", inputs["text.txt"])]
    cache = MemberCache(tmp_path / "mc")
    write_zip(members, tmp_path / "a.zip", epoch=0, member_cache=cache)
    (entry,) = (tmp_path / "mc").rglob("*.*.*.*")
    entry.write_bytes(entry.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(HashMismatchError, match="compressed member in the cache is damaged; it has been removed"):
        write_zip(members, tmp_path / "b.zip", epoch=0, member_cache=cache)
    assert not entry.exists() and not (tmp_path / "b.zip").exists()
    write_zip(members, tmp_path / "b.zip", epoch=0, member_cache=cache)
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()
