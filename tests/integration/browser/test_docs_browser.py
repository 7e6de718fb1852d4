"""The documentation site as a reader sees it: every page rendered in headless Chromium with the network off.

Every page is opened from the file system, as a site copied to an offline machine is read: it fails on any
console error, any failed request (a font, a script, a stylesheet from the network or missing from the site)
and on having no content. The search, which runs in a Web Worker, is tried on the site served from loopback
(opened from the file system, Chromium 156 never starts it: docs/limitations.md). Screenshots of the home page
and the command reference are kept in test-artifacts/docs-site/ (ignored by git) for a person to look at.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.browser import Browser, require_browser, serve
from fixtures.docs_site import ROOT, build_site

ARTIFACTS = ROOT / "test-artifacts" / "docs-site"
SCREENSHOTS = {"index.html": "home.png", "reference/commands.html": "commands.png"}
MIN_ARTICLE_CHARS = 200  # the shortest page (review with diff) has over 800 characters of text


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("site")
    result = build_site(dest)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    return dest


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium, driver = require_browser()
    with Browser(chromium=chromium, chromedriver=driver) as opened:
        yield opened


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if p.name != "404.html")


def test_every_page_renders_with_content_and_no_error_or_request_off_the_site(site: Path, browser: Browser) -> None:
    pages = _pages(site)
    assert len(pages) >= 20, f"the site has only {len(pages)} pages"
    problems: list[str] = []
    for page in pages:
        report = browser.visit(page.as_uri())
        problems += report.problems()
        article = browser.driver.execute_script(
            "const a = document.querySelector('article'); return a ? a.innerText : ''") or ""
        if len(article.strip()) < MIN_ARTICLE_CHARS:
            problems.append(f"{page.relative_to(site)}: the page shows {len(article.strip())} characters of content")
        outside = [url for url in report.requests if not url.startswith(("file://", "data:", "blob:"))]
        problems += [f"{page.relative_to(site)}: requested {url}" for url in outside]
        name = SCREENSHOTS.get(page.relative_to(site).as_posix())
        if name:
            shot = browser.screenshot(ARTIFACTS / name)
            assert shot.stat().st_size > 10_000, f"{shot} is too small to show a page"
    assert not problems, "\n".join(problems)


def test_the_search_finds_the_page_that_holds_a_word(site: Path, browser: Browser) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with serve(site) as base:
        report = browser.visit(base + "index.html")
        assert not report.problems(), report.problems()
        browser.driver.execute_script("document.querySelector('[data-md-toggle=search]').checked = true")
        field = browser.driver.find_element(By.CSS_SELECTOR, "input.md-search__input")
        field.click()
        field.send_keys("intunewin")
        WebDriverWait(browser.driver, 20).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, ".md-search-result__item"))
        links = [a.get_attribute("href") for a in browser.driver.find_elements(By.CSS_SELECTOR,
                                                                                  ".md-search-result__link")]
        assert any("how-to/intune-configmgr.html" in (link or "") for link in links), links
        browser.screenshot(ARTIFACTS / "search.png")
        assert not browser.driver.get_log("browser")


def test_the_harness_reports_a_request_to_the_network_and_a_console_error(tmp_path: Path, browser: Browser) -> None:
    """The check above can fail: a page that fetches a font from the network and logs an error is caught."""
    page = tmp_path / "bad.html"
    page.write_text("<!doctype html><html><head><link rel=stylesheet href='https://fonts.example.com/css'>"
                    "</head><body><p>text</p><script>console.error('broken');</script></body></html>",
                    encoding="utf-8")
    report = browser.visit(page.as_uri())
    assert any("broken" in error for error in report.console_errors), report
    assert any("fonts.example.com" in failed for failed in report.failed_requests), report
