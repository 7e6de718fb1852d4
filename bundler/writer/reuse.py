"""Finished bundles kept in the cache by the hash of everything that makes them, so that a rebuild with
nothing changed publishes the zip it made before instead of assembling it again.

The key covers what the bytes of a bundle depend on: the manifest as parsed, the lock, every input by its
sha256 and file name, ort-bundler's own files (code, templates, the identity model), the versions of the
libraries it builds with, and the Python and zlib that write the zip. The build is reproducible (the same
key gives the same bytes on any machine), so the kept zip is the zip a full build would write. It is
checked against the sha256 recorded with it while it is published; a kept zip that differs is dropped and
the bundle is assembled again. `reproduce` never reuses: it exists to assemble.

A record in the cache cannot vouch for a zip beside it: whoever can replace the one can rewrite the other
(issue 27). So each record carries an HMAC over the key, the zip's sha256 and its name, made with a secret
that only the cache's owner can read (`bundles/reuse.key`, 32 random bytes, mode 0600, owned by the user
who builds, never followed through a link). A record without a valid HMAC, or a secret that is not this
user's alone, means the bundle is assembled again. The published zip is a copy, never a hard link to the
kept one, so nothing done to the cache later changes what was published. The copies are made by the kernel
(`copy_file_range`): on a file system that shares blocks (btrfs, XFS with reflink, as RHEL and Fedora make them)
that is a clone, a separate file that writes nothing until one side changes (issue 37's bytes written); elsewhere
it is a copy that never passes through Python.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import stat
import sys
import zlib
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import BinaryIO

from bundler import __version__
from bundler.atomic import write_atomic
from bundler.derived import make_folders
from bundler.errors import BuildError
from bundler.hashing import CHUNK
from bundler.manifest import Manifest
from bundler.sources.cache import DISK_ERRNOS, Cache, cached_sha256
from bundler.sources.lock import Lock, lock_data
from bundler.writer.temps import locked_temp

STORE = "bundles"
RECORD = "bundle.sha256"
SECRET = "reuse.key"
_SECRET_BYTES = 32
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
    """Publish the kept zip for `key` at `dest` (and its sidecar) and return its sha256, or None to build.
    The store is checked whole first (`Cache.checked`): one another user could write is refused, not read."""
    folder = cache.checked(cache.root / STORE, tree=True) / key[:2] / key
    try:
        sha256, name, mac = (folder / RECORD).read_text(encoding="ascii").strip().split("  ")
    except (OSError, UnicodeDecodeError, ValueError):  # absent, or not a record this version wrote
        return None
    secret = _secret(cache, create=False)
    if secret is None or not hmac.compare_digest(mac, _mac(secret, key, sha256, name)):
        return None  # a record its owner did not write: the bundle is assembled again
    kept = folder / name
    if name != dest.name or not kept.is_file():
        return None
    fd, tmp = locked_temp(dest.parent, prefix=f".{dest.name}.")
    try:
        # Copied into the locked temporary file (a dead build's temporaries are cleaned, a live one's not), then
        # the copy is hashed: what is checked is what will be published, whatever happens to the kept one.
        with os.fdopen(fd, "w+b") as out, kept.open("rb") as source:
            kernel_copy(source, out)
            out.seek(0)
            digest = hashlib.sha256()
            while chunk := out.read(CHUNK):
                digest.update(chunk)
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
    """Keep a copy of a finished zip under its key, with a record only this cache's owner can make; a cache
    that cannot take it only costs the next rebuild its speed. A copy (a clone where the file system shares
    blocks), not a hard link: the published zip and the kept one must not be one file, or a change to the cache
    would change what was published."""
    folder = cache.root / STORE / key[:2] / key
    with contextlib.suppress(OSError):
        secret = _secret(cache, create=True)
        if secret is None:
            return
        make_folders(folder)
        tmp = folder / f".{zip_path.name}.{os.getpid()}.tmp"
        tmp.unlink(missing_ok=True)
        with zip_path.open("rb") as source, tmp.open("xb") as out:
            kernel_copy(source, out)
        os.chmod(tmp, 0o644)  # made under the user's umask: writable by the user alone, as the cache requires
        os.replace(tmp, folder / zip_path.name)
        record = f"{sha256}  {zip_path.name}  {_mac(secret, key, sha256, zip_path.name)}\n"
        write_atomic(folder / RECORD, record.encode("ascii"))


def kernel_copy(source: BinaryIO, out: BinaryIO) -> None:
    """All of `source` (from its start) to `out`, by `copy_file_range` where the system has it: a clone on btrfs
    or XFS, an in-kernel copy elsewhere. A file system or a pair of them that cannot do it (another mount on an
    older kernel, a network share) gets a plain copy."""
    size = os.fstat(source.fileno()).st_size
    done = 0
    if hasattr(os, "copy_file_range"):
        with contextlib.suppress(OSError):  # EXDEV, EINVAL, ENOSYS, EOPNOTSUPP: copied below from where it stopped
            while done < size:
                step = os.copy_file_range(source.fileno(), out.fileno(), size - done, done, done)
                if step == 0:
                    break
                done += step
    source.seek(done)
    out.seek(done)
    shutil.copyfileobj(source, out, CHUNK)


def _mac(secret: bytes, key: str, sha256: str, name: str) -> str:
    return hmac.new(secret, f"{key}\n{sha256}\n{name}".encode(), hashlib.sha256).hexdigest()


def _secret(cache: Cache, *, create: bool) -> bytes | None:
    """The cache owner's secret, or None when it is missing (and not to be made) or anyone else could have
    written or read it: a regular file, not a link, owned by this user, with no permission for others."""
    path = cache.root / STORE / SECRET
    if create and not path.exists():
        make_folders(path.parent)
        with contextlib.suppress(FileExistsError):  # another build made it first: read theirs
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(secrets.token_bytes(_SECRET_BYTES))
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as source:  # a folder in its place fails here, as a link fails above
            info = os.fstat(source.fileno())
            data = source.read(_SECRET_BYTES + 1)
    except OSError:
        return None
    private = os.name == "nt" or (info.st_uid == os.geteuid() and not info.st_mode & 0o077)
    if not stat.S_ISREG(info.st_mode) or not private or len(data) != _SECRET_BYTES:
        return None
    return data
