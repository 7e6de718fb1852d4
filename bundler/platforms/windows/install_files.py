"""The PE files an install of a Windows bundle puts on disk, as App Control and AppLocker policies must name them.

A bundle that carries its interpreter ([python] runtime) installs a relocatable tree: its install image is made
here by the install engine, exactly as `package --msi` makes it (bundler/platforms/windows/msi.py `make_image`), so the
console-script launchers pypa's installer writes and every `.pyd` inside the wheels are files of the image.

A bundle that runs on the target's own Python installs a tree that depends on that machine: the environment's
`python.exe` is the target's, and each console-script launcher embeds the absolute path of that interpreter, so
its hash is known only on the target. Those files are named as not covered, with the reason; everything else
(the wheels' binaries, the files the plan copies) is read from the bundle as the install will write it.
"""

from __future__ import annotations

import configparser
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from bundler.errors import VerificationError
from bundler.platforms.windows.app_control import Uncovered
from bundler.readers.pe import is_pe
from bundler.shipped.ort_bundle.records import InstallPlan

#: Members of a wheel that may be PE files: Windows loads nothing else as code.
_PE_SUFFIXES = (".dll", ".pyd", ".exe")


@dataclass(frozen=True, kw_only=True)
class InstallFiles:
    files: tuple[tuple[str, Path], ...]  # (install-relative path, where the same bytes are here)
    uncovered: tuple[Uncovered, ...]


def image_files(image: Path) -> InstallFiles:
    """Every PE file of an install image (the tree `make_image` wrote, or an MSI's extracted files)."""
    found = [(path.relative_to(image).as_posix(), path) for path in sorted(image.rglob("*"))
             if path.is_file() and not path.is_symlink() and is_pe(path)]
    return InstallFiles(files=tuple(found), uncovered=())


def planned_files(plan: InstallPlan, bundle: Path, work: Path) -> InstallFiles:
    """The PE files an install of the unpacked `bundle` writes on a target whose Python it uses, the wheels'
    members extracted into `work`; the interpreter and the console-script launchers named as not covered."""
    site = f"{plan.venv.dir}/{plan.venv.site_packages}"
    files = [(entry.target, bundle / entry.source) for entry in plan.copy if is_pe(bundle / entry.source)]
    files += [(f"{site}/{entry.target}", bundle / entry.source) for entry in plan.venv.site_packages_files
              if is_pe(bundle / entry.source)]
    interpreter = PurePosixPath(plan.venv.dir, plan.venv.interpreter)
    uncovered = [Uncovered(path=str(path), reason="the target's own Python, which the environment starts: allow that "
                                                  "Python (python.org's is signed by the Python Software Foundation) "
                                                  "in your base policy")
                 for path in (interpreter, interpreter.with_name("pythonw.exe"))]
    for number, wheel in enumerate(plan.venv.wheels):
        with zipfile.ZipFile(bundle / wheel) as archive:
            for member, target in _wheel_binaries(archive, plan, wheel=wheel):
                dest = work / str(number) / member
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(archive.read(member))
                if is_pe(dest):
                    files.append((target, dest))
            uncovered += [Uncovered(path=f"{plan.venv.dir}/{plan.venv.scripts}/{script}.exe",
                                    reason="a console-script launcher: pypa's installer writes the target's "
                                           "interpreter path into it, so its hash exists only on the target; add "
                                           "[python] runtime to make the install relocatable and the launcher known")
                          for script in _console_scripts(archive)]
    return InstallFiles(files=tuple(sorted(files)), uncovered=tuple(sorted(uncovered, key=lambda u: u.path)))


def _wheel_binaries(archive: zipfile.ZipFile, plan: InstallPlan, *, wheel: str) -> Iterator[tuple[str, str]]:
    """(member, install-relative path) of each member that may be a PE file, by the wheel's install scheme."""
    site = f"{plan.venv.dir}/{plan.venv.site_packages}"
    for member in archive.namelist():
        if not member.lower().endswith(_PE_SUFFIXES):
            continue
        parts = PurePosixPath(member).parts
        if ".." in parts or PurePosixPath(member).is_absolute():
            msg = f"{wheel}: member {member!r} leaves the wheel's folder; expected paths inside it"
            raise VerificationError(msg)
        if parts[0].endswith(".data") and len(parts) > 2:
            scheme, rest = parts[1], "/".join(parts[2:])
            base = {"scripts": f"{plan.venv.dir}/{plan.venv.scripts}", "data": plan.venv.dir}.get(scheme, site)
            yield member, f"{base}/{rest}"
        else:
            yield member, f"{site}/{member}"


def _console_scripts(archive: zipfile.ZipFile) -> list[str]:
    """The names of the launchers the installer generates for the wheel's entry points."""
    entry_points = next((n for n in archive.namelist() if n.count("/") == 1
                         and n.endswith(".dist-info/entry_points.txt")), None)
    if entry_points is None:
        return []
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(archive.read(entry_points).decode("utf-8"))
    return sorted(name for section in ("console_scripts", "gui_scripts") if parser.has_section(section)
                  for name in parser.options(section))
