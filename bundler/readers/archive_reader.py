"""What every archive format's reader is: the `Reader` protocol and the `RawEntry`s it yields, the `Limits`
it enforces before it writes anything, and the one translation of the standard library's archive errors
into `UnsafeArchiveError`s."""

from __future__ import annotations

import lzma
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from isal import isal_zlib

from bundler.errors import UnsafeArchiveError


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Bounds that keep a hostile or broken archive from exhausting disk, memory or the path budget."""

    max_members: int = 100_000
    max_total_size: int = 8 * 1024**3
    max_ratio: float = 200.0
    max_path_length: int = 200


DEFAULT_LIMITS = Limits()
# Small members compress far beyond any sane ratio (a page of zeros, a padded header) without being a
# threat, so the ratio rule only looks at members, and archives, that expand past this many bytes.
RATIO_GRACE_BYTES = 1024 * 1024


def unsafe(label: str, name: str | None, problem: str) -> UnsafeArchiveError:
    where = f"{label}: entry {name!r}" if name is not None else label
    return UnsafeArchiveError(f"{where} {problem}")


@contextmanager
def translated_errors(label: str, fmt: str, name: str | None = None) -> Iterator[None]:
    """Turn the standard library's archive and decompression errors into one named, actionable error."""
    try:
        yield
    except EOFError as exc:
        msg = f"is a truncated {fmt} stream: it ends before its end marker (an incomplete download?)"
        raise unsafe(label, name, msg) from exc
    except zipfile.BadZipFile as exc:
        raise unsafe(label, name, f"is corrupt zip data ({exc})") from exc
    except tarfile.TarError as exc:
        if str(exc) == "unexpected end of data":
            raise unsafe(label, name, "is a truncated tar: its data ends early (an incomplete download?)") from exc
        raise unsafe(label, name, f"is a corrupt tar ({exc})") from exc
    except (zlib.error, isal_zlib.error, lzma.LZMAError) as exc:  # type: ignore[misc]  # isal types it loosely
        raise unsafe(label, name, f"holds corrupt {fmt} compressed data ({exc})") from exc
    except OSError as exc:  # gzip.BadGzipFile, bz2's "Invalid data stream", or a failing disk
        raise unsafe(label, name, f"cannot be read as {fmt} data ({exc})") from exc


@dataclass(frozen=True, kw_only=True)
class RawEntry:
    """A member as its container describes it, before our rules; `handle` goes back to the reader."""

    name: str
    kind: str  # "file", "dir", "symlink", "hardlink", "device" or "other"
    size: int
    executable: bool
    handle: zipfile.ZipInfo | tarfile.TarInfo


class Reader(Protocol):
    fmt: str
    parallel: bool  # members may be read on several threads at once, each through its own stream

    def members(self) -> Iterator[RawEntry]: ...

    def open(self, raw: RawEntry) -> BinaryIO: ...

    def close(self) -> None: ...
