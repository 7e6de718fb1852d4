"""The outside programs are named once (bundler/integrations/tools.py): CI installs every one of them, and a
missing or too old one is one sentence naming the Debian package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fixtures.cli import REPO

from bundler.errors import InputUnavailableError
from bundler.integrations import tools
from bundler.runner import run

CI_RUN = REPO / ".ci" / "run"


def _apt_packages() -> set[str]:
    """The Debian packages .ci/run installs: the words of its `apt-get install` commands (continued lines joined)."""
    script = CI_RUN.read_text(encoding="utf-8").replace("\\\n", " ")
    words: set[str] = set()
    for line in script.splitlines():
        if "apt-get install" in line:
            words |= {word for word in line.split() if re.fullmatch(r"[a-z0-9][a-z0-9.+-]+", word)}
    return words


def test_ci_installs_the_package_of_every_tool() -> None:
    missing = sorted({tool.debian_package for tool in tools.TOOLS.values()} - _apt_packages())
    assert not missing, f".ci/run does not install {missing}"


def test_a_missing_tool_is_one_sentence_naming_its_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InputUnavailableError) as raised:
        tools.find(tools.WIXL, "package --msi")
    assert str(raised.value) == "wixl is not installed; package --msi needs it: install the Debian package wixl"


def test_a_tool_below_its_floor_is_refused_with_the_version_found(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """A stand-in named osslsigncode reporting Debian 12's own 2.5, which cannot sign scripts."""
    stand_in = tmp_path / "osslsigncode"
    stand_in.write_text("#!/bin/sh\necho 'osslsigncode 2.5, using:'\n", encoding="utf-8")
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(tools.ToolMissingError, match=r"is osslsigncode 2\.5, using:; signing needs osslsigncode 2\.8 "
                                                     r"or later: install the Debian package osslsigncode \(on Debian 12"):
        tools.find(tools.OSSLSIGNCODE, "signing", runner=run)


def test_every_tool_the_msi_work_names_is_found_through_the_table() -> None:
    """`tool()` of the MSI code for each program it runs, osslsigncode's version floor included (a floor needs a
    runner to ask the version: `verify APP.msi --trust` once stopped with an internal error there)."""
    from bundler.platforms.windows.msi import tool

    for name in ("wixl", "msibuild", "msiinfo", "msiextract", "gcab", "osslsigncode"):
        assert tool(name).endswith(f"/{name}")
