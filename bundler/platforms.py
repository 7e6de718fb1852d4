"""The two targets a bundle can be built for, each described once.

Every difference between Windows and Linux that the build cares about (where a venv keeps its packages
and interpreter, which variable finds DLLs, which wheel tags serve the target, line endings of the text
files) lives in one `TargetPlatform`, so no other module compares platform strings (cibuildwheel's
`PlatformModule` serves the same role there).
"""

from __future__ import annotations

import re
import sysconfig
from dataclasses import dataclass

from packaging.tags import Tag

_MANYLINUX_X86_64 = re.compile(r"^(linux|manylinux(1|2010|2014|_\d+_\d+))_x86_64$")

#: The glibc range of the manylinux tags a Linux bundle accepts, newest first (pip does not widen
#: `manylinux_2_28` to older tags by itself, so each one is named).
MANYLINUX_GLIBC_MAX = 28
MANYLINUX_GLIBC_MIN = 17


@dataclass(frozen=True, kw_only=True)
class TargetPlatform:
    """What differs between the targets, from the build's point of view."""

    tag: str  # the manifest's `[bundle] platform`
    windows: bool
    markers: tuple[tuple[str, str], ...]  # PEP 508 environment markers that differ per platform
    dll_path_variable: str
    newline: str  # of the text files a person reads on the target (README-INSTALL.txt)

    def site_packages(self, python: str) -> str:
        """Where the venv keeps its packages, install-relative."""
        return "venv/Lib/site-packages" if self.windows else f"venv/lib/python{python}/site-packages"

    @property
    def venv_python(self) -> str:
        return "venv/Scripts/python.exe" if self.windows else "venv/bin/python"

    def default_install_dir(self, name: str) -> str:
        # Windows: the engine expands %ProgramFiles% on the target; a folder only administrators can write.
        return f"%ProgramFiles%\\{name}" if self.windows else f"/opt/{name}"

    def pip_platforms(self) -> list[str]:
        """The `--platform` values for pip, most preferred first."""
        if self.windows:
            return [self.tag]
        perennial = [f"manylinux_2_{minor}_x86_64" for minor in range(MANYLINUX_GLIBC_MAX, MANYLINUX_GLIBC_MIN - 1, -1)]
        return [*perennial, "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]

    def serves_platform(self, platform_tag: str) -> bool:
        """Whether a wheel's platform tag (not `any`) runs on this target."""
        if self.windows:
            return platform_tag == self.tag
        return bool(_MANYLINUX_X86_64.match(platform_tag))

    def serves(self, tag: Tag, *, minor: int) -> bool:
        """Whether a wheel tag serves CPython 3.<minor> on this target: an exact cp3X tag, the stable ABI
        of an older 3.X, or a pure-Python py3 wheel."""
        if tag.interpreter.startswith("py3") and tag.abi == "none":
            return tag.platform == "any" or self.serves_platform(tag.platform)
        if not self.serves_platform(tag.platform):
            return False
        exact = tag.interpreter == f"cp3{minor}" and tag.abi == f"cp3{minor}"
        stable = (tag.abi == "abi3" and tag.interpreter.startswith("cp3") and tag.interpreter[3:].isdigit()
                  and int(tag.interpreter[3:]) <= minor)
        return exact or stable


WINDOWS = TargetPlatform(
    tag="win_amd64", windows=True, dll_path_variable="PATH", newline="\r\n",
    markers=(("sys_platform", "win32"), ("platform_system", "Windows"), ("os_name", "nt"),
             ("platform_machine", "AMD64")),
)
LINUX = TargetPlatform(
    tag="linux_x86_64", windows=False, dll_path_variable="LD_LIBRARY_PATH", newline="\n",
    markers=(("sys_platform", "linux"), ("platform_system", "Linux"), ("os_name", "posix"),
             ("platform_machine", "x86_64")),
)

TARGETS: dict[str, TargetPlatform] = {target.tag: target for target in (WINDOWS, LINUX)}


def target_platform(tag: str) -> TargetPlatform:
    """The platform for a validated `[bundle] platform` value."""
    return TARGETS[tag]


def host_platform() -> TargetPlatform | None:
    """The target this machine itself is (the model gate runs here), or None for another kind of machine:
    `sysconfig`'s `linux-x86_64` and `win-amd64` are the wheel platform tags with `-` for `_`."""
    return TARGETS.get(sysconfig.get_platform().replace("-", "_").replace(".", "_"))
