"""Builders for hostile and broken archives, made at test time so no binary archive is ever committed.

zipfile refuses to write most of what an attacker writes (duplicate names without a warning, encryption
flags, sizes that lie, overlapping entries), so zips are also assembled here from raw headers, following
the layout in PKWARE's APPNOTE: local header + data per entry, then the central directory, then the
end-of-central-directory record.
"""

from __future__ import annotations

import io
import struct
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

_DOS_DATE_1980_01_01 = 0x21
_UTF8_NAMES = 0x800
_MADE_BY_UNIX = 3 << 8 | 20


@dataclass(frozen=True, kw_only=True)
class RawMember:
    """One zip entry exactly as it will be written: every field may lie about `payload`."""

    name: str
    payload: bytes  # the bytes stored in the archive (compressed and/or encrypted already)
    crc: int
    size: int  # declared uncompressed size
    method: int = 0
    flags: int = 0
    external_attr: int = 0
    compress_size: int | None = None  # declared compressed size; len(payload) unless overridden


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush()


def stored(name: str, content: bytes, **fields: object) -> RawMember:
    values = {"payload": content, "crc": zlib.crc32(content), "size": len(content), **fields}
    return RawMember(name=name, **values)


def deflated(name: str, content: bytes, **fields: object) -> RawMember:
    values = {"payload": raw_deflate(content), "crc": zlib.crc32(content), "size": len(content), "method": 8,
              **fields}
    return RawMember(name=name, **values)


def write_raw_zip(path: Path, members: list[RawMember]) -> Path:
    body, central = bytearray(), bytearray()
    for member in members:
        name = member.name.encode("utf-8")
        flags = member.flags | _UTF8_NAMES
        compress_size = len(member.payload) if member.compress_size is None else member.compress_size
        common = (member.method, 0, _DOS_DATE_1980_01_01, member.crc, compress_size, member.size, len(name), 0)
        central += struct.pack("<4sHHHHHHLLLHHHHHLL", b"PK\x01\x02", _MADE_BY_UNIX, 20, flags, *common, 0, 0, 0,
                               member.external_attr, len(body)) + name
        body += struct.pack("<4sHHHHHLLLHH", b"PK\x03\x04", 20, flags, *common) + name + member.payload
    count = len(members)
    end = struct.pack("<4sHHHHLLH", b"PK\x05\x06", 0, 0, count, count, len(central), len(body), 0)
    path.write_bytes(bytes(body + central + end))
    return path


def _crc_step(crc: int, byte: int) -> int:
    """One raw CRC-32 table step (zlib.crc32 adds the pre- and post-inversion that ZipCrypto omits)."""
    return zlib.crc32(bytes([byte]), crc ^ 0xFFFFFFFF) ^ 0xFFFFFFFF


def zipcrypto_encrypt(plain: bytes, *, password: bytes, crc: int) -> bytes:
    """Traditional PKWARE encryption (APPNOTE 6.1), so the 'truly encrypted' case is real ciphertext."""
    keys = [0x12345678, 0x23456789, 0x34567890]

    def update(byte: int) -> None:
        keys[0] = _crc_step(keys[0], byte)
        keys[1] = ((keys[1] + (keys[0] & 0xFF)) * 134775813 + 1) & 0xFFFFFFFF
        keys[2] = _crc_step(keys[2], keys[1] >> 24)

    for byte in password:
        update(byte)
    header = bytes(range(11)) + bytes([crc >> 24])  # the last byte lets readers check the password
    out = bytearray()
    for byte in header + plain:
        temp = (keys[2] | 2) & 0xFFFF
        out.append(byte ^ ((temp * (temp ^ 1)) >> 8) & 0xFF)
        update(byte)
    return bytes(out)


def tar_member(name: str, content: bytes = b"", *, kind: bytes = tarfile.REGTYPE, linkname: str = "",
               mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, mode
    info.size = len(content) if kind == tarfile.REGTYPE else 0
    return info, content


def write_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes]], *, compression: str = "gz") -> Path:
    mode = f"w:{compression}" if compression else "w"
    with tarfile.open(path, mode) as tar:
        for info, content in members:
            tar.addfile(info, io.BytesIO(content) if info.isreg() else None)
    return path


def chop(path: Path, *, keep: float) -> Path:
    """Cut a file as an interrupted download would."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


class _Zeros(io.RawIOBase):
    """`size` zero bytes, produced as they are read: a bomb's content without holding it in memory."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def zeros_tar(path: Path, members: dict[str, int], *, compression: str = "gz") -> Path:
    """A tar whose members are `size` zero bytes each: compresses about 1000:1 (a tar bomb)."""
    with tarfile.open(path, f"w:{compression}" if compression else "w") as tar:
        for name, size in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = size, 0o644
            tar.addfile(info, io.BufferedReader(_Zeros(size)))
    return path


def sparse_tar(path: Path, tree: Path, *, fmt: str = "gnu") -> Path:
    """`tree` packed by GNU tar with --sparse: a file of holes is stored as a map of a few hundred bytes."""
    import subprocess

    subprocess.run(["tar", "--sparse", f"--format={fmt}", "-czf", str(path), "-C", str(tree), "."], check=True)
    return path


def with_nul_in_name(path: Path, name: str, content: bytes, *, marker: str = "\x01") -> Path:
    """A zip whose member name holds a NUL where `name` has `marker` (zipfile itself cuts names at a NUL)."""
    write_raw_zip(path, [stored(name, content)])
    data = path.read_bytes().replace(name.encode("utf-8"), name.replace(marker, "\0").encode("utf-8"))
    path.write_bytes(data)
    return path
