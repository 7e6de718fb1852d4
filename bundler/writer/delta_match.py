"""Where the bytes of a new release zip already are in the old one: the matching behind `ort-bundler delta`.

The new zip is described as ranges of the old zip to copy and bytes to insert, over the zips' stored
(compressed) bytes, never their content, so the applier never compresses (bundler/shipped/ort_bundle/delta_apply.py).
Most of a new release is members the old one has, byte for byte, under another top folder
(`app-1.0.0-…/` becomes `app-1.1.0-…/`), so matching is by the zip's own structure first:

1. members are paired by their name below the top folder: a member whose stored bytes did not change is
   one copy (its local header differs only in the folder name, which a byte-aligned comparison leaves
   as a few inserted bytes);
2. local headers, central directory entries (paired the same way) and the end records are compared
   byte-aligned, from their start and from their end: what differs is an offset field or a version;
3. what is left (a changed member's bytes, a member the old zip does not have) is looked up in the old
   zip by content-defined anchors: every position holding one of a few byte values starts a key, the old
   zip's keys are indexed once, and a key found in the new bytes is extended both ways at memcmp speed.
   Anchors are content-defined, so a run shared by both zips has its anchors at the same places in both:
   no rolling hash over every byte, which Python cannot afford on a gigabyte. A wheel that changed one
   file keeps its other files' stored bytes, and those are found here.
"""

from __future__ import annotations

import mmap
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bundler.errors import UnsafeArchiveError

LOCAL = struct.Struct("<IHHHHHIIIHH")  # the local file header before its name
CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")  # a central directory entry before its name
EOCD = struct.Struct("<IHHHHIIH")
ZIP64_LOCATOR = struct.Struct("<IIQI")
ZIP64_EOCD = struct.Struct("<IQHHIIQQQQ")
MIN_RUN = 8  # the shortest aligned run worth an op (an op costs 2-4 bytes before the ops are compressed)
KEY = 12  # the bytes an anchor's key spans
ANCHOR_BYTES = bytes([0x8A, 0x5B, 0x11, 0xC3, 0x2E, 0xE7, 0x74, 0x99, 0x05, 0xF0, 0x3A, 0xB6, 0x67, 0xD2, 0x48, 0xA1])
MAX_ANCHORS = 4 << 20
CHUNK = 1 << 20


@dataclass(frozen=True, kw_only=True)
class Span:
    """One member of a zip: its local header and its stored bytes (and whatever follows them before the next)."""

    name: str
    header: tuple[int, int]
    data: tuple[int, int]
    tail: tuple[int, int]
    stored: bool  # kept as it is (a wheel in a bundle), not deflated


@dataclass(frozen=True, kw_only=True)
class Layout:
    """A zip's members by their name below the top folder, its central directory entries and its end records."""

    top: str
    members: dict[str, Span]
    central: dict[str, tuple[int, int]]
    end: tuple[int, int]


@dataclass(frozen=True)
class Copy:
    """`length` bytes of the new zip from `new` are the old zip's bytes from `old`."""

    new: int
    length: int
    old: int


def layout(data: mmap.mmap | bytes, path: Path, *, strip_top: bool = True) -> Layout:
    """Read a zip's structure from its own records (zip64 too), refusing what does not add up. Names are
    below the top folder (`strip_top`, a bundle) or whole (a wheel)."""
    try:
        cd_start, cd_end = _central_directory(data)
        entries = list(_central_entries(data, cd_start, cd_end))
    except (struct.error, IndexError, ValueError):
        entries, cd_start, cd_end = [], 0, 0
    if not entries:
        raise UnsafeArchiveError(f"{path}: no readable zip central directory, expected a bundle zip")
    top = entries[0][0].split("/")[0]
    offsets = sorted(offset for _, offset, _ in entries) + [cd_start]
    following = dict(zip(offsets, offsets[1:]))
    members: dict[str, Span] = {}
    central: dict[str, tuple[int, int]] = {}
    for name, offset, (start, end) in entries:
        relative = name.split("/", 1)[1] if strip_top and "/" in name else name
        members[relative] = _span(data, relative, offset, following[offset], path)
        central[relative] = (start, end)
    return Layout(top=top, members=members, central=central, end=(cd_end, len(data)))


