"""The reproducible zip writer on its own: validity, method choice, member cache, ZIP64, refusals."""

from __future__ import annotations

import hashlib
import os
import subprocess
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO, cast

import pytest

from bundler.errors import BuildError, HashMismatchError
from bundler.writer.members import DEFLATED, STORED, Member, MemberCache, file_method
from bundler.writer.zipwriter import Produced, stream_zip, write_zip


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


class _Sink:
    """A stream that can only be written to and asked its position, like the `.intunewin` encryptor."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def tell(self) -> int:
        return len(self.data)


def crc_member(name: str, path: Path) -> Member:
    return Member(name=name, source=path, crc=zlib.crc32(path.read_bytes()))


def test_a_zip_laid_into_a_stream_is_the_zip_written_to_a_file(inputs: dict[str, Path], tmp_path: Path) -> None:
    """Stored files carry their CRC-32 (no header is gone back to in a stream), deflated ones their sha256."""
    as_file = [file_member(f"top/{n}", p) for n, p in inputs.items()]
    streamed = [crc_member(f"top/{n}", p) if file_method(n, p) == STORED else file_member(f"top/{n}", p)
                for n, p in inputs.items()]
    assert {m.name for m in streamed if m.crc is not None} == {"top/random.bin", "top/already.whl"}
    cache = MemberCache(tmp_path / "mc")
    write_zip(as_file, tmp_path / "a.zip", epoch=0, member_cache=cache)
    sink = _Sink()
    stream_zip(streamed, cast(BinaryIO, sink), epoch=0, member_cache=cache)
    assert bytes(sink.data) == (tmp_path / "a.zip").read_bytes()


def test_a_stream_refuses_a_stored_file_without_its_crc(inputs: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="top/random.bin: a stored file needs its CRC-32 beforehand"):
        stream_zip([file_member("top/random.bin", inputs["random.bin"])], cast(BinaryIO, _Sink()), epoch=0,
                   member_cache=MemberCache(tmp_path / "mc"))


def test_a_file_that_changed_since_its_crc_was_taken_is_refused_and_nothing_is_written(inputs: dict[str, Path],
                                                                                       tmp_path: Path) -> None:
    member = crc_member("top/random.bin", inputs["random.bin"])
    inputs["random.bin"].write_bytes(os.urandom(400_000))
    with pytest.raises(HashMismatchError, match=r"random.bin: changed while it was written into the zip \(CRC-32"):
        write_zip([member], tmp_path / "out" / "x.zip", epoch=0, member_cache=MemberCache(tmp_path / "mc"))
    assert not list((tmp_path / "out").iterdir())


@pytest.mark.parametrize("bound", [1 << 20, 1 << 33])  # a ZIP64 header from the start when the bound is past 4 GiB
def test_produced_members_get_their_crc_and_sizes_after_their_bytes(bound: int, tmp_path: Path) -> None:
    """A producer may go back over its own first bytes; a later one may use what an earlier one made. `unzip -t`
    (Info-ZIP, not ours) checks every CRC and the local headers against the central directory."""
    made: list[bytes] = []

    def first(out: BinaryIO) -> int:
        start = out.tell()
        body = os.urandom(300_000)
        out.write(bytes(8) + body)
        out.seek(start)
        out.write(b"MAC-LATE")  # known only at the end, like the .intunewin's MAC
        out.seek(start + 8 + len(body))
        made.append(b"MAC-LATE" + body)
        return zlib.crc32(made[0])

    def second(out: BinaryIO) -> int:
        text = hashlib.sha256(made[0]).hexdigest().encode()
        out.write(text)
        return zlib.crc32(text)

    dest, sidecar = tmp_path / "out" / "p.zip", tmp_path / "out" / "p.zip.sha256"
    write_zip([Member(name="a/readme.txt", data=b"hello")], dest, epoch=0, member_cache=MemberCache(tmp_path / "mc"),
              sidecar=sidecar, produced=[Produced(name="b/first.bin", produce=first, bound=bound),
                                         Produced(name="c/second.txt", produce=second, bound=1 << 10)])
    test = subprocess.run(["unzip", "-t", str(dest)], capture_output=True, text=True)
    assert test.returncode == 0 and "No errors detected" in test.stdout, test.stdout + test.stderr
    with zipfile.ZipFile(dest) as archive:
        assert archive.read("b/first.bin") == made[0]
        assert archive.read("c/second.txt") == hashlib.sha256(made[0]).hexdigest().encode()
        assert archive.namelist() == ["a/", "a/readme.txt", "b/", "b/first.bin", "c/", "c/second.txt"]
    assert subprocess.run(["sha256sum", "-c", sidecar.name], cwd=dest.parent, capture_output=True).returncode == 0


def test_a_producer_that_writes_past_its_bound_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    def greedy(out: BinaryIO) -> int:
        out.write(bytes(2048))
        return 0

    with pytest.raises(BuildError, match="its producer wrote 2048 bytes, more than the 1024 it promised"):
        write_zip([], tmp_path / "out" / "x.zip", epoch=0, member_cache=MemberCache(tmp_path / "mc"),
                  produced=[Produced(name="x.bin", produce=greedy, bound=1024)])
    assert not list((tmp_path / "out").iterdir())


def packed_member(name: str, wheel: Path, member: str) -> Member:
    """A wheel's member as the Linux GPU part adds it: read where it lies, its compressed bytes copied as they are."""
    from bundler.assembly.assembly import Assembly
    from bundler.readers.archives import SafeArchive
    from bundler.readers.member_scan import read_files

    with SafeArchive.open(wheel, label=wheel.name) as archive:
        [file] = read_files(archive, wheel, [member], label=wheel.name, work=wheel.parent / "work")
    assembly = Assembly()
    assembly.add_archive_file(name, file)
    return assembly.members[name]


