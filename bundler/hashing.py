"""Streaming SHA-256, and the wording of a hash mismatch."""

from __future__ import annotations

import hashlib
from pathlib import Path

from bundler.names import redact_url

CHUNK = 1 << 20
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def mismatch_message(what: str, source: str, expected: tuple[str, ...] | str, actual: str) -> str:
    """One sentence; calls out the empty-download trap (docs/facts.md §2), the most common cause."""
    wanted = expected if isinstance(expected, str) else " or ".join(expected)
    msg = f"{what}: hash mismatch for {redact_url(source)}: expected sha256 {wanted}, got {actual}"
    if actual == EMPTY_SHA256:
        msg += " (this is the hash of an empty file: the download or file was empty)"
    return msg
