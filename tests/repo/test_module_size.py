"""No module of bundler over 600 lines: a smoke alarm, not the rule.

The rule is one concern per module (issue 35): a module is split where it holds two concerns, and a small one
merged into the neighbour that shares its concern, whatever their lengths. Past 600 lines a module has almost
certainly grown a second concern, so the suite stops there. The same limit for every subpackage, the shipped
target code included.
"""

from __future__ import annotations

from pathlib import Path

import bundler

PACKAGE = Path(bundler.__file__).parent
LIMIT = 600


def too_long(root: Path) -> list[str]:
    """Every `*.py` below `root` with more than LIMIT lines (counted as `wc -l` does), relative to `root`."""
    counted = ((path, len(path.read_text(encoding="utf-8").splitlines())) for path in sorted(root.rglob("*.py")))
    return [f"{path.relative_to(root)}: {lines} lines" for path, lines in counted if lines > LIMIT]


def test_no_module_of_bundler_is_over_600_lines() -> None:
    found = too_long(PACKAGE)
    assert list(PACKAGE.rglob("*.py")) and not found, \
        f"split these by concern (at most {LIMIT} lines each):\n" + "\n".join(found)


def test_the_check_finds_a_module_one_line_over_in_a_subpackage(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "fits.py").write_text("x = 1\n" * LIMIT, encoding="utf-8")
    (tmp_path / "sub" / "over.py").write_text("x = 1\n" * LIMIT + "y = 2", encoding="utf-8")
    assert too_long(tmp_path) == [f"{Path('sub', 'over.py')}: {LIMIT + 1} lines"]
