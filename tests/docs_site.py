"""Building the documentation site in a test: `mkdocs build --strict` of this tree into a folder of the test's.

The hook that generates the reference pages (docs/hooks/reference.py) is loaded from the tree, and documents
the tree's own parser, whatever ort-bundler the environment has installed.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOOK = ROOT / "docs" / "hooks" / "reference.py"


def require_mkdocs() -> None:
    """MkDocs and its Material theme (the `[docs]` extra), or skip locally / fail in CI."""
    missing = [name for name in ("mkdocs", "material") if importlib.util.find_spec(name) is None]
    if missing:
        msg = f"{' and '.join(missing)} not installed: pip install -e '.[docs]' (.ci/run does)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)


def build_site(dest: Path, *, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of `config` into `dest`; the result, for the test to judge."""
    require_mkdocs()
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(dest)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)


def copy_docs_tree(dest: Path) -> Path:
    """mkdocs.yml and docs/ copied into `dest`, to build a changed copy; returns the copy's mkdocs.yml."""
    shutil.copytree(ROOT / "docs", dest / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "mkdocs.yml", dest / "mkdocs.yml")
    return dest / "mkdocs.yml"


def reference_hook() -> ModuleType:
    """docs/hooks/reference.py, imported as MkDocs imports it."""
    spec = importlib.util.spec_from_file_location("docs_reference_hook", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
