"""Which inputs a manifest needs: its own, plus every wheel its lock file pins, for the manifest's target."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote, urlparse

from bundler.errors import HashMismatchError, InputUnavailableError, ManifestError
from bundler.hashing import file_sha256
from bundler.manifest import Input, Manifest
from bundler.sources.gate import gate_inputs
from bundler.sources.lock import Lock, Target, read_lock


def target_of(manifest: Manifest) -> Target:
    return Target(platform=manifest.bundle.platform, python=manifest.bundle.python)


def load_lock(manifest: Manifest) -> Lock | None:
    """The lock the manifest references, checked against the manifest's target."""
    path = manifest.python.lock
    if path is None:
        return None
    if not path.is_file():
        msg = f"{manifest.path.name}: python.lock: {path.name} does not exist; run `ort-bundler lock {manifest.path.name}`"
        raise ManifestError(msg)
    lock = read_lock(path)
    target = target_of(manifest)
    if lock.target != target:
        msg = (f"{path.name}: locked for {lock.target.platform} / Python {lock.target.python}, but the manifest targets "
               f"{target.platform} / Python {target.python}; run `ort-bundler lock {manifest.path.name}` again")
        raise ManifestError(msg)
    if lock.gate is not None and lock.gate.ort_version != manifest.ort.version:
        msg = (f"{path.name}: [gate] pins onnxruntime {lock.gate.ort_version} for the model gate, but the manifest "
               f"pins {manifest.ort.version}; run `ort-bundler lock {manifest.path.name}` again")
        raise ManifestError(msg)
    return lock


#: The input key of the install engine's pinned pypa installer wheel (the lock's [installer] table).
INSTALLER_KEY = "lock-installer:installer"


def lock_inputs(lock: Lock | None) -> list[Input]:
    if lock is None:
        return []
    wheels = [*lock.wheels, *([lock.installer] if lock.installer else [])]
    return [Input(key=INSTALLER_KEY if w is lock.installer else f"lock:{w.name}", kind="requirement",
                  location=f"{w.name}=={w.version}", sha256=(w.sha256,), filename=w.filename) for w in wheels]


def all_inputs(manifest: Manifest) -> list[Input]:
    """The manifest's inputs, the wheels its lock pins for the target, and the model gate's wheels for this
    machine when the lock pins them for its kind (`bundler/sources/gate.py`)."""
    lock = load_lock(manifest)
    return manifest.inputs() + lock_inputs(lock) + gate_inputs(lock)


def local_source(item: Input) -> Path | None:
    """The file a `path` or `file:` input names on this machine; None for a download or a requirement."""
    if item.kind == "path":
        return Path(item.location)
    parsed = urlparse(item.location)
    if item.kind != "url" or parsed.scheme != "file":
        return None
    from urllib.request import url2pathname  # imports http.client and ssl: 25 ms a build that reads no URL spares

    return Path(url2pathname(unquote(parsed.path)))


def outside_folder(inputs: list[Input], folder: Path) -> list[str]:
    """One sentence per local file outside the manifest's folder that the manifest does not allow there.

    `path = "/etc/shadow"` was read, hashed and its sha256 printed in the mismatch message (issue 27): a
    manifest reads files of its own folder, and anything else only where it says so (`allow_outside`).
    Checked before any file is read, so nothing about the file is disclosed.
    """
    problems = []
    for item in inputs:
        if not _forbidden(item, folder):
            continue
        problems.append(f"{item.key}: {item.location} is outside the manifest's folder {folder}; expected a file "
                        f"below it, or `allow_outside = true` in {item.key} to read it from there")
    return problems


def _forbidden(item: Input, folder: Path) -> bool:
    """Whether `item` is a local file outside `folder` that the manifest does not allow there."""
    local = local_source(item)
    return not (local is None or item.allow_outside or os.path.normpath(local).startswith(os.path.join(folder, "")))


def absent_local_files(inputs: list[Input]) -> list[str]:
    """One sentence per `path`/`file:` input whose file is not there, whether or not the cache holds its hash.

    A cache that holds the pinned bytes hides a wrong path on this machine (fetch, lock and build never
    read the file again), yet the manifest is wrong for the next person, whose fetch fails (issue 26).
    """
    return [f"{item.key}: {item.location} does not exist; expected the file the manifest pins there "
            f"(sha256 {item.sha256[0][:12]}…): correct the path"
            for item in inputs if (local := local_source(item)) is not None and not local.is_file()]


def require_local_files(inputs: list[Input], folder: Path) -> None:
    """fetch and lock read a manifest's local files only from its folder unless allowed (exit 3), and refuse one
    that is not where the manifest says (exit 4); every problem named, nothing read before."""
    if outside := outside_folder(inputs, folder):
        raise ManifestError(outside)
    problems = absent_local_files(inputs)
    if problems:
        raise InputUnavailableError("\n".join(problems))


def local_pin_mismatches(inputs: list[Input], folder: Path) -> list[str]:
    """One sentence per `path`/`file:` input whose file exists here with bytes other than its pin.

    The cache answers by hash, so a model overwritten in place while its sha256 stayed the same was never read
    again: `lock`, `fetch` and `build` shipped the old bytes from a warm cache and only a cold one said exit 5
    (issue 38, item 1). Hashing the file every time is what makes "the manifest pins these bytes" true. Files
    that are absent are another check's (`absent_local_files`), and a folder or an unreadable file is left to the
    step that reads it, which names it; a file outside `folder` that the manifest may not read is never read.
    """
    local = [(item, path) for item in inputs
             if (path := local_source(item)) is not None and not _forbidden(item, folder) and path.is_file()]
    with ThreadPoolExecutor(max_workers=min(8, len(local) or 1)) as pool:
        actual = list(pool.map(_sha256_or_none, [path for _, path in local]))
    return [f"{item.key}: {item.as_written} has sha256 {digest}, but the manifest pins {' or '.join(item.sha256)}: "
            f"the file changed after it was pinned; pin the new file (sha256 = \"{digest}\", then run `ort-bundler "
            f"lock` again) or put the pinned file back"
            for (item, _), digest in zip(local, actual) if digest is not None and digest not in item.sha256]


def _sha256_or_none(path: Path) -> str | None:
    try:
        return file_sha256(path)
    except OSError:
        return None


def require_local_pins(inputs: list[Input], folder: Path) -> None:
    """Exit 5 before anything is fetched or built when a local file the manifest pins was changed (every
    mismatch named, with the path as the manifest wrote it)."""
    if problems := local_pin_mismatches(inputs, folder):
        raise HashMismatchError("\n".join(problems))
