"""Every outside program in one table, and the one way to find one.

A tool found and checked where it is used grows a second spelling of its package name and version floor at
the next use; here each is data, so the message a user reads when one is missing is the same everywhere, and
the tests require exactly the tools the program itself knows.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass

from bundler.errors import InputUnavailableError
from bundler.runner import Runner


class ToolMissingError(InputUnavailableError):
    """A program the step needs is not installed, or is older than the step needs."""


@dataclass(frozen=True)
class Tool:
    """An outside program: what to run, where it comes from and the oldest version that does the job."""

    program: str
    debian_package: str
    #: (major, minor) read from the first line of `program --version` by `version_pattern`; None: any version.
    floor: tuple[int, int] | None = None
    version_pattern: str = ""
    #: Said after the Debian package when the stable release's version is too old.
    where: str = ""

    def install_hint(self) -> str:
        return f"install the Debian package {self.debian_package}{f' ({self.where})' if self.where else ''}"


OSSLSIGNCODE = Tool("osslsigncode", "osslsigncode", floor=(2, 8), version_pattern=r"osslsigncode (\d+)\.(\d+)",
                    where="on Debian 12 from bookworm-backports: 2.8 or later signs PowerShell scripts")
WIXL = Tool("wixl", "wixl")
MSIBUILD = Tool("msibuild", "msitools")
MSIINFO = Tool("msiinfo", "msitools")
MSIEXTRACT = Tool("msiextract", "msitools")
OPENSSL = Tool("openssl", "openssl")
CMAKE = Tool("cmake", "cmake")
MINGW_GCC = Tool("x86_64-w64-mingw32-gcc", "gcc-mingw-w64-x86-64")
MINGW_DLLTOOL = Tool("x86_64-w64-mingw32-dlltool", "binutils-mingw-w64-x86-64")
GCC = Tool("gcc", "gcc")
PIPX = Tool("pipx", "pipx")
CHROMIUM = Tool("chromium", "chromium")
CHROMEDRIVER = Tool("chromedriver", "chromium-driver")
DOCKER_REGISTRY = Tool("docker-registry", "docker-registry")
WINE64 = Tool("wine64", "wine64")
GCAB = Tool("gcab", "gcab")
CABEXTRACT = Tool("cabextract", "cabextract")
XDELTA3 = Tool("xdelta3", "xdelta3")
ZSTD = Tool("zstd", "zstd")

#: Every tool by program name: what .ci/run installs is held to this table by the tests.
TOOLS = {tool.program: tool for tool in (OSSLSIGNCODE, WIXL, MSIBUILD, MSIINFO, MSIEXTRACT, OPENSSL, CMAKE, MINGW_GCC,
                                         MINGW_DLLTOOL, GCC, PIPX, CHROMIUM, CHROMEDRIVER, DOCKER_REGISTRY, WINE64,
                                         XDELTA3, ZSTD, GCAB, CABEXTRACT)}


def find(tool: Tool, purpose: str, *, runner: Runner | None = None, instead: str = "") -> str:
    """The path of `tool`, checked against its version floor with `runner`, or one sentence saying what to install.

    `purpose` completes "…; <purpose> needs it"; `instead` names another way round, such as `--signer COMMAND`.
    """
    found = shutil.which(tool.program)
    otherwise = f", or {instead}" if instead else ""
    if found is None:
        msg = f"{tool.program} is not installed; {purpose} needs it: {tool.install_hint()}{otherwise}"
        raise ToolMissingError(msg)
    if tool.floor is None:
        return found
    if runner is None:
        msg = f"{tool.program} has a version floor, so finding it needs a runner to ask its version"
        raise TypeError(msg)
    first = (runner([found, "--version"]).splitlines() or [""])[0]
    match = re.match(tool.version_pattern, first)
    if match is None or (int(match.group(1)), int(match.group(2))) < tool.floor:
        msg = (f"{found} is {first.strip() or 'of an unknown version'}; {purpose} needs {tool.program} "
               f"{tool.floor[0]}.{tool.floor[1]} or later: {tool.install_hint()}{otherwise}")
        raise ToolMissingError(msg)
    return found
