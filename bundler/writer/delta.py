"""Make a delta bundle: the new release zip as copies of the old one's bytes and inserted bytes.

The format is the applier's (bundler/shipped/ort_bundle/delta_apply.py, which every bundle ships); this module only
writes it. The matching is delta_match.py's. Inserted bytes are compressed here, on the build side, in
chunks of at most `MAX_CHUNK` bytes, each with xz or zlib or stored as it is, whichever is smallest (a
changed model's deflated bytes barely compress again). The ops are compressed the same way. The file is
written beside its final name, hashed as it is written, and renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import mmap
import os
import re
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

from bundler.atomic import write_atomic
from bundler.shipped.ort_bundle.delta_apply import (
    CHUNK_HEAD,
    COPY,
    INSERT,
    MAGIC,
    MAX_CHUNK,
    PREAMBLE,
    VERSION,
    Release,
)
from bundler.writer.delta_match import (
    AnchorIndex,
    Copy,
    Layout,
    Span,
    aligned_runs,
    inner_layout,
    layout,
    small_diff,
)

VERSIONS = re.compile(r"\d+(?:\.\d+)*")  # what a member's name changes from one release of its project to the next
PROBE = 64 << 10  # bytes up to this size are always tried with xz too


@dataclass(frozen=True, kw_only=True)
class MemberChanges:
    """The members (names below the top folder) the new zip adds, drops and carries with other stored bytes."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    unchanged: int

    def to_json(self) -> dict[str, Any]:
        return {"added": list(self.added), "removed": list(self.removed), "changed": list(self.changed),
                "unchanged": self.unchanged}


@dataclass(frozen=True, kw_only=True)
class Plan:
    """The new zip, op by op: (new offset, length, old offset) copies; the bytes between them are inserted."""

    copies: tuple[Copy, ...]
    new_size: int
    members: MemberChanges

    def ops(self) -> Iterator[tuple[int, int, int]]:
        """(kind, length, old offset or new offset of the literal bytes) in the order the applier runs them."""
        pos = 0
        for copy in self.copies:
            if copy.new > pos:
                yield INSERT, copy.new - pos, pos
            yield COPY, copy.length, copy.old
            pos = copy.new + copy.length
        if pos < self.new_size:
            yield INSERT, self.new_size - pos, pos

    @property
    def copied(self) -> int:
        return sum(copy.length for copy in self.copies)


@dataclass(frozen=True, kw_only=True)
class DeltaFile:
    path: Path
    sha256: str
    size: int
    ops: int
    copied: int
    inserted: int


def plan(old_path: Path, new_path: Path) -> Plan:
    with old_path.open("rb") as old_file, new_path.open("rb") as new_file:
        with _mapped(old_file) as old, _mapped(new_file) as new:
            return _plan(old, new, layout(old, old_path), layout(new, new_path))


def _mapped(handle: Any) -> mmap.mmap:
    return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


def _plan(old: mmap.mmap, new: mmap.mmap, before: Layout, after: Layout) -> Plan:
    copies: list[Copy] = []
    leftovers: list[tuple[int, int]] = []
    changed = _pair(old, new, before, after, copies, leftovers, nested=True)
    index = AnchorIndex(old) if any(end - start >= 64 for start, end in leftovers) else None
    for start, end in leftovers:
        if index is not None and end - start >= 64:
            copies += index.matches(new, start, end)
    added = set(after.members) - set(before.members)
    members = MemberChanges(added=tuple(sorted(added)), removed=tuple(sorted(set(before.members) - set(after.members))),
                            changed=tuple(sorted(changed)), unchanged=len(after.members) - len(changed) - len(added))
    return Plan(copies=tuple(_merged(copies)), new_size=len(new), members=members)