def _central_directory(data: mmap.mmap | bytes) -> tuple[int, int]:
    at = data.rfind(b"PK\x05\x06", max(0, len(data) - 65557))
    if at < 0:
        raise ValueError("no end of central directory")
    _, _, _, _, _, size, offset, _ = EOCD.unpack_from(data, at)
    if offset == 0xFFFFFFFF or size == 0xFFFFFFFF:
        _, _, zip64_at, _ = ZIP64_LOCATOR.unpack_from(data, at - ZIP64_LOCATOR.size)
        fields = ZIP64_EOCD.unpack_from(data, zip64_at)
        size, offset = fields[8], fields[9]
    return offset, offset + size


def _central_entries(data: mmap.mmap | bytes, start: int, end: int) -> Iterator[tuple[str, int, tuple[int, int]]]:
    """(name, local header offset, the entry's own byte range) of each central directory entry."""
    pos = start
    while pos < end:
        fields = CENTRAL.unpack_from(data, pos)
        if fields[0] != 0x02014B50:
            raise ValueError("not a central directory entry")
        name_len, extra_len, comment_len, offset = fields[10], fields[11], fields[12], fields[16]
        name = bytes(data[pos + CENTRAL.size:pos + CENTRAL.size + name_len]).decode("utf-8", "replace")
        extra = bytes(data[pos + CENTRAL.size + name_len:pos + CENTRAL.size + name_len + extra_len])
        if offset == 0xFFFFFFFF:
            offset = _zip64_offset(extra, fields)
        entry_end = pos + CENTRAL.size + name_len + extra_len + comment_len
        yield name, offset, (pos, entry_end)
        pos = entry_end


def _zip64_offset(extra: bytes, fields: tuple[int, ...]) -> int:
    """The local header offset from a zip64 extra field (after the sizes it also holds when they overflow)."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, pos)
        if tag == 1:
            skip = 8 * ((fields[9] == 0xFFFFFFFF) + (fields[8] == 0xFFFFFFFF))
            return int(struct.unpack_from("<Q", extra, pos + 4 + skip)[0])
        pos += 4 + size
    raise ValueError("a zip64 offset without its extra field")


def _span(data: mmap.mmap | bytes, name: str, offset: int, following: int, path: Path) -> Span:
    fields = LOCAL.unpack_from(data, offset)
    if fields[0] != 0x04034B50:
        raise UnsafeArchiveError(f"{path}: {name} has no local header at offset {offset}, expected a bundle zip")
    data_start = offset + LOCAL.size + fields[9] + fields[10]
    size = fields[7]
    if size == 0xFFFFFFFF:  # zip64: the sizes are in the extra field
        size = struct.unpack_from("<Q", data, offset + LOCAL.size + fields[9] + 4 + 8)[0]
    data_end = min(data_start + size, following)
    return Span(name=name, header=(offset, data_start), data=(data_start, data_end), tail=(data_end, following),
                stored=fields[3] == 0)


def inner_layout(data: bytes, base: int) -> Layout | None:
    """The layout of a zip stored inside another (a wheel in a bundle), its offsets those of the outer zip; None
    when the bytes are not a readable zip (they are then matched as bytes)."""
    if not data.startswith(b"PK\x03\x04"):
        return None
    try:
        inner = layout(data, Path("(stored member)"), strip_top=False)
    except (UnsafeArchiveError, struct.error, IndexError, ValueError, KeyError):
        return None

    def move(pair: tuple[int, int]) -> tuple[int, int]:
        return pair[0] + base, pair[1] + base

    members = {name: Span(name=name, header=move(span.header), data=move(span.data), tail=move(span.tail),
                          stored=span.stored) for name, span in inner.members.items()}
    return Layout(top=inner.top, members=members, central={k: move(v) for k, v in inner.central.items()},
                  end=move(inner.end))


# -- matching -------------------------------------------------------------------------------------------------


def aligned_runs(old: bytes, new: bytes, old_at: int, new_at: int) -> list[Copy]:
    """Runs of at least MIN_RUN equal bytes where `new` and `old` are laid side by side (same offset)."""
    length = min(len(old), len(new))
    runs = []
    for start in range(0, length, CHUNK):
        piece = min(CHUNK, length - start)
        a = int.from_bytes(old[start:start + piece], "little")
        b = int.from_bytes(new[start:start + piece], "little")
        xor = (a ^ b).to_bytes(piece, "little")
        runs += [Copy(new_at + start + m.start(), m.end() - m.start(), old_at + start + m.start())
                 for m in re.finditer(b"\x00{%d,}" % MIN_RUN, xor)]
    return runs


def small_diff(old: bytes, new: bytes, old_at: int, new_at: int) -> list[Copy]:
    """Aligned runs from the start and, where those leave bytes, from the end (a name one byte longer)."""
    head = aligned_runs(old, new, old_at, new_at)
    shift = len(new) - len(old)
    if shift == 0 or not old or not new:
        return head
    keep = min(len(old), len(new))
    tail = aligned_runs(old[len(old) - keep:], new[len(new) - keep:], old_at + len(old) - keep,
                        new_at + len(new) - keep)
    return merge_disjoint(head, tail)


def merge_disjoint(first: list[Copy], second: list[Copy]) -> list[Copy]:
    """`first`, plus the parts of `second` that cover new bytes `first` does not."""
    covered = sorted((c.new, c.new + c.length) for c in first)
    result = list(first)
    for copy in second:
        start, end = copy.new, copy.new + copy.length
        for a, b in covered:
            if b <= start or a >= end:
                continue
            if a > start and a - start >= MIN_RUN:
                result.append(Copy(start, a - start, copy.old + start - copy.new))
            start = max(start, b)
            if start >= end:
                break
        if end - start >= MIN_RUN:
            result.append(Copy(start, end - start, copy.old + start - copy.new))
    return result


class AnchorIndex:
    """The old zip's anchor keys (KEY bytes from each position holding an anchor byte), first position wins."""

    def __init__(self, old: mmap.mmap | bytes) -> None:
        self.old = old
        self.pattern = anchor_pattern(len(old))
        self.index: dict[bytes, int] = {}
        for match in self.pattern.finditer(old):
            at = match.start()
            self.index.setdefault(bytes(old[at:at + KEY]), at)

    def matches(self, new: mmap.mmap | bytes, start: int, end: int) -> Iterator[Copy]:
        """Copies covering what of new[start:end] the old zip holds, in order, none overlapping."""
        cursor = start
        search = self.pattern.search
        found = search(new, cursor, end - KEY + 1)
        while found is not None:
            at = found.start()
            old_at = self.index.get(bytes(new[at:at + KEY]))
            if old_at is None:
                found = search(new, at + 1, end - KEY + 1)
                continue
            back = common_backward(self.old, old_at, new, at, min(old_at, at - cursor))
            forward = common_forward(self.old, old_at, new, at, min(len(self.old) - old_at, end - at))
            yield Copy(at - back, back + forward, old_at - back)
            cursor = at + forward
            found = search(new, cursor, end - KEY + 1)


