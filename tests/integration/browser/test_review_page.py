"""`ort-bundler report`: the release review page, built from real Windows bundles (the real ORT 1.23.1 and numpy
wheels) and looked at in Debian's headless chromium with the network off (tests/fixtures/browser.py).

Screenshots of the Windows bundle's page and of a diff page are kept in test-artifacts/review/ (made by
tests/fixtures/review_screenshots.py, which regenerates the docs' picture).
"""

from __future__ import annotations

import html.parser
import json
import os
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from fixtures.browser import require_browser
from fixtures.cli import REPO, run_cli
from fixtures.review_screenshots import screenshot_pages
from fixtures.windows_bundles import build_zip, manifest

from bundler.review.page import render_page
from bundler.review.view import Sources, review

pytestmark = pytest.mark.integration

ARTIFACTS = REPO / "test-artifacts" / "review"
SECTIONS = ("identity", "verification", "signatures", "contents", "closure", "gpu", "models", "licences", "provenance")
HOSTILE = '<script>alert("bundle")</script><svg onload="alert(1)"><img src=x onerror=alert(2)>'


@dataclass(frozen=True)
class Bundles:
    old: Path
    new: Path
    work: Path


@pytest.fixture(scope="module")
def bundles(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Bundles:
    """Two releases of a Windows bundle: 1.1.0 moves numpy from 1.x to 2.x."""
    work = tmp_path_factory.mktemp("review")
    built = {}
    for version, numpy in (("1.0.0", "numpy<2"), ("1.1.0", "numpy>=2")):
        first = manifest(work, name="reviewed", version=version, runtime=None, lock=None, numpy=numpy)
        run_cli("lock", str(first))
        built[version] = build_zip(manifest(work, name="reviewed", version=version, runtime=None, numpy=numpy,
                                            lock=first.with_suffix(".lock.toml")), bundler_cache, work)
    return Bundles(old=built["1.0.0"], new=built["1.1.0"], work=work)


def report(bundle: Path, out: Path, cache: Path, *flags: str, env: dict[str, str] | None = None,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_cli("report", "--cache", str(cache), "-o", str(out), str(bundle), *flags, env=env, check=check)


class _Elements(html.parser.HTMLParser):
    """Every element and attribute the page really holds, as a browser's parser sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += [name for name, _ in attrs]


def elements(page: bytes) -> _Elements:
    parser = _Elements()
    parser.feed(page.decode("utf-8"))
    return parser


def test_the_page_shows_every_section_offline_with_no_console_error_or_request(bundles: Bundles, bundler_cache: Path,
                                                                               tmp_path: Path) -> None:
    require_browser()
    single, diffed = tmp_path / "windows-bundle.html", tmp_path / "diff.html"
    report(bundles.new, single, bundler_cache)
    report(bundles.new, diffed, bundler_cache, "--against", str(bundles.old))
    shots = screenshot_pages([single, diffed], ARTIFACTS)
    for page_report, picture in shots:
        assert not page_report.problems(), page_report.problems()
        assert not [r for r in page_report.requests if not r.startswith("file:")], page_report.requests
        assert picture.stat().st_size > 10_000
    text = shots[0][0].text
    for words in ("Release review: reviewed 1.1.0", "OK: ", "onnxruntime.dll", "Microsoft Corporation",
                  "none: a CPU bundle", "tiny-mlp", "reference output", "numpy", "CycloneDX",
                  "https://slsa.dev/provenance/v1", "urn:ort-bundler:builder:reproducible", "input models[0]"):
        assert words in text, words
    page = single.read_bytes()
    for section in SECTIONS:
        assert f'<section id="{section}">'.encode() in page, section
    assert b"<svg" in page and page.count(b"<line ") > 50  # the closure: one line per dependency
    diff_text = shots[1][0].text
    assert "reviewed-1.0.0-win_amd64.zip → reviewed-1.1.0-win_amd64.zip" in diff_text
    assert "numpy" in diff_text and "What changed" in diff_text


def test_the_page_holds_no_script_and_forbids_any(bundles: Bundles, bundler_cache: Path, tmp_path: Path) -> None:
    report(bundles.new, tmp_path / "r.html", bundler_cache)
    found = elements((tmp_path / "r.html").read_bytes())
    assert not {"script", "iframe", "object", "embed", "link", "img", "base", "form"} & set(found.tags)
    assert not [a for a in found.attributes if a.startswith("on")]
    assert b"default-src 'none'" in (tmp_path / "r.html").read_bytes()


def test_markup_in_a_bundle_renders_as_text(bundles: Bundles, bundler_cache: Path, tmp_path: Path) -> None:
    """A bundle whose names, licences and DLL names hold markup: the page shows the markup as text, runs nothing."""
    require_browser()
    hostile = tmp_path / "hostile-1.1.0-win_amd64.zip"
    with zipfile.ZipFile(bundles.new) as source, zipfile.ZipFile(hostile, "w") as dest:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith("/bundle.json"):
                record = json.loads(data)
                record["name"] = HOSTILE
                record["licenses"][0]["component"] = HOSTILE
                record["dll_closure"]["dependencies"][0]["dll"] = HOSTILE
                record["models"][0]["outputs"][0]["name"] = "</text></svg>" + HOSTILE
                data = json.dumps(record).encode()
            dest.writestr(info, data)
    report(hostile, tmp_path / "hostile.html", bundler_cache)
    page = (tmp_path / "hostile.html").read_bytes()
    found = elements(page)
    assert not {"script", "img"} & set(found.tags), "markup from the bundle became elements"
    assert not [a for a in found.attributes if a.startswith("on")]
    [(seen, _)] = screenshot_pages([tmp_path / "hostile.html"], tmp_path / "shots")
    assert not seen.problems(), seen.problems()
    assert HOSTILE in seen.text  # shown, character for character
    assert "FAILED" in seen.text  # the changed bundle.json does not verify, and the page says so first


def test_the_same_bundle_gives_the_same_page_in_any_folder_time_zone_and_locale(bundles: Bundles, bundler_cache: Path,
                                                                              tmp_path: Path) -> None:
    elsewhere = tmp_path / "another folder" / bundles.new.name
    elsewhere.parent.mkdir()
    shutil.copyfile(bundles.new, elsewhere)
    report(bundles.new, tmp_path / "a.html", bundler_cache, "--against", str(bundles.old))
    env = {**os.environ, "TZ": "Asia/Kathmandu", "LC_ALL": "C.UTF-8", "LANG": "de_DE.UTF-8"}
    report(elsewhere, tmp_path / "b.html", bundler_cache, "--against", str(bundles.old), env=env)
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()


def test_a_missing_bundle_or_a_folder_as_output_is_one_sentence_and_writes_nothing(bundles: Bundles,
                                                                                   bundler_cache: Path,
                                                                                   tmp_path: Path) -> None:
    missing = report(tmp_path / "nope.zip", tmp_path / "r.html", bundler_cache, check=False)
    assert missing.returncode == 4 and "nope.zip: not found" in missing.stderr
    against = report(bundles.new, tmp_path / "r.html", bundler_cache, "--against", str(tmp_path / "old.zip"),
                     check=False)
    assert against.returncode == 4 and "--against" in against.stderr
    (tmp_path / "folder.html").mkdir()
    folder = report(bundles.new, tmp_path / "folder.html", bundler_cache, check=False)
    assert folder.returncode == 2 and "found a folder" in folder.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.html"]


@pytest.mark.parametrize("record", [
    {"name": ["not", "text"], "models": "none", "dll_closure": [], "licenses": {"a": 1}, "gpu": 7},
    {"models": [None, 3, {"reference": {"outputs": {"y": "a string"}}}], "signatures": [None, "x"]},
    {},
])
def test_a_record_of_the_wrong_shape_gives_a_page_with_gaps_never_an_error(record: dict) -> None:
    page = render_page(review(Sources(zip_name="odd.zip", zip_sha256="0" * 64, zip_size=1, members=[("a/b", 1)],
                                      bundle=record, sbom={"components": "no"}, verification={"ok": "yes"},
                                      provenance=None, diff=None)))
    assert b'<section id="models">' in page and b"FAILED" in page
