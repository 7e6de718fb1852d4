"""The ORT Python wheel: built locally from a `capi` source, or an official wheel verified as is.

A `capi` source is an `onnxruntime/` package tree (a custom build's output, an unpacked wheel). We read
it without importing anything from it, derive the wheel tag from its binaries (the import table of a
`.pyd`, the name of a Linux extension module), never from guesses, and write a wheel whose bytes depend
only on the tree's content and the manifest: sorted entries, fixed timestamps and permissions, fixed
metadata text. An official wheel is never rebuilt; it is checked against the manifest and its own RECORD.
"""

from __future__ import annotations

import ast
import base64
import csv
import hashlib
import io
import os
import re
import shutil
import tempfile
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from email.message import Message
from email.parser import Parser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag, parse_tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version
from wheel.wheelfile import WheelFile

from .archives import SafeArchive
from .errors import BuildError, InputUnavailableError, UnsupportedError
from .pe import X64_MACHINE, inspect_pe, is_x86_64_elf

PLATFORMS = ("win_amd64", "linux_x86_64")
# RECORD hashes we accept: fixed-length and at least as strong as sha256 (not md5/sha1, not the shake XOFs).
RECORD_ALGORITHMS = frozenset({"sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512", "blake2b", "blake2s"})
PACKAGE = "onnxruntime"
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
WIN_PYTHON_DLL_RE = re.compile(r"^python3(\d+)\.dll$", re.IGNORECASE)
LINUX_EXTENSION_RE = re.compile(r"\.cpython-3(\d+)-x86_64-linux-gnu\.so$")
LINUX_ABI3_RE = re.compile(r"\.abi3\.so$")
MANYLINUX_X86_64_RE = re.compile(r"^(linux|manylinux(1|2010|2014|_\d+_\d+))_x86_64$")
PYTHON_RE = re.compile(r"^3\.(\d{1,2})$")
# Files a running Python writes next to sources: build-host artifacts, regenerated on install.
SKIPPED_DIRS = {"__pycache__"}
SKIPPED_SUFFIXES = {".pyc", ".pyo"}
# A build output folder nests the package a few levels deep (build/Windows/Release/Release/onnxruntime).
SEARCH_DEPTH = 4
RECORD_SIGNATURES = ("RECORD", "RECORD.jws", "RECORD.p7s")


@dataclass(frozen=True, kw_only=True)
class CapiTree:
    """What a capi source holds, read from its files without importing them."""

    root: Path  # the folder containing onnxruntime/
    package: str  # distribution name in wheel-filename form: "onnxruntime", "onnxruntime_gpu"
    version: str
    requires: tuple[str, ...]  # Requires-Dist of the source's dist-info, empty when it has none
    tag: str  # compressed wheel tag derived from the binaries, e.g. "cp311-cp311-win_amd64"


@dataclass(frozen=True, kw_only=True)
class _Extension:
    """One extension module and the Python it was built for."""

    path: Path
    python: str  # "cp311"; for a stable-ABI module the Python is not knowable from the binary: ""
    abi: str  # "cp311" or "abi3"


def read_capi(source: Path, *, work_dir: Path, platform: str, label: str) -> CapiTree:
    """Find the package tree in a zip or folder and read its name, version, dependencies and tag."""
    root = _package_root(_materialize(source, work_dir=work_dir, label=label), label=label)
    dist_info = _dist_info(root, label=label)
    metadata = _parse_headers((dist_info / "METADATA").read_text(encoding="utf-8")) if dist_info else None
    source_tags = _wheel_file_tags(dist_info) if dist_info else ()
    return CapiTree(
        root=root,
        package=_tree_package(root, metadata),
        version=_tree_version(root, metadata, label=label),
        requires=tuple(metadata.get_all("Requires-Dist") or ()) if metadata else (),
        tag=derive_tag(root, platform=platform, source_tags=source_tags),
    )


