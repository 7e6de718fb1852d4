"""No run of three or more blank lines in the code or the templates (what is left where code was cut out).

ruff's rule for it (E303) is a preview rule, and preview changes other rules too; this is the same check
for the Python files and the templates the bundles' scripts are rendered from.
"""

from __future__ import annotations

import re

from fixtures.cli import REPO

ROOT = REPO
RUN = re.compile(r"\n(?:[ \t]*\n){3,}")


def test_no_file_holds_three_blank_lines_in_a_row() -> None:
    files = [path for folder in ("bundler", "tests", "bench", "templates") for path in sorted((ROOT / folder).rglob("*"))
             if path.suffix in (".py", ".j2") and path.is_file()]
    found = [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 2}"
             for path in files for text in [path.read_text(encoding="utf-8")] for match in RUN.finditer(text)]
    assert files and not found, "runs of three or more blank lines (keep at most two):\n" + "\n".join(found)