def anchor_pattern(size: int) -> re.Pattern[bytes]:
    """Anchors as dense as the index can afford: one position in 16 (16 byte values) for a zip up to 64 MiB,
    then fewer byte values, so the old zip's index holds about `MAX_ANCHORS` keys; past 1 GiB a byte value
    followed by a quarter of the others (one in 1024). A run both zips share is found once it spans a few
    anchors: about 50 bytes for the quickstarts, where a changed binary's deflated bytes still hold short runs
    of the old one's."""
    values = min(len(ANCHOR_BYTES), max(1, MAX_ANCHORS * 256 // max(size, 1)))
    if size > 1 << 30:
        return re.compile(b"\x8a[\x00-\x3f]")
    return re.compile(b"[" + b"".join(re.escape(bytes([v])) for v in ANCHOR_BYTES[:values]) + b"]")


def common_forward(a: mmap.mmap | bytes, ai: int, b: mmap.mmap | bytes, bi: int, limit: int) -> int:
    """How many bytes from a[ai] and b[bi] are equal (at most `limit`): galloping, then halving."""
    done, step = 0, 64
    while done < limit:
        step = min(step, limit - done)
        if a[ai + done:ai + done + step] == b[bi + done:bi + done + step]:
            done += step
            step = min(step * 2, CHUNK)
        elif step == 1:
            break
        else:
            step //= 2
    return done


def common_backward(a: mmap.mmap | bytes, ai: int, b: mmap.mmap | bytes, bi: int, limit: int) -> int:
    """How many bytes before a[ai] and b[bi] are equal (at most `limit`)."""
    done, step = 0, 64
    while done < limit:
        step = min(step, limit - done)
        if a[ai - done - step:ai - done] == b[bi - done - step:bi - done]:
            done += step
            step = min(step * 2, CHUNK)
        elif step == 1:
            break
        else:
            step //= 2
    return done
