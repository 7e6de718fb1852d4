"""run.cmd and run.ps1 hand --tune, --profile and --support-bundle to the shipped Python tools, and set
ORT_BUNDLE_APPLY_TUNING=1 for the entry point exactly when `[launch] apply_tuning` says so.

run.cmd runs for real under `wine64 cmd`, with a compiled stand-in in the place of the venv's python.exe
that records its arguments and environment (no Windows Python exists here; the tools themselves run for
real on Linux in test_tuning_install.py). run.ps1 is parsed as Windows PowerShell 5.1.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_scripts_windows import (
    STANDIN_C,
    parse_problems,
    powershell7_constructs,
    read_report,
    windows_context,
    write_scripts,
)
from wine import Wine, compile_windows_exe, mingw_gcc, wine  # noqa: F401  (fixtures)

from bundler.assembly.render import EntryPoint, render_scripts

SEEN = ("ORT_BUNDLE_APPLY_TUNING", "ORT_BUNDLE_PROFILE_DIR", "ORT_BUNDLE_CACHE_DIR")


@pytest.fixture(scope="module")
def recorder_exe(mingw_gcc: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in python.exe of test_scripts_windows, recording the variables these switches set."""
    folder = tmp_path_factory.mktemp("recorder")
    source = folder / "recorder.c"
    source.write_text(STANDIN_C.replace("%NAMES%", ", ".join(f'"{n}"' for n in SEEN)))
    return compile_windows_exe(mingw_gcc, source, folder / "recorder.exe")


def install_root(folder: Path, recorder: Path, *, apply_tuning: bool) -> Path:
    run_cmd = write_scripts(folder, windows_context(apply_tuning=apply_tuning))["run.cmd"]
    python = folder / "venv" / "Scripts" / "python.exe"
    python.parent.mkdir(parents=True)
    python.write_bytes(recorder.read_bytes())
    return run_cmd


@pytest.mark.wine
def test_run_cmd_hands_the_switches_to_the_python_tools(wine: Wine, recorder_exe: Path, tmp_path: Path) -> None:
    root = tmp_path / "ort & apps" / "demo"
    run_cmd = install_root(root, recorder_exe, apply_tuning=True)
    report = tmp_path / "report.txt"
    env = {"STANDIN_OUT": wine.to_windows(report), "STANDIN_EXIT": "0", "ORT_BUNDLE_CACHE_DIR": wine.to_windows(tmp_path)}
    win_root = wine.to_windows(root)

    def started(*args: str) -> tuple[list[str], dict[str, str]]:
        result = wine.cmd(run_cmd, *args, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        recorded, seen = read_report(report)
        return recorded[1:], seen

    args, seen = started("--tune", "--runs", "5")
    assert args == ["-I", "-B", "-m", "ort_bundle.tuning", "--root", win_root, "--tune", "--runs", "5"]
    assert seen["ORT_BUNDLE_APPLY_TUNING"] == "<unset>"  # the tuning's own sessions stay untouched
    args, _ = started("--support-bundle")
    assert args == ["-I", "-B", "-m", "ort_bundle.support", "--root", win_root, "--support-bundle"]
    args, seen = started("--profile", '"a b"')
    assert args == ["-I", "-B", "-m", "ort_bundle.profile", "--entry-kind", "script", "--entry",
                    f"{win_root}\\app\\main.py", "--", "--profile", "a b"]
    assert seen["ORT_BUNDLE_APPLY_TUNING"] == "1" and seen["ORT_BUNDLE_PROFILE_DIR"] == f"{wine.to_windows(tmp_path)}\\profiles"
    args, seen = started("x")
    assert args == [f"{win_root}\\app\\main.py", "x"] and seen["ORT_BUNDLE_APPLY_TUNING"] == "1"

    plain = install_root(tmp_path / "plain", recorder_exe, apply_tuning=False)
    assert wine.cmd(plain, "x", env=env).returncode == 0
    assert read_report(report)[1]["ORT_BUNDLE_APPLY_TUNING"] == "<unset>"  # only when [launch] opts in


@pytest.mark.parametrize("entry", [None, EntryPoint(kind="module", value="app.main"),
                                   EntryPoint(kind="script", value="app/main.py"),
                                   EntryPoint(kind="program", value="app/main.exe")])
def test_run_ps1_with_the_switches_parses_as_windows_powershell_51(entry: EntryPoint | None) -> None:
    script = render_scripts(windows_context(apply_tuning=True, entry_point=entry))["payload/launchers/run.ps1"]
    assert parse_problems(script) == [] and powershell7_constructs(script) == []
    text = script.decode("utf-8-sig")
    assert "'ort_bundle.tuning'" in text and "'ort_bundle.support'" in text and "'ort_bundle.profile'" in text
    assert text.count("$variables['ORT_BUNDLE_APPLY_TUNING'] = '1'") == 2  # the entry point and --profile