def derive_tag(tree_root: Path, *, platform: str, source_tags: Sequence[str] = ()) -> str:
    """The wheel tag the binaries call for.

    A `.pyd` names its Python in its import table (`python311.dll` → cp311); a Linux extension names it
    in its file name (`cpython-311-x86_64-linux-gnu`). A stable-ABI module (`python3.dll`, `.abi3.so`)
    only says "some Python 3": the oldest Python it supports was fixed at compile time by
    `Py_LIMITED_API` and is not readable from the binary, so it comes from the lowest `cp3X-abi3` tag
    the source wheel carried, and without one the build stops rather than claim a Python it may not
    serve. On Linux the platform part is the manylinux tag(s) the source wheel carried (the binaries'
    glibc needs were audited for those) and otherwise plain `linux_x86_64`. Never `py3-none`.
    """
    if platform not in PLATFORMS:
        msg = f"found target platform '{platform}', expected one of {', '.join(PLATFORMS)}"
        raise UnsupportedError(msg)
    package = tree_root / PACKAGE
    extensions = _win_extensions(package) if platform == "win_amd64" else _linux_extensions(package)
    if not extensions:
        msg = (f"{package}: found no Python extension module for {platform} (a .pyd importing pythonXY.dll "
               f"or a *.cpython-3XY-x86_64-linux-gnu.so), expected one; without it the wheel could only be "
               f"py3-none, which cannot carry ONNX Runtime's binaries")
        raise BuildError(msg)
    source = _parse_tags(source_tags, where=f"{tree_root}: the source wheel's WHEEL file")
    python, abi = _python_and_abi(extensions, source_tags=source, package=package)
    if source and not any(t.interpreter == python and t.abi == abi for t in source):
        msg = (f"{package}: the binaries are built for {python}-{abi}, but the source wheel's WHEEL file says "
               f"{', '.join(sorted(source_tags))}; expected them to agree")
        raise BuildError(msg)
    return f"{python}-{abi}-{'.'.join(_platform_tags(platform, python, abi, source))}"


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


def verify_official_wheel(path: Path, *, expected_name: str, expected_version: str, target_platform: str,
                          target_python: str, label: str) -> None:
    """Check an official wheel's name, version and tags against the manifest and its RECORD hashes."""
    tags = _check_wheel_filename(path, expected_name=expected_name, expected_version=expected_version,
                                 label=label)
    _check_serves(path, tags, platform=target_platform, python=target_python, label=label)
    with SafeArchive.open(path, label=label) as archive:
        dist_info = _wheel_dist_info(archive, path=path, label=label)
        _check_dist_info(archive, dist_info, path=path, tags=tags, expected_name=expected_name,
                         expected_version=expected_version, label=label)
        _check_record(archive, dist_info, path=path, label=label)


def _parse_tags(tags: Sequence[str], *, where: str) -> frozenset[Tag]:
    try:
        return frozenset(tag for text in tags for tag in parse_tag(text))
    except ValueError:
        msg = f"{where} has the tags {', '.join(tags)}, expected tags of the form python-abi-platform"
        raise BuildError(msg) from None


# --- reading a capi source -------------------------------------------------------------------------


def _materialize(source: Path, *, work_dir: Path, label: str) -> Path:
    """A folder is used in place; an archive (zip, wheel, tar) is extracted into a fresh folder under work_dir."""
    if source.is_dir():
        return source
    if not source.is_file():
        msg = f"{label}: found nothing at {source}, expected a zip or folder holding onnxruntime/capi/"
        raise InputUnavailableError(msg)
    dest = work_dir / f"{source.name}.capi"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with SafeArchive.open(source, label=label) as archive:
        archive.extract(dest)
    return dest


def _package_root(base: Path, *, label: str) -> Path:
    roots = sorted(_roots_with_capi(base, depth=SEARCH_DEPTH))
    if not roots:
        msg = (f"{label}: found no {PACKAGE}/capi/ folder in {base}, expected a zip or folder holding the "
               f"{PACKAGE} package tree (for example an unpacked wheel or a build's output)")
        raise BuildError(msg)
    if len(roots) > 1:
        msg = (f"{label}: found {len(roots)} {PACKAGE}/capi/ folders ({', '.join(map(str, roots))}), "
               f"expected exactly one")
        raise BuildError(msg)
    return roots[0]


def _roots_with_capi(base: Path, *, depth: int) -> Iterator[Path]:
    if (base / PACKAGE / "capi").is_dir():
        yield base
        return
    if depth == 0:
        return
    for child in base.iterdir():
        if child.is_dir() and not child.is_symlink():
            yield from _roots_with_capi(child, depth=depth - 1)


