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
from typing import BinaryIO

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import parse_tag
from packaging.version import Version
from wheel.wheelfile import WheelFile

from bundler.assembly.source_zip import RawMember, RawSource
from bundler.derived import Derived, DerivedCache, code_digest, content_sha256, derived_key
from bundler.errors import BuildError
from bundler.hashing import CHUNK, file_sha256
from bundler.readers.capi import PACKAGE, CapiTree, _files, _version, read_capi
from bundler.target_platform import TargetPlatform

GENERATOR = "ort-bundler"
# Zip timestamps cannot express times before 1980 or after 2107.
ZIP_MIN_EPOCH = 315532800
ZIP_MAX_EPOCH = 4354819199
# A source zip's members keep the modes upstream gave them (an official wheel: 0664/0666, a few 0775):
# the rebuilt wheel differs from upstream's only where it must. A folder source's modes follow the build
# host's umask, so its files get fixed modes instead: shared libraries and extension modules 0o755 like a
# linker's output (tools such as ldd and auditwheel expect it), everything else 0o644.
BINARY_RE = re.compile(r"\.(pyd|dll|dylib|so)(\.\d+)*$", re.IGNORECASE)
BINARY_MODE = 0o755
FILE_MODE = 0o644
# Who rebuilt the wheel, from which file: a file of its own in the .dist-info folder (which may hold other
# files), as `Rebuilt-By: ort-bundler from <file> sha256:<hex>`. Not in METADATA: no core-metadata field
# says "rebuilt", and packaging's strict reader refuses unknown fields (issue 26). Bundles built before
# carried the field in METADATA; readers accept both (bundler/assembly/sbom.py).
MARKER_FIELD = "Rebuilt-By"
PROVENANCE_FILE = "ort-bundler-rebuilt-by.txt"
# Dist-info files the wheel's writer (RECORD, WHEEL) or an installer (INSTALLER, REQUESTED,
# direct_url.json) makes: never copied from a source, which may be an installed tree.
NOT_COPIED = frozenset({"RECORD", "RECORD.jws", "RECORD.p7s", "WHEEL", "INSTALLER", "REQUESTED", "direct_url.json",
                        PROVENANCE_FILE})
ORT_LICENSE_EXPRESSION = "MIT"  # ONNX Runtime's LICENSE, every release
# Requires-Python of the official onnxruntime wheels by release, from the package index's data (looked up
# 2026-12-01): 1.21.0 to 1.24.3 say >=3.10, 1.24.4 to 1.32.0 >=3.11; earlier releases state none there.
REQUIRES_PYTHON = (
    (Version("1.21.0"), Version("1.24.3"), ">=3.10"),
    (Version("1.24.4"), Version("1.32.0"), ">=3.11"),
)
WHEEL_KIND = "capi-wheel"
# What the built wheel's bytes depend on besides its inputs: part of the derived-cache key.
WHEEL_CODE = ("bundler.assembly.wheelbuild", "bundler.assembly.source_zip", "bundler.readers.capi", "bundler.readers.pe", "wheel.wheelfile")


