"""Safe reading of the zip and tar archives a bundle is built from.

Every input archive is untrusted: it comes from a mirror, a colleague's share or a truncated download,
and its member names become paths on a Windows machine. So an archive is validated entry by entry when
it is opened, before anything is read or written, and reading still counts bytes, because a header can
lie about sizes. zipfile and tarfile exceptions never leave this module: they become
`UnsafeArchiveError`s that name the archive (through the caller's `label`) and the entry.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import unicodedata
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from bundler.derived import known_sha256
from bundler.errors import (
    BuildError,
    InputUnavailableError,
    UnsafeArchiveError,
)
from bundler.hashing import CHUNK
from bundler.readers.archive_formats import is_archive, open_reader
from bundler.readers.archive_reader import DEFAULT_LIMITS, Limits, RawEntry, Reader, translated_errors, unsafe
from bundler.readers.tar_reader import check_tar_budget

# The archive API the rest of the build uses: `SafeArchive` and what describes its limits and inputs.
__all__ = ["DEFAULT_LIMITS", "Entry", "Limits", "SafeArchive", "check_tar_budget", "is_archive"]


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One validated member: a posix path that is safe to create under any extraction folder."""

    name: str
    size: int
    is_dir: bool


# How many members of a zip are written at once: the build's inputs are extracted on a 2-core machine
# as on a 32-core one, and beyond a few threads the file system, not inflating, is the limit.
EXTRACT_THREADS = min(4, os.cpu_count() or 1)
# read() holds a member in memory; anything bigger must be streamed so peak memory stays flat.
_READ_LIMIT = 256 * 1024 * 1024


