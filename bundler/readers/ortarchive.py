"""Reading an ONNX Runtime C/C++ release archive: its version, commit, binaries and whether they agree; extracting it without its links."""

from __future__ import annotations

import gzip
import lzma
import mmap
import re
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from bundler.errors import BuildError, InputUnavailableError, UnsafeArchiveError
from bundler.readers.archives import Limits, SafeArchive, check_tar_budget
from bundler.readers.pe import X64_MACHINE, inspect_pe, is_x86_64_elf
from bundler.target_platform import TargetPlatform

# ORT's FileVersion is <major>.<minor>.<build date>.<build number>.<short commit> (docs/facts.md §1).
_FILE_VERSION = re.compile(r"^(\d+)\.(\d+)\.\d+\.\d+\.([0-9a-f]{7,40})$")


_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")


# "ORT Build Info: git-branch=HEAD, git-commit-id=d9b2048791, build type=Release" in both the DLL and the .so.
_BUILD_INFO_COMMIT = re.compile(rb"git-commit-id=([0-9a-f]{7,40})")


_SHARED_OBJECT = re.compile(r"\.so(\.\d+)*$")


_MAX_LINK_HOPS = 8

_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


@dataclass(frozen=True, kw_only=True)
class OrtArchive:
    """What an ORT release archive is, read from its own files; paths are relative to its top folder."""

    top: str
    version: str
    commit: str
    files: tuple[str, ...]
    binaries: dict[str, str | None]  # lib path -> PE FileVersion (None for a Linux shared object)
    links: dict[str, str] = field(default_factory=dict)  # accepted symlink -> the regular file it resolves to

    def to_json(self) -> dict[str, Any]:
        return {"top": self.top, "version": self.version, "commit": self.commit, "files": list(self.files),
                "binaries": dict(sorted(self.binaries.items())), "links": dict(sorted(self.links.items()))}


@dataclass(frozen=True, kw_only=True)
class _Layout:
    """The files a platform's archive must have, relative to the top folder."""

    library: str
    import_library: str | None

    @classmethod
    def of(cls, target: TargetPlatform, version: str) -> _Layout:
        return _format(target).layout(version)


def inspect_ort_archive(path: Path, *, label: str, target: TargetPlatform, expected_version: str | None = None) -> OrtArchive:
    """Read and cross-check an archive without keeping it: only its binaries and version files are extracted.

    Raises BuildError when the archive disagrees with itself or with `expected_version` (the manifest's).
    """
    with tempfile.TemporaryDirectory(prefix="ort-archive-") as tmp:
        archive, _ = extract_ort_archive(path, label=label, target=target, dest=Path(tmp),
                                         expected_version=expected_version, everything=False)
    return archive


def extract_ort_archive(path: Path, *, label: str, target: TargetPlatform, dest: Path, expected_version: str | None = None,
                        everything: bool = True) -> tuple[OrtArchive, Path]:
    """Extract (all of, or only what inspection needs from) an archive under `dest`; returns it and its top folder."""
    dest.mkdir(parents=True, exist_ok=True)
    source, links = _without_links(path, label=label, scratch=dest / "link-free.tar")
    with SafeArchive.open(source, label=label) as archive:
        top = _top_folder(archive.names(), label=label)
        files = tuple(sorted(PurePosixPath(e.name).relative_to(top).as_posix() for e in archive.entries
                             if not e.is_dir and e.name not in links))
        wanted = None if everything else [f"{top}/{rel}" for rel in files if _needed_for_inspection(rel, target)]
        archive.extract(dest / "tree", members=wanted)
    if source != path:
        source.unlink()
    root = dest / "tree" / top
    relative_links = {PurePosixPath(k).relative_to(top).as_posix(): PurePosixPath(v).relative_to(top).as_posix()
                      for k, v in links.items()}
    result = _read_facts(root, top=top, files=files, links=relative_links, label=label, target=target)
    problems = _disagreements(result, root, label=label, target=target, expected_version=expected_version)
    if problems:
        msg = f"{label} is not a consistent ONNX Runtime release archive: " + "; ".join(problems)
        raise BuildError(msg)
    return result, root


def _needed_for_inspection(rel: str, target: TargetPlatform) -> bool:
    return rel in ("VERSION_NUMBER", "GIT_COMMIT_ID") or _is_binary(rel, target)


def _is_binary(rel: str, target: TargetPlatform) -> bool:
    path = PurePosixPath(rel)
    if path.parent.as_posix() != "lib":
        return False
    return bool(_format(target).library_name.search(path.name))


def _top_folder(names: list[str], *, label: str) -> str:
    """The official archives hold exactly one folder, e.g. onnxruntime-win-x64-1.23.1/."""
    tops = sorted({name.split("/", 1)[0] for name in names})
    if len(tops) != 1 or not any("/" in name for name in names):
        msg = (f"{label} has the top-level entries {tops[:5]}; expected the single top folder of an ONNX Runtime "
               f"release archive (onnxruntime-<platform>-<version>/)")
        raise BuildError(msg)
    return tops[0]


