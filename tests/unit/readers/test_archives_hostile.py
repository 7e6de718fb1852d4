"""Hostile archives and metadata (issue 18, items 3, 8, 11, 12), each made here by the test.

Bombs are refused before a byte is extracted (item 8): a tar.gz of zeros, GNU and PAX sparse tars whose
map claims gigabytes, and an ORT .tgz whose re-packing (it has links) would otherwise copy a 10 GiB
sparse member first. Names read from an input's metadata are checked against their grammar before they
become part of a path (item 3); metadata that is not UTF-8 (item 11), a NUL in a zip member name and a
RECORD hash that is not base64 (item 12) are named in one sentence instead of a traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from fixtures.crafted_archives import sparse_tar, stored, with_nul_in_name, write_raw_zip, zeros_tar
from fixtures.hostile import one_line, run, snapshot

from bundler.errors import BuildError, UnsafeArchiveError
from bundler.readers.archives import SafeArchive
from bundler.readers.capi import read_capi
from bundler.readers.ortarchive import extract_ort_archive
from bundler.readers.wheels import verify_official_wheel
from bundler.target_platform import LINUX

GIB = 1024**3


def sparse_tree(root: Path, files: dict[str, int], links: dict[str, str] | None = None) -> Path:
    """Files of `size` bytes that are all hole (they take no disk space), plus symlinks."""
    for name, size in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:
            fh.truncate(size)
    for name, target in (links or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, root / name)
    return root


def packed(archive: Path, tree: Path, *, fmt: str = "gnu") -> Path:
    """`tree` as a sparse tar.gz; the tree is removed (a snapshot would otherwise read gigabytes of holes)."""
    sparse_tar(archive, tree, fmt=fmt)
    shutil.rmtree(tree)
    return archive


def disk_bytes(root: Path) -> int:
    """Bytes really allocated under root (a sparse leftover counts by its blocks, a full one by its size)."""
    return sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file() and not p.is_symlink())


# -- item 8: tar bombs -------------------------------------------------------------------------------

@pytest.fixture
def zeros_bomb(tmp_path: Path) -> Path:
    """96 MiB of zeros in a tar.gz of about 100 KB: a ratio near 1000, five times the limit."""
    return zeros_tar(tmp_path / "bomb.tar.gz", {"pkg/a.bin": 64 * 1024**2, "pkg/b.bin": 32 * 1024**2})


@pytest.fixture
def gnu_sparse_bomb(tmp_path: Path) -> Path:
    tree = sparse_tree(tmp_path / "gnu-tree", {"pkg/disk.img": 7 * GIB})
    return packed(tmp_path / "gnu-sparse.tar.gz", tree, fmt="gnu")


@pytest.fixture
def pax_sparse_bomb(tmp_path: Path) -> Path:
    tree = sparse_tree(tmp_path / "pax-tree", {"pkg/disk.img": 3 * GIB, "pkg/small.txt": 10})
    return packed(tmp_path / "pax-sparse.tar.gz", tree, fmt="pax")


@pytest.mark.parametrize("bomb", ["zeros_bomb", "gnu_sparse_bomb", "pax_sparse_bomb"])
def test_tar_bombs_fail_inspect_with_exit_6(request: pytest.FixtureRequest, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str], bomb: str) -> None:
    archive: Path = request.getfixturevalue(bomb)
    assert archive.stat().st_size < 200_000
    before = snapshot(tmp_path)
    code, err = run(capsys, "inspect", str(archive))
    line = one_line(err, "inspect")
    assert code == 6, err
    assert f"{archive.name}: entry './pkg/" in line or f"{archive.name}: entry 'pkg/" in line
    assert "above the limit of 200 (tar bomb or sparse-file bomb)" in line
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("bomb", ["zeros_bomb", "gnu_sparse_bomb", "pax_sparse_bomb"])
def test_a_capi_build_extracts_nothing_from_a_tar_bomb(request: pytest.FixtureRequest, tmp_path: Path,
                                                        bomb: str) -> None:
    archive: Path = request.getfixturevalue(bomb)
    work = tmp_path / "work"
    with pytest.raises(UnsafeArchiveError, match=r"ort\.capi: entry .* \(tar bomb or sparse-file bomb\)"):
        read_capi(archive, work_dir=work, target=LINUX, label="ort.capi")
    assert disk_bytes(work) == 0


def test_the_sparse_real_size_counts_against_the_total_limit_too(tmp_path: Path) -> None:
    """9 GiB of holes is beyond the 8 GiB total whatever the ratio: refused by its real, expanded size."""
    tree = sparse_tree(tmp_path / "tree", {"pkg/huge.img": 9 * GIB})
    archive = sparse_tar(tmp_path / "huge.tar.gz", tree, fmt="gnu")
    with pytest.raises(UnsafeArchiveError, match="brings the uncompressed total to 9663676416 bytes"):
        SafeArchive.open(archive, label="src")


def test_an_ort_tgz_with_links_is_not_repacked_past_a_sparse_bomb(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Re-packing (to drop the lib/ links) used to copy every member before any limit applied."""
    top = "onnxruntime-linux-x64-1.23.1"
    tree = sparse_tree(tmp_path / "tree", {f"{top}/VERSION_NUMBER": 7, f"{top}/lib/libonnxruntime.so.1.23.1": 4096,
                                           f"{top}/lib/filler.bin": 10 * GIB},
                       links={f"{top}/lib/libonnxruntime.so": "libonnxruntime.so.1.23.1"})
    archive = tmp_path / f"{top}.tgz"
    subprocess.run(["tar", "--sparse", "--format=gnu", "-czf", str(archive), "-C", str(tree), top], check=True)
    shutil.rmtree(tree)
    dest = tmp_path / "dest"
    with pytest.raises(UnsafeArchiveError, match=r"filler\.bin' brings the uncompressed total to \d+ bytes"):
        extract_ort_archive(archive, label="ort.archive", target=LINUX, dest=dest)
    assert disk_bytes(dest) < 1024**2  # the re-packed copy stops before the bomb member
    shutil.rmtree(dest)
    before = snapshot(tmp_path)
    code, err = run(capsys, "inspect", str(archive))
    assert code == 6, err
    assert "filler.bin' brings the uncompressed total" in one_line(err, "inspect")
    assert snapshot(tmp_path) == before


