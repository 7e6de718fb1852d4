"""The two targets a bundle can be built for, each described once, as data.

Every value that differs between Windows and Linux and that the build only reads (where a venv keeps its
packages and interpreter, which variable finds DLLs, which wheel tags serve the target, line endings of the
text files, the binary format and interpreter layout its readers expect) lives in one `TargetPlatform`, so no
module asks which platform it builds for: it reads the value. What the targets *do* differently (the DLL
closure, the VC++ runtime, the app-local runtime, the MSI) is the platform backends' (`bundler.platforms`),
which sit above the code they use; this identity stays at the base, where every layer may read it.
"""

from __future__ import annotations

import re
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from packaging.tags import Tag

from bundler.names import reserved_on_windows

_MANYLINUX_X86_64 = re.compile(r"^(linux|manylinux(1|2010|2014|_\d+_\d+))_x86_64$")

#: The glibc range of the manylinux tags a Linux bundle accepts, newest first (pip does not widen
#: `manylinux_2_28` to older tags by itself, so each one is named).
MANYLINUX_GLIBC_MAX = 28
MANYLINUX_GLIBC_MIN = 17


def _no_reserved_names(name: str) -> bool:
    return False


@dataclass(frozen=True, kw_only=True)
class TargetPlatform:
    """What differs between the targets, from the build's point of view: values, never a yes/no per platform."""

    name: str  # short and stable ("windows", "linux"): a folder name for per-target files, never compared
    tag: str  # the manifest's `[bundle] platform`
    markers: tuple[tuple[str, str], ...]  # PEP 508 environment markers that differ per platform
    dll_path_variable: str
    newline: str  # of the text files a person reads on the target (README-INSTALL.txt, the SDK's files)
    venv_scripts: str  # venv-relative folder of the interpreter and console scripts
    interpreter: str  # file name of the interpreter in `venv_scripts`
    lib_dir: str  # interpreter-home-relative folder holding site-packages; `{python}` is the "3.X" version
    script_kind: str  # pypa installer's launcher kind for console scripts
    install_dir: str  # the default install folder; `{name}` is the bundle's name
    machine: str  # the runtime record's name for the CPU architecture
    program_suffix: str  # what a native program's file name ends with ("" where any name runs)
    binary_format: Literal["pe", "elf"]  # the format of its DLLs/shared objects, which picks the readers
    runtime_layout: Literal["embeddable", "standalone"]  # the `[python] runtime` archive the target takes
    archive_os: str  # the OS word of ORT's and python-build-standalone's file names (`onnxruntime-win-x64-...`)
    sections: frozenset[str]  # the optional manifest sections only some targets support, that this one does
    #: The GPU execution providers a bundle for this target can carry (DirectML is a DirectX 12 library).
    gpu_providers: frozenset[str]
    reserved_name: Callable[[str], bool]  # whether the file system refuses a name (Windows' device names)
    scripts: tuple[str, ...]  # the bundle paths of its install and run scripts, each rendered from `<file name>.j2`
    wheel_platforms: tuple[str, ...]  # the `--platform` values for pip, most preferred first
    wheel_platform: re.Pattern[str]  # a wheel platform tag (not `any`) that runs on this target

    def pip_platforms(self) -> list[str]:
        """The `--platform` values for pip, most preferred first."""
        return list(self.wheel_platforms)

    def site_packages(self, python: str) -> str:
        """Where the venv keeps its packages, install-relative."""
        return f"venv/{self.venv_site_packages(python)}"

    def venv_site_packages(self, python: str) -> str:
        """Where an interpreter home (a venv, the bundled runtime) keeps its packages, relative to that home."""
        return f"{self.lib_dir.format(python=python)}/site-packages"

    @property
    def venv_python(self) -> str:
        return f"venv/{self.venv_scripts}/{self.interpreter}"

    def default_install_dir(self, name: str) -> str:
        return self.install_dir.format(name=name)

    def serves_platform(self, platform_tag: str) -> bool:
        """Whether a wheel's platform tag (not `any`) runs on this target."""
        return bool(self.wheel_platform.match(platform_tag))

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


_MANYLINUX = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(MANYLINUX_GLIBC_MAX, MANYLINUX_GLIBC_MIN - 1, -1))

WINDOWS = TargetPlatform(
    name="windows", tag="win_amd64",
    scripts=("install.ps1", "install.cmd", "uninstall.ps1", "uninstall.cmd", "payload/launchers/run.ps1",
             "payload/launchers/run.cmd", "try-in-sandbox.cmd", "apply-delta.cmd"), dll_path_variable="PATH", newline="\r\n",
    markers=(("sys_platform", "win32"), ("platform_system", "Windows"), ("os_name", "nt"),
             ("platform_machine", "AMD64")),
    venv_scripts="Scripts", interpreter="python.exe", lib_dir="Lib", script_kind="win-amd64",
    # The engine expands %ProgramFiles% on the target; a folder only administrators can write.
    install_dir="%ProgramFiles%\\{name}", machine="x64", program_suffix=".exe", binary_format="pe",
    runtime_layout="embeddable", archive_os="win", sections=frozenset({"vc_redist", "gpu"}),
    gpu_providers=frozenset({"CUDAExecutionProvider", "DmlExecutionProvider"}),
    reserved_name=reserved_on_windows, wheel_platforms=("win_amd64",), wheel_platform=re.compile(r"^win_amd64$"),
)
LINUX = TargetPlatform(
    name="linux", tag="linux_x86_64",
    scripts=("install.sh", "uninstall.sh", "payload/launchers/run.sh", "apply-delta.sh"), dll_path_variable="LD_LIBRARY_PATH", newline="\n",
    markers=(("sys_platform", "linux"), ("platform_system", "Linux"), ("os_name", "posix"),
             ("platform_machine", "x86_64")),
    venv_scripts="bin", interpreter="python", lib_dir="lib/python{python}", script_kind="posix",
    install_dir="/opt/{name}", machine="x86-64", program_suffix="", binary_format="elf",
    runtime_layout="standalone", archive_os="linux", sections=frozenset({"gpu"}), reserved_name=_no_reserved_names,
    gpu_providers=frozenset({"CUDAExecutionProvider"}),
    wheel_platforms=(*_MANYLINUX, "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"),
    wheel_platform=_MANYLINUX_X86_64,
)

TARGETS: dict[str, TargetPlatform] = {target.tag: target for target in (WINDOWS, LINUX)}


def host_platform() -> TargetPlatform | None:
    """The target this machine itself is (the model gate runs here), or None for another kind of machine:
    `sysconfig`'s `linux-x86_64` and `win-amd64` are the wheel platform tags with `-` for `_`."""
    return TARGETS.get(sysconfig.get_platform().replace("-", "_").replace(".", "_"))


def named_by(file_name: str) -> TargetPlatform:
    """The target an upstream file's name speaks of (`ort-bundler init` and `inspect` guess from it): a wheel's
    platform tag, the OS word of ORT's and python-build-standalone's archives (`-win-`, `-linux-`), else the
    embeddable package's `.zip`; Linux when nothing says."""
    lower = file_name.lower()
    for target in TARGETS.values():
        if target.tag in lower or f"-{target.archive_os}-" in lower:
            return target
    return WINDOWS if lower.endswith(".zip") else LINUX
