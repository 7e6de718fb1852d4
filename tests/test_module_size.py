"""No module of bundler over 450 lines (issue 25): past that, a module holds more than one concern and gets
split by concern, not trimmed. The same limit for every subpackage, the shipped target code included.
"""

from __future__ import annotations

from pathlib import Path

import bundler

PACKAGE = Path(bundler.__file__).parent
LIMIT = 450


def too_long(root: Path) -> list[str]:
    """Every `*.py` below `root` with more than LIMIT lines (counted as `wc -l` does), relative to `root`."""
    counted = ((path, len(path.read_text(encoding="utf-8").splitlines())) for path in sorted(root.rglob("*.py")))
    return [f"{path.relative_to(root)}: {lines} lines" for path, lines in counted if lines > LIMIT]


def test_no_module_of_bundler_is_over_450_lines() -> None:
    found = too_long(PACKAGE)
    assert list(PACKAGE.rglob("*.py")) and not found, \
        f"split these by concern (at most {LIMIT} lines each):\n" + "\n".join(found)


def test_the_check_finds_a_module_one_line_over_in_a_subpackage(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "fits.py").write_text("x = 1\n" * LIMIT, encoding="utf-8")
    (tmp_path / "sub" / "over.py").write_text("x = 1\n" * LIMIT + "y = 2", encoding="utf-8")
    assert too_long(tmp_path) == [f"{Path('sub', 'over.py')}: {LIMIT + 1} lines"]