_RESERVED_STEMS = frozenset(
    ["CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"] + [f"{port}{n}" for port in ("COM", "LPT") for n in "0123456789¹²³"]
)
_FORBIDDEN_CHARS = frozenset('<>:"|?*')
_DRIVE = re.compile(r"[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SEPARATORS = re.compile(r"[/\\]")
# A component `_check_component` accepts without looking further: not a reserved stem (CON, COM1.txt), at
# least one character, none of them special, not ending in a dot. Reserved stems with a superscript digit
# or a `$` (COM¹, CONIN$) cannot match the character set.
_PLAIN_COMPONENT = r"(?!(?i:CON|PRN|AUX|NUL|COM[0-9]|LPT[0-9])(?:[./]|$))[A-Za-z0-9_+.-]*[A-Za-z0-9_+-]"
_PLAIN_NAME = re.compile(rf"{_PLAIN_COMPONENT}(?:/{_PLAIN_COMPONENT})*/?")


def _clean_name(raw: str, *, label: str, limits: Limits) -> str:
    """The posix path a member may be extracted to, or an error naming the rule it breaks.

    A name made only of ASCII letters, digits and `_+-.`, in components that are not reserved device
    names and do not end in a dot (most of a wheel's thousands) passes every rule of `_checked_name`
    as it is: one regular expression says so, and only the others are taken apart rule by rule.
    """
    if _PLAIN_NAME.fullmatch(raw) and len(name := raw.rstrip("/")) <= limits.max_path_length:
        return name
    return _checked_name(raw, label=label, limits=limits)


def _checked_name(raw: str, *, label: str, limits: Limits) -> str:
    def fail(problem: str) -> UnsafeArchiveError:
        return unsafe(label, raw, problem)

    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise fail("has a name that is not valid UTF-8") from None
    if control := _CONTROL.search(raw):  # a regular expression: a wheel of sympy names 7000 members
        raise fail(f"has the control character U+{ord(control.group()):04X} in its name")
    if raw[:2] in ("//", "\\\\", "/\\", "\\/"):
        raise fail("is a UNC path (\\\\server\\share); expected a path relative to the archive root")
    if raw.startswith(("/", "\\")):
        raise fail("is an absolute path; expected a path relative to the archive root")
    if _DRIVE.match(raw):
        raise fail("starts with a drive letter; expected a path relative to the archive root")
    parts = [part for part in _SEPARATORS.split(raw) if part not in ("", ".")]
    if ".." in parts:
        raise fail("has a '..' component (path traversal); expected it to stay inside the extraction folder")
    for part in parts:
        _check_component(part, fail=fail)
    name = "/".join(parts)
    if len(name) > limits.max_path_length:
        raise fail(f"has a path of {len(name)} characters, above the limit of {limits.max_path_length} "
                   f"(Windows MAX_PATH budget)")
    return name


def _check_component(part: str, *, fail: Callable[[str], UnsafeArchiveError]) -> None:
    if bad := sorted(_FORBIDDEN_CHARS.intersection(part)):
        raise fail(f"has the character {bad[0]!r} in {part!r}, which Windows forbids in file names")
    if part.split(".")[0].rstrip(" ").upper() in _RESERVED_STEMS:
        raise fail(f"has the component {part!r}, a reserved device name on Windows")
    if part.endswith((".", " ")):
        raise fail(f"has the component {part!r} ending in a dot or space, which Windows silently strips")


_LINK_PROBLEMS = {
    "symlink": "is a symbolic link; bundles carry regular files and folders only",
    "hardlink": "is a hard link; bundles carry regular files and folders only",
    "device": "is a device, fifo or socket; bundles carry regular files and folders only",
    "other": "has an entry type that is neither a regular file nor a folder",
}


@dataclass(frozen=True, kw_only=True)
class _Member:
    entry: Entry
    raw: RawEntry


class _Catalogue:
    """Accumulates members while enforcing the rules that span entries: counts, totals, collisions."""

    def __init__(self, *, label: str, limits: Limits) -> None:
        self._label, self._limits = label, limits
        self.members: dict[str, _Member] = {}
        self._folded: dict[str, str] = {}
        self._total = 0
        self._count = 0

    def add(self, raw: RawEntry) -> None:
        self._count += 1
        if self._count > self._limits.max_members:
            raise unsafe(self._label, raw.name, f"is beyond the limit of {self._limits.max_members} members")
        if raw.kind in _LINK_PROBLEMS:
            raise unsafe(self._label, raw.name, _LINK_PROBLEMS[raw.kind])
        self._total += raw.size
        if self._total > self._limits.max_total_size:
            raise unsafe(self._label, raw.name, f"brings the uncompressed total to {self._total} bytes, above "
                                                 f"the limit of {self._limits.max_total_size}")
        if raw.kind == "dir" and raw.name in (".", "./"):
            return  # the root folder itself, as `tar -C dir .` writes it
        name = _clean_name(raw.name, label=self._label, limits=self._limits)
        self._register(name, raw)

    def _register(self, name: str, raw: RawEntry) -> None:
        if name in self.members:
            first = self.members[name].raw.name
            raise unsafe(self._label, raw.name, f"is a duplicate of the earlier entry {first!r}")
        folded = (name if name.isascii() else unicodedata.normalize("NFC", name)).casefold()  # ASCII is NFC
        if folded in self._folded:
            raise unsafe(self._label, raw.name, f"collides with the entry {self._folded[folded]!r} on a "
                                                 f"case-insensitive or Unicode-normalising file system")
        self._folded[folded] = name
        entry = Entry(name=name, size=raw.size, is_dir=raw.kind == "dir")
        self.members[name] = _Member(entry=entry, raw=raw)

    def check_folders(self) -> None:
        """A file whose name another entry uses as a folder cannot be extracted on any file system."""
        folders = {folded.rsplit("/", 1)[0] for folded in self._folded if "/" in folded}
        folders |= {parent for folder in folders for parent in _parents(folder)}
        for folded, name in self._folded.items():
            if folded in folders and not self.members[name].entry.is_dir:
                raise unsafe(self._label, self.members[name].raw.name,
                              "is a file, but other entries use the same name as a folder")


def _parents(folder: str) -> Iterator[str]:
    while "/" in folder:
        folder = folder.rsplit("/", 1)[0]
        yield folder


class _CountedStream(io.RawIOBase):
    """Counts what a member really yields, so a header that lies about the size cannot get past us."""

    def __init__(self, inner: BinaryIO, *, label: str, fmt: str, name: str, declared: int) -> None:
        super().__init__()
        self._inner, self._label, self._fmt, self._name, self._declared = inner, label, fmt, name, declared
        self._count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]  # io passes a memoryview
        with translated_errors(self._label, self._fmt, self._name):
            data = self._inner.read(len(buffer))
        self._count += len(data)
        if self._count > self._declared:
            raise unsafe(self._label, self._name, f"expands beyond the {self._declared} bytes its header declares "
                                                   f"(zip bomb or corrupt header)")
        if not data and len(buffer) and self._count != self._declared:
            raise unsafe(self._label, self._name, f"ends after {self._count} bytes but its header declares "
                                                   f"{self._declared} (corrupt or truncated archive)")
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
        super().close()


