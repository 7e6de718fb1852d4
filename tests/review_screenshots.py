"""Screenshots of release review pages, as the docs show them: `python3 tests/review_screenshots.py
REPORT.html [REPORT.html …] -o DIR` renders each page in Debian's headless chromium (network off) and writes
DIR/<page>.png. tests/test_review_page.py calls `screenshot_pages` for its artifacts; run it by hand to
regenerate the picture in docs/how-to/review-a-release.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from browser import Browser, PageReport


def screenshot_pages(pages: list[Path], out: Path, *, max_height: int = 6000) -> list[tuple[PageReport, Path]]:
    """Each page loaded and pictured whole (up to `max_height` pixels); its report says what the console and the
    network saw."""
    shots = []
    with Browser() as browser:
        for page in pages:
            report = browser.visit(page.resolve().as_uri())
            height = browser.driver.execute_script("return document.documentElement.scrollHeight")
            browser.driver.set_window_size(1280, min(int(height), max_height))
            shots.append((report, browser.screenshot(out / f"{page.stem}.png")))
    return shots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="+", type=Path)
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--max-height", type=int, default=6000, help="cut the picture at this many pixels")
    args = parser.parse_args(argv)
    for report, path in screenshot_pages(args.pages, args.output, max_height=args.max_height):
        print(f"{path}: {'; '.join(report.problems()) or 'no console error, no request'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
