"""SafeArchive against one crafted archive per rule, real happy paths, and the real ORT wheel."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import random
import stat
import tarfile
import time
import zipfile
import zlib
from pathlib import Path

import pytest
from fixtures.crafted_archives import (
    chop,
    deflated,
    raw_deflate,
    stored,
    tar_member,
    write_raw_zip,
    write_tar,
    zipcrypto_encrypt,
)
from fixtures.wheels import pip_download

from bundler.errors import InputUnavailableError, UnsafeArchiveError, UnsupportedError
from bundler.readers.archives import (
    Entry,
    Limits,
    SafeArchive,
    _checked_name,
    _clean_name,
    _CountedStream,
    is_archive,
)

LABEL = "[ort] archive crafted"


def rejection(path: Path, *, limits: Limits = Limits(), error: type[Exception] = UnsafeArchiveError) -> str:
    with pytest.raises(error) as caught:
        SafeArchive.open(path, label=LABEL, limits=limits)
    message = str(caught.value)
    assert message.startswith(LABEL), message
    assert "\n" not in message
    return message


def make_zip(path: Path, files: dict[str, bytes], *, modes: dict[str, int] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (modes or {}).get(name, 0o100644) << 16
            archive.writestr(info, content)
    return path


def noise(size: int, *, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


# --- names -------------------------------------------------------------------------------------------------

BAD_NAMES = [
    ("../evil.txt", "path traversal"),
    ("lib/../../evil.txt", "path traversal"),
    ("..\\evil.txt", "path traversal"),  # a backslash separates, as it does on Windows
    ("lib\\..\\..\\evil.txt", "path traversal"),
    ("/etc/cron.d/evil", "absolute path"),
    ("\\Windows\\evil.dll", "absolute path"),
    ("\\\\server\\share\\evil.dll", "UNC path"),
    ("//server/share/evil.dll", "UNC path"),
    ("C:/Windows/System32/evil.dll", "drive letter"),
    ("c:evil.dll", "drive letter"),
    ("lib/CON", "reserved device name"),
    ("aux.txt", "reserved device name"),
    ("Com1.dll", "reserved device name"),
    ("lib/lpt9.h", "reserved device name"),
    ("nul.tar.gz", "reserved device name"),
    ("COM0", "reserved device name"),
    ("CONOUT$", "reserved device name"),
    ("prn .txt", "reserved device name"),
    ("com\u00b9.txt", "reserved device name"),
    ("lib./a.dll", "ending in a dot or space"),
    ("lib/a.dll ", "ending in a dot or space"),
    ("lib/a<b", "Windows forbids"),
    ("lib/a>b", "Windows forbids"),
    ('lib/a"b', "Windows forbids"),
    ("lib/a|b", "Windows forbids"),
    ("lib/a?b", "Windows forbids"),
    ("lib/a*b", "Windows forbids"),
    ("lib/a:stream", "Windows forbids"),
    ("lib/a\x01b", "control character U+0001"),
    ("lib/a\x1fb", "control character U+001F"),
    ("lib/" + "x" * 197, "201 characters"),
]


@pytest.mark.parametrize(("name", "phrase"), BAD_NAMES)
@pytest.mark.parametrize("container", ["zip", "tgz"])
def test_unsafe_names_are_rejected_naming_label_entry_and_rule(tmp_path, container, name, phrase):
    if container == "zip":
        path = make_zip(tmp_path / "a.zip", {"ok.txt": b"fine", name: b"payload"})
    else:
        path = write_tar(tmp_path / "a.tgz", [tar_member("ok.txt", b"fine"), tar_member(name, b"payload")])
    message = rejection(path)
    assert repr(name) in message
    assert phrase in message


# Names the one-expression fast path of `_clean_name` must hand to the full rules, though some pass them.
NEAR_MISSES = ["CONSOLE.txt", "COM10.dll", "com.txt", "lpt", "a..b/c", ".hidden", "-/+", "a/./b", "./a", "a//b",
               "dir/", "d\\e", "ünïcode.txt", "a b.txt", "x" * 199, "x" * 200, "a.", "a/..b", "nul_.txt", "prn-1"]


@pytest.mark.parametrize("name", [*(name for name, _ in BAD_NAMES), *NEAR_MISSES])
def test_the_fast_path_for_plain_names_decides_as_the_full_rules_do(name):
    """A name the fast path accepts gets the same answer, to the character, as from every rule in turn."""
    limits = Limits(max_path_length=199)
    try:
        full = _checked_name(name, label=LABEL, limits=limits)
    except UnsafeArchiveError as exc:
        full = str(exc)
    try:
        fast = _clean_name(name, label=LABEL, limits=limits)
    except UnsafeArchiveError as exc:
        fast = str(exc)
    assert fast == full


def test_every_name_in_real_wheels_gets_the_same_answer_from_the_fast_path():
    names = [info.filename for requirement in ("sympy==1.14.0", "numpy==2.4.6")
             for info in zipfile.ZipFile(pip_download(requirement, "win_amd64")).infolist()]
    limits = Limits()
    assert len(names) > 2000
    assert [_clean_name(n, label=LABEL, limits=limits) for n in names] == [
        _checked_name(n, label=LABEL, limits=limits) for n in names]


def test_deflated_members_inflated_with_isal_are_byte_for_byte_what_zipfile_reads():
    """Deflated members are inflated with ISA-L, not zlib: every member of real wheels must come out as zipfile
    (zlib) reads it, the numpy wheel's 20 MB OpenBLAS DLL included."""
    for requirement in ("numpy==2.4.6", "protobuf==7.36.2"):
        wheel = pip_download(requirement, "win_amd64")
        with zipfile.ZipFile(wheel) as plain, SafeArchive.open(wheel, label=LABEL) as archive:
            deflated = [info for info in plain.infolist() if info.compress_type == zipfile.ZIP_DEFLATED]
            assert len(deflated) > 10
            for info in deflated:
                with archive.open_member(info.filename) as stream:
                    assert stream.read() == plain.read(info), info.filename