def _dist_info(root: Path, *, label: str) -> Path | None:
    found = sorted(p for p in root.glob("*.dist-info")
                   if p.is_dir() and canonicalize_name(p.name.split("-")[0]).startswith(PACKAGE))
    if len(found) > 1:
        msg = f"{label}: found {len(found)} ONNX Runtime dist-info folders in {root}, expected at most one"
        raise BuildError(msg)
    return found[0] if found else None


def _parse_headers(text: str) -> Message:
    return Parser().parsestr(text, headersonly=True)


def _wheel_file_tags(dist_info: Path) -> tuple[str, ...]:
    wheel = dist_info / "WHEEL"
    return tuple(_parse_headers(wheel.read_text(encoding="utf-8")).get_all("Tag") or ()) if wheel.is_file() else ()


def _tree_package(root: Path, metadata: Message | None) -> str:
    """Distribution name: the dist-info's, else what the ORT build wrote into capi/, else CPU vs CUDA."""
    capi = root / PACKAGE / "capi"
    if metadata and metadata["Name"]:
        name = metadata["Name"]
    elif isinstance(declared := _module_constants(capi / "build_and_package_info.py").get("package_name"), str):
        name = declared
    else:
        name = f"{PACKAGE}-gpu" if _module_constants(capi / "version_info.py").get("use_cuda") is True else PACKAGE
    return canonicalize_name(name).replace("-", "_")


def _tree_version(root: Path, metadata: Message | None, *, label: str) -> str:
    """`__version__` of the package, cross-checked with every other place the tree states its version."""
    init = root / PACKAGE / "__init__.py"
    claims = {
        f"{init}": _module_constants(init).get("__version__"),
        f"{root / PACKAGE / 'capi' / 'build_and_package_info.py'}":
            _module_constants(root / PACKAGE / "capi" / "build_and_package_info.py").get("__version__"),
        "the dist-info METADATA": metadata["Version"] if metadata else None,
    }
    stated = {where: value for where, value in claims.items() if isinstance(value, str)}
    if not stated:
        msg = f"{label}: found no __version__ in {init}, expected a string assignment such as __version__ = \"1.23.1\""
        raise BuildError(msg)
    if len({_version(value, where=where) for where, value in stated.items()}) > 1:
        listed = "; ".join(f"{where} says {value}" for where, value in stated.items())
        msg = f"{label}: the source disagrees about its version ({listed}), expected one version"
        raise BuildError(msg)
    return next(iter(stated.values()))


def _module_constants(path: Path) -> dict[str, object]:
    """Top-level `name = <literal>` assignments, read with ast: a capi tree is never imported."""
    if not path.is_file():
        return {}
    try:
        module = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as exc:
        msg = f"{path}: cannot parse it as Python ({exc.msg}, line {exc.lineno}), expected a module of the ORT package"
        raise BuildError(msg) from exc
    constants: dict[str, object] = {}
    for node in module.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    constants.setdefault(target.id, node.value.value)
    return constants


