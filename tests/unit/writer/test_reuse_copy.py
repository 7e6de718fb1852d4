"""The kept zip's copies (writer/reuse.py `kernel_copy`): whole and exact by the kernel's copy, and by the plain copy
where the kernel refuses (a destination opened to append is one it always refuses)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bundler.writer.reuse import kernel_copy

SIZE = (3 << 20) + 12345  # more than one CHUNK, not a multiple of it


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "bundle.zip"
    path.write_bytes(os.urandom(SIZE))
    return path


def test_the_kernel_copy_is_whole_and_exact_and_a_separate_file(source: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.zip"
    with source.open("rb") as src, copy.open("xb") as out:
        src.seek(100)  # the copy starts at the file's start, wherever the source's position is
        kernel_copy(src, out)
    original = source.read_bytes()
    assert copy.read_bytes() == original
    with copy.open("r+b") as changed:  # a clone shares blocks only until one side changes
        changed.write(bytes([original[0] ^ 0xFF]))
    assert source.read_bytes() == original and copy.read_bytes() != original
    assert copy.stat().st_ino != source.stat().st_ino and source.stat().st_nlink == 1


def test_a_destination_the_kernel_will_not_copy_into_gets_a_plain_copy(source: Path, tmp_path: Path) -> None:
    copy = tmp_path / "appended.zip"
    if hasattr(os, "copy_file_range"):
        with source.open("rb") as src, copy.open("ab") as out, pytest.raises(OSError):
            os.copy_file_range(src.fileno(), out.fileno(), 1, 0, 0)  # the kernel's refusal this test relies on
    copy.unlink(missing_ok=True)
    with source.open("rb") as src, copy.open("ab") as out:
        kernel_copy(src, out)
    assert copy.read_bytes() == source.read_bytes()