def test_a_path_of_exactly_the_limit_is_accepted(tmp_path):
    name = "lib/" + "x" * 196
    path = make_zip(tmp_path / "a.zip", {name: b"x"})
    with SafeArchive.open(path, label=LABEL) as archive:
        assert archive.names() == [name]
    assert "has a path of 200 characters, above the limit of 199" in rejection(path, limits=Limits(max_path_length=199))


def test_tar_name_that_is_not_utf8_is_rejected(tmp_path):
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT, encoding="latin-1") as tar:
        info = tarfile.TarInfo("caf\u00e9.txt")
        tar.addfile(info, io.BytesIO(b""))
    assert "not valid UTF-8" in rejection(path)


# --- entry types -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("kind", "phrase"), [
    (tarfile.SYMTYPE, "symbolic link"),
    (tarfile.LNKTYPE, "hard link"),
    (tarfile.CHRTYPE, "device, fifo or socket"),
    (tarfile.BLKTYPE, "device, fifo or socket"),
    (tarfile.FIFOTYPE, "device, fifo or socket"),
])
def test_tar_links_and_devices_are_rejected(tmp_path, kind, phrase):
    path = write_tar(tmp_path / "a.tgz", [tar_member("lib/a.dll", b"MZ"),
                                          tar_member("lib/b.dll", kind=kind, linkname="/etc/passwd")])
    message = rejection(path)
    assert "'lib/b.dll'" in message and phrase in message


@pytest.mark.parametrize(("mode", "phrase"), [
    (stat.S_IFLNK | 0o777, "symbolic link"),
    (stat.S_IFIFO | 0o644, "device, fifo or socket"),
    (stat.S_IFCHR | 0o644, "device, fifo or socket"),
])
def test_zip_entries_whose_unix_mode_is_not_a_regular_file_are_rejected(tmp_path, mode, phrase):
    path = make_zip(tmp_path / "a.zip", {"lib/a.dll": b"MZ", "lib/link": b"/etc/passwd"},
                    modes={"lib/link": mode})
    message = rejection(path)
    assert "'lib/link'" in message and phrase in message