def test_an_ordinary_tar_gz_still_opens(tmp_path: Path) -> None:
    archive = zeros_tar(tmp_path / "ok.tar.gz", {"pkg/small.bin": 512 * 1024})  # under the ratio's grace size
    with SafeArchive.open(archive, label="src") as opened:
        assert opened.names() == ["pkg/small.bin"]


# -- item 12: a NUL in a zip member name --------------------------------------------------------------

@pytest.mark.parametrize("name", ["evil.txt\x01.exe", "dir/a\x01../../x", "\x01hidden"])
def test_a_nul_in_a_zip_member_name_is_refused_not_truncated(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             name: str) -> None:
    archive = with_nul_in_name(tmp_path / "nul.zip", name, b"payload")
    assert any("\0" in info.orig_filename for info in zipfile.ZipFile(archive).infolist())
    with pytest.raises(UnsafeArchiveError, match="has a NUL character in its name"):
        SafeArchive.open(archive, label="src")
    code, err = run(capsys, "inspect", str(archive))
    assert code == 6 and "has a NUL character in its name; expected a plain path" in one_line(err, "inspect")


# -- item 3: names from an input's metadata become no path --------------------------------------------

def capi_tree(root: Path, *, metadata: bytes | None = None, wheel: bytes | None = None,
              version_line: str = '__version__ = "1.23.1"\n') -> Path:
    (root / "onnxruntime" / "capi").mkdir(parents=True)
    (root / "onnxruntime" / "__init__.py").write_text(version_line, encoding="utf-8")
    (root / "onnxruntime" / "capi" / "__init__.py").write_text("", encoding="utf-8")
    dist_info = root / "onnxruntime-1.23.1.dist-info"
    if metadata is not None or wheel is not None:
        dist_info.mkdir()
    if metadata is not None:
        (dist_info / "METADATA").write_bytes(metadata)
    if wheel is not None:
        (dist_info / "WHEEL").write_bytes(wheel)
    return root


@pytest.mark.parametrize("name", ["/some/absolute/path", "../../../../tmp/escaped", "onnxruntime/../../x",
                                  "C:\\Windows\\evil", "onnx runtime", "-onnxruntime", "x" * 300])
