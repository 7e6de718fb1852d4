"""A pinned Python interpreter: python.org's Windows embeddable package or a python-build-standalone archive.

A bundle that carries its own interpreter needs no Python on the target (issue 12). The archive is an
untrusted input like any other, so it is opened through `SafeArchive`, and what the bundle will rely on is
read from the files themselves, never from the archive's name: the version (`PY_VERSION` in
`patchlevel.h`, or the `python3XY.dll` version resource), the machine (ELF `e_machine`, PE `Machine`), and,
on Linux, that the interpreter finds its `libpython` relative to itself (`RUNPATH $ORIGIN/...`), without
which it is not relocatable.

python-build-standalone archives hold a few links (`bin/python3 -> python3.11`, `lib/libpython3.11.so ->
libpython3.11.so.1.0`) that `SafeArchive` refuses. The policy: a link is accepted only when it names a
sibling in its own folder and ends at a regular file; the archive is re-packed without links (each one an
empty placeholder, so its name is still checked) and the links are not shipped: nothing the bundle starts
uses them, and they are listed in the record.
"""

from __future__ import annotations

import re
import tarfile
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from bundler.errors import BuildError, InputUnavailableError, ManifestError, UnsafeArchiveError
from bundler.readers.archives import DEFAULT_LIMITS, SafeArchive, check_tar_budget
from bundler.readers.elf import read_elf
from bundler.readers.pe import ELF_X86_64, X64_MACHINE, inspect_pe
from bundler.sources.cache import DISK_ERRNOS

RuntimeKind = Literal["python-build-standalone", "embeddable"]
PBS_TOP = "python"
_PY_VERSION = re.compile(rb'#define\s+PY_VERSION\s+"(3\.\d+\.\d+)[^"]*"')
_LIB_DIR = re.compile(r"^python/lib/python(3\.\d+)/os\.py$")
_PYTHON_DLL = re.compile(r"^python3(\d+)\.dll$", re.IGNORECASE)
_FULL_VERSION = re.compile(r"^(3\.\d+\.\d+)")
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
_MAX_LINK_HOPS = 8
_LICENSE_FILE = re.compile(r"(LICEN[CS]E|COPYING|NOTICE)([._-][^/]*)?", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class PythonRuntime:
    """An extracted, checked interpreter: every file relative to `root`, and what the install needs to know."""

    kind: RuntimeKind
    version: str  # "3.11.7"
    root: Path  # the extracted folder that becomes `python/` on the target
    files: tuple[str, ...]  # posix paths relative to root, sorted
    executables: frozenset[str]  # files with an executable bit in the archive
    interpreter: str  # relative to root: "bin/python3.11" or "python.exe"
    pth: str | None  # Windows: the `python3XY._pth` file, relative to root
    stdlib_zip: str | None  # Windows: `python3XY.zip`
    licenses: tuple[str, ...]  # licence and notice texts, relative to root
    links: Mapping[str, str]  # accepted links (relative to root) -> the sibling they name; not shipped

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "version": self.version, "interpreter": self.interpreter,
                "files": len(self.files), "licenses": list(self.licenses), "links": dict(sorted(self.links.items()))}


def read_runtime(path: Path, *, label: str, layout: Literal["embeddable", "standalone"], python: str,
                 dest: Path) -> PythonRuntime:
    """Check and extract the pinned interpreter into `dest`; every problem names `label` and the entry.

    `layout` is the kind of archive the target takes (`TargetPlatform.runtime_layout`): python.org's embeddable
    package or python-build-standalone's `install_only`."""
    source, links = _without_links(path, label=label, scratch=dest.parent / f"{dest.name}-link-free.tar")
    with SafeArchive.open(source, label=label) as archive:
        names = [e.name for e in archive.entries if not e.is_dir and e.name not in links]
        kind, top = _LAYOUTS[layout](names, label=label, python=python)
        archive.extract(dest, members=names)
    root = dest / top if top else dest
    rel = [name.removeprefix(f"{top}/") if top else name for name in names]
    rel_links = {k.removeprefix(f"{top}/"): v for k, v in links.items()}
    executable_rel = frozenset(name for name in rel if (root / name).stat().st_mode & 0o111)  # SafeArchive kept the bit
    if kind == "embeddable":  # what the archive turned out to be, read from its files
        return _windows_runtime(root, tuple(sorted(rel)), label=label, python=python, links=rel_links)
    return _linux_runtime(root, tuple(sorted(rel)), executable_rel, label=label, python=python, links=rel_links,
                          kind=kind)