def _pair(old: mmap.mmap, new: mmap.mmap, before: Layout, after: Layout, copies: list[Copy],
          leftovers: list[tuple[int, int]], *, nested: bool) -> list[str]:
    """Copies for the members both zips have, their central directory entries and end records; the members
    whose stored bytes changed. A changed wheel (`nested`: a zip stored in the bundle) is paired the same way,
    member by member: a wheel one release on keeps most of its files' deflated bytes."""
    changed = []
    renamed = _renamed(before, after)
    for name, span in after.members.items():
        was = before.members.get(name) or before.members.get(renamed.get(name, ""))
        if was is None:
            leftovers.append((span.header[0], span.tail[1]))
            continue
        copies += _region(old, new, was.header, span.header, leftovers)
        if old[was.data[0]:was.data[1]] == new[span.data[0]:span.data[1]]:
            copies.append(Copy(span.data[0], span.data[1] - span.data[0], was.data[0]))
        else:
            changed += [name] if name in before.members else []
            inner = _inner(old, new, was, span) if nested and was.stored and span.stored else None
            if inner is None:
                copies += _region(old, new, was.data, span.data, leftovers)
            else:
                _pair(old, new, *inner, copies, leftovers, nested=False)
        copies += _region(old, new, was.tail, span.tail, leftovers)
    for name, (start, end) in after.central.items():
        entry = before.central.get(name) or before.central.get(renamed.get(name, ""))
        if entry is not None:
            copies += _region(old, new, entry, (start, end), leftovers)
        else:
            leftovers.append((start, end))
    copies += _region(old, new, before.end, after.end, leftovers)
    return changed


def _renamed(before: Layout, after: Layout) -> dict[str, str]:
    """New name -> old name of the members that only their version numbers tell apart (`numpy-2.4.5-….whl` and
    `numpy-2.4.6-….whl`, `x-1.0.dist-info/RECORD`), where that pairing is unambiguous on both sides."""
    gone = _by_shape(name for name in before.members if name not in after.members)
    came = _by_shape(name for name in after.members if name not in before.members)
    return {came[shape]: gone[shape] for shape in came.keys() & gone.keys()}


def _by_shape(names: Iterable[str]) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    for name in names:
        found.setdefault(VERSIONS.sub("#", name), []).append(name)
    return {shape: group[0] for shape, group in found.items() if len(group) == 1}


def _inner(old: mmap.mmap, new: mmap.mmap, was: Span, span: Span) -> tuple[Layout, Layout] | None:
    before = inner_layout(old[was.data[0]:was.data[1]], was.data[0])
    after = inner_layout(new[span.data[0]:span.data[1]], span.data[0])
    return None if before is None or after is None else (before, after)


def _region(old: mmap.mmap, new: mmap.mmap, was: tuple[int, int], now: tuple[int, int],
            leftovers: list[tuple[int, int]]) -> list[Copy]:
    """Aligned runs between a region and its counterpart; the new bytes they leave go to `leftovers`."""
    before, after = old[was[0]:was[1]], new[now[0]:now[1]]
    runs = small_diff(before, after, was[0], now[0]) if len(after) <= 1 << 16 else aligned_runs(
        before, after, was[0], now[0])
    pos = now[0]
    for run in sorted(runs, key=lambda c: c.new):
        if run.new > pos:
            leftovers.append((pos, run.new))
        pos = run.new + run.length
    if pos < now[1]:
        leftovers.append((pos, now[1]))
    return runs


def _merged(copies: list[Copy]) -> list[Copy]:
    """Sorted, overlaps dropped, and a copy that continues the one before in both zips joined to it."""
    result: list[Copy] = []
    for copy in sorted(copies, key=lambda c: (c.new, -c.length)):
        if result and copy.new < result[-1].new + result[-1].length:
            overlap = result[-1].new + result[-1].length - copy.new
            if copy.length - overlap < 8:
                continue
            copy = Copy(copy.new + overlap, copy.length - overlap, copy.old + overlap)
        if result and result[-1].new + result[-1].length == copy.new and result[-1].old + result[-1].length == copy.old:
            last = result.pop()
            copy = Copy(last.new, last.length + copy.length, last.old)
        result.append(copy)
    return result


