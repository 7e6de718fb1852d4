"""One input of a manifest (a `url`, `path` or `requirement` with its sha256): its location checked and
resolved against the manifest's folder, nothing fetched."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

from packaging.requirements import InvalidRequirement, Requirement

from bundler.manifest.problems import Problems
from bundler.manifest.records import Input, InputKind
from bundler.manifest.schema import INPUT_KEYS
from bundler.names import file_name_problem, redact_url

# Paths and URLs longer than this are refused up front: file systems cap a path at 4096 bytes (PATH_MAX)
# and Windows much lower, and an unreadable path otherwise surfaces as an OS error mid-build.
MAX_LOCATION_LENGTH = 2048


SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def parse_input(table: Any, where: str, base: Path, problems: Problems, *, required: bool = True,
           embedded: bool = False) -> Input | None:
    """An input table: exactly one of url / path / requirement, and its sha256.

    `embedded` tables (a [[models]] entry, [vc_redist]) carry keys of their own, checked by their section.
    """
    if table is None:
        if required:
            problems.add(where, "missing, expected a table with 'url', 'path' or 'requirement' and 'sha256'")
        return None
    if not isinstance(table, dict):
        problems.found(where, table, "a table with 'url', 'path' or 'requirement' and 'sha256'")
        return None
    if not embedded:
        problems.unknown_keys(where, table, INPUT_KEYS)
    sources = [k for k in ("url", "path", "requirement") if k in table]
    if len(sources) != 1:
        found = " and ".join(f"'{s}'" for s in sources) or "none"
        problems.add(where, f"found {found}, expected exactly one of 'url', 'path' or 'requirement'")
        return None
    kind: InputKind = sources[0]  # type: ignore[assignment]
    hashes = _hashes(table.get("sha256"), f"{where}.sha256", problems, many=kind == "requirement")
    location, filename = _location(kind, table[kind], f"{where}.{kind}", base, problems)
    size = table.get("size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size <= 0):
        problems.found(f"{where}.size", size, "the file's size in bytes, a positive integer")
        return None
    allow_outside = table.get("allow_outside", False)
    if not isinstance(allow_outside, bool):
        problems.found(f"{where}.allow_outside", allow_outside, "true or false")
        return None
    if hashes is None or location is None:
        return None
    return Input(key=where, kind=kind, location=location, sha256=hashes, filename=filename, size=size,
                 allow_outside=allow_outside, written=table[kind])


def _hashes(value: Any, where: str, problems: Problems, *, many: bool) -> tuple[str, ...] | None:
    if value is None:
        problems.add(where, "missing; every input must be pinned by its sha256 (run `sha256sum FILE`)")
        return None
    values = value if many and isinstance(value, list) else [value]
    if not values or not all(isinstance(v, str) and SHA256_RE.match(v) for v in values):
        expected = "64 lowercase hex digits" + (" (or a list of them)" if many else "")
        problems.found(where, value, expected)
        return None
    return tuple(values)


def _location(kind: InputKind, value: Any, where: str, base: Path, problems: Problems) -> tuple[str | None, str | None]:
    if not isinstance(value, str) or not value:
        problems.found(where, value, "a non-empty string")
        return None, None
    if len(value) > MAX_LOCATION_LENGTH:
        problems.found(where, redact_url(value), f"at most {MAX_LOCATION_LENGTH} characters (found {len(value)})")
        return None, None
    if control := next((c for c in value if ord(c) < 0x20 or ord(c) == 0x7F), None):
        problems.found(where, redact_url(value), f"a location without control characters (found U+{ord(control):04X})")
        return None, None
    checks: dict[str, Callable[[str, str, Path, Problems], tuple[str | None, str | None]]] = {
        "url": _url_location, "path": _path_location, "requirement": _requirement_location,
    }
    return checks[kind](value, where, base, problems)


# How to give a download its credentials instead of writing them into the URL: what the downloads really read.
# `requests` (sources/download.py, a Session left to trust the environment) answers a host's challenge from
# ~/.netrc or the file $NETRC names; `requirement` inputs are fetched by pip with the user's own pip configuration.
CREDENTIALS_ADVICE = ("put the credentials in ~/.netrc (or the file $NETRC names) as `machine HOST login USER "
                      "password TOKEN`, which downloads use for that host, or pin a package index's wheel as a "
                      "`requirement`, which pip fetches with its own configuration (pip.conf, keyring)")


def _url_location(value: str, where: str, base: Path, problems: Problems) -> tuple[str | None, str | None]:
    parsed = urlparse(value)
    if "@" in parsed.netloc:
        problems.found(where, redact_url(value), "a URL without a user or password (a credential in a URL is "
                       "printed in messages and written into bundle.json and the lock): " + CREDENTIALS_ADVICE)
        return None, None
    if parsed.scheme not in ("https", "http", "file") or (parsed.scheme != "file" and not parsed.netloc):
        problems.found(where, value, "an https, http or file URL")
        return None, None
    path = unquote(parsed.path)
    if control := next((c for c in path if ord(c) < 0x20 or ord(c) == 0x7F), None):
        problems.found(where, value, f"a URL whose path decodes without control characters (found U+{ord(control):04X})")
        return None, None
    if parsed.scheme != "file" and ".." in path.split("/"):
        problems.found(where, value, "a URL without '..' segments (also when written %2e%2e)")
        return None, None
    name = PurePosixPath(path).name
    if not name:
        problems.found(where, value, "a URL that ends in a file name")
        return None, None
    if problem := file_name_problem(name):
        problems.found(where, value, f"a URL whose file name is usable on every file system, not {problem}")
        return None, None
    if parsed.scheme == "file":
        return _file_url(parsed.netloc, path, value, where, base, problems), name
    return value, name


def _file_url(host: str, path: str, value: str, where: str, base: Path, problems: Problems) -> str | None:
    """A `file:` URL names a local file; a relative one (file:models/a.onnx) is below the manifest's folder."""
    if host not in ("", "localhost"):
        problems.found(where, value, "a file URL on this machine (file:///path), not on the host " + repr(host))
        return None
    from urllib.request import url2pathname  # 50 ms of imports (http.client, email): only for a file: URL

    local = Path(url2pathname(path))
    return value if local.is_absolute() else (base / local).resolve().as_uri()