# -- the two layouts --------------------------------------------------------------------------------------


def _pbs_layout(names: list[str], *, label: str, python: str) -> tuple[RuntimeKind, str]:
    """python-build-standalone `install_only`: one top folder `python/` with bin/, lib/, include/."""
    if any(_PYTHON_DLL.match(n) for n in names) or "python.exe" in names:
        msg = (f"{label} is a Windows Python (it holds python.exe / python3XY.dll), but [bundle] platform is "
               "linux_x86_64; expected a python-build-standalone *-x86_64-unknown-linux-gnu-install_only.tar.gz")
        raise ManifestError(msg)
    outside = sorted(n for n in names if not n.startswith(f"{PBS_TOP}/"))
    if outside:
        msg = (f"{label}: entry {outside[0]!r} is outside the top folder '{PBS_TOP}/'; a python-build-standalone "
               "install_only archive holds everything under python/")
        raise UnsafeArchiveError(msg)
    found = sorted({m.group(1) for n in names if (m := _LIB_DIR.match(n))})
    if not found:
        msg = (f"{label} has no python/lib/python3.X/os.py; expected a python-build-standalone install_only "
               "archive (the 'full' and 'debug' variants have another layout)")
        raise BuildError(msg)
    if found != [python]:
        _version_mismatch(label, f"Python {', '.join(found)} (python/lib/python{found[0]}/)", python)
    return "python-build-standalone", PBS_TOP


def _embeddable_layout(names: list[str], *, label: str, python: str) -> tuple[RuntimeKind, str]:
    """python.org's embeddable package: python.exe, python3XY.dll, python3XY.zip, python3XY._pth at its root."""
    if any(n.startswith(f"{PBS_TOP}/bin/") for n in names):
        msg = (f"{label} is a Linux Python (it holds python/bin/), but [bundle] platform is win_amd64; expected "
               "python.org's Windows embeddable package python-3.X.Y-embed-amd64.zip")
        raise ManifestError(msg)
    dlls = sorted(m.group(1) for n in names if "/" not in n and (m := _PYTHON_DLL.match(n)) and m.group(1))
    if "python.exe" not in names or not dlls:
        msg = (f"{label} has no python.exe and python3XY.dll at its root; expected python.org's Windows "
               "embeddable package (python-3.X.Y-embed-amd64.zip)")
        raise BuildError(msg)
    minor = python.split(".")[1]
    if dlls != [minor]:
        _version_mismatch(label, f"python3{dlls[0]}.dll (Python 3.{dlls[0]})", python)
    for needed in (f"python3{minor}.zip", f"python3{minor}._pth"):
        if needed not in names:
            msg = f"{label} has no {needed}; expected the embeddable package's standard library and path file"
            raise BuildError(msg)
    return "embeddable", ""


#: Where each kind of archive keeps the interpreter, by the layout a target takes.
_LAYOUTS = {"embeddable": _embeddable_layout, "standalone": _pbs_layout}


def _version_mismatch(label: str, found: str, python: str) -> None:
    msg = (f"python.runtime ({label}): holds {found}, but [bundle] python is {python}; pin the {python} runtime "
           "or change [bundle] python (the wheels' tag follows from it)")
    raise ManifestError(msg)


# -- what the files say -----------------------------------------------------------------------------------


def _linux_runtime(root: Path, files: tuple[str, ...], executables: frozenset[str], *, label: str, python: str,
                   links: Mapping[str, str], kind: RuntimeKind) -> PythonRuntime:
    interpreter = f"bin/python{python}"
    if interpreter not in files:
        msg = f"{label} has no regular file python/{interpreter}; expected the interpreter under that name"
        raise BuildError(msg)
    version = _patchlevel_version(root, files, label=label, python=python)
    licenses = _licenses(files, label=label, python=python)
    _check_elf_interpreter(root, interpreter, files, label=label)
    return PythonRuntime(kind=kind, version=version, root=root, files=files, executables=executables,
                         interpreter=interpreter, pth=None, stdlib_zip=None, licenses=licenses, links=links)