# --- collisions --------------------------------------------------------------------------------------------

def test_duplicate_zip_names_are_rejected(tmp_path):
    path = write_raw_zip(tmp_path / "a.zip", [stored("lib/a.dll", b"one"), stored("lib/a.dll", b"two")])
    assert "entry 'lib/a.dll' is a duplicate" in rejection(path)


def test_duplicate_tar_names_are_rejected(tmp_path):
    path = write_tar(tmp_path / "a.tgz", [tar_member("a.txt", b"one"), tar_member("a.txt", b"two")])
    assert "entry 'a.txt' is a duplicate" in rejection(path)


def test_names_equal_once_backslashes_are_separators_are_duplicates(tmp_path):
    path = write_raw_zip(tmp_path / "a.zip", [stored("lib/a.dll", b"one"), stored("lib\\a.dll", b"two")])
    message = rejection(path)
    assert repr("lib\\a.dll") in message and "duplicate of the earlier entry 'lib/a.dll'" in message


@pytest.mark.parametrize(("first", "second"), [
    ("lib/README.txt", "lib/readme.TXT"),
    ("caf\u00e9.txt", "cafe\u0301.txt"),  # NFC versus NFD spelling of the same name
    ("LIB/a.dll", "lib/A.DLL"),
])
def test_names_that_collide_on_windows_or_macos_are_rejected(tmp_path, first, second):
    path = make_zip(tmp_path / "a.zip", {first: b"one", second: b"two"})
    message = rejection(path)
    assert repr(second) in message and f"collides with the entry {first!r}" in message


def test_a_file_used_as_a_folder_is_rejected(tmp_path):
    path = make_zip(tmp_path / "a.zip", {"lib": b"file", "lib/a.dll": b"MZ"})
    assert "entry 'lib' is a file, but other entries use the same name as a folder" in rejection(path)


# --- limits and bombs --------------------------------------------------------------------------------------

def test_too_many_members(tmp_path):
    path = make_zip(tmp_path / "a.zip", {f"f{i}.txt": b"x" for i in range(4)})
    message = rejection(path, limits=Limits(max_members=3))
    assert "'f3.txt'" in message and "limit of 3 members" in message
    with SafeArchive.open(path, label=LABEL, limits=Limits(max_members=4)) as archive:
        assert len(archive.entries) == 4


def test_total_size_beyond_limit(tmp_path):
    path = write_tar(tmp_path / "a.tar.gz", [tar_member("a.bin", noise(600)), tar_member("b.bin", noise(600))])
    message = rejection(path, limits=Limits(max_total_size=1000))
    assert "'b.bin'" in message and "1200 bytes" in message and "limit of 1000" in message


def test_member_compression_ratio_beyond_limit_is_a_zip_bomb(tmp_path):
    path = make_zip(tmp_path / "a.zip", {"small.txt": b"ok", "zeros.bin": bytes(4 * 1024 * 1024)})
    message = rejection(path)
    assert "'zeros.bin'" in message and "zip bomb" in message and "limit of 200" in message


def test_overall_ratio_catches_many_small_members(tmp_path):
    path = make_zip(tmp_path / "a.zip", {f"z{i}.bin": bytes(600 * 1024) for i in range(20)})
    message = rejection(path)
    assert "declares 12288000 bytes uncompressed" in message and "zip bomb" in message


def test_small_highly_compressible_members_are_fine(tmp_path):
    path = make_zip(tmp_path / "a.zip", {"pad.bin": bytes(64 * 1024), "a.txt": noise(1024)})
    with SafeArchive.open(path, label=LABEL) as archive:
        assert archive.read("pad.bin") == bytes(64 * 1024)


