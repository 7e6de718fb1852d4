"""run.cmd and run.ps1 hand --tune, --profile and --support-bundle to the shipped Python tools, and set
ORT_BUNDLE_APPLY_TUNING=1 for the entry point exactly when `[launch] apply_tuning` says so.

run.cmd runs for real under `wine64 cmd` and starts python.org's CPython 3.11.9 through the venv's python.exe (a
venv that CPython made under Wine, tests/windows_python.py). In the place of the tools (`ort_bundle.tuning`,
`.support`, `.profile` in the venv's site-packages) and of the entry point is tests/windows_reporter.py, which
records the command line and the environment it was started with; the tools themselves run for real on Linux in
test_tuning_install.py. run.ps1 is parsed as Windows PowerShell 5.1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_scripts_windows import parse_problems, powershell7_constructs, reporting, windows_context, write_scripts
from windows_python import copy_venv, place_reporter, read_report, windows_python, windows_venv  # noqa: F401
from wine import Wine, wine  # noqa: F401  (fixtures)

from bundler.assembly.render import EntryPoint, render_scripts

TOOLS = ("ort_bundle.tuning", "ort_bundle.support", "ort_bundle.profile")


def install_root(folder: Path, venv: Path, *, apply_tuning: bool) -> Path:
    run_cmd = write_scripts(folder, windows_context(apply_tuning=apply_tuning))["run.cmd"]
    copy_venv(venv, folder / "venv", modules=TOOLS)
    place_reporter(folder / "app" / "main.py")
    return run_cmd


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
    assert args == ["-I", "-B", "-m", "ort_bundle.tuning", "--root", win_root, "--tune", "--runs", "5"]
    assert seen["argv"][0] == f"{site}\\ort_bundle\\tuning.py" and (seen["isolated"], seen["dont_write_bytecode"]) == (1, 1)
    assert "ORT_BUNDLE_APPLY_TUNING" not in seen["environ"]  # the tuning's own sessions stay untouched
    args, seen = started("--support-bundle")
    assert args == ["-I", "-B", "-m", "ort_bundle.support", "--root", win_root, "--support-bundle"]
    assert seen["argv"][0] == f"{site}\\ort_bundle\\support.py"
    args, seen = started("--profile", '"a b"')
    assert args == ["-I", "-B", "-m", "ort_bundle.profile", "--entry-kind", "script", "--entry",
                    f"{win_root}\\app\\main.py", "--", "--profile", "a b"]
    assert seen["argv"][0] == f"{site}\\ort_bundle\\profile.py"
    assert seen["environ"]["ORT_BUNDLE_APPLY_TUNING"] == "1"
    assert seen["environ"]["ORT_BUNDLE_PROFILE_DIR"] == f"{wine.to_windows(tmp_path)}\\profiles"
    args, seen = started("x")
    assert args == [f"{win_root}\\app\\main.py", "x"] and seen["environ"]["ORT_BUNDLE_APPLY_TUNING"] == "1"

    plain = install_root(tmp_path / "plain", windows_venv, apply_tuning=False)
    assert wine.cmd(plain, "x", env=env).returncode == 0
    assert "ORT_BUNDLE_APPLY_TUNING" not in read_report(report)["environ"]  # only when [launch] opts in


@pytest.mark.parametrize("entry", [None, EntryPoint(kind="module", value="app.main"),
                                   EntryPoint(kind="script", value="app/main.py"),
                                   EntryPoint(kind="program", value="app/main.exe")])
def test_run_ps1_with_the_switches_parses_as_windows_powershell_51(entry: EntryPoint | None) -> None:
    script = render_scripts(windows_context(apply_tuning=True, entry_point=entry))["payload/launchers/run.ps1"]
    assert parse_problems(script) == [] and powershell7_constructs(script) == []
    text = script.decode("utf-8-sig")
    assert "'ort_bundle.tuning'" in text and "'ort_bundle.support'" in text and "'ort_bundle.profile'" in text
    assert text.count("$variables['ORT_BUNDLE_APPLY_TUNING'] = '1'") == 2  # the entry point and --profile
