"""A DLL's facts read as its bytes stream past (bundler/readers/pe_stream.py), against the same readers on the whole
file, on the real onnxruntime win_amd64 wheel's DLLs fed in pieces of awkward sizes."""

from __future__ import annotations

import zipfile
from concurrent.futures import Future
from pathlib import Path

import pefile
import pytest

from bundler.readers import pe, signatures
from bundler.readers.pe import NameScan, runtime_dll_names
from bundler.readers.pe_sparse import NotKept, SparseImage
from bundler.readers.pe_stream import HEAD, PeStream

DLLS = ("onnxruntime/capi/onnxruntime.dll", "onnxruntime/capi/onnxruntime_providers_shared.dll",
        "onnxruntime/capi/onnxruntime_pybind11_state.pyd")


@pytest.fixture(scope="module")
def ort_dlls(ort_win_wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(ort_win_wheel) as zf:
        return {name: zf.read(name) for name in DLLS}


def streamed(data: bytes, piece: int) -> PeStream:
    stream = PeStream(len(data))
    for start in range(0, len(data), piece):
        stream.feed(data[start:start + piece])
    return stream


def done(value: bytes | None) -> Future[bytes | None]:
    future: Future[bytes | None] = Future()
    future.set_result(value)
    return future


@pytest.mark.parametrize("piece", [4093, 1 << 20])
@pytest.mark.parametrize("name", DLLS)
def test_the_streamed_facts_digest_and_evidence_are_those_of_the_whole_file(ort_dlls: dict[str, bytes], name: str,
                                                                            piece: int) -> None:
    data = ort_dlls[name]
    stream = streamed(data, piece)
    image = stream.image()
    assert image is not None, stream.failed
    whole = pefile.PE(data=data, fast_load=True)
    assert stream.authenticode_sha256() == signatures.authenticode_digest(data, whole, algorithm="sha256")
    assert pe._inspect(image, name=name, names=stream.names) == pe._inspect(data, name=name)
    kept = signatures._evidence(image, name=name, ahead=done(stream.authenticode_sha256()))
    assert kept == signatures._evidence(data, name=name) and kept.verified  # Microsoft's signature


def test_a_changed_byte_in_the_signed_content_fails_the_streamed_digest(ort_dlls: dict[str, bytes]) -> None:
    data = bytearray(ort_dlls[DLLS[0]])
    data[len(data) // 2] ^= 0xFF  # inside .text, a section the stream does not keep but hashes
    stream = streamed(bytes(data), 1 << 20)
    image = stream.image()
    assert image is not None
    evidence = signatures._evidence(image, name="x.dll", ahead=done(stream.authenticode_sha256()))
    assert not evidence.verified and "modified after signing" in (evidence.reason or "")


def test_names_straddling_every_piece_boundary_are_found_as_in_the_whole_file() -> None:
    utf16 = "nvcuda.dll".encode("utf-16-le")
    data = (b"\0" * 5 + b"cudnn_ops64_9.dll\0" + b"\x01" * 300 + b"zlibwapi.dll" + b"\0junk.dllx " + utf16
            + b"\0\0-" + b"a" * 150 + b".dll" + b"\0" * 3 + b"cublasLt64_12.DLL")
    expected = runtime_dll_names(data, exclude=set())
    assert expected == ("cudnn_ops64_9.dll", "zlibwapi.dll", "a" * 100 + ".dll", "cublasLt64_12.DLL", "nvcuda.dll")
    for piece in (1, 2, 3, 7, 64, 211, len(data)):
        scan = NameScan()
        for start in range(0, len(data), piece):
            scan.feed(data[start:start + piece])
        assert scan.names(exclude=set()) == expected, piece


def test_the_sparse_image_serves_only_what_it_holds() -> None:
    image = SparseImage(100, [(10, b"abcdefghij"), (50, bytearray(b"0123456789"))])
    assert len(image) == 100 and image[12] == ord("c") and image[52:55] == b"234" and image[200:300] == b""
    assert image.find(b"def", 10, 20) == 13 and image.find(b"zz", 50, 60) == -1
    for read in (lambda: image[0], lambda: image[15:25], lambda: image[40:55], lambda: image.find(b"a")):
        with pytest.raises(NotKept):
            read()
    with pytest.raises(IndexError):
        image[100]


def test_a_file_that_is_not_a_pe_or_ends_early_gives_no_image(ort_dlls: dict[str, bytes]) -> None:
    text = streamed(b"MZ" + b"\0" * (HEAD + 10), 4096)
    assert text.image() is None and "headers cannot be read" in (text.failed or "")
    data = ort_dlls[DLLS[0]]
    short = PeStream(len(data) + 1)  # declared one byte longer than what arrives
    short.feed(data)
    assert short.image() is None


def test_a_certificate_table_past_the_end_is_reported_as_the_whole_file_reports_it(ort_dlls: dict[str, bytes]) -> None:
    """A crafted security directory pointing past the end of the file: the stream neither fails nor keeps a range
    there, and the evidence is what reading the whole file gives (no PKCS#7 signature found)."""
    data = bytearray(ort_dlls[DLLS[1]])
    entry = pefile.PE(data=bytes(data), fast_load=True).OPTIONAL_HEADER.DATA_DIRECTORY[4].get_file_offset()
    data[entry:entry + 8] = (len(data) + 4096).to_bytes(4, "little") + (64).to_bytes(4, "little")
    stream = streamed(bytes(data), 4096)
    image = stream.image()
    assert image is not None, stream.failed
    kept = signatures._evidence(image, name="x.dll", ahead=done(stream.authenticode_sha256()))
    assert kept == signatures._evidence(bytes(data), name="x.dll") and kept.signed and not kept.verified