def _patchlevel_version(root: Path, files: tuple[str, ...], *, label: str, python: str) -> str:
    header = f"include/python{python}/patchlevel.h"
    if header not in files:
        msg = f"{label} has no python/{header}; its PY_VERSION is how the build reads the interpreter's version"
        raise BuildError(msg)
    match = _PY_VERSION.search((root / header).read_bytes())
    if match is None:
        msg = f"{label}: python/{header} has no '#define PY_VERSION \"3.X.Y\"'"
        raise BuildError(msg)
    version = match.group(1).decode("ascii")
    if version.rsplit(".", 1)[0] != python:
        _version_mismatch(label, f"Python {version} (python/{header})", python)
    return version


def _check_elf_interpreter(root: Path, interpreter: str, files: tuple[str, ...], *, label: str) -> None:
    """x86-64, and relocatable: every libpython it needs is shipped and found through $ORIGIN."""
    info = read_elf(root / interpreter, label=f"{label}: python/{interpreter}")
    if info.machine != ELF_X86_64:
        msg = (f"{label}: python/{interpreter} is an ELF binary for machine {info.machine}, but the bundle targets "
               f"x86-64 (machine {ELF_X86_64}); pin the *-x86_64-unknown-linux-gnu-install_only archive")
        raise BuildError(msg)
    for needed in (n for n in info.values("needed") if n.startswith("libpython")):
        if f"lib/{needed}" not in files:
            msg = f"{label}: python/{interpreter} needs {needed}, which the archive does not hold as python/lib/{needed}"
            raise BuildError(msg)
        fixed = [p for p in info.search_path if not p.startswith("$ORIGIN")]
        if fixed or not info.search_path:
            where = f"its RUNPATH names {fixed[0]}" if fixed else "it has no RUNPATH"
            msg = (f"{label}: python/{interpreter} is not relocatable: it needs {needed} but {where}, so on the target "
                   "it would not find python/lib/ (expected RUNPATH $ORIGIN/../lib, as python-build-standalone sets)")
            raise BuildError(msg)
        library = read_elf(root / "lib" / needed, label=f"{label}: python/lib/{needed}")
        if library.machine != ELF_X86_64:
            msg = f"{label}: python/lib/{needed} is for ELF machine {library.machine}, expected x86-64 ({ELF_X86_64})"
            raise BuildError(msg)


def _windows_runtime(root: Path, files: tuple[str, ...], *, label: str, python: str,
                     links: Mapping[str, str]) -> PythonRuntime:
    minor = python.split(".")[1]
    dll = f"python3{minor}.dll"
    for name in ("python.exe", dll):
        info = inspect_pe(root / name, label=f"{label}: {name}")
        if info.machine != X64_MACHINE:
            msg = (f"{label}: {name} is a {info.machine_name} binary, but the bundle targets x64 (win_amd64); pin "
                   "python-3.X.Y-embed-amd64.zip, not the win32 or arm64 package")
            raise BuildError(msg)
    info = inspect_pe(root / dll, label=f"{label}: {dll}")
    stated = info.product_version or info.file_version
    match = _FULL_VERSION.match(stated or "")
    if match is None:
        msg = f"{label}: {dll} has no version resource naming a Python version (found {stated!r}); expected '3.X.Y'"
        raise BuildError(msg)
    version = match.group(1)
    if version.rsplit(".", 1)[0] != python:
        _version_mismatch(label, f"Python {version} ({dll} version resource)", python)
    return PythonRuntime(kind="embeddable", version=version, root=root, files=files, executables=frozenset(),
                         interpreter="python.exe", pth=f"python3{minor}._pth", stdlib_zip=f"python3{minor}.zip",
                         licenses=_licenses(files, label=label, python=python), links=links)


def _licenses(files: tuple[str, ...], *, label: str, python: str) -> tuple[str, ...]:
    """The PSF licence (which carries the notices of what the build bundles: OpenSSL, libffi, ...) and any other
    licence text at the top, one level down, or in a `licenses/` folder."""
    found = []
    for name in files:
        parts = name.split("/")
        if not _LICENSE_FILE.fullmatch(parts[-1]) or parts[-1].lower().endswith((".py", ".pyc", ".h")):
            continue
        if len(parts) <= 2 or "licenses" in parts[:-1] or name == f"lib/python{python}/{parts[-1]}":
            found.append(name)
    if not found:
        msg = (f"{label} carries no licence text (LICENSE.txt); redistributing CPython requires the PSF licence "
               "and the notices of what it bundles")
        raise BuildError(msg)
    return tuple(found)


