"""`package` says each long stage on stderr as it starts (issue 37), and nothing with `--json` or `-q`.

The real commands: the Windows quickstart built from the test run's shared cache, then packaged as `.intunewin`.
(The MSI's own progress inside its cabinets is bundler/platforms/windows/'s to report through the same `say` hook.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def win_zip(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = run_cli("build", "--json", "--cache", str(bundler_cache), "-o", str(out), str(MANIFESTS / "quickstart-win.toml"))
    return Path(json.loads(proc.stdout)["zip"])


def test_package_names_each_stage_on_stderr_as_it_starts(win_zip: Path, bundler_cache: Path, tmp_path: Path) -> None:
    proc = run_cli("package", "--cache", str(bundler_cache), str(win_zip), "-o", str(tmp_path / "out"), "--intunewin")
    stages = [line for line in proc.stderr.splitlines() if line.startswith("package: ")]
    assert stages[0] == f"package: verifying {win_zip.name}"
    assert stages[1].startswith("package: unpacking ") and stages[1].endswith("MiB")
    assert stages[2] == "package: writing the .intunewin packages"
    assert "package:" not in proc.stdout  # stdout names what was written, as before
    assert "wrote " in proc.stdout


@pytest.mark.parametrize("flag", ["--json", "-q"])
def test_json_and_quiet_packages_say_no_stage(win_zip: Path, bundler_cache: Path, tmp_path: Path, flag: str) -> None:
    proc = run_cli("package", flag, "--cache", str(bundler_cache), str(win_zip), "-o", str(tmp_path / "out"),
                   "--intunewin")
    assert "package:" not in proc.stderr + proc.stdout
