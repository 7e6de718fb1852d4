"""try-in-sandbox under Wine (issue 28).

Windows Sandbox itself cannot run here. What can:

- the logon script the sandbox runs (bundler/shipped/ort_bundle/sandbox/sandbox.py writes it), in Wine's real cmd.exe and reg.exe,
  against NAMED STAND-INS for what it calls (install.cmd, run.cmd and uninstall.cmd as small batch files that
  record their arguments and write or delete the detection value; VC_redist.x64.exe as a mingw-built program
  that writes its arguments to a file and exits with the code it is given). That checks the script's own logic: the order, the arguments, reading the install
  folder from the registry, each exit code written down, stopping after a failed install. The stand-ins prove
  nothing about the install itself;
- `try-in-sandbox.cmd --write-only` itself, from real quickstart-win bundles unpacked below a folder with spaces
  and an ampersand, run by python.org's real CPython 3.11.9 for Windows (fixtures/windows_python.py): the bundled one
  for `[python] runtime`, the one on PATH for a machine-Python bundle.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.windows_python import WindowsPython, windows_python  # noqa: F401  (fixture)
from fixtures.wine import Wine, compile_windows_exe, mingw_gcc, wine  # noqa: F401  (fixtures)
from integration.real_wheels.test_runtime_build import build, runtime_manifest
from unit.shipped.test_sandbox import CPU, DOCUMENTED, folders

from bundler.shipped.ort_bundle.sandbox import sandbox, sandbox_render
from bundler.shipped.ort_bundle.sandbox.sandbox_render import Request

pytestmark = pytest.mark.wine
INSTALL_DIR = "C:\\ort demo\\app"
KEY = "HKLM\\SOFTWARE\\ort-bundler\\demo"
CALLS = "C:\\ort-sandbox\\results\\calls.txt"

INSTALL_STANDIN = f"""@echo off
>> {CALLS} echo install.cmd %*
reg add "{KEY}" /v InstallDir /t REG_SZ /d "{INSTALL_DIR}" /f /reg:64 >nul
if not exist "{INSTALL_DIR}" mkdir "{INSTALL_DIR}"
copy /y C:\\ort-sandbox\\standins\\run.cmd "{INSTALL_DIR}\\run.cmd" >nul
exit /b %FAKE_INSTALL_EXIT%
"""
RUN_STANDIN = f"""@echo off
>> {CALLS} echo run.cmd %*
if "%~1"=="--self-check" echo {{"ok": true, "from": "the run.cmd stand-in"}}
if not "%~1"=="--self-check" echo the entry point stand-in ran
exit /b %FAKE_RUN_EXIT%
"""
UNINSTALL_STANDIN = f"""@echo off
>> {CALLS} echo uninstall.cmd %*
if not defined FAKE_KEEP_KEY reg delete "{KEY}" /f /reg:64 >nul
exit /b 0
"""


VC_REDIST_STANDIN = r"""
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {  /* VC_redist.x64.exe stand-in: its arguments to STANDIN_OUT, exit STANDIN_EXIT */
    FILE *f = fopen(getenv("STANDIN_OUT"), "wb");
    for (int i = 1; i < argc; i++) fprintf(f, "%s\n", argv[i]);
    fclose(f);
    return atoi(getenv("STANDIN_EXIT"));
}
"""


@pytest.fixture(scope="module")
def standin_exe(mingw_gcc: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("vc-redist-standin")
    (folder / "standin.c").write_text(VC_REDIST_STANDIN)
    return compile_windows_exe(mingw_gcc, folder / "standin.c", folder / "VC_redist.x64.exe")


def crlf(text: str) -> bytes:
    return text.replace("\n", "\r\n").encode("ascii")


@pytest.fixture
def sandbox_drive(wine: Wine, standin_exe: Path) -> Iterator[Path]:
    """C:\\ort-sandbox in the session's Wine prefix, laid out as the .wsb maps it, with the stand-ins."""
    root = wine.drive_c() / "ort-sandbox"
    for folder in ("bundle", "steps", "results", "standins"):
        (root / folder).mkdir(parents=True)
    (root / "bundle" / "install.cmd").write_bytes(crlf(INSTALL_STANDIN))
    (root / "bundle" / "uninstall.cmd").write_bytes(crlf(UNINSTALL_STANDIN))
    (root / "standins" / "run.cmd").write_bytes(crlf(RUN_STANDIN))
    vc_redist = root / "bundle" / "payload" / "vc_redist" / "VC_redist.x64.exe"
    vc_redist.parent.mkdir(parents=True)
    shutil.copyfile(standin_exe, vc_redist)
    steps = sandbox_render.render_steps(Request(bundle="D:\\b\\demo"), CPU)
    (root / "steps" / sandbox_render.STEPS_FILE).write_bytes(steps.encode("ascii"))
    yield root
    shutil.rmtree(root)
    shutil.rmtree(wine.drive_c() / "ort demo", ignore_errors=True)
    wine.run(["reg", "delete", KEY, "/f", "/reg:64"])


