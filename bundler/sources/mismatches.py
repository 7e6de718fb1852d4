"""What `fetch` saw when an input's bytes did not match its pin, kept for the `build` that follows.

`build` reads only the cache, and a file whose hash did not match never enters it: without this note
the next build could only say "not in the cache, run fetch first", which sends the user to repeat the
step that already told them the real problem (issue 26, defect 9). The note is keyed by the input's
source and pins, so correcting either makes it moot, and a later successful fetch removes it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from bundler.manifest import Input
from bundler.sources.cache import Cache

FOLDER = "mismatches"


def _note(cache: Cache, item: Input) -> Path:
    key = hashlib.sha256(f"{item.kind}\0{item.location}\0{' '.join(item.sha256)}".encode()).hexdigest()
    return cache.work_dir(FOLDER) / f"{key}.txt"  # checked as every store is: its text reaches the user


def remember(cache: Cache, item: Input, message: str) -> None:
    """Best effort: a cache that cannot take the note still had the mismatch reported by fetch itself."""
    note = _note(cache, item)
    try:
        note.parent.mkdir(parents=True, exist_ok=True)
        tmp = note.with_name(f".{note.name}.{os.getpid()}.tmp")
        tmp.write_text(message, encoding="utf-8")
        os.replace(tmp, note)
    except OSError:
        pass


def forget(cache: Cache, item: Input) -> None:
    try:
        _note(cache, item).unlink(missing_ok=True)
    except OSError:
        pass


def recalled(cache: Cache, item: Input) -> str | None:
    """The mismatch fetch last reported for exactly this source and pin, if any."""
    try:
        return _note(cache, item).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