def test_overlapping_entries_are_rejected(tmp_path):
    second = stored("b.bin", noise(100, seed=2))
    overlap = 100 + 30 + len("b.bin") + len(second.payload)
    first = stored("a.bin", noise(100, seed=1), compress_size=overlap)
    message = rejection(write_raw_zip(tmp_path / "a.zip", [first, second]))
    assert "'a.bin'" in message and "overlaps entry 'b.bin'" in message


def test_a_header_declaring_less_than_the_data_holds_cannot_extract_more(tmp_path):
    content = bytes(3 * 1024 * 1024)
    path = write_raw_zip(tmp_path / "a.zip", [deflated("bomb.bin", content, size=1000)])
    with SafeArchive.open(path, label=LABEL) as archive:
        assert archive.entries == (Entry(name="bomb.bin", size=1000, is_dir=False),)
        with pytest.raises(UnsafeArchiveError) as caught:
            archive.extract(tmp_path / "out")
    assert str(caught.value).startswith(f"{LABEL}: entry 'bomb.bin' is corrupt zip data")
    assert not (tmp_path / "out" / "bomb.bin").exists()


def test_a_lying_header_whose_crc_matches_the_prefix_yields_only_the_declared_bytes(tmp_path):
    content = bytes(3 * 1024 * 1024)
    member = deflated("bomb.bin", content, size=1000, crc=zlib.crc32(content[:1000]))
    path = write_raw_zip(tmp_path / "a.zip", [member])
    with SafeArchive.open(path, label=LABEL) as archive:
        written = archive.extract(tmp_path / "out")
    assert [p.stat().st_size for p in written] == [1000]


@pytest.mark.parametrize("make", [stored, deflated])
def test_a_header_declaring_more_than_the_data_holds_is_caught_while_streaming(tmp_path, make):
    content = noise(1000)
    path = write_raw_zip(tmp_path / "a.zip", [make("short.bin", content, size=5000)])
    with SafeArchive.open(path, label=LABEL) as archive, archive.open_member("short.bin") as stream:
        with pytest.raises(UnsafeArchiveError) as caught:
            stream.read()
    assert str(caught.value) == (f"{LABEL}: entry 'short.bin' ends after 1000 bytes but its header declares 5000 "
                                 f"(corrupt or truncated archive)")


def test_counted_stream_stops_a_member_that_yields_more_than_declared():
    stream = io.BufferedReader(_CountedStream(io.BytesIO(b"x" * 10), label=LABEL, fmt="zip", name="m",
                                              declared=5))
    with pytest.raises(UnsafeArchiveError, match="entry 'm' expands beyond the 5 bytes its header declares"):
        stream.read()


# --- damaged and encrypted zips ----------------------------------------------------------------------------

def test_truncated_zip_is_named_as_such(tmp_path):
    path = chop(make_zip(tmp_path / "onnxruntime-win-x64-1.23.1.zip", {"lib/a.dll": noise(200_000)}), keep=0.5)
    assert is_archive(path)
    message = rejection(path)
    assert "truncated or not a zip" in message and "end-of-central-directory" in message
    assert "BadZipFile" not in message


def test_pseudo_encrypted_entry_is_named_as_such(tmp_path):
    content = b"plain text, flagged as encrypted " * 100
    path = write_raw_zip(tmp_path / "a.zip", [deflated("lib/notes.txt", content, flags=0x1)])
    with zipfile.ZipFile(path) as plain_reader, pytest.raises(RuntimeError, match="encrypted"):
        plain_reader.read("lib/notes.txt")  # the flag is really set: zipfile asks for a password
    message = rejection(path)
    assert "entry 'lib/notes.txt' is pseudo-encrypted" in message


def test_a_flagged_bomb_is_caught_by_its_ratio_before_any_trial_decompression(tmp_path):
    path = write_raw_zip(tmp_path / "a.zip", [deflated("zeros.bin", bytes(8 * 1024 * 1024), flags=0x1)])
    message = rejection(path)
    assert "entry 'zeros.bin' expands" in message and "zip bomb" in message


