"""The grammar of every name an input hands us before that name becomes part of a path.

A distribution name read from a capi source's METADATA, a version, a file name taken from a URL: each
ends up in an output path (`<name>-<version>-<tag>.whl`, a cache file, a zip member). A hostile input
that says `Name: /some/absolute/path` must stop here with a sentence naming it, not become a path.
Each check returns the problem as text (for the manifest's list of problems) or raises for readers.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from pathlib import Path

from packaging.version import InvalidVersion, Version

from bundler.errors import BuildError

# PEP 508 / core metadata "Name": letters and digits, with '.', '_' and '-' only between them.
DISTRIBUTION_RE = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
# The public part of a PEP 440 version as it may appear in a file name (no spaces, no separators).
VERSION_TEXT_RE = re.compile(r"^[0-9][0-9A-Za-z.+!_-]*$")
MAX_NAME_LENGTH = 200
WINDOWS_FORBIDDEN = frozenset('<>:"/\\|?*')
WINDOWS_RESERVED = frozenset(
    ["CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"] + [f"{port}{n}" for port in ("COM", "LPT") for n in "0123456789¹²³"]
)
# A Windows drive (C:), which makes a location absolute there even without a leading separator.
_DRIVE_RE = re.compile(r"^[A-Za-z]:")


def reserved_on_windows(name: str) -> bool:
    """`nul`, `CON.txt`, `com1.onnx`: names Windows maps to devices whatever their extension."""
    return name.split(".")[0].rstrip(" ").upper() in WINDOWS_RESERVED


def file_name_problem(name: str) -> str | None:
    """Why `name` cannot be one file name on every file system a bundle meets, or None."""
    if not name or name in (".", ".."):
        return "an empty name or a '.'/'..' component"
    if len(name) > MAX_NAME_LENGTH:
        return f"a name of {len(name)} characters (at most {MAX_NAME_LENGTH})"
    if control := next((c for c in name if ord(c) < 0x20 or ord(c) == 0x7F), None):
        return f"the control character U+{ord(control):04X}"
    if bad := sorted(WINDOWS_FORBIDDEN.intersection(name)):
        return f"the character {bad[0]!r}, a path separator or a character Windows forbids in file names"
    if name.startswith((".", " ")) or name.endswith((".", " ")):
        return "a name that starts with a dot or space or ends with one"
    if reserved_on_windows(name):
        return "a device name that Windows reserves (CON, NUL, COM1, ...)"
    return None


def location_problem(location: str) -> str | None:
    """Why a data file's location cannot ship (the phrase after "which"), or None when it stays in the model's folder."""
    if not location:
        return "is empty"
    if location.startswith(("/", "\\")) or _DRIVE_RE.match(location):
        return "is absolute (expected a path relative to the model's folder)"
    if "\\" in location:
        return "uses '\\' (expected '/' between folders, the same on every platform)"
    parts = location.split("/")
    if ".." in parts:
        return "climbs out of the model's folder with '..'"
    if any(part in ("", ".") for part in parts):
        return "has an empty or '.' path component (expected a plain relative path)"
    for part in parts:
        if problem := file_name_problem(part):
            return f"has a component that is not a portable file name: {problem}"
    return None


def distribution_name(text: str, *, where: str) -> str:
    """A distribution name as core metadata defines it; anything else is refused before it names a file."""
    if len(text) > MAX_NAME_LENGTH or not DISTRIBUTION_RE.fullmatch(text):
        msg = (f"{where}: found the distribution name {text[:80]!r}, expected letters and digits with '.', '_' "
               f"or '-' between them (such as onnxruntime_gpu)")
        raise BuildError(msg)
    return text


def version_text(text: str, *, where: str) -> str:
    """A PEP 440 version written exactly as it may appear in a file name (packaging allows spaces around it)."""
    try:
        Version(text)
    except InvalidVersion:
        valid = False
    else:
        valid = len(text) <= 64 and bool(VERSION_TEXT_RE.fullmatch(text))
    if not valid:
        msg = f"{where}: found the version {text[:80]!r}, expected a PEP 440 version such as 1.23.1"
        raise BuildError(msg)
    return text


def read_utf8(path: Path, *, label: str) -> str:
    """A metadata file (METADATA, WHEEL, RECORD) as text; bytes that are not UTF-8 are named, not a traceback."""
    return decode_utf8(path.read_bytes(), label=label, name=path.name)


def decode_utf8(data: bytes, *, label: str, name: str) -> str:
    """The in-memory form of `read_utf8`, for a member read from an archive."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = (f"{label}: {name} is not UTF-8 text ({exc.reason} at byte {exc.start}); expected the UTF-8 "
               f"file the wheel format requires")
        raise BuildError(msg) from None


RECORD_DIGEST_RE = re.compile(r"^[A-Za-z0-9_-]+$")


def record_digest(value: str, *, algorithm: str, where: str) -> bytes:
    """A RECORD hash: unpadded urlsafe base64 of exactly one digest of `algorithm`, nothing looser."""
    size = hashlib.new(algorithm).digest_size
    try:
        digest = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)) if RECORD_DIGEST_RE.fullmatch(value) else b""
    except binascii.Error:
        digest = b""
    if len(digest) != size:
        msg = (f"{where}: found the hash {value[:80]!r}, expected the urlsafe base64 of a {size}-byte {algorithm} "
               f"digest")
        raise BuildError(msg)
    return digest


# `scheme://user:secret@` at the start of a URL, wherever it appears in a text (a message, an exception's text).
_USERINFO_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s@]*@")


def redact_url(text: str) -> str:
    """`text` with the user and password of every URL in it replaced by `***`.

    The one helper every message that shows a URL goes through (issue 34, severe 6): a credential written into a
    URL must not reach a terminal, a CI log or a file, even when the manifest check that refuses it is bypassed
    (a URL a server redirects to, an exception's text that quotes the URL it failed on).
    """
    return _USERINFO_RE.sub(r"\1***@", text)
