"""Apply a delta bundle: rebuild a release zip from the previous release's zip and a `.delta` file.

    python3 -I delta_apply.py OLD.zip DELTA -o DIR    (or run.sh --apply …, ort-bundler apply …)

A release moves into an air-gapped site as a few megabytes instead of gigabytes: the delta says which byte
ranges of OLD to copy and carries the bytes OLD does not have, and this file, which every bundle ships as
`ort_bundle/delta_apply.py`, puts them together. It runs on the far side with the interpreter the old
release installed (or any Python 3.8+), with the standard library only. The delta is data, never code.

Nothing is compressed here: members are written as the stored bytes they were published with (copied from OLD
or carried by the delta, whose own bytes are only decompressed), so the result does not depend on this zlib.
The result is written beside its final name (hashed on a thread beside the copy, and synced to disk as it grows),
flushed, and renamed into place only when its sha256 is the one the delta records; a refusal is one sentence, its own exit code (EXIT_CODES), and leaves nothing behind.
The format (version 1), documented in the docs' reference ("Delta bundles"):

    MAGIC (8 bytes) VERSION (1 byte) HEADER_LEN (4 bytes, big-endian) HEADER (UTF-8 JSON)
    OPS_STORED (header "ops"."stored_size" bytes: the ops, compressed by "ops"."method")
    LITERAL CHUNK x header "literals"."chunks": METHOD (1 byte) STORED_SIZE RAW_SIZE (4 bytes each) STORED
    TRAILER (32 bytes): the sha256 of every byte before it

An op is a varint TAG (kind = TAG & 1, length = TAG >> 1, at least 1): kind 0 copies `length` bytes of OLD
from `previous copy's end + zigzag varint`, kind 1 inserts the next `length` bytes of the literal stream
(the chunks' raw bytes, in order). Varints are unsigned LEB128.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import mmap
import os
import queue
import shutil
import struct
import sys
import threading
import zipfile
import zlib
from dataclasses import dataclass
from typing import BinaryIO, Dict, Iterator, List, Optional, Sequence, Tuple, Union

MAGIC = b"ORTDELTA"
VERSION = 1
PREAMBLE = struct.Struct(">8sBI")  # magic, version, header length
CHUNK_HEAD = struct.Struct(">BII")  # a literal chunk's method, stored size, raw size
TRAILER_SIZE = 32
METHODS = {0: "raw", 1: "xz", 2: "zlib"}  # a literal chunk's (and the ops') compression, by its byte
COPY, INSERT = 0, 1
#: Bounds on what a delta may declare, checked before anything is allocated or written.
MAX_HEADER = 1 << 20
MAX_OPS = 256 << 20
MAX_CHUNK = 16 << 20
MAX_RESULT = 1 << 40
BUFFER = 1 << 20
SYNC_EVERY = 128 << 20
#: One exit code per refusal (bundler/errors.py has the same numbers for `ort-bundler apply`).
EXIT_CODES = {"usage": 2, "unavailable": 4, "damaged": 20, "oversize": 21, "other_bundle": 22, "wrong_old": 23,
              "outside_old": 24}


class DeltaError(Exception):
    """A refusal: `kind` is a key of EXIT_CODES, the message one sentence."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.code = kind, EXIT_CODES[kind]


@dataclass(frozen=True)
class Release:
    """One side of a delta, as its header records it: the zip's file name and top folder, what it is, its hash."""

    file: str
    top: str
    name: str
    version: str
    platform: str
    sha256: str
    size: int

    @classmethod
    def from_json(cls, data: object, side: str) -> Release:
        if not isinstance(data, dict):
            raise DeltaError("damaged", f"the delta's header has no \"{side}\" table")
        try:
            fields = {key: data[key] for key in ("file", "top", "name", "version", "platform", "sha256")}
            size = data["size"]
        except KeyError as exc:
            raise DeltaError("damaged", f"the delta's header lacks \"{side}\".\"{exc.args[0]}\"") from None
        if not all(isinstance(value, str) for value in fields.values()) or not _is_size(size):
            raise DeltaError("damaged", f"the delta's header has a malformed \"{side}\" table")
        if os.path.basename(fields["file"]) != fields["file"] or not fields["file"].endswith(".zip"):
            raise DeltaError("damaged", f"the delta's header names \"{fields['file']}\", expected a plain .zip name")
        return cls(size=size, **fields)

    def describe(self) -> str:
        return f"{self.name} {self.version} for {self.platform}"