@pytest.mark.parametrize("method", [0, 8])
def test_truly_encrypted_entry_is_named_as_such(tmp_path, method):
    content = b"secret weights " * 500
    crc = zlib.crc32(content)
    data = raw_deflate(content) if method == 8 else content
    payload = zipcrypto_encrypt(data, password=b"hunter2", crc=crc)
    member = stored("model.onnx", content, payload=payload, method=method, flags=0x1)
    path = write_raw_zip(tmp_path / "a.zip", [member])
    with zipfile.ZipFile(path) as reader:
        assert reader.read("model.onnx", pwd=b"hunter2") == content  # real ZipCrypto ciphertext
    message = rejection(path)
    assert "entry 'model.onnx' is encrypted; ort-bundler cannot read encrypted archives" in message
    assert "pseudo" not in message


def test_corrupt_member_data_is_reported_when_read(tmp_path):
    member = stored("a.bin", b"good data", payload=b"bad! data")
    path = write_raw_zip(tmp_path / "a.zip", [member])
    with SafeArchive.open(path, label=LABEL) as archive, pytest.raises(UnsafeArchiveError) as caught:
        archive.read("a.bin")
    assert str(caught.value).startswith(f"{LABEL}: entry 'a.bin' is corrupt zip data (Bad CRC-32")


def test_unreadable_compression_method_is_unsupported(tmp_path):
    path = write_raw_zip(tmp_path / "a.zip", [stored("a.bin", b"data", method=93)])
    message = rejection(path, error=UnsupportedError)
    assert "'a.bin'" in message and "compression method 93" in message


def test_corrupt_central_directory_is_wrapped(tmp_path):
    path = make_zip(tmp_path / "a.zip", {"a.txt": b"x"})
    data = bytearray(path.read_bytes())
    central = data.rindex(b"PK\x01\x02")
    data[central:central + 4] = b"XXXX"
    path.write_bytes(bytes(data))
    assert "is corrupt zip data" in rejection(path)


# --- damaged tars ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("compression", "fmt"), [("gz", "gzip"), ("bz2", "bzip2"), ("xz", "xz")])
def test_truncated_compressed_tar_is_named_as_such(tmp_path, compression, fmt):
    members = [tar_member("a.bin", noise(300_000)), tar_member("b.bin", noise(300_000, seed=1))]
    path = chop(write_tar(tmp_path / "a.tgz", members, compression=compression), keep=0.6)
    assert f"is a truncated {fmt} stream" in rejection(path)


def test_tar_with_a_corrupt_header_is_not_silently_cut_short(tmp_path):
    path = write_tar(tmp_path / "a.tar", [tar_member("a.txt", b"a"), tar_member("b.txt", b"b")], compression="")
    data = bytearray(path.read_bytes())
    data[1024:1029] = b"\xff\xff\xff\xff\xff"  # the second header: its checksum no longer adds up
    path.write_bytes(bytes(data))
    with tarfile.open(path) as tar:
        assert tar.getnames() == ["a.txt"]  # tarfile alone just stops, losing b.txt without a word
    assert "is a corrupt tar" in rejection(path)


@pytest.mark.parametrize("cut", [1024, 1300, 1636])
def test_plain_tar_cut_short_is_truncated(tmp_path, cut):
    path = write_tar(tmp_path / "a.tar", [tar_member("a.txt", b"a"), tar_member("b.txt", noise(600))],
                     compression="")
    path.write_bytes(path.read_bytes()[:cut])  # at a member boundary, in b.txt's header, in its data
    assert "is a truncated tar" in rejection(path)


def test_tar_with_data_after_its_end_marker_is_corrupt(tmp_path):
    path = write_tar(tmp_path / "a.tar", [tar_member("a.txt", b"a")], compression="")
    path.write_bytes(path.read_bytes() + b"smuggled")
    assert "has data after its end-of-archive marker" in rejection(path)