def _read_facts(root: Path, *, top: str, files: tuple[str, ...], links: dict[str, str], label: str,
                target: TargetPlatform) -> OrtArchive:
    version = _read_text(root, "VERSION_NUMBER", files, label=label)
    commit = _read_text(root, "GIT_COMMIT_ID", files, label=label)
    version_of = _format(target).file_version
    binaries = {rel: version_of(root / rel, label=f"{label}: {rel}") for rel in files if _is_binary(rel, target)}
    return OrtArchive(top=top, version=version, commit=commit, files=files, binaries=binaries, links=links)


def _read_text(root: Path, name: str, files: tuple[str, ...], *, label: str) -> str:
    if name not in files:
        msg = f"{label} has no {name} in its top folder; expected the file every ONNX Runtime release archive carries"
        raise BuildError(msg)
    return (root / name).read_text(encoding="utf-8", errors="replace").strip()


def _file_version(path: Path, *, label: str) -> str | None:
    return inspect_pe(path, label=label).file_version


def _no_version(path: Path, *, label: str) -> str | None:
    """A shared object carries no version resource; its build-info string is checked instead."""
    return None


def _disagreements(archive: OrtArchive, root: Path, *, label: str, target: TargetPlatform,
                   expected_version: str | None) -> list[str]:
    """Every way the archive contradicts itself, the manifest or the target platform, each one sentence."""
    problems = _version_problems(archive, expected_version)
    layout = _Layout.of(target, archive.version)
    required = [layout.library, "include/onnxruntime_c_api.h"]
    if layout.import_library:
        required.append(layout.import_library)
    shipped = set(archive.files) | set(archive.links)
    problems += [f"it has no {rel}, expected for {target.tag} (is this the archive for another platform?)"
                 for rel in required if rel not in shipped]
    problems += _binary_problems(archive, root, target=target)
    if layout.library in archive.files:
        problems += _build_info_problems(archive, root / layout.library, layout.library)
    return problems


def _version_problems(archive: OrtArchive, expected_version: str | None) -> list[str]:
    problems = []
    if not _VERSION.match(archive.version):
        problems.append(f"VERSION_NUMBER holds {archive.version!r}, expected a version such as '1.23.1'")
    if expected_version is not None and archive.version != expected_version:
        problems.append(f"VERSION_NUMBER says {archive.version} but [ort] version is {expected_version}")
    if not _COMMIT.match(archive.commit):
        problems.append(f"GIT_COMMIT_ID holds {archive.commit!r}, expected a hexadecimal git commit id")
    named = re.search(r"-(\d+\.\d+\.\d+)$", archive.top)
    if named and named.group(1) != archive.version:
        problems.append(f"its top folder {archive.top} names version {named.group(1)} but VERSION_NUMBER says "
                        f"{archive.version}")
    return problems


def _binary_problems(archive: OrtArchive, root: Path, *, target: TargetPlatform) -> list[str]:
    problems = []
    for rel in sorted(archive.binaries):
        if not _PLAIN_NAME.match(PurePosixPath(rel).name):
            problems.append(f"{rel} has a name with characters other than letters, digits and . _ + -")
        else:
            problems += _format(target).problems(archive, rel, root / rel, target=target)
    versions = sorted({v for v in archive.binaries.values() if v is not None})
    if len(versions) > 1:
        problems.append(f"its DLLs carry different FileVersions {versions}, expected one build")
    return problems


def _elf_problems(archive: OrtArchive, rel: str, path: Path, *, target: TargetPlatform) -> list[str]:
    if is_x86_64_elf(path):
        return []
    return [f"{rel} is not an x86-64 ELF shared object, expected one for {target.tag}"]


def _dll_problems(archive: OrtArchive, rel: str, path: Path, *, target: TargetPlatform) -> list[str]:
    info = inspect_pe(path, label=rel)
    problems = []
    if info.machine != X64_MACHINE:
        problems.append(f"{rel} is built for {info.machine_name}, expected x64")
    version = archive.binaries[rel]
    if version is None:
        if rel == _Layout.of(target, archive.version).library:
            problems.append(f"{rel} has no FileVersion, expected the ORT form <major>.<minor>.<date>.<build>.<commit>")
        return problems
    match = _FILE_VERSION.match(version)
    if match is None:
        problems.append(f"{rel} has FileVersion {version}, expected the ORT form <major>.<minor>.<date>.<build>.<commit>")
        return problems
    major_minor = ".".join(archive.version.split(".")[:2])
    if f"{match.group(1)}.{match.group(2)}" != major_minor:
        problems.append(f"{rel} has FileVersion {version} but VERSION_NUMBER says {archive.version}")
    if not _same_commit(match.group(3), archive.commit):
        problems.append(f"{rel} has FileVersion {version}, whose commit {match.group(3)} is not GIT_COMMIT_ID "
                        f"{archive.commit}")
    return problems


@dataclass(frozen=True, kw_only=True)
class _BinaryFormat:
    """What an archive's libraries are in one binary format (`TargetPlatform.binary_format`): their names, the
    main library's layout, the version each states and what each must be."""

    layout: Callable[[str], _Layout]  # of the ORT version
    library_name: re.Pattern[str]
    file_version: Callable[..., str | None]  # (path, *, label)
    problems: Callable[..., list[str]]  # (archive, rel, path, *, target)


