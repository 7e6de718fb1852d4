"""The install the README and docs/get-started/install.md give: the built wheel, installed as a tool, works.

`pip install .` (non-editable) and `pipx install` of the wheel both install the wheel that `pip wheel` builds
from a clean copy of the tree, so that wheel is built once here and installed twice: into a fresh virtual
environment, and with pipx (Debian's `pipx`, with its home and bin folders in the test's folder). Neither
reaches a package index: the dependencies come from the Python running the tests (`--system-site-packages`,
`--no-deps --no-index`), which keeps the test to seconds; what is checked is what the wheel itself carries: the
`ort-bundler` script, the templates (every file of templates/ is in the installed package) and metadata that
asks for the runtime dependencies only, the tests' tools being the `[test]` extra.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from fixtures.docs_site import ROOT
from fixtures.wine import require
from packaging.requirements import Requirement

from bundler.integrations import tools

#: Only the test and docs extras may ask for these: a user's install never gets them.
DEVELOPER_TOOLS = {"pytest", "pytest-xdist", "ruff", "mypy", "import-linter", "tree-sitter", "tree-sitter-pwsh",
                   "mkdocs", "mkdocs-material", "selenium", "check-wheel-contents", "bcrypt"}
#: What the tree holds that a wheel is not built from (and that would make the copy slow or stale).
NOT_SOURCES = {".git", "build", "dist", "site", "test-artifacts", "tests", "bench", "docs", ".venv", "__pycache__",
               ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def _clean_copy(dest: Path) -> Path:
    """The tree as a fresh clone has it: without build outputs and without bundler/templates, the worktree's link."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n in NOT_SOURCES or n.endswith(".egg-info")}
        if Path(folder).resolve() == (ROOT / "bundler").resolve():
            skipped.add("templates")
        return skipped

    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    source = _clean_copy(base / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "--disable-pip-version-check", "-w", str(base / "out"), str(source)], check=True, timeout=300,
                   capture_output=True, text=True)
    (built,) = (base / "out").glob("ort_bundler-*.whl")
    return built


def _requires(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(zf.read(name).decode("utf-8"))
    return [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]


def _templates() -> set[str]:
    return {p.relative_to(ROOT / "templates").as_posix() for p in (ROOT / "templates").rglob("*")
            if p.is_file() and p.suffix in {".j2", ".txt"}}


def _check_installed(python: Path, program: Path, tmp_path: Path, home: Path) -> None:
    """`--help`, `init` and the templates, from the installed copy and not from this tree."""
    env = {"PATH": f"{program.parent}:/usr/bin:/bin", "HOME": str(home), "LC_ALL": "C.UTF-8"}
    where = subprocess.run([str(python), "-c", "import bundler, importlib.resources as r; print(bundler.__file__); "
                            "root = r.files('bundler.templates'); print('\\n'.join(sorted("
                            "str(p.relative_to(root)) for p in __import__('pathlib').Path(str(root)).rglob('*') "
                            "if p.suffix in ('.j2', '.txt'))))"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True, timeout=120)
    module_file, *templates = where.stdout.splitlines()
    assert Path(module_file).resolve().is_relative_to(python.parent.parent.resolve()), \
        f"bundler was imported from {module_file}, not from the installed wheel"
    assert set(templates) == _templates(), f"templates missing from the installed package: {_templates() - set(templates)}"
    helped = subprocess.run([str(program), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120, check=False)
    assert helped.returncode == 0, helped.stderr
    assert "init" in helped.stdout and "build" in helped.stdout
    made = subprocess.run([str(program), "init", "-o", "app.toml"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert made.returncode == 0, made.stderr
    assert "[bundle]" in (tmp_path / "app.toml").read_text(encoding="utf-8")


def test_the_wheel_asks_for_the_runtime_dependencies_only(wheel: Path) -> None:
    unconditional = {req.name.lower() for req in _requires(wheel) if req.marker is None or "extra" not in str(
        req.marker)}
    assert not unconditional & DEVELOPER_TOOLS, f"a plain install would pull {unconditional & DEVELOPER_TOOLS}"
    test_extra = {req.name.lower() for req in _requires(wheel) if req.marker and 'extra == "test"' in str(req.marker)}
    assert {"pytest", "ruff", "mypy"} <= test_extra


@pytest.mark.slow
def test_pip_install_of_the_wheel_into_a_fresh_venv_gives_a_working_ort_bundler(wheel: Path, tmp_path: Path) -> None:
    """The venv has no pip of its own (ensurepip is most of a venv's making); this Python's pip installs into it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True,
                   timeout=120)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--disable-pip-version-check", "--no-deps", "--no-index", str(wheel)], check=True, timeout=300,
                   capture_output=True, text=True)
    work = tmp_path / "work"
    work.mkdir()
    _check_installed(venv / "bin" / "python", venv / "bin" / "ort-bundler", work, tmp_path)


@pytest.mark.slow
def test_pipx_install_of_the_wheel_gives_a_working_ort_bundler(wheel: Path, tmp_path: Path) -> None:
    """pipx's own pip (its "shared libraries", which it would make and then upgrade from the package index) is
    made here first, offline, as `python -m venv` makes any venv's pip (ensurepip's bundled wheel): pipx then
    finds it current and goes straight to installing the wheel."""
    pipx = require(tools.PIPX)
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "pipx" / "shared")], check=True, timeout=300)
    env = {**os.environ, "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin"),
           "PIPX_MAN_DIR": str(tmp_path / "man"), "HOME": str(tmp_path), "PIPX_DEFAULT_PYTHON": sys.executable,
           "PIP_NO_INDEX": "1"}
    installed = subprocess.run([pipx, "install", "--python", sys.executable, "--system-site-packages",
                                "--pip-args=--no-deps --no-index --disable-pip-version-check", str(wheel)],
                               env=env, capture_output=True, text=True, timeout=300, check=False)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    python = tmp_path / "pipx" / "venvs" / "ort-bundler" / "bin" / "python"
    work = tmp_path / "work"
    work.mkdir()
    _check_installed(python, tmp_path / "bin" / "ort-bundler", work, tmp_path)