def _version(text: str, *, where: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        msg = f"{where}: found the version '{text}', expected a PEP 440 version such as 1.23.1"
        raise BuildError(msg) from None


# --- the tag from the binaries ---------------------------------------------------------------------


def _files(folder: Path) -> list[Path]:
    """Every file under folder in a fixed order, skipping what a running Python leaves behind."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        found.extend(Path(dirpath) / f for f in sorted(filenames) if Path(f).suffix not in SKIPPED_SUFFIXES)
    return sorted(found, key=lambda p: p.relative_to(folder).as_posix())


def _win_extensions(package: Path) -> list[_Extension]:
    return [_pyd_extension(path) for path in _files(package) if path.suffix.lower() == ".pyd"]


def _pyd_extension(path: Path) -> _Extension:
    info = inspect_pe(path)
    machine, imports = info.machine, info.imports
    if machine != X64_MACHINE:
        msg = f"{path}: found PE machine {machine:#06x}, expected {X64_MACHINE:#06x} (x64) for win_amd64"
        raise BuildError(msg)
    versions = sorted({m.group(1) for dll in imports if (m := WIN_PYTHON_DLL_RE.match(dll))})
    if len(versions) > 1:
        pythons = ", ".join(f"python3{v}.dll" for v in versions)
        msg = f"{path}: found imports of several Pythons ({pythons}), expected exactly one"
        raise BuildError(msg)
    if versions:
        return _Extension(path=path, python=f"cp3{versions[0]}", abi=f"cp3{versions[0]}")
    if any(dll.lower() == "python3.dll" for dll in imports):
        return _Extension(path=path, python="", abi="abi3")
    msg = f"{path}: found no import of pythonXY.dll or python3.dll, expected a Python extension module"
    raise BuildError(msg)


def _linux_extensions(package: Path) -> list[_Extension]:
    found = []
    for path in _files(package):
        if match := LINUX_EXTENSION_RE.search(path.name):
            found.append(_Extension(path=path, python=f"cp3{match.group(1)}", abi=f"cp3{match.group(1)}"))
        elif LINUX_ABI3_RE.search(path.name):
            found.append(_Extension(path=path, python="", abi="abi3"))
    for extension in found:
        _check_elf_x86_64(extension.path)
    return found


def _check_elf_x86_64(path: Path) -> None:
    if not is_x86_64_elf(path):
        msg = f"{path}: not an x86-64 ELF file, expected a Linux x86_64 extension module"
        raise BuildError(msg)


def _python_and_abi(extensions: Sequence[_Extension], *, source_tags: frozenset[Tag],
                    package: Path) -> tuple[str, str]:
    """One Python for all modules; version-specific modules pin it, stable-ABI ones merely accept it."""
    specific = sorted({e.python for e in extensions if e.abi != "abi3"})
    if len(specific) > 1:
        listed = "; ".join(f"{e.path.name} is {e.python}" for e in extensions if e.abi != "abi3")
        msg = f"{package}: the extension modules disagree about the Python version ({listed}), expected one"
        raise BuildError(msg)
    if specific:
        return specific[0], specific[0]
    declared = sorted((t.interpreter for t in source_tags if t.abi == "abi3" and t.interpreter.startswith("cp3")),
                      key=lambda interpreter: int(interpreter[3:]))
    if not declared:
        names = ", ".join(e.path.name for e in extensions)
        msg = (f"{package}: found only stable-ABI extension modules ({names}) and no cp3X-abi3 tag in a source "
               f"dist-info, expected one: the oldest Python such a module supports cannot be read from the "
               f"binary; use the wheel it came from as the capi source")
        raise BuildError(msg)
    return declared[0], "abi3"


def _platform_tags(platform: str, python: str, abi: str, source_tags: frozenset[Tag]) -> list[str]:
    if platform == "win_amd64":
        return ["win_amd64"]
    carried = sorted({t.platform for t in source_tags
                      if t.interpreter == python and t.abi == abi and MANYLINUX_X86_64_RE.match(t.platform)})
    return carried or ["linux_x86_64"]


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


def _check_wheel_filename(path: Path, *, expected_name: str, expected_version: str, label: str) -> frozenset[Tag]:
    try:
        name, version, _build, tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        msg = f"{label}: found the file name '{path.name}' ({exc}), expected a wheel file name"
        raise BuildError(msg) from None
    if name != canonicalize_name(expected_name):
        msg = f"{label}: {path.name} is the distribution '{name}', expected '{expected_name}'"
        raise BuildError(msg)
    if version != _version(expected_version, where=f"{label} expected version"):
        msg = f"{label}: {path.name} is version {version}, expected {expected_version} as pinned by [ort] version"
        raise BuildError(msg)
    return tags


def _check_serves(path: Path, tags: frozenset[Tag], *, platform: str, python: str, label: str) -> None:
    match = PYTHON_RE.match(python)
    if platform not in PLATFORMS or not match:
        msg = f"{label}: found the target {platform} / Python {python}, expected one of {', '.join(PLATFORMS)} and '3.X'"
        raise UnsupportedError(msg)
    minor = int(match.group(1))
    if not any(_tag_serves(tag, platform=platform, minor=minor) for tag in tags):
        msg = (f"{label}: {path.name} carries the tags {', '.join(sorted(map(str, tags)))}, expected one that "
               f"serves CPython 3.{minor} on {platform}")
        raise BuildError(msg)


def _tag_serves(tag: Tag, *, platform: str, minor: int) -> bool:
    on_platform = tag.platform == platform if platform == "win_amd64" else bool(MANYLINUX_X86_64_RE.match(tag.platform))
    exact = tag.interpreter == f"cp3{minor}" and tag.abi == f"cp3{minor}"
    stable = (tag.abi == "abi3" and tag.interpreter.startswith("cp3") and tag.interpreter[3:].isdigit()
              and int(tag.interpreter[3:]) <= minor)
    return on_platform and (exact or stable)


def _wheel_dist_info(archive: SafeArchive, *, path: Path, label: str) -> str:
    found = sorted({name.split("/")[0] for name in archive.names() if name.split("/")[0].endswith(".dist-info")})
    if len(found) != 1:
        msg = f"{label}: {path.name} has {len(found)} .dist-info folders ({', '.join(found) or 'none'}), expected exactly one"
        raise BuildError(msg)
    return found[0]


def _check_dist_info(archive: SafeArchive, dist_info: str, *, path: Path, tags: frozenset[Tag],
                     expected_name: str, expected_version: str, label: str) -> None:
    metadata = _parse_headers(_read_text(archive, f"{dist_info}/METADATA", path=path, label=label))
    if canonicalize_name(metadata["Name"] or "") != canonicalize_name(expected_name):
        msg = f"{label}: {path.name}'s METADATA names '{metadata['Name']}', expected '{expected_name}'"
        raise BuildError(msg)
    if _version(metadata["Version"] or "", where=f"{path.name} METADATA") != Version(expected_version):
        msg = f"{label}: {path.name}'s METADATA says version {metadata['Version']}, expected {expected_version}"
        raise BuildError(msg)
    wheel = _parse_headers(_read_text(archive, f"{dist_info}/WHEEL", path=path, label=label))
    declared = _parse_tags(wheel.get_all("Tag") or (), where=f"{label}: {path.name}'s WHEEL file")
    if declared != tags:
        msg = (f"{label}: {path.name}'s WHEEL file declares the tags {', '.join(sorted(map(str, declared))) or 'none'}, "
               f"expected the tags of its file name ({', '.join(sorted(map(str, tags)))})")
        raise BuildError(msg)


def _read_text(archive: SafeArchive, name: str, *, path: Path, label: str) -> str:
    if name not in archive.names():
        msg = f"{label}: {path.name} has no {name}, expected one in every wheel"
        raise BuildError(msg)
    return archive.read(name).decode("utf-8")


def _check_record(archive: SafeArchive, dist_info: str, *, path: Path, label: str) -> None:
    """Every member is listed in RECORD and hashes to what it says, read in one streaming pass."""
    record = _record_entries(_read_text(archive, f"{dist_info}/RECORD", path=path, label=label), path=path, label=label)
    unhashed = {f"{dist_info}/{name}" for name in RECORD_SIGNATURES}
    members = [entry.name for entry in archive.entries if not entry.is_dir and entry.name not in unhashed]
    for name in members:
        if name not in record:
            msg = f"{label}: {path.name} contains {name}, which its RECORD does not list with a hash"
            raise BuildError(msg)
        _check_member(archive, name, record[name], path=path, label=label)
    missing = sorted(set(record) - set(members))
    if missing:
        msg = f"{label}: {path.name}'s RECORD lists {missing[0]}, which the wheel does not contain"
        raise BuildError(msg)


def _record_entries(text: str, *, path: Path, label: str) -> dict[str, tuple[str, bytes, int | None]]:
    entries = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) != 3:
            msg = f"{label}: {path.name}'s RECORD has the row {row!r}, expected path,hash,size"
            raise BuildError(msg)
        name, digest, size = row
        if not digest:
            continue
        algorithm, _, value = digest.partition("=")
        if algorithm not in RECORD_ALGORITHMS:
            msg = f"{label}: {path.name}'s RECORD hashes {name} with '{algorithm}', expected sha256 or stronger"
            raise BuildError(msg)
        padded = value + "=" * (-len(value) % 4)
        entries[name] = (algorithm, base64.urlsafe_b64decode(padded), int(size) if size.isdigit() else None)
    return entries


def _check_member(archive: SafeArchive, name: str, expected: tuple[str, bytes, int | None], *, path: Path,
                  label: str) -> None:
    """Stream one member through its hash; corrupt data surfaces from SafeArchive as UnsafeArchiveError."""
    algorithm, digest, size = expected
    hasher = hashlib.new(algorithm)
    length = 0
    with archive.open_member(name) as member:
        while chunk := member.read(CHUNK):
            hasher.update(chunk)
            length += len(chunk)
    if hasher.digest() != digest or (size is not None and size != length):
        msg = (f"{label}: {path.name}: {name} does not match its RECORD entry ({algorithm} or size "
               f"differs), expected the file as published; the wheel was modified or damaged")
        raise BuildError(msg)