@dataclass(frozen=True)
class Header:
    """What the delta's JSON header declares."""

    old: Release
    new: Release
    new_sha256_line: str
    ops_method: int
    ops_stored: int
    ops_size: int
    ops_count: int
    literal_size: int
    chunks: int


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class HashingReader:
    """The delta, read once, front to back: every byte read goes into its sha256."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle, self.digest = handle, hashlib.sha256()

    def exactly(self, size: int, what: str) -> bytes:
        data = self.handle.read(size)
        if len(data) != size:
            raise DeltaError("damaged", f"the delta ends inside {what} (truncated)")
        self.digest.update(data)
        return data


def read_header(reader: HashingReader) -> Header:
    magic, version, length = PREAMBLE.unpack(reader.exactly(PREAMBLE.size, "its preamble"))
    if magic != MAGIC:
        raise DeltaError("damaged", "the file does not start like an ort-bundler delta (no ORTDELTA magic)")
    if version != VERSION:
        raise DeltaError("damaged", f"the delta is format {version}, this applier reads format {VERSION}")
    if length > MAX_HEADER:
        raise DeltaError("oversize", f"the delta declares a {length}-byte header, expected at most {MAX_HEADER}")
    try:
        data = json.loads(reader.exactly(length, "its header").decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise DeltaError("damaged", "the delta's header is not valid JSON") from None
    if not isinstance(data, dict) or data.get("format") != VERSION:
        raise DeltaError("damaged", f"the delta's header is not a format-{VERSION} delta header")
    return _header(data)


def _header(data: Dict[str, object]) -> Header:
    old, new = Release.from_json(data.get("old"), "old"), Release.from_json(data.get("new"), "new")
    ops, literals, line = data.get("ops"), data.get("literals"), data.get("new_sha256_line")
    if not isinstance(ops, dict) or not isinstance(literals, dict) or not isinstance(line, str):
        raise DeltaError("damaged", "the delta's header lacks its \"ops\", \"literals\" or \"new_sha256_line\"")
    numbers = [ops.get("stored_size"), ops.get("size"), ops.get("count"), literals.get("size"), literals.get("chunks")]
    if ops.get("method") not in METHODS or not all(_is_size(n) for n in numbers):
        raise DeltaError("damaged", "the delta's header has a malformed \"ops\" or \"literals\" table")
    if line != f"{new.sha256}  {new.file}\n":
        raise DeltaError("damaged", "the delta's header records a .sha256 line that does not name its new zip")
    header = Header(old, new, line, ops["method"], *numbers)  # type: ignore[arg-type]
    _check_declared(header)
    return header


def _check_declared(header: Header) -> None:
    """Every size the header declares, bounded before anything is allocated or written."""
    bounds = [("result", header.new.size, MAX_RESULT), ("ops section", header.ops_stored, MAX_OPS),
              ("decompressed ops", header.ops_size, MAX_OPS), ("literal stream", header.literal_size, header.new.size),
              ("op count", header.ops_count, header.new.size + 1), ("OLD", header.old.size, MAX_RESULT)]
    for what, value, limit in bounds:
        if value > limit:
            raise DeltaError("oversize", f"the delta declares a {what} of {value} bytes, expected at most {limit}")


def _decompress(method: int, data: bytes, size: int, what: str) -> bytes:
    """`data` decompressed to exactly `size` bytes (never more is produced: a bomb stops at size + 1)."""
    try:
        if method == 0:
            raw = data
        else:
            decoder = lzma.LZMADecompressor(format=lzma.FORMAT_XZ) if method == 1 else zlib.decompressobj()
            raw = decoder.decompress(data, size + 1)
            if not decoder.eof or decoder.unused_data:
                raise DeltaError("damaged", f"the delta's {what} is not one whole {METHODS[method]} stream")
    except (lzma.LZMAError, zlib.error) as exc:
        raise DeltaError("damaged", f"the delta's {what} does not decompress ({exc})") from None
    if len(raw) != size:
        raise DeltaError("damaged", f"the delta's {what} holds {len(raw)} bytes, its header declares {size}")
    return raw


def parse_ops(raw: bytes, header: Header) -> List[Tuple[int, int, int]]:
    """(kind, length, OLD offset or -1) of every op, each checked against OLD's size and the result's."""
    ops: List[Tuple[int, int, int]] = []
    pos, copy_end, total, inserted = 0, 0, 0, 0
    while pos < len(raw):
        tag, pos = _varint(raw, pos)
        kind, length = tag & 1, tag >> 1
        if length == 0:
            raise DeltaError("damaged", f"op {len(ops)} of the delta has length 0")
        if kind == COPY:
            step, pos = _varint(raw, pos)
            offset = copy_end + ((step >> 1) ^ -(step & 1))
            if offset < 0 or offset + length > header.old.size:
                raise DeltaError("outside_old", f"op {len(ops)} of the delta copies bytes {offset}-{offset + length} "
                                                f"of OLD, which has {header.old.size} bytes")
            copy_end = offset + length
            ops.append((COPY, length, offset))
        else:
            inserted += length
            ops.append((INSERT, length, -1))
        total += length
        if total > header.new.size or len(ops) > header.ops_count:
            raise DeltaError("oversize", f"the delta's ops write more than the {header.new.size} bytes it declares")
    if total != header.new.size or inserted != header.literal_size or len(ops) != header.ops_count:
        raise DeltaError("damaged", f"the delta's {len(ops)} ops write {total} bytes ({inserted} inserted), its "
                                    f"header declares {header.ops_count} ops, {header.new.size} ({header.literal_size})")
    return ops


def _varint(data: bytes, pos: int) -> Tuple[int, int]:
    value, shift = 0, 0
    while pos < len(data) and shift < 64:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise DeltaError("damaged", "the delta's ops end inside a number")


class Literals:
    """The literal stream: chunk after chunk of the delta, decompressed as the inserts need them."""

    def __init__(self, reader: HashingReader, chunks: int) -> None:
        self.reader, self.left, self.buffer, self.pos = reader, chunks, b"", 0

    def take(self, size: int) -> Iterator[bytes]:
        while size:
            if self.pos == len(self.buffer):
                self._next_chunk()
            piece = self.buffer[self.pos:self.pos + size]
            self.pos += len(piece)
            size -= len(piece)
            yield piece

    def _next_chunk(self) -> None:
        if not self.left:
            raise DeltaError("damaged", "the delta's inserts need more bytes than its literal chunks hold")
        self.left -= 1
        method, stored, size = CHUNK_HEAD.unpack(self.reader.exactly(CHUNK_HEAD.size, "a literal chunk's head"))
        if method not in METHODS:
            raise DeltaError("damaged", f"a literal chunk of the delta has the unknown method {method}")
        if stored > MAX_CHUNK + 4096 or size > MAX_CHUNK or size == 0:
            raise DeltaError("oversize", f"a literal chunk of the delta declares {stored} stored and {size} raw "
                                         f"bytes, expected 1 to {MAX_CHUNK}")
        data = self.reader.exactly(stored, "a literal chunk")
        self.buffer, self.pos = _decompress(method, data, size, "literal chunk"), 0


def check_old(path: str, release: Release) -> None:
    """OLD must be the zip the delta was made from: another bundle and another release are told apart here,
    by its top folder and size; its sha256 is `OldHash`'s, computed while the result is written."""
    try:
        size = os.path.getsize(path)
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except OSError as exc:
        raise DeltaError("unavailable", f"cannot read {path} ({exc.strerror or exc})") from None
    except (zipfile.BadZipFile, ValueError):
        raise DeltaError("wrong_old", f"{path} is not a zip file; this delta updates {release.file}") from None
    top = names[0].split("/")[0] if names else ""
    if top != release.top and not (top.startswith(release.name + "-") and top.endswith("-" + release.platform)):
        raise DeltaError("other_bundle", f"{path} holds {top or 'nothing'}, but this delta is for {release.describe()} "
                                         f"({release.file}): it belongs to another bundle")
    if size != release.size:
        raise _wrong_old(path, release, f"{size} bytes")


