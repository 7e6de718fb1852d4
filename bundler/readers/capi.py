"""Reading a `capi` source (an official wheel, an installed tree or an archive of one) into a `CapiTree`: the package, its version, its extensions and the wheel tag they imply."""

from __future__ import annotations

import ast
import os
import re
import shutil
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from email.message import Message
from email.parser import Parser
from pathlib import Path, PurePosixPath

from packaging.tags import Tag, parse_tag
from packaging.utils import (
    canonicalize_name,
)
from packaging.version import InvalidVersion, Version

from bundler.errors import BuildError, InputUnavailableError
from bundler.names import distribution_name, read_utf8, version_text
from bundler.readers.archives import SafeArchive
from bundler.readers.member_scan import copyable
from bundler.readers.pe import X64_MACHINE, inspect_pe, is_x86_64_elf
from bundler.readers.pe_source import PackedPe, PeSource, inflate
from bundler.target_platform import TargetPlatform

WIN_PYTHON_DLL_RE = re.compile(r"^python3(\d+)\.dll$", re.IGNORECASE)


LINUX_EXTENSION_RE = re.compile(r"\.cpython-3(\d+)-x86_64-linux-gnu\.so$")


PYTHON_RE = re.compile(r"^3\.(\d{1,2})$")


# Files a running Python writes next to sources: build-host artifacts, regenerated on install.
SKIPPED_DIRS = {"__pycache__"}


SKIPPED_SUFFIXES = {".pyc", ".pyo"}


# A build output folder nests the package a few levels deep (build/Windows/Release/Release/onnxruntime).
SEARCH_DEPTH = 4


PACKAGE = "onnxruntime"
# What of a zip source is written to disk: what is read as a file. Not the Windows binaries: the tag is read from
# the `.pyd`'s imports where it lies in the zip, and the DLL closure and the signature check read them in the built
# wheel (`readers/pe_source.py`); only a `.pyd` compressed with a method a wheel may not hold is written out. A
# Linux extension module (the tag: its name, and that it is x86-64 ELF), a
# dist-info, the modules that state the name and version. The rest of the package goes into the wheel from the zip,
# compressed as it is there and hashed from its stream: creating three hundred small files was a third of the time
# it takes to read an official wheel, and writing out onnxruntime-gpu's Linux providers (460 MB, read by nothing)
# a tenth of what the Linux GPU build wrote.
ON_DISK = re.compile(r"(\.dylib|\.(cpython-3\d+-x86_64-linux-gnu|abi3)\.so|\.dist-info/[^/]+(/[^/]+)*"
                     r"|(^|/)onnxruntime/(__init__|capi/build_and_package_info|capi/version_info)\.py)$", re.IGNORECASE)
LINUX_ABI3_RE = re.compile(r"\.abi3\.so$")


@dataclass(frozen=True, kw_only=True)
class CapiTree:
    """What a capi source holds, read from its files without importing them."""

    root: Path  # the folder containing onnxruntime/
    package: str  # distribution name in wheel-filename form: "onnxruntime", "onnxruntime_gpu"
    version: str
    requires: tuple[str, ...]  # Requires-Dist of the source's dist-info, empty when it has none
    dist_info: Path | None  # the source's ORT dist-info folder (an official wheel, an installed tree)
    tag: str  # compressed wheel tag derived from the binaries, e.g. "cp311-cp311-win_amd64"
    archive: Path | None = None  # the zip the tree was extracted from, whose compressed members can be reused
    archive_root: str = ""  # where `root` is inside that zip ("" for its top, "build/Release" for a nested tree)
    # Package files (relative to `root`) left in that zip, not extracted: none is read as a file (`ON_DISK`).
    in_archive: tuple[str, ...] = ()
    # How messages name the source: the manifest's key, never `root`, a scratch folder the user never made.
    label: str = "ort.capi"


@dataclass(frozen=True, kw_only=True)
class _Extension:
    """One extension module and the Python it was built for."""

    name: str  # its file name
    python: str  # "cp311"; for a stable-ABI module the Python is not knowable from the binary: ""
    abi: str  # "cp311" or "abi3"