def test_a_wheel_s_member_is_copied_as_it_is_compressed_there(inputs: dict[str, Path], tmp_path: Path) -> None:
    """The bytes unzip inflates are the file's, the compressed bytes are the wheel's own (no deflating again), and
    nothing was extracted or put in the member cache on the way."""
    wheel = tmp_path / "nvidia_x-1-py3-none-manylinux_2_27_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.write(inputs["text.txt"], "nvidia/x/lib/libtext.so.1")
        archive.write(inputs["random.bin"], "nvidia/x/lib/librandom.so.1", compress_type=zipfile.ZIP_STORED)
    members = [packed_member(f"top/gpu/{n}", wheel, f"nvidia/x/lib/{n}") for n in ("libtext.so.1", "librandom.so.1")]
    dest = tmp_path / "b.zip"
    write_zip(members, dest, epoch=0, member_cache=MemberCache(tmp_path / "mc"))
    assert subprocess.run(["unzip", "-tq", str(dest)], capture_output=True).returncode == 0
    with zipfile.ZipFile(dest) as out, zipfile.ZipFile(wheel) as source:
        for name, original in (("libtext.so.1", "text.txt"), ("librandom.so.1", "random.bin")):
            assert out.read(f"top/gpu/{name}") == inputs[original].read_bytes()
            made, given = out.getinfo(f"top/gpu/{name}"), source.getinfo(f"nvidia/x/lib/{name}")
            assert (made.compress_type, made.compress_size, made.CRC) == (given.compress_type, given.compress_size,
                                                                         given.CRC)
    assert not (tmp_path / "mc").exists() and not (tmp_path / "work").exists()


def test_a_wheel_changed_after_it_was_read_is_refused_kept_and_nothing_is_written(inputs: dict[str, Path],
                                                                               tmp_path: Path) -> None:
    wheel = tmp_path / "x.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(inputs["text.txt"], "lib/libtext.so.1")
    member = packed_member("top/libtext.so.1", wheel, "lib/libtext.so.1")
    data = bytearray(wheel.read_bytes())
    data[100] ^= 0xFF  # inside the member's compressed bytes
    wheel.write_bytes(bytes(data))
    with pytest.raises(HashMismatchError) as caught:
        write_zip([member], tmp_path / "b.zip", epoch=0, member_cache=MemberCache(tmp_path / "mc"))
    assert str(caught.value) == (f"{wheel}: the compressed bytes of lib/libtext.so.1 changed after the build read "
                                 "them; the input cache was changed while the build ran: run `ort-bundler fetch` and "
                                 "the build again")
    assert wheel.exists() and not (tmp_path / "b.zip").exists()