def _wrong_old(path: str, release: Release, found: str) -> DeltaError:
    return DeltaError("wrong_old", f"{path} has {found}, but this delta was made from {release.file} with "
                                   f"{release.size} bytes and sha256 {release.sha256}: use that very zip as OLD")


class OldHash(threading.Thread):
    """OLD's sha256, read once, front to back, on a thread of its own while the result is written (hashlib
    and file reads release the GIL): the check costs no time of its own. The result is renamed into place only
    after it matched."""

    def __init__(self, path: str) -> None:
        super().__init__(daemon=True)
        self.path, self.hexdigest = path, ""
        self.start()

    def run(self) -> None:
        try:
            self.hexdigest = _file_sha256(self.path)
        except OSError as exc:
            self.hexdigest = f"unreadable ({exc.strerror or exc})"

    def check(self, release: Release) -> None:
        self.join()
        if self.hexdigest != release.sha256:
            raise _wrong_old(self.path, release, f"sha256 {self.hexdigest}")


def _file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(BUFFER), b""):
            digest.update(block)
    return digest.hexdigest()


def check_room(folder: str, size: int) -> None:
    existing = os.path.abspath(folder)
    while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    free = shutil.disk_usage(existing).free
    if size > free:
        raise DeltaError("oversize", f"the delta declares a {size}-byte result, and {existing} has {free} bytes free")