def test_gzip_that_holds_no_tar(tmp_path):
    path = tmp_path / "model.onnx.gz"
    path.write_bytes(gzip.compress(b"not a tar " * 100))
    assert not is_archive(path)
    assert "is a gzip file that does not hold a tar archive" in rejection(path)


def test_neither_zip_nor_tar(tmp_path):
    path = tmp_path / "a.zip"
    path.write_bytes(noise(4096))
    assert not is_archive(path)
    assert "is neither a zip nor a tar archive" in rejection(path)


def test_missing_file(tmp_path):
    with pytest.raises(InputUnavailableError, match=r"^\[ort\] archive crafted is missing or not a file: "):
        SafeArchive.open(tmp_path / "absent.zip", label=LABEL)


# --- detection ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("compression", ["", "gz", "bz2", "xz"])
def test_tar_kinds_are_detected_by_content_whatever_the_extension(tmp_path, compression):
    path = write_tar(tmp_path / "misnamed.zip", [tar_member("a/b.txt", b"hello")], compression=compression)
    assert is_archive(path)
    with SafeArchive.open(path, label=LABEL) as archive:
        assert archive.read("a/b.txt") == b"hello"


def test_zip_is_detected_by_content_and_folders_are_not_archives(tmp_path):
    path = make_zip(tmp_path / "payload.bin", {"a.txt": b"x"})
    assert is_archive(path)
    assert not is_archive(tmp_path)
    (tmp_path / "plain.txt").write_text("hello")
    assert not is_archive(tmp_path / "plain.txt")


def test_bzip2_and_xz_files_that_hold_no_tar_are_not_archives(tmp_path):
    for name, compress in {"b.bz2": bz2.compress, "x.xz": lzma.compress}.items():
        (tmp_path / name).write_bytes(compress(b"not a tar"))
        assert not is_archive(tmp_path / name)


# --- happy paths -------------------------------------------------------------------------------------------

ZIP_FILES = {
    "pkg/": b"",
    "pkg/lib/onnxruntime.dll": noise(5000, seed=1),
    "pkg/bin/run.sh": b"#!/bin/sh\necho hi\n",
    "pkg/include/deep/er/api.h": b"#pragma once\n",
    "VERSION_NUMBER": b"1.23.1\n",
}


