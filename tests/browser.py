"""Headless Chromium for tests that look at a page as a reader would, with the network off.

Debian's `chromium`, driven by Debian's `chromium-driver` through selenium with explicit paths (Selenium
Manager, which would download a browser or driver, is never asked). The network is off in two ways that also
make any attempt visible: every host name but 127.0.0.1 resolves to nothing (`--host-resolver-rules`) and every
request that is not a local file or to loopback goes to a proxy on a port where nothing listens, so a page that
reaches for a font, a CDN or an analytics script records a failed request. Loopback stays open for `serve`, a
static server of a folder on 127.0.0.1, for what a page does only over http (a search index loaded by a Web
Worker). Chromium's own background traffic (component updates, sync, first-run pages) is switched off so that
what is recorded is the page's.

`Browser.visit(url)` loads a page and returns a `PageReport`: the console's errors, the requests that failed
(or answered 400 or more) and the page's visible text. The documentation site's test uses it; so can any page
the project writes (a release review, a report).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from wine import require_tool

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

#: No network, no background traffic, no GPU, no sandbox (root in CI; a container has no user namespaces).
CHROMIUM_ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--proxy-server=127.0.0.1:9",  # the discard port: nothing listens, every proxied request fails (loopback bypasses)
    "--window-size=1280,1000",
)


@dataclass(frozen=True)
class PageReport:
    """What one page load showed: a page is good when both lists are empty and `text` has content."""

    url: str
    title: str
    text: str
    console_errors: tuple[str, ...]
    failed_requests: tuple[str, ...]
    requests: tuple[str, ...]

    def problems(self) -> list[str]:
        """Each console error and failed request, one line each, naming the page."""
        return ([f"{self.url}: console error: {e}" for e in self.console_errors]
                + [f"{self.url}: failed request: {r}" for r in self.failed_requests])


def require_browser() -> tuple[str, str]:
    """Chromium, its driver and selenium, or skip locally / fail in CI (.ci/run installs all three)."""
    require_tool("selenium" if importlib.util.find_spec("selenium") else None,
                 "selenium (pip install -e '.[docs]')")
    chromium = require_tool(CHROMIUM if os.access(CHROMIUM, os.X_OK) else None, "chromium (Debian package chromium)")
    driver = require_tool(CHROMEDRIVER if os.access(CHROMEDRIVER, os.X_OK) else None,
                          "chromedriver (Debian package chromium-driver)")
    return chromium, driver


class Browser:
    """One headless Chromium for a test module: `with Browser() as browser: report = browser.visit(url)`."""

    def __init__(self, *, chromium: str = CHROMIUM, chromedriver: str = CHROMEDRIVER) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager, if it were ever asked, stays offline
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for arg in CHROMIUM_ARGS:
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        options.add_experimental_option("perfLoggingPrefs", {"enableNetwork": True, "enablePage": False})
        self.driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
        self.driver.set_page_load_timeout(30)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.driver.quit()

    def visit(self, url: str) -> PageReport:
        """Load `url`, let it settle, and report what the console and the network saw."""
        self._drain()
        self.driver.get(url)
        self.driver.execute_script("return document.readyState")
        # Scripts that run after load (search index, deferred fonts) get a moment to fail too.
        self.driver.execute_async_script("const done = arguments[arguments.length - 1]; setTimeout(done, 300);")
        console = tuple(entry["message"] for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE")
        requests, failed = self._network()
        text = self.driver.execute_script("return document.body ? document.body.innerText : ''") or ""
        return PageReport(url=url, title=self.driver.title, text=text, console_errors=console,
                          failed_requests=failed, requests=requests)

    def screenshot(self, path: Path) -> Path:
        """A PNG of the page as it is now, at the window's size."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if not self.driver.save_screenshot(str(path)):
            msg = f"chromium wrote no screenshot to {path}"
            raise RuntimeError(msg)
        return path

    def _drain(self) -> None:
        """Forget what earlier pages logged, so each report is its own page's."""
        self.driver.get_log("browser")
        self.driver.get_log("performance")

    def _network(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(every URL requested, each failed one with its reason) from the DevTools network events."""
        urls: dict[str, str] = {}
        failed: list[str] = []
        for entry in self.driver.get_log("performance"):
            message: dict[str, Any] = json.loads(entry["message"])["message"]
            method, params = message.get("method"), message.get("params", {})
            if method == "Network.requestWillBeSent":
                urls[params["requestId"]] = params["request"]["url"]
            elif method == "Network.loadingFailed" and not params.get("canceled"):
                failed.append(f"{urls.get(params['requestId'], params['requestId'])} ({params.get('errorText')})")
            elif method == "Network.responseReceived" and params["response"].get("status", 0) >= 400:
                failed.append(f"{params['response']['url']} (HTTP {params['response']['status']})")
        return tuple(urls.values()), tuple(failed)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log on stderr: the test's report says what failed."""


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve `folder` on 127.0.0.1 (a free port) while the block runs; yields the base URL, ending in `/`."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