class ResultHash(threading.Thread):
    """The result's sha256, taken on a thread of its own from the very bytes the writer is handed (views of the
    mapped OLD, literal pieces) while the writer copies them: hashing costs more than copying (about 0.8 s
    against 0.4 s a GB on a 2-core machine), so hashing in line made the copy wait for it. The queue holds a
    few pieces only (a literal piece is at most one 16 MiB chunk)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.pieces: queue.Queue[Optional[Union[bytes, memoryview]]] = queue.Queue(maxsize=8)
        self.digest, self.failure = hashlib.sha256(), ""
        self.start()

    def run(self) -> None:
        piece = self.pieces.get()
        while piece is not None:
            if not self.failure:
                try:
                    self.digest.update(piece)
                except (TypeError, ValueError, BufferError) as exc:  # a piece it cannot read: named, and the
                    self.failure = f"cannot hash the result ({exc})"  # queue still drained (the writer never blocks)
            piece = self.pieces.get()

    def hexdigest(self) -> str:
        """The digest once every piece is hashed (the writer has put the end mark)."""
        self.join()
        if self.failure:
            raise DeltaError("unavailable", self.failure)
        return self.digest.hexdigest()


def write_result(old: BinaryIO, out: BinaryIO, ops: List[Tuple[int, int, int]], literals: Literals,
                 result: ResultHash) -> None:
    """Write the ops' bytes to `out`, handing each to `result` to be hashed beside the copy. OLD is mapped: its
    bytes are hashed where they lie and copied by the kernel (copy_file_range, Linux) or written from the map."""
    view = memoryview(mmap.mmap(old.fileno(), 0, access=mmap.ACCESS_READ))
    kernel, unsynced = hasattr(os, "copy_file_range"), 0
    try:
        for kind, length, offset in ops:
            if kind == INSERT:
                for piece in literals.take(length):
                    result.pieces.put(piece)
                    out.write(piece)
            else:
                result.pieces.put(view[offset:offset + length])
                done = _kernel_copy(old, out, offset, length) if kernel and length >= BUFFER else 0
                kernel = kernel and done == (length if length >= BUFFER else 0)
                out.write(view[offset + done:offset + length])
            unsynced += length
            if unsynced >= SYNC_EVERY and hasattr(os, "fdatasync"):
                out.flush()
                os.fdatasync(out.fileno())  # the disk writes while the hashes run: the last fsync waits for a tail only
                unsynced = 0
    finally:
        result.pieces.put(None)


def _kernel_copy(old: BinaryIO, out: BinaryIO, offset: int, length: int) -> int:
    """How many bytes of OLD the kernel copied to the end of `out` (0 where it cannot: another file system)."""
    out.flush()
    done = 0
    try:
        while done < length:
            step = os.copy_file_range(old.fileno(), out.fileno(), length - done, offset + done)
            if step <= 0:
                break
            done += step
    except OSError:
        pass
    out.seek(0, os.SEEK_END)
    return done


def apply_delta(old_path: str, delta_path: str, out_dir: str) -> Tuple[Header, str]:
    """Rebuild the new zip in `out_dir`; returns the header and the result's path. Nothing stays on a refusal."""
    try:
        handle = open(delta_path, "rb")
    except OSError as exc:
        raise DeltaError("unavailable", f"cannot read {delta_path} ({exc.strerror or exc})") from None
    with handle:
        reader = HashingReader(handle)
        header = read_header(reader)
        check_old(old_path, header.old)
        check_room(out_dir, header.new.size)
        old_hash = OldHash(old_path)  # started at once
        try:
            raw = _decompress(header.ops_method, reader.exactly(header.ops_stored, "its ops"), header.ops_size, "ops")
            ops = parse_ops(raw, header)
            del raw
            return header, _rebuild(old_path, reader, header, ops, out_dir, old_hash)
        except DeltaError:
            old_hash.check(header.old)  # a wrong OLD is the cause to name, whatever else went wrong after it
            raise


