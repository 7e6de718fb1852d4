"""The ORT Python wheel: built locally from a `capi` source, or an official wheel verified as is.

A `capi` source is an `onnxruntime/` package tree (a custom build's output, an unpacked wheel). We read
it without importing anything from it, derive the wheel tag from its binaries (the import table of a
`.pyd`, the name of a Linux extension module), never from guesses, and write a wheel whose bytes depend
only on the tree's content and the manifest: sorted entries, fixed timestamps and permissions, fixed
metadata text. An official wheel is never rebuilt; it is checked against the manifest and its own RECORD.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import tempfile
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import parse_tag
from wheel.wheelfile import WheelFile

from bundler.errors import BuildError
from bundler.readers.capi import PACKAGE, CapiTree, _files, _version

GENERATOR = "ort-bundler"
CHUNK = 1 << 20
# Zip timestamps cannot express times before 1980 or after 2107.
ZIP_MIN_EPOCH = 315532800
ZIP_MAX_EPOCH = 4354819199
# Shared libraries and extension modules get 0o755 like a linker's output (tools such as ldd and
# auditwheel expect it); everything else 0o644. Never the build host's modes, which follow its umask.
BINARY_RE = re.compile(r"\.(pyd|dll|dylib|so)(\.\d+)*$", re.IGNORECASE)
BINARY_MODE = 0o755
FILE_MODE = 0o644










def build_wheel(tree: CapiTree, *, expected_version: str, requires: Sequence[str] | None = None,
                out_dir: Path, source_date_epoch: int) -> Path:
    """Write `<dist>-<version>-<tag>.whl` whose bytes depend only on the tree's content and arguments.

    Independent of umask, time zone, file mtimes and directory listing order; the tree is only read.
    """
    version = _checked_version(tree, expected_version)
    dependencies = _dependencies(tree, requires)
    name = f"{tree.package}-{version}-{tree.tag}.whl"
    date_time = _zip_date_time(source_date_epoch)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".wheelbuild-", dir=out_dir))
    try:
        with _FixedTimeWheelFile(staging / name, "w", date_time=date_time) as wheel:
            for arcname, path in _package_files(tree.root):
                wheel.write_file(arcname, path, mode=_mode(arcname))
            dist_info = f"{tree.package}-{version}.dist-info"
            wheel.write_member(f"{dist_info}/METADATA", _metadata_text(tree.package, version, dependencies))
            wheel.write_member(f"{dist_info}/WHEEL", _wheel_text(tree.tag))
        target = out_dir / name
        os.replace(staging / name, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target






# --- reading a capi source -------------------------------------------------------------------------






















# --- the tag from the binaries ---------------------------------------------------------------------
















# --- writing the wheel -----------------------------------------------------------------------------


class _FixedTimeWheelFile(WheelFile):
    """WheelFile whose every entry, RECORD included, gets our timestamp and mode, never the clock's.

    `WheelFile.close` writes RECORD through `writestr` with a plain name, which would stamp it with the
    current time unless SOURCE_DATE_EPOCH is in the environment; we do not touch the environment.
    """

    def __init__(self, path: Path, mode: str, *, date_time: tuple[int, int, int, int, int, int]) -> None:
        super().__init__(path, mode, compression=zipfile.ZIP_DEFLATED)
        self._date_time = date_time

    def write_member(self, arcname: str, data: bytes | str, *, mode: int = FILE_MODE) -> None:
        self.writestr(self._zipinfo(arcname, mode), data)

    def write_file(self, arcname: str, path: Path, *, mode: int) -> None:
        """Stream a file in (a CUDA provider DLL is 400 MB): deflate and hash it in chunks, so memory does
        not grow with the file. RECORD takes the hash and size from the same tables `writestr` fills."""
        size = path.stat().st_size
        digest = hashlib.sha256()
        info = self._zipinfo(arcname, mode)
        # ZipFile's own open: WheelFile.open is the hash-checking reader.
        with path.open("rb") as src, zipfile.ZipFile.open(self, info, "w", force_zip64=size >= zipfile.ZIP64_LIMIT) as dst:
            while chunk := src.read(CHUNK):
                digest.update(chunk)
                dst.write(chunk)
        self._file_hashes[arcname] = ("sha256", base64.urlsafe_b64encode(digest.digest()).decode("ascii").rstrip("="))
        self._file_sizes[arcname] = size

    def writestr(self, zinfo_or_arcname: str | zipfile.ZipInfo, data: bytes | str,
                 compress_type: int | None = None) -> None:
        if isinstance(zinfo_or_arcname, str):
            zinfo_or_arcname = self._zipinfo(zinfo_or_arcname, FILE_MODE)
        super().writestr(zinfo_or_arcname, data, compress_type)

    def _zipinfo(self, arcname: str, mode: int) -> zipfile.ZipInfo:
        info = zipfile.ZipInfo(arcname, date_time=self._date_time)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.create_system = 3  # Unix, on every build host, so the mode bits below are honoured
        info.external_attr = (0o100000 | mode) << 16
        return info


def _checked_version(tree: CapiTree, expected_version: str) -> str:
    found = _version(tree.version, where=f"{tree.root / PACKAGE}")
    expected = _version(expected_version, where="[ort] version")
    if found != expected:
        msg = (f"{tree.root / PACKAGE}: found ONNX Runtime version {tree.version}, expected {expected_version} "
               f"as pinned by [ort] version")
        raise BuildError(msg)
    return str(found)


def _dependencies(tree: CapiTree, requires: Sequence[str] | None) -> tuple[str, ...]:
    dependencies = tuple(requires if requires is not None else tree.requires)
    if not dependencies:
        msg = (f"{tree.root / PACKAGE}: found no Requires-Dist in the source (it has no dist-info METADATA), "
               f"expected the dependencies of ONNX Runtime {tree.version}; list them under [ort] dependencies "
               f"in the manifest (for 1.23.1: coloredlogs, flatbuffers, numpy>=1.21.6, packaging, protobuf, sympy)")
        raise BuildError(msg)
    for dependency in dependencies:
        try:
            Requirement(dependency)
        except InvalidRequirement as exc:
            msg = f"{tree.root / PACKAGE}: found the dependency '{dependency}' ({exc}), expected a PEP 508 requirement"
            raise BuildError(msg) from None
    return dependencies


def _package_files(root: Path) -> list[tuple[str, Path]]:
    """(archive name, file) for the package, in archive-name order; links must stay inside the tree."""
    package = root / PACKAGE
    resolved_root = root.resolve()
    files = []
    for path in _files(package):
        if path.is_symlink() and not path.resolve().is_relative_to(resolved_root):
            msg = f"{path}: found a link to {path.resolve()}, outside {root}; expected files inside the tree"
            raise BuildError(msg)
        files.append((path.relative_to(root).as_posix(), path))
    return sorted(files)


def _mode(arcname: str) -> int:
    return BINARY_MODE if BINARY_RE.search(arcname) else FILE_MODE


def _zip_date_time(source_date_epoch: int) -> tuple[int, int, int, int, int, int]:
    clamped = min(max(source_date_epoch, ZIP_MIN_EPOCH), ZIP_MAX_EPOCH)
    return time.gmtime(clamped)[:6]


def _metadata_text(package: str, version: str, dependencies: Sequence[str]) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {package}",
        f"Version: {version}",
        "Summary: ONNX Runtime, packaged by ort-bundler from a capi package tree",
        *(f"Requires-Dist: {dependency}" for dependency in dependencies),
    ]
    return "\n".join(lines) + "\n"


def _wheel_text(tag: str) -> str:
    lines = [
        "Wheel-Version: 1.0",
        f"Generator: {GENERATOR}",
        "Root-Is-Purelib: false",
        *(f"Tag: {t}" for t in sorted(str(t) for t in parse_tag(tag))),
    ]
    return "\n".join(lines) + "\n"


# --- verifying an official wheel -------------------------------------------------------------------


