_FORMATS = {
    # A DLL, its import library for the linker, and a FileVersion naming the commit.
    "pe": _BinaryFormat(layout=lambda version: _Layout(library="lib/onnxruntime.dll",
                                                       import_library="lib/onnxruntime.lib"),
                        library_name=re.compile(r"\.dll$", re.IGNORECASE), file_version=_file_version,
                        problems=_dll_problems),
    # The fully versioned shared object, which a program links itself (no import library), and no version resource.
    "elf": _BinaryFormat(layout=lambda version: _Layout(library=f"lib/libonnxruntime.so.{version}", import_library=None),
                         library_name=_SHARED_OBJECT, file_version=_no_version, problems=_elf_problems),
}


def _format(target: TargetPlatform) -> _BinaryFormat:
    return _FORMATS[target.binary_format]


def _build_info_problems(archive: OrtArchive, library: Path, rel: str) -> list[str]:
    """The main library names the commit it was built from; a swapped library shows up here."""
    with library.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        found = _BUILD_INFO_COMMIT.search(data)
        built = found.group(1).decode("ascii") if found else None
    if built is None:
        return []
    if _same_commit(built, archive.commit):
        return []
    return [f"{rel} was built from commit {built} but GIT_COMMIT_ID is {archive.commit}"]


def _same_commit(a: str, b: str) -> bool:
    """Short and full ids of one commit: one is a prefix of the other."""
    return a.startswith(b) or b.startswith(a)


@contextmanager
def _tar_errors(label: str) -> Iterator[None]:
    try:
        yield
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile) as exc:
        msg = f"{label} cannot be read as a tar archive ({exc}); expected a complete .tgz release archive"
        raise UnsafeArchiveError(msg) from exc
    except OSError as exc:
        msg = f"{label} cannot be re-packed without its links: {exc.strerror or exc}"
        raise BuildError(msg) from exc


def _without_links(path: Path, *, label: str, scratch: Path) -> tuple[Path, dict[str, str]]:
    """The archive to open with SafeArchive, and its accepted links (archive names) -> resolved regular file.

    A zip, or a tar without symlinks, is used as it is. A tar with symlinks is re-packed into `scratch`
    with every accepted link as an empty placeholder; anything else unusual is copied through unchanged so
    that SafeArchive refuses it with its own message.
    """
    if not path.is_file():
        raise InputUnavailableError(f"{label} is missing or not a file: {path}")
    if zipfile.is_zipfile(path) or not _is_tar(path, label=label):
        return path, {}
    symlinks: dict[str, str] = {}
    regular: set[str] = set()
    limits = Limits()
    total = 0
    archive_size = path.stat().st_size
    with _tar_errors(label), tarfile.open(path, "r:*") as source, tarfile.open(scratch, "w",
                                                                             format=tarfile.PAX_FORMAT) as out:
        for count, member in enumerate(source, 1):
            total += member.size if member.isreg() else 0
            check_tar_budget(label, member.name, count=count, total=total, archive_size=archive_size, limits=limits)
            name = _normal(member.name)
            if member.issym():
                symlinks[name] = member.linkname
                out.addfile(_placeholder(member.name))
                continue
            if member.isreg():
                regular.add(name)
                out.addfile(member, source.extractfile(member))
            else:
                out.addfile(member)
    if not symlinks:
        scratch.unlink()
        return path, {}
    return scratch, _accept_links(symlinks, regular, label=label)


def _is_tar(path: Path, *, label: str) -> bool:
    with _tar_errors(label):
        return tarfile.is_tarfile(path)


def _normal(name: str) -> str:
    return "/".join(part for part in name.split("/") if part not in ("", "."))


def _placeholder(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = 0o644
    return info


def _accept_links(symlinks: Mapping[str, str], regular: set[str], *, label: str) -> dict[str, str]:
    """Each link -> the regular file its chain ends at; any link outside the policy is refused by name."""
    accepted = {}
    for name in sorted(symlinks):
        target = _resolve(name, symlinks, regular)
        if target is None:
            msg = (f"{label}: entry {name!r} is a symbolic link to {symlinks[name]!r}; only links inside a top "
                   f"folder's lib/ that name a sibling file (the libonnxruntime.so chain) are accepted")
            raise UnsafeArchiveError(msg)
        accepted[name] = target
    return accepted


def _resolve(name: str, symlinks: Mapping[str, str], regular: set[str]) -> str | None:
    seen = {name}
    current = name
    for _ in range(_MAX_LINK_HOPS):
        parts = current.split("/")
        target = symlinks[current]
        if len(parts) != 3 or parts[1] != "lib" or not _PLAIN_NAME.match(parts[2]) or not _PLAIN_NAME.match(target):
            return None
        current = f"{parts[0]}/lib/{target}"
        if current in regular:
            return current
        if current not in symlinks or current in seen:
            return None
        seen.add(current)
    return None
