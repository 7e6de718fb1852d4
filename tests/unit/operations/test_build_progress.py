"""`build` shows the zip's bytes on stderr (issue 37): whole lines in a log, nothing with `--json` or `-q`.

The real command on the quickstart, from the test run's shared cache (fetched for real); `--no-reuse` makes it
write the zip rather than take the one a build before left.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli

pytestmark = pytest.mark.integration

ZIP_LINE = re.compile(r"^zip: ([\d.]+) (KiB|MiB) of ([\d.]+) (KiB|MiB), (in [\d.]+ s|[\d.]+ \w+/s)$")


def test_a_build_logged_to_a_file_writes_zip_lines_with_bytes_and_its_total(bundler_cache: Path, tmp_path: Path) -> None:
    proc = run_cli("build", "--no-reuse", "--cache", str(bundler_cache), "-o", str(tmp_path / "dist"),
                   str(MANIFESTS / "quickstart-linux.toml"))
    assert "\r" not in proc.stderr  # a log gets lines, not a redrawn bar
    lines = [line for line in proc.stderr.splitlines() if line.startswith("zip: ")]
    assert lines, proc.stderr
    last = ZIP_LINE.match(lines[-1])
    assert last is not None, lines[-1]
    assert last.group(1, 2) == last.group(3, 4)  # the whole zip written
    assert last.group(5).startswith("in ")
    assert "zip:" not in proc.stdout


def test_a_json_build_keeps_progress_off_both_streams(bundler_cache: Path, tmp_path: Path) -> None:
    proc = run_cli("build", "--json", "--no-reuse", "--cache", str(bundler_cache), "-o", str(tmp_path / "dist"),
                   str(MANIFESTS / "quickstart-linux.toml"))
    assert json.loads(proc.stdout)["zip"].endswith(".zip")
    assert "zip:" not in proc.stderr