def run_steps(wine: Wine, root: Path, *, install_exit: int, run_exit: int = 0, keep_key: bool = False) -> list[str]:
    report = root / "results" / "vc_redist-args.txt"
    env = {"FAKE_INSTALL_EXIT": str(install_exit), "FAKE_RUN_EXIT": str(run_exit),
           "STANDIN_OUT": "C:\\ort-sandbox\\results\\vc_redist-args.txt", "STANDIN_EXIT": "1638"}
    result = wine.run(["cmd", "/c", "C:\\ort-sandbox\\steps\\" + sandbox_render.STEPS_FILE],
                      env={**env, **({"FAKE_KEEP_KEY": "1"} if keep_key else {})})
    assert result.returncode == 0, result.stdout + result.stderr
    args = report.read_text().splitlines()
    assert args == ["/install", "/quiet", "/norestart", "/log", "C:\\ort-sandbox\\results\\vc_redist.log"]
    return (root / "results" / "exit-codes.txt").read_text().splitlines()


def test_the_logon_script_runs_every_step_in_order_and_records_each_exit_code(wine: Wine, sandbox_drive: Path) -> None:
    results = sandbox_drive / "results"
    codes = run_steps(wine, sandbox_drive, install_exit=0)
    assert codes == ["started demo 1.2.3", "vc_redist 1638", "install 0", "detection-value found", "self-check 0",
                     "entry-point 0", "uninstall 0", "detection-value removed", "finished"]
    calls = (results / "calls.txt").read_text().splitlines()
    assert [line.split()[0] for line in calls] == ["install.cmd", "run.cmd", "run.cmd", "uninstall.cmd"]
    assert calls[0].split() == ["install.cmd", "-LogPath", "C:\\ort-sandbox\\results\\install.log"]
    assert calls[1].split() == ["run.cmd", "--self-check", "--json"] and calls[2].split() == ["run.cmd"]
    assert calls[3].startswith(f'uninstall.cmd -InstallDir "{INSTALL_DIR}" -LogPath C:\\ort-sandbox\\results\\uninstall.log')
    assert (results / "install-dir.txt").read_text().strip() == INSTALL_DIR  # read back from the detection value
    assert '"ok": true' in (results / "selfcheck.json").read_text()
    assert "the entry point stand-in ran" in (results / "entry-point.txt").read_text()
    gone = wine.run(["reg", "query", KEY, "/reg:64"])
    assert gone.returncode != 0  # the uninstall stand-in removed it: the script handed it the folder it read


def test_a_failed_install_stops_the_script_and_a_new_run_clears_only_its_own_results(wine: Wine,
                                                                                      sandbox_drive: Path) -> None:
    results = sandbox_drive / "results"
    (results / "selfcheck.json").write_text("from the previous run")
    (results / "notes.txt").write_text("the admin's own file")
    codes = run_steps(wine, sandbox_drive, install_exit=13)
    assert codes == ["started demo 1.2.3", "vc_redist 1638", "install 13", "finished"]
    assert [line.split()[0] for line in (results / "calls.txt").read_text().splitlines()] == ["install.cmd"]
    assert not (results / "selfcheck.json").exists() and (results / "notes.txt").read_text() == "the admin's own file"


def test_a_failing_self_check_is_recorded_and_a_detection_value_left_by_the_uninstall_is_named(
        wine: Wine, sandbox_drive: Path) -> None:
    codes = run_steps(wine, sandbox_drive, install_exit=3010, run_exit=14, keep_key=True)
    assert codes == ["started demo 1.2.3", "vc_redist 1638", "install 3010", "detection-value found", "self-check 14",
                     "entry-point 14", "uninstall 0", "detection-value left behind", "finished"]


# --- try-in-sandbox.cmd itself, in python.org's real CPython 3.11.9 for Windows (fixtures/windows_python.py) ----------

SPACED_PARENT = "deploy tests & co"


def built_bundle(manifest: Path, cache: Path, work: Path) -> Path:
    """The real build of a quickstart manifest, unpacked below a folder whose name has spaces and an ampersand."""
    zip_path = Path(json.loads(build(manifest, cache, work / "dist").stdout)["zip"])
    parent = work / SPACED_PARENT
    subprocess.run(["unzip", "-q", str(zip_path), "-d", str(parent)], check=True)
    [bundle] = parent.iterdir()
    return bundle