def build_wheel(tree: CapiTree, *, expected_version: str, requires: Sequence[str] | None = None,
                out_dir: Path, source_date_epoch: int, target_python: str | None = None,
                source_label: str | None = None) -> Path:
    """Write `<dist>-<version>-<tag>.whl` whose bytes depend only on the tree's content and arguments.

    Independent of umask, time zone, file mtimes and directory listing order; the tree is only read.
    A source dist-info (an official wheel, an installed tree) is kept, every field and file of it, except
    what the wheel's writer or an installer makes (RECORD, WHEEL, INSTALLER, ...), with METADATA as upstream
    wrote it (Requires-Dist replaced only when the manifest lists dependencies); one file is added,
    `PROVENANCE_FILE`, naming ort-bundler and `source_label`. Without a dist-info the METADATA is written
    new (2.4, with Requires-Python and License-Expression). Files from a source zip keep its modes.
    """
    version = _checked_version(tree, expected_version)
    name = f"{tree.package}-{version}-{tree.tag}.whl"
    dist_info = f"{tree.package}-{version}.dist-info"
    metadata = _metadata(tree, version, requires=requires, target_python=target_python)
    date_time = _zip_date_time(source_date_epoch)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".wheelbuild-", dir=out_dir))
    try:
        with _FixedTimeWheelFile(staging / name, "w", date_time=date_time) as wheel, RawSource(tree) as raw:
            for arcname, path in _package_files(tree):
                wheel.add_file(arcname, path, mode=raw.mode(arcname) or _mode(arcname), raw=raw.member(arcname, path),
                               source=raw)
            generated = {"METADATA": metadata, "WHEEL": _wheel_text(tree.tag),
                         PROVENANCE_FILE: f"{MARKER_FIELD}: {_marker(source_label)}\n"}
            for arcname, path in _dist_info_files(tree.dist_info, dist_info):
                in_tree = path.relative_to(tree.root).as_posix()
                wheel.add_file(arcname, path, mode=raw.mode(in_tree) or FILE_MODE, raw=raw.member(in_tree, path),
                               source=raw)
            for member, text in sorted(generated.items()):
                kept = raw.mode(f"{tree.dist_info.relative_to(tree.root).as_posix()}/{member}") if tree.dist_info else None
                wheel.write_member(f"{dist_info}/{member}", text, mode=kept or FILE_MODE)
        target = out_dir / name
        os.replace(staging / name, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def capi_wheel(source: Path, *, source_sha256: str, target: TargetPlatform, target_python: str, expected_version: str,
               requires: Sequence[str] | None, source_date_epoch: int, work: Path,
               cache: DerivedCache | None) -> Derived:
    """The wheel built from a capi source, taken from the derived-artifact cache when the same inputs built
    it before: building means extracting and deflating 30-40 MB, a cache hit only hashing the result."""
    key = derived_key({
        "source_sha256": source_sha256, "source_name": source.name, "platform": target.tag,
        "target_python": target_python, "version": expected_version,
        "requires": list(requires) if requires is not None else None, "source_date_epoch": source_date_epoch,
        "code": code_digest(WHEEL_CODE),
    })
    found = cache.find(WHEEL_KIND, key) if cache is not None else None
    if found is not None:
        return found
    tree = read_capi(source, work_dir=work / "capi", target=target, label="ort.capi")
    built = build_wheel(tree, expected_version=expected_version, requires=requires, out_dir=work / "wheel",
                        source_date_epoch=source_date_epoch, target_python=target_python,
                        source_label=f"{source.name} sha256:{source_sha256}")
    if cache is None:
        return Derived(path=built, sha256=file_sha256(built))
    return cache.store(WHEEL_KIND, key, built)


# --- writing the wheel -----------------------------------------------------------------------------


class _FixedTimeWheelFile(WheelFile):  # type: ignore[misc]  # wheel publishes no types
    """WheelFile whose every entry, RECORD included, gets our timestamp and mode, never the clock's.

    `WheelFile.close` writes RECORD through `writestr` with a plain name, which would stamp it with the
    current time unless SOURCE_DATE_EPOCH is in the environment; we do not touch the environment.
    """

    def __init__(self, path: Path, mode: str, *, date_time: tuple[int, int, int, int, int, int]) -> None:
        super().__init__(path, mode, compression=zipfile.ZIP_DEFLATED)
        self._date_time = date_time

    def add_file(self, arcname: str, path: Path | None, *, mode: int, raw: RawMember | None,
                 source: RawSource) -> None:
        """Reuse the source zip's compressed bytes when the file came from one, else deflate it; `path` is
        None for a file left in the source zip (`CapiTree.in_archive`)."""
        if raw is not None:
            self.copy_raw(arcname, path, raw, mode=mode)
        elif path is not None:
            with path.open("rb") as stream:
                self.write_stream(arcname, stream, size=path.stat().st_size, mode=mode)
        else:
            with source.open(arcname) as (stream, size):
                self.write_stream(arcname, stream, size=size, mode=mode)

    def copy_raw(self, arcname: str, path: Path | None, raw: RawMember, *, mode: int) -> None:
        """Lay down a member compressed by the source zip, unchanged: deflating 35 MB of ORT binaries again
        costs seconds and gives nothing, and the bytes then depend only on the pinned source, not on the
        local zlib. CRC and sizes are the source's. RECORD's hash is taken from the extracted file, which
        holds the same bytes (its CRC was checked as it was extracted), or, for a member left in the zip,
        from the bytes inflated as they are copied, which are held to the entry's CRC and size."""
        info = self._zipinfo(arcname, mode)
        info.compress_type = raw.info.compress_type
        info.CRC, info.compress_size, info.file_size = raw.info.CRC, raw.info.compress_size, raw.info.file_size
        self._writecheck(info)
        self._didModify = True
        info.header_offset = self.fp.tell()
        self.fp.write(info.FileHeader())
        inflated = raw.copy_to(self.fp, inflate=path is None)
        self.filelist.append(info)
        self.NameToInfo[arcname] = info
        self.start_dir = self.fp.tell()
        sha256 = bytes.fromhex(content_sha256(path)) if path is not None else inflated
        assert sha256 is not None
        self._file_hashes[arcname] = ("sha256", base64.urlsafe_b64encode(sha256).decode("ascii").rstrip("="))
        self._file_sizes[arcname] = info.file_size

    def write_member(self, arcname: str, data: bytes | str, *, mode: int = FILE_MODE) -> None:
        self.writestr(self._zipinfo(arcname, mode), data)

    def write_stream(self, arcname: str, src: BinaryIO, *, size: int, mode: int) -> None:
        """Stream a file in (a CUDA provider DLL is 400 MB): deflate and hash it in chunks, so memory does
        not grow with the file. RECORD takes the hash and size from the same tables `writestr` fills."""
        digest = hashlib.sha256()
        info = self._zipinfo(arcname, mode)
        # ZipFile's own open: WheelFile.open is the hash-checking reader.
        with zipfile.ZipFile.open(self, info, "w", force_zip64=size >= zipfile.ZIP64_LIMIT) as dst:
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
    found = _version(tree.version, where=f"{tree.label}: the {PACKAGE} package's version")
    expected = _version(expected_version, where="[ort] version")
    if found != expected:
        msg = (f"{tree.label}: found ONNX Runtime version {tree.version}, expected {expected_version} "
               f"as pinned by [ort] version")
        raise BuildError(msg)
    return str(found)


def _metadata(tree: CapiTree, version: str, *, requires: Sequence[str] | None, target_python: str | None) -> str:
    """The source's METADATA (with the manifest's dependencies, when it gives them), or a new one for a tree
    without dist-info."""
    if tree.dist_info is not None:
        text = (tree.dist_info / "METADATA").read_bytes().decode("utf-8")  # as written: no newline translation
        return _rebuilt_metadata(text, requires=_dependencies(tree, requires) if requires is not None else None)
    return _new_metadata(tree, version, _dependencies(tree, requires),
                         requires_python=requires_python(version, target_python=target_python, tag=tree.tag))


def _dependencies(tree: CapiTree, requires: Sequence[str] | None) -> tuple[str, ...]:
    dependencies = tuple(requires if requires is not None else tree.requires)
    if not dependencies:
        msg = (f"{tree.label}: found no Requires-Dist in the source (it has no dist-info METADATA), "
               f"expected the dependencies of ONNX Runtime {tree.version}; list them under [ort] dependencies "
               f"in the manifest (for 1.23.1: coloredlogs, flatbuffers, numpy>=1.21.6, packaging, protobuf, sympy)")
        raise BuildError(msg)
    for dependency in dependencies:
        try:
            Requirement(dependency)
        except InvalidRequirement as exc:
            msg = f"{tree.label}: found the dependency '{dependency}' ({exc}), expected a PEP 508 requirement"
            raise BuildError(msg) from None
    return dependencies


def _marker(source_label: str | None) -> str:
    """Never the tree's folder name: the wheel's bytes must not depend on where the source was unpacked."""
    return f"ort-bundler from {source_label or 'a capi package tree'}"


def _rebuilt_metadata(text: str, *, requires: Sequence[str] | None) -> str:
    """Every header field and the description body kept as written, line endings included (the Windows
    wheels' METADATA has CRLF); Requires-Dist replaced only when the manifest lists the dependencies; the
    marker field an older ort-bundler added is dropped (the provenance now has its own file)."""
    newline = "\r\n" if "\r\n" in text else "\n"
    head, separator, body = text.partition(newline * 2)
    fields = [f for f in _header_fields(head, newline) if _field_name(f) != MARKER_FIELD.lower()]
    if requires is not None:
        names = [_field_name(f) for f in fields]
        at = names.index("requires-dist") if "requires-dist" in names else len(fields)
        kept_before = sum(1 for name in names[:at] if name != "requires-dist")
        fields = [f for f in fields if _field_name(f) != "requires-dist"]
        fields[kept_before:kept_before] = [[f"Requires-Dist: {r}"] for r in requires]
    lines = newline.join(line for field in fields for line in field) + newline
    return lines + newline + body if separator else lines


def _header_fields(head: str, newline: str) -> list[list[str]]:
    """Header lines grouped by field: a line starting with white space continues the field before it."""
    fields: list[list[str]] = []
    for line in head.split(newline):
        if not line:
            continue
        if line[0] in " \t" and fields:
            fields[-1].append(line)
        else:
            fields.append([line])
    return fields


def _field_name(field: list[str]) -> str:
    return field[0].partition(":")[0].strip().lower()


def requires_python(version: str, *, target_python: str | None, tag: str) -> str:
    """What the official wheels of this ORT release say, else the manifest's target Python (or, without
    one, the Python the binaries were built for) as the lowest."""
    release = Version(version)
    for low, high, specifier in REQUIRES_PYTHON:
        if low <= release <= high:
            return specifier
    if target_python is not None:
        return f">={target_python}"
    interpreter = tag.split("-")[0]
    return f">=3.{interpreter[3:]}"


def _new_metadata(tree: CapiTree, version: str, dependencies: Sequence[str], *, requires_python: str) -> str:
    lines = [
        "Metadata-Version: 2.4",
        f"Name: {tree.package}",
        f"Version: {version}",
        "Summary: ONNX Runtime, packaged by ort-bundler from a capi package tree",
        f"License-Expression: {ORT_LICENSE_EXPRESSION}",
        f"Requires-Python: {requires_python}",
        *(f"Requires-Dist: {dependency}" for dependency in dependencies),
    ]
    return "\n".join(lines) + "\n"


def _dist_info_files(source: Path | None, dist_info: str) -> list[tuple[str, Path]]:
    """(archive name, file) of the source dist-info's files the wheel keeps (METADATA is written apart)."""
    if source is None:
        return []
    kept = []
    for path in _files(source):
        relative = path.relative_to(source).as_posix()
        if relative not in NOT_COPIED and relative != "METADATA":
            _check_inside(path, source.parent)
            kept.append((f"{dist_info}/{relative}", path))
    return sorted(kept)


def _package_files(tree: CapiTree) -> list[tuple[str, Path | None]]:
    """(archive name, file) for the package, in archive-name order, None for a file left in the source zip;
    links must stay inside the tree."""
    files: list[tuple[str, Path | None]] = [(name, None) for name in tree.in_archive]
    for path in _files(tree.root / PACKAGE):
        _check_inside(path, tree.root)
        files.append((path.relative_to(tree.root).as_posix(), path))
    return sorted(files, key=lambda file: file[0])


def _check_inside(path: Path, root: Path) -> None:
    if path.is_symlink() and not path.resolve().is_relative_to(root.resolve()):
        msg = f"{path}: found a link to {path.resolve()}, outside {root}; expected files inside the tree"
        raise BuildError(msg)


def _mode(arcname: str) -> int:
    return BINARY_MODE if BINARY_RE.search(arcname) else FILE_MODE


def _zip_date_time(source_date_epoch: int) -> tuple[int, int, int, int, int, int]:
    clamped = min(max(source_date_epoch, ZIP_MIN_EPOCH), ZIP_MAX_EPOCH)
    return time.gmtime(clamped)[:6]


def _wheel_text(tag: str) -> str:
    lines = [
        "Wheel-Version: 1.0",
        f"Generator: {GENERATOR}",
        "Root-Is-Purelib: false",
        *(f"Tag: {t}" for t in sorted(str(t) for t in parse_tag(tag))),
    ]
    return "\n".join(lines) + "\n"
