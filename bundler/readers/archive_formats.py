"""Which archive a file is, judged by its content (extensions lie: a .whl is a zip, a .tgz may be a plain
.tar), and the reader that opens it (`zip_reader`, `tar_reader`)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from bundler.errors import InputUnavailableError, UnsafeArchiveError
from bundler.readers.archive_reader import Limits, Reader
from bundler.readers.tar_reader import COMPRESSION, TAR_BLOCK, TarReader, holds_tar, is_tar_header
from bundler.readers.zip_reader import EMPTY_MAGIC, LOCAL_HEADER_MAGIC, ZipReader


def _sniff(path: Path) -> str | None:
    """The container kind from the leading bytes; extensions lie (a .whl is a zip, a .tgz may be a .tar)."""
    if path.is_dir():
        return None
    try:
        with path.open("rb") as raw:
            head = raw.read(TAR_BLOCK)
    except OSError as exc:
        raise InputUnavailableError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if head.startswith((LOCAL_HEADER_MAGIC, EMPTY_MAGIC)):
        return "zip"
    for kind, (magic, _, _) in COMPRESSION.items():
        if head.startswith(magic):
            return kind
    if is_tar_header(head):
        return "tar"
    return "zip" if zipfile.is_zipfile(path) else None  # a zip behind a stub, e.g. self-extracting


def is_archive(path: Path) -> bool:
    """Whether `path` holds a zip or a (possibly compressed) tar, judged by content.

    A compressed stream counts only if it holds a tar; one too damaged to tell counts, so that
    `SafeArchive.open` can name the damage instead of the caller treating it as a plain file. A folder is
    not an archive; a file that cannot be read raises `InputUnavailableError`.
    """
    kind = _sniff(path)
    if kind not in COMPRESSION:
        return kind is not None
    try:
        return holds_tar(path, kind, label=str(path))
    except UnsafeArchiveError:
        return True


def open_reader(path: Path, *, label: str, limits: Limits) -> Reader:
    if not path.is_file():
        raise InputUnavailableError(f"{label} is missing or not a file: {path}")
    kind = _sniff(path)
    if kind is None:
        raise UnsafeArchiveError(f"{label} is neither a zip nor a tar archive (judged by its content)")
    if kind == "zip":
        return ZipReader(path, label=label, limits=limits)
    return TarReader(path, kind=kind, label=label, limits=limits)