def test_real_zip_lists_reads_streams_and_extracts(tmp_path):
    path = make_zip(tmp_path / "a.zip", ZIP_FILES, modes={"pkg/": 0o40755, "pkg/bin/run.sh": 0o100755})
    dest = tmp_path / "out"
    started = time.time()
    with SafeArchive.open(path, label=LABEL) as archive:
        assert archive.entries == tuple(
            Entry(name=name.rstrip("/"), size=len(content), is_dir=name.endswith("/"))
            for name, content in ZIP_FILES.items())
        assert archive.names() == ["pkg", "pkg/lib/onnxruntime.dll", "pkg/bin/run.sh", "pkg/include/deep/er/api.h",
                                   "VERSION_NUMBER"]
        assert archive.read("VERSION_NUMBER") == b"1.23.1\n"
        with archive.open_member("pkg/lib/onnxruntime.dll") as stream:
            assert b"".join(iter(lambda: stream.read(1000), b"")) == ZIP_FILES["pkg/lib/onnxruntime.dll"]
        written = archive.extract(dest)
    assert written == [dest / name.rstrip("/") for name in ZIP_FILES]
    for name, content in ZIP_FILES.items():
        if not name.endswith("/"):
            assert (dest / name).read_bytes() == content
    assert stat.S_IMODE((dest / "pkg/bin/run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "pkg/lib/onnxruntime.dll").stat().st_mode) == 0o644
    assert (dest / "VERSION_NUMBER").stat().st_mtime >= started - 2  # 1980 from the archive is not copied


def test_real_tgz_with_nested_folders(tmp_path):
    src = tmp_path / "src"
    (src / "lib" / "cmake").mkdir(parents=True)
    (src / "include").mkdir()
    (src / "lib" / "libonnxruntime.so.1.23.1").write_bytes(noise(3000))
    (src / "lib" / "cmake" / "config.cmake").write_text("set(X 1)\n")
    (src / "include" / "onnxruntime_c_api.h").write_text("#pragma once\n")
    tool = src / "lib" / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o700)
    path = tmp_path / "onnxruntime-linux-x64-1.23.1.tgz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(src, arcname=".")  # `tar -C src .` style: a "." root and "./" prefixes
    dest = tmp_path / "out"
    with SafeArchive.open(path, label=LABEL) as archive:
        assert set(archive.entries) == {
            Entry(name="include", size=0, is_dir=True),
            Entry(name="include/onnxruntime_c_api.h", size=13, is_dir=False),
            Entry(name="lib", size=0, is_dir=True),
            Entry(name="lib/cmake", size=0, is_dir=True),
            Entry(name="lib/cmake/config.cmake", size=9, is_dir=False),
            Entry(name="lib/libonnxruntime.so.1.23.1", size=3000, is_dir=False),
            Entry(name="lib/tool", size=10, is_dir=False),
        }
        written = archive.extract(dest)
    assert sorted(p.relative_to(dest).as_posix() for p in written) == sorted(archive.names())
    assert (dest / "lib/libonnxruntime.so.1.23.1").read_bytes() == (src / "lib/libonnxruntime.so.1.23.1").read_bytes()
    assert stat.S_IMODE((dest / "lib/tool").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "lib/cmake/config.cmake").stat().st_mode) == 0o644


def test_extract_a_subset(tmp_path):
    path = make_zip(tmp_path / "a.zip", ZIP_FILES)
    with SafeArchive.open(path, label=LABEL) as archive:
        written = archive.extract(tmp_path / "out", members=["pkg/include/deep/er/api.h"])
        with pytest.raises(InputUnavailableError, match="has no entry 'pkg/missing.dll'"):
            archive.extract(tmp_path / "out", members=["pkg/missing.dll"])
    assert written == [tmp_path / "out/pkg/include/deep/er/api.h"]
    assert sorted(p.name for p in (tmp_path / "out").rglob("*") if p.is_file()) == ["api.h"]


def test_extract_never_follows_a_link_already_in_dest(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "out"
    dest.mkdir()
    os.symlink(outside, dest / "lib")
    path = make_zip(tmp_path / "a.zip", {"lib/evil.dll": b"MZ"})
    with SafeArchive.open(path, label=LABEL) as archive, pytest.raises(UnsafeArchiveError) as caught:
        archive.extract(dest)
    assert "entry 'lib/evil.dll' would be written outside" in str(caught.value)
    assert list(outside.iterdir()) == []


def test_reading_a_folder_entry_is_refused(tmp_path):
    path = make_zip(tmp_path / "a.zip", ZIP_FILES)
    with SafeArchive.open(path, label=LABEL) as archive, pytest.raises(UnsafeArchiveError, match="is a folder"):
        archive.read("pkg")


# --- the real thing ----------------------------------------------------------------------------------------

@pytest.mark.integration
def test_real_ort_windows_wheel_opens_cleanly(ort_win_wheel, tmp_path):
    label = f"[ort] wheel {ort_win_wheel.name}"
    with SafeArchive.open(ort_win_wheel, label=label) as archive:
        assert "onnxruntime/capi/onnxruntime.dll" in archive.names()
        assert "Root-Is-Purelib: false" in archive.read("onnxruntime-1.23.1.dist-info/WHEEL").decode()
        dll = next(entry for entry in archive.entries if entry.name == "onnxruntime/capi/onnxruntime.dll")
        [written] = archive.extract(tmp_path, members=[dll.name])
    assert written.stat().st_size == dll.size > 10_000_000
    assert written.read_bytes()[:2] == b"MZ"