# -- encoding -------------------------------------------------------------------------------------------------


def encode_ops(plan: Plan) -> tuple[bytes, int]:
    """The ops as the applier reads them (before compression), and how many there are."""
    out = bytearray()
    count, copy_end = 0, 0
    for kind, length, where in plan.ops():
        out += _varint(length << 1 | kind)
        if kind == COPY:
            step = where - copy_end
            out += _varint(step << 1 if step >= 0 else (-step << 1) - 1)
            copy_end = where + length
        count += 1
    return bytes(out), count


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def compress(raw: bytes) -> tuple[int, bytes]:
    """(method, stored bytes): the smallest of xz, zlib and the bytes as they are. Deflated members (a changed
    model, a rebuilt binary) still shrink by a percent or so with zlib, which costs little; xz, slow on
    megabytes, is tried only where zlib found the bytes compressible (a text, the zips' structure)."""
    candidates = [(0, raw), (2, zlib.compress(raw, 9))]
    if len(raw) <= PROBE or len(candidates[1][1]) < 0.9 * len(raw):
        preset = 9 | lzma.PRESET_EXTREME if len(raw) <= 4 << 20 else 9
        candidates.append((1, lzma.compress(raw, format=lzma.FORMAT_XZ, check=lzma.CHECK_NONE, preset=preset)))
    return min(candidates, key=lambda c: (len(c[1]), c[0]))


def literal_chunks(new: mmap.mmap, plan: Plan) -> Iterator[bytes]:
    """The inserted bytes, in op order, cut into chunks of MAX_CHUNK bytes."""
    pending = bytearray()
    for kind, length, where in plan.ops():
        if kind != INSERT:
            continue
        pending += new[where:where + length]
        while len(pending) >= MAX_CHUNK:
            yield bytes(pending[:MAX_CHUNK])
            del pending[:MAX_CHUNK]
    if pending:
        yield bytes(pending)


def write_delta(plan: Plan, *, new_path: Path, old: Release, new: Release, new_line: str, dest: Path,
                extra: dict[str, Any]) -> DeltaFile:
    """Write the delta to `dest` (atomically) and its `.sha256` beside it."""
    ops_raw, count = encode_ops(plan)
    method, ops_stored = compress(ops_raw)
    inserted = plan.new_size - plan.copied
    header = {"format": VERSION, "old": asdict(old), "new": asdict(new), "new_sha256_line": new_line,
              "ops": {"method": method, "stored_size": len(ops_stored), "size": len(ops_raw), "count": count},
              "literals": {"size": inserted, "chunks": -(-inserted // MAX_CHUNK)}, **extra}
    head = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    digest = hashlib.sha256()
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            size = _write_body(handle, digest, [PREAMBLE.pack(MAGIC, VERSION, len(head)), head, ops_stored],
                               new_path, plan)
        os.chmod(temp, 0o644)
        os.replace(temp, dest)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    sha = _file_sha256(dest)
    write_atomic(dest.with_name(dest.name + ".sha256"), f"{sha}  {dest.name}\n".encode())
    return DeltaFile(path=dest, sha256=sha, size=size, ops=count, copied=plan.copied, inserted=inserted)


def _write_body(handle: BinaryIO, digest: Any, head: list[bytes], new_path: Path, plan: Plan) -> int:
    """The preamble, header and ops, then each literal chunk compressed, then the trailer; returns the size."""
    for piece in head:
        digest.update(piece)
        handle.write(piece)
    with new_path.open("rb") as new_file, _mapped(new_file) as new_map:
        for chunk in literal_chunks(new_map, plan):
            chunk_method, stored = compress(chunk)
            piece = CHUNK_HEAD.pack(chunk_method, len(stored), len(chunk)) + stored
            digest.update(piece)
            handle.write(piece)
    handle.write(digest.digest())
    return int(handle.tell())


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
