"""The launcher (ort_bundle.launcher, started by run.cmd) hands --tune, --profile and --support-bundle to the
shipped Python tools, and sets ORT_BUNDLE_APPLY_TUNING=1 for the entry point exactly when `[launch] apply_tuning`
says so.

run.cmd runs for real under `wine64 cmd` and starts python.org's CPython 3.11.9 through the venv's python.exe (a
venv that CPython made under Wine, fixtures/windows_python.py), which runs the shipped launcher. In the place of the
tools (`ort_bundle.tuning`, `.support`, `.profile` in the venv's site-packages) and of the entry point is
tests/fixtures/windows_reporter.py, which records the command line and the environment it was started with; the tools
themselves run for real on Linux in test_tuning_install.py. run.ps1 is parsed as Windows PowerShell 5.1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fixtures.windows_python import read_report, windows_python, windows_venv  # noqa: F401
from fixtures.wine import Wine, wine  # noqa: F401  (fixtures)
from integration.wine.test_scripts_windows import (
    make_install_root,
    parse_problems,
    powershell7_constructs,
    reporting,
    windows_context,
)

from bundler.assembly.render import LAUNCH_CONFIG, EntryPoint, render_scripts
from bundler.shipped.ort_bundle.launch_config import RUN_SCRIPT

TOOLS = ("ort_bundle.tuning", "ort_bundle.support", "ort_bundle.profile")


def install_root(folder: Path, venv: Path, *, apply_tuning: bool) -> Path:
    return make_install_root(folder, venv, windows_context(apply_tuning=apply_tuning), modules=TOOLS)


@pytest.mark.wine
def test_run_cmd_hands_the_switches_to_the_python_tools(wine: Wine, windows_venv: Path, tmp_path: Path) -> None:
    root = tmp_path / "ort & apps" / "demo"
    run_cmd = install_root(root, windows_venv, apply_tuning=True)
    report = tmp_path / "report.json"
    env = reporting(wine, report, ORT_BUNDLE_CACHE_DIR=wine.to_windows(tmp_path))
    win_root = wine.to_windows(root)
    site = f"{win_root}\\venv\\Lib\\site-packages"

    def started(*args: str) -> tuple[list[str], dict[str, Any]]:
        result = wine.cmd(run_cmd, *args, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        found = read_report(report)
        return found["orig_argv"][1:], found

    args, seen = started("--tune", "--runs", "5")
    assert args == ["-I", "-B", "-m", "ort_bundle.tuning", "--root", win_root, "--runs", "5"]
    assert seen["argv"][0] == f"{site}\\ort_bundle\\tuning.py" and (seen["isolated"], seen["dont_write_bytecode"]) == (1, 1)
    assert "ORT_BUNDLE_APPLY_TUNING" not in seen["environ"]  # the tuning's own sessions stay untouched
    args, seen = started("--support-bundle")
    assert args == ["-I", "-B", "-m", "ort_bundle.support", "--root", win_root]
    assert seen["argv"][0] == f"{site}\\ort_bundle\\support.py"
    args, seen = started("-Profile", '"a b"')  # the PowerShell-style name, case-insensitive, as cmd.exe's `if /i`
    assert args == ["-I", "-B", "-m", "ort_bundle.profile", "--entry-kind", "script", "--entry",
                    f"{win_root}\\app\\main.py", "--", "a b"]
    assert seen["argv"][0] == f"{site}\\ort_bundle\\profile.py"
    assert seen["environ"]["ORT_BUNDLE_APPLY_TUNING"] == "1"
    assert seen["environ"]["ORT_BUNDLE_PROFILE_DIR"] == f"{wine.to_windows(tmp_path)}\\profiles"
    args, seen = started("x")  # the script entry point runs isolated too, its own folder first on sys.path
    assert args == ["-I", "-B", "-c", RUN_SCRIPT, f"{win_root}\\app\\main.py", "x"]
    assert seen["argv"] == [f"{win_root}\\app\\main.py", "x"] and seen["isolated"] == 1
    assert seen["environ"]["ORT_BUNDLE_APPLY_TUNING"] == "1"

    plain = install_root(tmp_path / "plain", windows_venv, apply_tuning=False)
    assert wine.cmd(plain, "x", env=env).returncode == 0
    assert "ORT_BUNDLE_APPLY_TUNING" not in read_report(report)["environ"]  # only when [launch] opts in


@pytest.mark.parametrize("entry", [None, EntryPoint(kind="module", value="app.main"),
                                   EntryPoint(kind="script", value="app/main.py"),
                                   EntryPoint(kind="program", value="app/main.exe")])
def test_run_ps1_parses_as_windows_powershell_51_and_apply_tuning_is_the_launchers(entry: EntryPoint | None) -> None:
    scripts = render_scripts(windows_context(apply_tuning=True, entry_point=entry))
    script = scripts["payload/launchers/run.ps1"]
    assert parse_problems(script) == [] and powershell7_constructs(script) == []
    text = script.decode("utf-8-sig")
    assert "'ort_bundle.launcher'" in text and "ORT_BUNDLE_APPLY_TUNING" not in text and "ort_bundle.tuning" not in text
    assert json.loads(scripts[LAUNCH_CONFIG])["apply_tuning"] is True