def read_capi(source: Path, *, work_dir: Path, target: TargetPlatform, label: str) -> CapiTree:
    """Find the package tree in a zip or folder and read its name, version, dependencies and tag."""
    base, left = _materialize(source, work_dir=work_dir, label=label)
    root = _package_root(base, label=label)
    archive = source if source.is_file() and zipfile.is_zipfile(source) else None
    prefix = f"{root.relative_to(base).as_posix()}/" if root != base else ""
    pyds = [name for name in left if name.startswith(f"{prefix}{PACKAGE}/") and name.lower().endswith(".pyd")]
    packed = _read_in_place(source, pyds, label=label) if archive else ()
    dist_info = _dist_info(root, label=label)
    metadata = _parse_headers(read_utf8(dist_info / "METADATA", label=label)) if dist_info else None
    source_tags = _wheel_file_tags(dist_info) if dist_info else ()
    return CapiTree(
        root=root,
        package=_tree_package(root, metadata),
        version=_tree_version(root, metadata, label=label),
        requires=tuple(metadata.get_all("Requires-Dist") or ()) if metadata else (),
        dist_info=dist_info,
        tag=derive_tag(root, target=target, source_tags=source_tags, label=label, packed=packed),
        archive=archive,
        archive_root=root.relative_to(base).as_posix() if archive and root != base else "",
        in_archive=tuple(sorted(name.removeprefix(prefix) for name in left if name.startswith(f"{prefix}{PACKAGE}/"))),
        label=label,
    )


def derive_tag(tree_root: Path, *, target: TargetPlatform, source_tags: Sequence[str] = (), label: str | None = None,
               packed: Sequence[PackedPe] = ()) -> str:
    """The wheel tag the binaries call for.

    A `.pyd` names its Python in its import table (`python311.dll` → cp311); a Linux extension names it
    in its file name (`cpython-311-x86_64-linux-gnu`). A stable-ABI module (`python3.dll`, `.abi3.so`)
    only says "some Python 3": the oldest Python it supports was fixed at compile time by
    `Py_LIMITED_API` and is not readable from the binary, so it comes from the lowest `cp3X-abi3` tag
    the source wheel carried, and without one the build stops rather than claim a Python it may not
    serve. On Linux the platform part is the manylinux tag(s) the source wheel carried (the binaries'
    glibc needs were audited for those) and otherwise plain `linux_x86_64`. Never `py3-none`. Messages name
    the package as `label` says (the manifest's key) when given, never the folder a source was unpacked into.
    `packed` are the `.pyd` files left in the source zip, read where they lie.
    """
    package = tree_root / PACKAGE
    where = f"{label}: its {PACKAGE} package" if label else str(package)
    extensions = _EXTENSIONS[target.binary_format](package, packed, label)
    if not extensions:
        msg = (f"{where}: found no Python extension module for {target.tag} (a .pyd importing pythonXY.dll "
               f"or a *.cpython-3XY-x86_64-linux-gnu.so), expected one; without it the wheel could only be "
               f"py3-none, which cannot carry ONNX Runtime's binaries")
        raise BuildError(msg)
    source = _parse_tags(source_tags, where=f"{label or tree_root}: the source wheel's WHEEL file")
    python, abi = _python_and_abi(extensions, source_tags=source, where=where)
    if source and not any(t.interpreter == python and t.abi == abi for t in source):
        msg = (f"{where}: the binaries are built for {python}-{abi}, but the source wheel's WHEEL file says "
               f"{', '.join(sorted(source_tags))}; expected them to agree")
        raise BuildError(msg)
    return f"{python}-{abi}-{'.'.join(_platform_tags(target, python, abi, source))}"


def _parse_tags(tags: Sequence[str], *, where: str) -> frozenset[Tag]:
    try:
        return frozenset(tag for text in tags for tag in parse_tag(text))
    except ValueError:
        msg = f"{where} has the tags {', '.join(tags)}, expected tags of the form python-abi-platform"
        raise BuildError(msg) from None


def _materialize(source: Path, *, work_dir: Path, label: str) -> tuple[Path, list[str]]:
    """A folder is used in place; an archive is extracted into a fresh folder under work_dir: a tar whole, a
    zip (a wheel) but for the files it need not write (`ON_DISK`), which are returned."""
    if source.is_dir():
        return source, []
    if not source.is_file():
        msg = f"{label}: found nothing at {source}, expected a zip or folder holding onnxruntime/capi/"
        raise InputUnavailableError(msg)
    dest = work_dir / f"{source.name}.capi"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with SafeArchive.open(source, label=label) as archive:
        if not zipfile.is_zipfile(source):
            archive.extract(dest)
            return dest, []
        files = [entry.name for entry in archive.entries if not entry.is_dir and not _skipped(entry.name)]
        written = {entry.name for entry in archive.entries if entry.is_dir or _on_disk(archive, entry.name)}
        archive.extract(dest, members=sorted(written))
    left = [name for name in files if name not in written]
    for name in left:  # their folders, so the tree is found as it would be fully extracted (names checked)
        dest.joinpath(*name.split("/")[:-1]).mkdir(parents=True, exist_ok=True)
    return dest, left