@pytest.fixture(scope="module")
def runtime_bundle(windows_python: WindowsPython, bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """quickstart-win with `[python] runtime` = python.org's embeddable package (from the real CPython)."""
    work = tmp_path_factory.mktemp("sandbox-runtime")
    return built_bundle(runtime_manifest(work, "quickstart-win.toml", windows_python.embed_zip), bundler_cache, work)


@pytest.fixture(scope="module")
def machine_bundle(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """quickstart-win as committed: no runtime, the machine's Python."""
    work = tmp_path_factory.mktemp("sandbox-machine")
    return built_bundle(runtime_manifest(work, "quickstart-win.toml", None), bundler_cache, work)


def listing(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")}


def fresh_copy(bundle: Path, tmp_path: Path) -> Path:
    """The unpacked bundle, copied below another spaced parent: each test writes its own -sandbox folder."""
    copy = tmp_path / SPACED_PARENT / bundle.name
    shutil.copytree(bundle, copy)
    return copy


def read_wsb(path: Path) -> ET.Element:
    root = ET.fromstring(path.read_text(encoding="ascii"))
    assert {element.tag for element in root.iter()} <= DOCUMENTED
    return root


@pytest.mark.integration
def test_try_in_sandbox_writes_a_wsb_beside_a_runtime_bundle_under_a_spaced_path(
        wine: Wine, runtime_bundle: Path, tmp_path: Path) -> None:
    bundle = fresh_copy(runtime_bundle, tmp_path)
    before = listing(bundle)
    result = wine.cmd(bundle / "try-in-sandbox.cmd", "--write-only")
    assert result.returncode == 0, result.stdout + result.stderr
    assert listing(bundle) == before  # nothing inside the bundle: the install refuses unlisted files
    folder = bundle.with_name(bundle.name + "-sandbox")
    wsb = folder / "quickstart-win.wsb"
    assert f"Wrote {wine.to_windows(wsb)}" in result.stdout
    root = read_wsb(wsb)
    assert root.findtext("Networking") == "Disable" and root.findtext("vGPU") == "Disable"
    mapped = folders(root)
    assert mapped == {"C:\\ort-sandbox\\bundle": (wine.to_windows(bundle), True),
                      "C:\\ort-sandbox\\steps": (wine.to_windows(folder / "steps"), True),
                      "C:\\ort-sandbox\\results": (wine.to_windows(folder / "results"), False)}
    for host, _ in mapped.values():  # absolute, and existing: else "The configuration file was invalid"
        assert host[1:3] == ":\\" and (Path("/") / host[3:].replace("\\", "/")).is_dir()
    assert "&amp;" in wsb.read_text()
    command = root.findtext("LogonCommand/Command") or ""
    assert command == "C:\\Windows\\System32\\cmd.exe /k C:\\ort-sandbox\\steps\\try-bundle.cmd"
    steps = (folder / "steps" / "try-bundle.cmd").read_bytes().decode("ascii").split("\r\n")
    assert "cmd /d /c %B%\\install.cmd -LogPath %R%\\install.log < nul > \"%R%\\install-output.txt\" 2>&1" in steps
    assert 'cmd /d /c ""%INSTALL%\\run.cmd" --self-check --json" < nul > "%R%\\selfcheck.json" 2> "%R%\\selfcheck-stderr.txt"' in steps
    vc_redist = json.loads((bundle / "bundle.json").read_text())["vc_redist"]  # quickstart-win ships none
    assert any("VC_redist" in line for line in steps) == (vc_redist is not None)
    assert any("run.cmd\"\" < nul > \"%R%\\entry-point.txt\"" in line for line in steps)  # the entry point, once
    assert not any("python-install" in line for line in steps if not line.startswith("if exist"))
    again = wine.cmd(bundle / "try-in-sandbox.cmd", "--write-only")  # a second run replaces the files, same bytes
    assert again.returncode == 0 and (folder / "quickstart-win.wsb").read_bytes() == wsb.read_bytes()
    assert sorted(p.name for p in folder.iterdir()) == ["quickstart-win.wsb", "results", "steps"]
    started = wine.cmd(bundle / "try-in-sandbox.cmd")  # Wine has no WindowsSandbox.exe: said, with the way to enable it
    assert started.returncode == 9, started.stdout + started.stderr
    assert sandbox.ENABLE_COMMAND in started.stderr and f"wrote {wine.to_windows(wsb)}" in started.stderr
    assert (folder / "quickstart-win.wsb").read_bytes() == wsb.read_bytes()


@pytest.mark.integration
def test_a_gpu_bundle_enables_vgpu_and_says_cuda_depends_on_the_host_driver(
        wine: Wine, runtime_bundle: Path, tmp_path: Path) -> None:
    """bundle.json's `gpu` record, as a GPU build writes it, is what makes a bundle a GPU bundle here (a real CUDA
    bundle is 1.5 GB; test_sandbox.py checks the rest of the GPU configuration)."""
    bundle = fresh_copy(runtime_bundle, tmp_path)
    record = json.loads((bundle / "bundle.json").read_text())
    record["gpu"] = {"cuda": "11.8", "cudnn": "8.9"}
    (bundle / "bundle.json").write_text(json.dumps(record))
    result = wine.cmd(bundle / "try-in-sandbox.cmd", "--write-only")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "whether CUDA works inside the sandbox depends on that driver" in result.stdout
    root = read_wsb(bundle.with_name(bundle.name + "-sandbox") / "quickstart-win.wsb")
    assert root.findtext("vGPU") == "Enable" and root.findtext("Networking") == "Disable"


@pytest.mark.integration
def test_refused_paths_and_bad_arguments_write_nothing(wine: Wine, runtime_bundle: Path, machine_bundle: Path,
                                                       windows_python: WindowsPython, tmp_path: Path) -> None:
    bundle = fresh_copy(runtime_bundle, tmp_path)
    installer = tmp_path / "python-3.11.9-amd64.exe"
    installer.write_bytes(b"MZ")
    parent_before = listing(tmp_path)
    cases = [(["--msi", "\\\\fileserver\\share\\app.msi"], 7, "is a UNC path"),
             (["--msi", wine.to_windows(tmp_path / "missing.msi")], 2, "is not a file"),
             (["--prereq", wine.to_windows(installer)], 2, "carries its own Python"),
             (["--memory", "12"], 2, "--memory 12 is out of range"),
             (["--bogus"], 2, "unrecognized arguments: --bogus")]
    for argv, code, message in cases:
        result = wine.cmd(bundle / "try-in-sandbox.cmd", *argv, "--write-only")
        assert result.returncode == code, (argv, result.stdout + result.stderr)
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert listing(tmp_path) == parent_before
    # A folder cmd.exe can still start the scripts from, but whose deepest file would pass MAX_PATH (260).
    longest = max(len(line.split("  ", 1)[1]) for line in (bundle / "SHA256SUMS").read_text().splitlines())
    short = len(wine.to_windows(tmp_path / "d" / bundle.name))
    deep = tmp_path / ("d" * (260 - longest - short))
    shutil.copytree(runtime_bundle, deep / bundle.name)
    assert len(wine.to_windows(deep / bundle.name)) + 1 + longest == 260
    result = wine.cmd(deep / bundle.name / "try-in-sandbox.cmd", "--write-only")
    assert result.returncode == 7 and "is too long: 260 characters" in result.stderr, result.stdout + result.stderr
    assert sorted(p.name for p in deep.iterdir()) == [bundle.name]


@pytest.mark.integration
def test_a_machine_python_bundle_writes_with_python_on_path_and_needs_the_prereq(
        wine: Wine, machine_bundle: Path, windows_python: WindowsPython, tmp_path: Path) -> None:
    bundle = fresh_copy(machine_bundle, tmp_path)
    installer = tmp_path / "media" / "python-3.11.9-amd64.exe"
    installer.parent.mkdir()
    installer.write_bytes(b"MZ")  # only its name and place matter here: the sandbox runs it
    path = {"WINEPATH": wine.to_windows(windows_python.full)}  # Wine's PATH is the registry's; WINEPATH goes first
    missing = wine.cmd(bundle / "try-in-sandbox.cmd", "--write-only", env=path)
    assert missing.returncode == 2 and "pass --prereq python-3.11.N-amd64.exe" in missing.stderr
    assert not bundle.with_name(bundle.name + "-sandbox").exists()
    result = wine.cmd(bundle / "try-in-sandbox.cmd", "--write-only", "--prereq", f'"{wine.to_windows(installer)}"', env=path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"writing the .wsb with {wine.to_windows(windows_python.full / 'python.exe')}" in result.stdout  # says which
    folder = bundle.with_name(bundle.name + "-sandbox")
    assert folders(read_wsb(folder / "quickstart-win.wsb"))["C:\\ort-sandbox\\input-1"] == (
        wine.to_windows(installer.parent), True)
    steps = (folder / "steps" / "try-bundle.cmd").read_bytes().decode("ascii")
    assert ('start "" /wait "C:\\ort-sandbox\\input-1\\python-3.11.9-amd64.exe" /quiet InstallAllUsers=1 PrependPath=1'
            in steps)
    none = wine.cmd(bundle / "try-in-sandbox.cmd", "--write-only")  # Wine's own PATH has no Python
    assert none.returncode == 12 and "no Python 3.8 or newer found" in none.stderr
