"""A file of which only some byte ranges are held (`pe_stream`), read by the PE and signature readers as they read a
mapped file."""

from __future__ import annotations

from typing import overload


class NotKept(Exception):
    """A reader asked for bytes the stream did not keep: the file is read whole instead."""


class SparseImage:
    """A file of `size` bytes of which only some ranges are held, read as `bytes` or an `mmap` is (length, index,
    slice, find): what the PE and signature readers ask of a DLL. Any read that is not within one kept range raises
    `NotKept`; a slice past the end is cut at the end, as with `bytes`."""

    def __init__(self, size: int, ranges: list[tuple[int, bytes | bytearray]]) -> None:
        self._size = size
        self._ranges = sorted(ranges, key=lambda kept: kept[0])

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, key: int) -> int: ...

    @overload
    def __getitem__(self, key: slice) -> bytes: ...

    def __getitem__(self, key: int | slice) -> int | bytes:
        if isinstance(key, int):
            offset = key + self._size if key < 0 else key
            if not 0 <= offset < self._size:
                raise IndexError(key)
            return self._read(offset, offset + 1)[0]
        start, stop, step = key.indices(self._size)
        if step != 1:
            raise NotKept(f"a slice with step {step}")
        return self._read(start, max(start, stop))

    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        stop = self._size if end is None else min(end, self._size)
        found = self._read(start, max(start, stop)).find(sub)
        return found if found < 0 else start + found

    def _read(self, start: int, stop: int) -> bytes:
        if stop <= start:
            return b""
        for offset, data in self._ranges:
            if offset <= start and stop <= offset + len(data):
                return bytes(data[start - offset:stop - offset])
        raise NotKept(f"bytes {start}..{stop} of {self._size}")