def _rebuild(old_path: str, reader: HashingReader, header: Header, ops: List[Tuple[int, int, int]],
             out_dir: str, old_hash: OldHash) -> str:
    created = not os.path.isdir(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    final = os.path.join(out_dir, header.new.file)
    temp = os.path.join(out_dir, f".{header.new.file}.{os.getpid()}.partial")
    sidecar_temp = temp + ".sha256"
    try:
        with open(old_path, "rb") as old, open(temp, "xb") as out:
            literals, result = Literals(reader, header.chunks), ResultHash()
            write_result(old, out, ops, literals, result)
            out.flush()
            os.fsync(out.fileno())  # on disk before its name: a crash leaves no renamed, half-written zip
            actual = result.hexdigest()  # (the hash finishes while the disk syncs)
        _finish_reading(reader, literals)
        old_hash.check(header.old)
        if actual != header.new.sha256:
            raise DeltaError("damaged", f"the rebuilt zip has sha256 {actual}, the delta records {header.new.sha256}")
        with open(sidecar_temp, "w", encoding="utf-8", newline="\n") as sidecar:
            sidecar.write(header.new_sha256_line)
        os.replace(temp, final)
        os.replace(sidecar_temp, final + ".sha256")
    except BaseException as exc:
        for path in (temp, sidecar_temp):
            if os.path.exists(path):
                os.remove(path)
        if created and not os.listdir(out_dir):
            os.rmdir(out_dir)
        if isinstance(exc, OSError):  # a full disk, a result another program holds open (Windows)
            raise DeltaError("unavailable", f"cannot write {final} ({exc.strerror or exc})") from None
        raise
    return final


def _finish_reading(reader: HashingReader, literals: Literals) -> None:
    """Every chunk used, then the trailer: the sha256 of everything read, and nothing after it."""
    if literals.left or literals.pos != len(literals.buffer):
        raise DeltaError("damaged", "the delta carries literal bytes that no insert uses")
    computed = reader.digest.digest()
    trailer = reader.handle.read(TRAILER_SIZE)
    if len(trailer) != TRAILER_SIZE:
        raise DeltaError("damaged", "the delta ends before its trailer (truncated)")
    if reader.handle.read(1):
        raise DeltaError("damaged", "the delta has bytes after its trailer")
    if trailer != computed:
        raise DeltaError("damaged", "the delta's sha256 trailer does not match its content (damaged in transit)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="delta_apply", description="rebuild a release zip from the previous "
                                     "release's zip and a delta made by `ort-bundler delta`")
    parser.add_argument("old", help="the previous release's zip, exactly as published")
    parser.add_argument("delta", help="the .delta file")
    parser.add_argument("-o", "--output", default=".", help="folder for the rebuilt zip and its .sha256")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_CODES["usage"] if exc.code else 0
    try:
        header, result = apply_delta(args.old, args.delta, args.output)
    except DeltaError as exc:
        print(f"apply: refused: {exc}", file=sys.stderr)
        return exc.code
    print(f"rebuilt {result}: {header.new.describe()} (was {header.old.version}), sha256 {header.new.sha256}, "
          "as the delta records; compare it with the sha256 published for that release, or run "
          "`ort-bundler verify --trust` on it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
