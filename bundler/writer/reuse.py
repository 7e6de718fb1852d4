"""Finished bundles kept in the cache by the hash of everything that makes them, so that a rebuild with
nothing changed publishes the zip it made before instead of assembling it again.

The key covers what the bytes of a bundle depend on: the manifest as parsed, the lock, every input by its
sha256 and file name, ort-bundler's own files (code, templates, the identity model), the versions of the
libraries it builds with, and the Python and zlib that write the zip. The build is reproducible (the same
key gives the same bytes on any machine), so the kept zip is the zip a full build would write. It is
checked against the sha256 recorded with it while it is published; a kept zip that differs is dropped and
the bundle is assembled again. `reproduce` never reuses: it exists to assemble.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import zlib
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from bundler import __version__
from bundler.atomic import link_or_copy, write_atomic
from bundler.errors import BuildError
from bundler.hashing import CHUNK
from bundler.manifest import Manifest
from bundler.sources.cache import DISK_ERRNOS, Cache, cached_sha256
from bundler.sources.lock import Lock, lock_data
from bundler.writer.temps import locked_temp

STORE = "bundles"
RECORD = "bundle.sha256"
_PACKAGE_ROOT = Path(__file__).resolve().parents[1]
_TEMPLATES = "bundler.templates"


def bundle_key(manifest: Manifest, lock: Lock | None, files: Mapping[str, Path]) -> str:
    """The hash of everything the bundle's bytes depend on (see the module's docstring)."""
    digest = hashlib.sha256()
    facts = {
        "ort-bundler": __version__,
        "python": list(sys.version_info[:3]),
        "zlib": zlib.ZLIB_RUNTIME_VERSION,
        "libraries": _library_versions(),
        "manifest": [manifest.path.name, manifest.raw],
        "lock": lock_data(lock) if lock is not None else None,
        "inputs": {key: [cached_sha256(path), path.name] for key, path in sorted(files.items())},
    }
    digest.update(json.dumps(facts, sort_keys=True, default=str).encode("utf-8"))
    for name, path in _own_files():
        digest.update(f"\n{name}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _own_files() -> list[tuple[str, Path]]:
    """ort-bundler's code and data, and the templates (package data, beside the code or, in a checkout, not),
    each named relative to its folder so that the key does not depend on where ort-bundler is installed."""
    from importlib import resources

    roots = {"bundler": _PACKAGE_ROOT, "templates": Path(str(resources.files(_TEMPLATES)))}
    found = {(f"{label}/{path.relative_to(root).as_posix()}", path) for label, root in roots.items()
             for path in root.rglob("*") if path.is_file() and "__pycache__" not in path.parts}
    return sorted(found)


def _library_versions() -> dict[str, str]:
    """The installed version of every distribution ort-bundler requires (its own metadata lists them)."""
    versions = {}
    for requirement in metadata.requires("ort-bundler") or ():
        if "extra ==" in requirement:
            continue
        name = re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0]
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    return versions


def reuse(cache: Cache, key: str, dest: Path, sidecar: Path) -> str | None:
    """Publish the kept zip for `key` at `dest` (and its sidecar) and return its sha256, or None to build."""
    folder = cache.root / STORE / key[:2] / key
    try:
        sha256, _, name = (folder / RECORD).read_text(encoding="ascii").strip().partition("  ")
    except (OSError, UnicodeDecodeError):
        return None
    kept = folder / name
    if name != dest.name or not kept.is_file():
        return None
    fd, tmp = locked_temp(dest.parent, prefix=f".{dest.name}.")
    try:
        # Copied into the locked temporary file (a dead build's temporaries are cleaned, a live one's not)
        # and hashed in the same pass: the kept zip is read once.
        with os.fdopen(fd, "wb") as out, kept.open("rb") as source:
            digest = hashlib.sha256()
            while chunk := source.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
            if digest.hexdigest() != sha256:  # altered since it was kept: never published, assembled again
                with contextlib.suppress(OSError):
                    kept.unlink()
                Path(tmp).unlink()
                return None
            out.flush()
            os.fsync(out.fileno())
            os.chmod(tmp, 0o644)
            if os.name != "nt":
                os.replace(tmp, dest)  # while still locked, so no cleaner can take it first
        if os.name == "nt":
            os.replace(tmp, dest)  # Windows renames only a closed file
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.errno not in DISK_ERRNOS:
            raise
        msg = f"{dest}: the bundle cannot be written: {exc.strerror}; free space on that disk or choose another folder"
        raise BuildError(msg) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    write_atomic(sidecar, f"{sha256}  {dest.name}\n".encode("ascii"))
    return sha256


def keep(cache: Cache, key: str, zip_path: Path, sha256: str) -> None:
    """Keep a finished zip under its key (a hard link where the file system allows); a cache that cannot
    take it only costs the next rebuild its speed."""
    folder = cache.root / STORE / key[:2] / key
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{zip_path.name}.{os.getpid()}.tmp"
        tmp.unlink(missing_ok=True)
        link_or_copy(zip_path, tmp)
        os.replace(tmp, folder / zip_path.name)
        write_atomic(folder / RECORD, f"{sha256}  {zip_path.name}\n".encode("ascii"))