class SafeArchive:
    """A zip or tar whose every entry has been checked; use `SafeArchive.open` as a context manager."""

    def __init__(self, *, reader: Reader, label: str, members: dict[str, _Member]) -> None:
        self._reader, self._label, self._members = reader, label, members
        self.entries: tuple[Entry, ...] = tuple(member.entry for member in members.values())

    @classmethod
    def open(cls, path: Path, *, label: str, limits: Limits = DEFAULT_LIMITS) -> SafeArchive:
        """Open and validate every entry now, so that nothing is extracted from an archive that is unsafe."""
        reader = open_reader(path, label=label, limits=limits)
        try:
            catalogue = _Catalogue(label=label, limits=limits)
            for raw in reader.members():
                catalogue.add(raw)
            catalogue.check_folders()
        except BaseException:
            reader.close()
            raise
        return cls(reader=reader, label=label, members=catalogue.members)

    def __enter__(self) -> SafeArchive:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def zip_info(self, name: str) -> zipfile.ZipInfo | None:
        """The zip entry behind the checked name `name` (None in a tar): where its compressed bytes lie."""
        handle = self._member(name).raw.handle
        return handle if isinstance(handle, zipfile.ZipInfo) else None

    def names(self) -> list[str]:
        return [entry.name for entry in self.entries]

    def read(self, name: str) -> bytes:
        """The whole member in memory; big members go through `open_member` so memory stays flat."""
        entry = self._member(name).entry
        if entry.size > _READ_LIMIT:
            msg = (f"{self._label}: entry {name!r} is {entry.size} bytes, too big to read into memory "
                   f"(limit {_READ_LIMIT}); stream it with open_member or extract it")
            raise BuildError(msg)
        with self.open_member(name) as stream:
            return stream.read()

    def entry(self, name: str) -> Entry:
        return self._member(name).entry

    def open_member(self, name: str) -> BinaryIO:
        member = self._member(name)
        if member.entry.is_dir:
            raise unsafe(self._label, name, "is a folder and has no content to read")
        inner = self._reader.open(member.raw)
        counted = _CountedStream(inner, label=self._label, fmt=self._reader.fmt, name=name,
                                 declared=member.entry.size)
        return io.BufferedReader(counted, buffer_size=CHUNK)

    def extract(self, dest: Path, *, members: Iterable[str] | None = None) -> list[Path]:
        """Write the chosen entries (all by default) under `dest`; returns their paths in archive order.

        Only regular files and folders are created, with fresh modes and times: nothing the archive says
        about owners, mtimes or permissions beyond "executable" reaches the target machine.
        """
        chosen = self._select(members)
        _make_folders(dest, label=self._label, name=None)
        root = dest.resolve(strict=True)
        written, files = [], []
        for member in chosen:
            target = self._target(root, member.entry.name)
            if member.entry.is_dir:
                target.mkdir(parents=True, exist_ok=True)
            else:
                files.append((member, target))
            written.append(target)
        self._write_files(files)
        return written

    def close(self) -> None:
        self._reader.close()

    def _member(self, name: str) -> _Member:
        if name not in self._members:
            raise InputUnavailableError(f"{self._label} has no entry {name!r}")
        return self._members[name]

    def _select(self, names: Iterable[str] | None) -> list[_Member]:
        if names is None:
            return list(self._members.values())
        wanted = {self._member(name).entry.name for name in names}
        return [member for name, member in self._members.items() if name in wanted]

    def _target(self, root: Path, name: str) -> Path:
        """Resolve again at extraction time: a link already inside `dest` could redirect a valid name."""
        target = root.joinpath(*name.split("/"))
        self._require_inside(root, target, name)
        _make_folders(target.parent, label=self._label, name=name)
        self._require_inside(root, target, name)  # a folder may have appeared, or been swapped for a link
        return target

    def _require_inside(self, root: Path, target: Path, name: str) -> None:
        if not target.resolve().is_relative_to(root):
            raise unsafe(self._label, name, f"would be written outside {root} through a link already there")

    def _write_files(self, files: Sequence[tuple[_Member, Path]]) -> None:
        """Inflating and creating files wait mostly outside the GIL (ISA-L, the file system): a zip's members
        are written on a few threads, the largest first; a tar, one stream, in order. Every target's folder
        was made, and checked to lie inside the extraction folder, before the first file is written."""
        if not self._reader.parallel or len(files) < 2:
            for member, target in files:
                self._write_file(member, target)
            return
        largest_first = sorted(files, key=lambda file: -file[0].entry.size)
        with ThreadPoolExecutor(max_workers=min(EXTRACT_THREADS, len(files))) as pool:
            for written in [pool.submit(self._write_file, member, target) for member, target in largest_first]:
                written.result()

    def _write_file(self, member: _Member, target: Path) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        with self.open_member(member.entry.name) as source:
            try:
                digest = hashlib.sha256()
                with os.fdopen(os.open(target, flags, 0o644), "wb") as out:
                    while chunk := source.read(CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
            except BaseException as exc:
                target.unlink(missing_ok=True)
                if isinstance(exc, OSError):
                    msg = f"{self._label}: entry {member.entry.name!r} cannot be written to {target}: {exc.strerror}"
                    raise BuildError(msg) from exc
                raise
        os.chmod(target, 0o755 if member.raw.executable else 0o644)
        known_sha256(target, digest.hexdigest())  # hashed on its way out: whoever hashes it next is answered


def _make_folders(folder: Path, *, label: str, name: str | None) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        who = f"{label}: entry {name!r} needs" if name is not None else f"{label}: extracting needs"
        raise BuildError(f"{who} the folder {folder}, which cannot be created: {exc.strerror}") from exc