def test_a_capi_distribution_name_that_is_not_a_name_is_refused(tmp_path: Path, name: str) -> None:
    root = capi_tree(tmp_path / "src", metadata=f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.23.1\n".encode())
    with pytest.raises(BuildError, match=r"the distribution name: found the distribution name .*, expected letters"):
        read_capi(root, work_dir=tmp_path / "work", target=LINUX, label="ort.capi")


@pytest.mark.parametrize("version_line", ['__version__ = " 1.23.1"\n', '__version__ = "1.23.1\\n"\n'])
def test_a_capi_version_with_whitespace_is_refused(tmp_path: Path, version_line: str) -> None:
    root = capi_tree(tmp_path / "src", version_line=version_line)
    with pytest.raises(BuildError, match=r"ort\.capi: the version: found the version .*, expected a PEP 440"):
        read_capi(root, work_dir=tmp_path / "work", target=LINUX, label="ort.capi")


# -- item 11: metadata that is not UTF-8 --------------------------------------------------------------

@pytest.mark.parametrize(("metadata", "wheel", "file"), [
    (b"Metadata-Version: 2.1\nName: onnxruntime\xff\nVersion: 1.23.1\n", None, "METADATA"),
    (b"\xfe\xffN\x00a\x00m\x00e\x00", None, "METADATA"),
    (b"Metadata-Version: 2.1\nName: onnxruntime\nVersion: 1.23.1\n", b"Wheel-Version: 1.0\nTag: cp311\xc3\x28\n",
     "WHEEL"),
])
def test_non_utf8_capi_metadata_is_named(tmp_path: Path, metadata: bytes, wheel: bytes | None, file: str) -> None:
    root = capi_tree(tmp_path / "src", metadata=metadata, wheel=wheel)
    with pytest.raises(BuildError, match=rf"{file} is not UTF-8 text \(invalid .* at byte \d+\)"):
        read_capi(root, work_dir=tmp_path / "work", target=LINUX, label="ort.capi")


WHEEL_NAME = "onnxruntime-1.23.1-cp311-cp311-manylinux_2_27_x86_64.whl"
DIST = "onnxruntime-1.23.1.dist-info"


def small_wheel(path: Path, *, record: bytes, metadata: bytes = b"Metadata-Version: 2.1\nName: onnxruntime\n"
                b"Version: 1.23.1\n") -> Path:
    wheel = b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp311-cp311-manylinux_2_27_x86_64\n"
    return write_raw_zip(path, [stored("onnxruntime/__init__.py", b"x = 1\n"), stored(f"{DIST}/METADATA", metadata),
                                stored(f"{DIST}/WHEEL", wheel), stored(f"{DIST}/RECORD", record)])


def verify(path: Path) -> None:
    verify_official_wheel(path, expected_name="onnxruntime", expected_version="1.23.1",
                          target=LINUX, target_python="3.11", label="ort.wheel")


@pytest.mark.parametrize("record", [b"onnxruntime/__init__.py,sha256=\xff\xfe,6\n",
                                    b"onnxruntime/\xe9t\xe9.py,,\n"])
def test_a_wheel_record_that_is_not_utf8_is_named(tmp_path: Path, record: bytes) -> None:
    with pytest.raises(BuildError, match=rf"ort\.wheel: {WHEEL_NAME}: {DIST}/RECORD is not UTF-8 text"):
        verify(small_wheel(tmp_path / WHEEL_NAME, record=record))


@pytest.mark.parametrize("digest", ["sha256=!!!not-base64!!!", "sha256=abc", "sha256=" + "A" * 42,
                                    "sha256=YWJj\nZGVm", "sha512=" + "A" * 43])
def test_a_record_hash_that_is_not_base64_of_one_digest_is_refused(tmp_path: Path, digest: str) -> None:
    record = f'onnxruntime/__init__.py,"{digest}",6\n{DIST}/METADATA,,\n{DIST}/WHEEL,,\n{DIST}/RECORD,,\n'
    with pytest.raises(BuildError, match=r"RECORD entry for onnxruntime/__init__\.py: found the hash .*, expected the "
                                         r"urlsafe base64 of a \d+-byte sha(256|512) digest"):
        verify(small_wheel(tmp_path / WHEEL_NAME, record=record.encode()))


def test_the_tar_helpers_make_what_they_claim(tmp_path: Path) -> None:
    """The bombs above are what they say: real sizes as tar itself lists them."""
    tree = sparse_tree(tmp_path / "tree", {"pkg/disk.img": 7 * GIB})
    archive = sparse_tar(tmp_path / "s.tar.gz", tree)
    with tarfile.open(archive) as tar:
        sizes = {m.name: m.size for m in tar if m.isreg()}
    assert sizes == {"./pkg/disk.img": 7 * GIB}
    assert archive.stat().st_size < 1000