def _path_location(value: str, where: str, base: Path, problems: Problems) -> tuple[str | None, str | None]:
    if too_long := next((part for part in re.split(r"[/\\]", value) if len(part.encode("utf-8")) > 255), None):
        problems.found(where, value, f"path components of at most 255 bytes (found one of {len(too_long)} characters)")
        return None, None
    if (link := link_below(base, value)) is not None:
        problems.found(where, value, f"the file itself, not a path through a symbolic link ({link} is one, and a link "
                                     "can point anywhere: name the file it points to)")
        return None, None
    path = (base / value).resolve()
    return str(path), path.name


def link_below(base: Path, value: str) -> str | None:
    """The first symbolic link (folder or file) on the way from the manifest's folder to `value`, as the user
    wrote it; None when every step is a real folder or file, or the path is not below the manifest's folder.

    A linked file was refused while a linked folder (`models/` → elsewhere) let the same file in (issue 27):
    one rule for both. Only the steps below the manifest's folder are the manifest's to vouch for.
    """
    target = Path(os.path.normpath(base / value))
    try:
        steps = target.relative_to(base).parts
    except ValueError:
        return None
    current = base
    for step in steps:
        current = current / step
        if current.is_symlink():
            return current.relative_to(base).as_posix()
    return None


def _requirement_location(value: str, where: str, base: Path, problems: Problems) -> tuple[str | None, str | None]:
    try:
        req = Requirement(value)
    except InvalidRequirement:
        req = None
    specs = list(req.specifier) if req else []
    if req is None or len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version or req.url or req.marker:
        problems.found(where, value, "an exact pin 'name==version'")
        return None, None
    return f"{req.name}=={specs[0].version}", None