def _on_disk(archive: SafeArchive, name: str) -> bool:
    """Read as a file (`ON_DISK`), or a `.pyd` that cannot be read where it lies (bzip2, LZMA: not a wheel's)."""
    if ON_DISK.search(name):
        return True
    info = archive.zip_info(name)
    return name.lower().endswith(".pyd") and (info is None or not copyable(info))


def _read_in_place(source: Path, names: Sequence[str], *, label: str) -> tuple[PackedPe, ...]:
    """The `.pyd` files left in the zip, each read once where it lies (and kept for the next reader)."""
    found = []
    with SafeArchive.open(source, label=label) as archive:
        for name in names:
            info = archive.zip_info(name)
            assert info is not None  # left in a zip because it could be read there (`_on_disk`)
            found.append(PackedPe(source, name, inflate(source, info)[0]))
    return tuple(found)


def _skipped(name: str) -> bool:
    """What `_files` leaves out of a tree on disk, by member name."""
    parts = name.split("/")
    return any(part in SKIPPED_DIRS for part in parts[:-1]) or Path(parts[-1]).suffix in SKIPPED_SUFFIXES


def _package_root(base: Path, *, label: str) -> Path:
    roots = sorted(_roots_with_capi(base, depth=SEARCH_DEPTH))
    if not roots:
        msg = (f"{label}: found no {PACKAGE}/capi/ folder in it, expected a zip or folder holding the "
               f"{PACKAGE} package tree (for example an unpacked wheel or a build's output)")
        raise BuildError(msg)
    if len(roots) > 1:
        listed = ", ".join(f"{root.relative_to(base).as_posix()}/{PACKAGE}/capi" for root in roots)
        msg = (f"{label}: found {len(roots)} {PACKAGE}/capi/ folders ({listed}), "
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
        listed = ", ".join(p.name for p in found)
        msg = f"{label}: found {len(found)} ONNX Runtime dist-info folders ({listed}), expected at most one"
        raise BuildError(msg)
    return found[0] if found else None


def _parse_headers(text: str) -> Message:
    return Parser().parsestr(text, headersonly=True)


def _wheel_file_tags(dist_info: Path) -> tuple[str, ...]:
    wheel = dist_info / "WHEEL"
    return tuple(_parse_headers(read_utf8(wheel, label=str(dist_info))).get_all("Tag") or ()) if wheel.is_file() else ()


def _tree_package(root: Path, metadata: Message | None) -> str:
    """Distribution name: the dist-info's, else what the ORT build wrote into capi/, else CPU vs CUDA."""
    capi = root / PACKAGE / "capi"
    if metadata and metadata["Name"]:
        name = metadata["Name"]
    elif isinstance(declared := module_constants(capi / "build_and_package_info.py").get("package_name"), str):
        name = declared
    else:
        name = f"{PACKAGE}-gpu" if module_constants(capi / "version_info.py").get("use_cuda") is True else PACKAGE
    return distribution_name(canonicalize_name(name).replace("-", "_"), where=f"{root}: the distribution name")


def _tree_version(root: Path, metadata: Message | None, *, label: str) -> str:
    """`__version__` of the package, cross-checked with every other place the tree states its version."""
    init = root / PACKAGE / "__init__.py"
    # Named relative to the tree: `root` may be a scratch folder the source was unpacked into.
    claims = {
        f"{PACKAGE}/__init__.py": module_constants(init).get("__version__"),
        f"{PACKAGE}/capi/build_and_package_info.py":
            module_constants(root / PACKAGE / "capi" / "build_and_package_info.py").get("__version__"),
        "the dist-info METADATA": metadata["Version"] if metadata else None,
    }
    stated = {where: value for where, value in claims.items() if isinstance(value, str)}
    if not stated:
        msg = f"{label}: found no __version__ in {PACKAGE}/__init__.py, expected a string assignment such as __version__ = \"1.23.1\""
        raise BuildError(msg)
    if len({_version(value, where=where) for where, value in stated.items()}) > 1:
        listed = "; ".join(f"{where} says {value}" for where, value in stated.items())
        msg = f"{label}: the source disagrees about its version ({listed}), expected one version"
        raise BuildError(msg)
    return version_text(next(iter(stated.values())), where=f"{label}: the version")


def module_constants(path: Path) -> dict[str, object]:
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


def _files(folder: Path) -> list[Path]:
    """Every file under folder in a fixed order, skipping what a running Python leaves behind."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        found.extend(Path(dirpath) / f for f in sorted(filenames) if Path(f).suffix not in SKIPPED_SUFFIXES)
    return sorted(found, key=lambda p: p.relative_to(folder).as_posix())


def _win_extensions(package: Path, packed: Sequence[PackedPe], label: str | None) -> list[_Extension]:
    return [*(_pyd_extension(path, name=str(path)) for path in _files(package) if path.suffix.lower() == ".pyd"),
            *(_pyd_extension(pe, name=f"{label}!{pe.name}") for pe in packed)]


def _pyd_extension(source: PeSource, *, name: str) -> _Extension:
    info = inspect_pe(source, label=name)
    machine, imports = info.machine, info.imports
    if machine != X64_MACHINE:
        msg = f"{name}: found PE machine {machine:#06x}, expected {X64_MACHINE:#06x} (x64) for win_amd64"
        raise BuildError(msg)
    versions = sorted({m.group(1) for dll in imports if (m := WIN_PYTHON_DLL_RE.match(dll))})
    file = PurePosixPath(name).name
    if len(versions) > 1:
        pythons = ", ".join(f"python3{v}.dll" for v in versions)
        msg = f"{name}: found imports of several Pythons ({pythons}), expected exactly one"
        raise BuildError(msg)
    if versions:
        return _Extension(name=file, python=f"cp3{versions[0]}", abi=f"cp3{versions[0]}")
    if any(dll.lower() == "python3.dll" for dll in imports):
        return _Extension(name=file, python="", abi="abi3")
    msg = f"{name}: found no import of pythonXY.dll or python3.dll, expected a Python extension module"
    raise BuildError(msg)


def _linux_extensions(package: Path, packed: Sequence[PackedPe], label: str | None) -> list[_Extension]:
    """`packed` is always empty here: a Linux extension module is read as a file (`ON_DISK`)."""
    found: list[_Extension] = []
    for path in _files(package):
        if match := LINUX_EXTENSION_RE.search(path.name):
            found.append(_Extension(name=path.name, python=f"cp3{match.group(1)}", abi=f"cp3{match.group(1)}"))
        elif LINUX_ABI3_RE.search(path.name):
            found.append(_Extension(name=path.name, python="", abi="abi3"))
        else:
            continue
        _check_elf_x86_64(path)
    return found


#: The extension modules of a package, by the binary format of the target: `.pyd` or `.so`.
_EXTENSIONS = {"pe": _win_extensions, "elf": _linux_extensions}


def _check_elf_x86_64(path: Path) -> None:
    if not is_x86_64_elf(path):
        msg = f"{path}: not an x86-64 ELF file, expected a Linux x86_64 extension module"
        raise BuildError(msg)


def _python_and_abi(extensions: Sequence[_Extension], *, source_tags: frozenset[Tag],
                    where: str) -> tuple[str, str]:
    """One Python for all modules; version-specific modules pin it, stable-ABI ones merely accept it."""
    specific = sorted({e.python for e in extensions if e.abi != "abi3"})
    if len(specific) > 1:
        listed = "; ".join(f"{e.name} is {e.python}" for e in extensions if e.abi != "abi3")
        msg = f"{where}: the extension modules disagree about the Python version ({listed}), expected one"
        raise BuildError(msg)
    if specific:
        return specific[0], specific[0]
    declared = sorted((t.interpreter for t in source_tags if t.abi == "abi3" and t.interpreter.startswith("cp3")),
                      key=lambda interpreter: int(interpreter[3:]))
    if not declared:
        names = ", ".join(e.name for e in extensions)
        msg = (f"{where}: found only stable-ABI extension modules ({names}) and no cp3X-abi3 tag in a source "
               f"dist-info, expected one: the oldest Python such a module supports cannot be read from the "
               f"binary; use the wheel it came from as the capi source")
        raise BuildError(msg)
    return declared[0], "abi3"


def _platform_tags(target: TargetPlatform, python: str, abi: str, source_tags: frozenset[Tag]) -> list[str]:
    """The source wheel's platform tags that serve the target (the manylinux ones a Linux wheel was audited for;
    on Windows only its own tag serves), else the target's tag."""
    carried = sorted({t.platform for t in source_tags
                      if t.interpreter == python and t.abi == abi and target.serves_platform(t.platform)})
    return carried or [target.tag]