# -- links ------------------------------------------------------------------------------------------------


@contextmanager
def _tar_errors(label: str) -> Iterator[None]:
    try:
        yield
    except (tarfile.TarError, EOFError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
            raise  # our scratch disk is full or read-only: the build names that disk, the archive is not at fault
        msg = f"{label} is a truncated or corrupt tar archive ({exc}); expected a complete install_only archive"
        raise UnsafeArchiveError(msg) from exc


def _without_links(path: Path, *, label: str, scratch: Path) -> tuple[Path, dict[str, str]]:
    """The archive to open with SafeArchive, and its accepted links (archive names) -> the sibling they name.

    A zip, or a tar without links, is used as it is; a damaged one is left to SafeArchive, whose messages
    name the damage. Otherwise the tar's headers are held to the archive rules first (`_within_budget`),
    then it is re-packed into `scratch` with each link as an empty placeholder.
    """
    if not path.is_file():
        raise InputUnavailableError(f"{label} is missing or not a file: {path}")
    if zipfile.is_zipfile(path) or not _is_tar(path):
        return path, {}
    scratch.parent.mkdir(parents=True, exist_ok=True)
    with _tar_errors(label), tarfile.open(path, "r:*") as source:
        members = _within_budget(source, archive_size=path.stat().st_size, label=label)
        links = {_normal(m.name): m.linkname for m in members if m.issym()}
        if not links:
            return path, {}
        regular = {_normal(m.name) for m in members if m.isreg()}
        with tarfile.open(scratch, "w", format=tarfile.PAX_FORMAT) as out:
            for member in members:
                if member.issym():
                    placeholder = tarfile.TarInfo(member.name)
                    placeholder.mode = 0o644
                    out.addfile(placeholder)
                else:
                    out.addfile(member, source.extractfile(member) if member.isreg() else None)
    return scratch, {name: _accept_link(name, links, regular, label=label) for name in sorted(links)}


def _within_budget(source: tarfile.TarFile, *, archive_size: int, label: str) -> list[tarfile.TarInfo]:
    """Every member's header, held to the archive rules before the re-packed copy gets a byte.

    The re-packing writes what it reads, so it must not be the first to see a member: a 199-byte archive
    with a 100 GiB sparse member (tarfile reports its expanded size) or gigabytes of zeros compressed
    1000:1 is refused here by count, total and ratio, as SafeArchive refuses them, with nothing written.
    """
    members: list[tarfile.TarInfo] = []
    total = 0
    for count, member in enumerate(source, 1):
        total += member.size if member.isreg() else 0
        check_tar_budget(label, member.name, count=count, total=total, archive_size=archive_size,
                         limits=DEFAULT_LIMITS)
        members.append(member)
    _require_end(source, label=label)
    return members


def _require_end(source: tarfile.TarFile, *, label: str) -> None:
    """tarfile stops quietly at a header it cannot read; a complete archive ends with a zero block there."""
    assert source.fileobj is not None
    source.fileobj.seek(source.offset)
    block = source.fileobj.read(512)
    if len(block) < 512 or block.strip(b"\0"):
        msg = f"{label} is a truncated tar: it ends without the end-of-archive marker (an incomplete download?)"
        raise UnsafeArchiveError(msg)


def _is_tar(path: Path) -> bool:
    """Whether a (possibly damaged) tar: a damaged one goes to SafeArchive, which names the damage."""
    try:
        return tarfile.is_tarfile(path)
    except (tarfile.TarError, EOFError, OSError):
        return False


def _normal(name: str) -> str:
    return "/".join(part for part in name.split("/") if part not in ("", "."))


def _accept_link(name: str, links: Mapping[str, str], regular: set[str], *, label: str) -> str:
    """The sibling a link names, if its chain stays in its folder and ends at a regular file."""
    current, seen = name, {name}
    for _ in range(_MAX_LINK_HOPS):
        target = links[current]
        if not _PLAIN_NAME.match(target):
            break
        current = str(PurePosixPath(current).parent / target)
        if current in regular:
            return target
        if current not in links or current in seen:
            break
        seen.add(current)
    msg = (f"{label}: entry {name!r} is a symbolic link to {links[name]!r}; only links to a file in the same folder "
           "(bin/python3 -> python3.11) are accepted")
    raise UnsafeArchiveError(msg)
