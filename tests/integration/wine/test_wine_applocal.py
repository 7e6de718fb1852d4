"""A native program loads the bundle's ONNX Runtime from its own folder, not the older copy in System32 (issue 13).

Windows 10 21H1+ and 11 ship their own `onnxruntime.dll` in System32, which an unpackaged program finds
before anything on `PATH`. Here a decoy of another version (1.20.1, a real ORT build) sits in the Wine prefix's
system32 and first on `PATH`; the probe, installed as the bundle's `[launch] program`, must still load the
bundle's 1.23.1 from `app\\`, and a copy of the same probe in a folder without the app-local DLLs must load the
decoy, which proves the test can tell the two apart.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from fixtures.cli import run_cli
from fixtures.native import (  # noqa: F401  (fixtures)
    DECOY_ORT_VERSION,
    ProbeExit,
    ProbeReport,
    ort_win_capi,
    ortprobe_exe,
    write_path_cmd,
)
from fixtures.wheels import ORT_VERSION
from fixtures.windows_python import windows_python, windows_venv  # noqa: F401  (fixtures)
from fixtures.wine import Wine, _find_wine, compile_windows_exe, mingw_gcc, require_tool  # noqa: F401  (fixtures)
from integration.wine.test_wine_launcher import (  # noqa: F401  (fixtures)
    Install,
    install,
    model_arguments,
    probe_bundle,
    probe_manifest,
    quoted,
    same_windows_path,
)

from bundler.hashing import file_sha256
from bundler.shipped.ort_bundle.bundle_info import BundleInfo

APP_LOCAL = ("app/onnxruntime.dll", "app/onnxruntime_providers_shared.dll")


@pytest.fixture(scope="module")
def system32_wine(tmp_path_factory: pytest.TempPathFactory, ort_win_capi) -> Wine:
    """A Wine prefix of its own whose system32 holds the decoy onnxruntime.dll, as Windows ML's inbox copy does."""
    exe = require_tool(_find_wine(), "wine64 (Debian package wine64)")
    wine = Wine(exe=exe, prefix=tmp_path_factory.mktemp("wineprefix-system32"))
    boot = wine.run(["cmd", "/c", "exit /b 0"], timeout=300)
    assert boot.returncode == 0, f"wine prefix did not boot: {boot.stderr[-2000:]}"
    system32 = wine.drive_c() / "windows" / "system32"
    shutil.copyfile(ort_win_capi(DECOY_ORT_VERSION) / "onnxruntime.dll", system32 / "onnxruntime.dll")
    yield wine
    server = shutil.which("wineserver") or "/usr/lib/wine/wineserver64"
    subprocess.run([server, "-k"], env=wine.env, check=False)


@pytest.fixture(scope="module")
def wine(system32_wine: Wine) -> Wine:
    """The one prefix of this module: the install's venv (`windows_venv`) is made from the machine Python installed
    in the decoy prefix, because run.cmd starts the launcher in that Python before the program."""
    return system32_wine


@pytest.mark.integration
def test_the_plan_places_the_runtime_beside_the_program_verified_like_every_file(install: Install,
                                                                                probe_bundle: Path) -> None:
    info = BundleInfo.read(install.root / "bundle.json")
    assert tuple(info.app_local_runtime) == APP_LOCAL
    copies = {entry["to"]: entry["from"] for entry in install.plan["copy"]}
    sums = dict(reversed(line.split("  ", 1)) for line in (probe_bundle / "SHA256SUMS").read_text().splitlines())
    for target in APP_LOCAL:
        source = copies[target]
        assert sums[source] == file_sha256(probe_bundle / source) == file_sha256(install.root / target)
    assert info.dll_closure is not None and info.dll_closure["program"]["problems"] == []


@pytest.mark.wine
@pytest.mark.integration
def test_with_a_decoy_in_system32_and_on_path_the_installed_program_loads_the_bundles_ort(
        system32_wine: Wine, install: Install, ort_win_capi, tmp_path: Path) -> None:
    wine = system32_wine
    decoy = ort_win_capi(DECOY_ORT_VERSION)
    launcher = write_path_cmd(tmp_path / "launcher.cmd", wine=wine, target=install.run_cmd, path_first=[decoy])
    result = wine.cmd(launcher, "--expect-version", ORT_VERSION, *model_arguments(wine, install))

    assert result.returncode == ProbeExit.OK, result.stdout + result.stderr
    report = ProbeReport.parse(result.stdout)
    assert same_windows_path(report.module, wine.to_windows(install.root / "app" / "onnxruntime.dll"))
    assert report.version == ORT_VERSION
    identity, *models = report.models
    assert identity.identity == "exact" and len(models) == len(install.bundle["models"])


@pytest.mark.wine
@pytest.mark.integration
def test_the_same_probe_without_the_app_local_copy_loads_system32s_decoy(
        system32_wine: Wine, install: Install, tmp_path: Path) -> None:
    wine = system32_wine
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = shutil.copy2(install.program, elsewhere / install.program.name)
    result = wine.run([wine.to_windows(Path(probe)), "--check-identity",
                       wine.to_windows(install.root / "installer" / "ort_bundle" / "selfcheck" / "identity.onnx")])

    assert result.returncode == ProbeExit.OK, result.stdout + result.stderr
    report = ProbeReport.parse(result.stdout)
    assert same_windows_path(report.module, "C:\\windows\\system32\\onnxruntime.dll")
    assert report.version == DECOY_ORT_VERSION


MISSING_IMPORT_C = r"""
__declspec(dllimport) int helper_value(void);
int main(void) { return helper_value(); }
"""
HELPER_C = "__declspec(dllexport) int helper_value(void) { return 7; }\n"


@pytest.mark.integration
def test_a_program_importing_a_dll_the_bundle_lacks_fails_the_build_naming_it(
        mingw_gcc: str, bundler_cache: Path, tmp_path: Path) -> None:
    (tmp_path / "helper.c").write_text(HELPER_C)
    (tmp_path / "main.c").write_text(MISSING_IMPORT_C)
    subprocess.run([mingw_gcc, "-shared", "-o", str(tmp_path / "apphelper.dll"), str(tmp_path / "helper.c"),
                    f"-Wl,--out-implib,{tmp_path / 'libapphelper.a'}"], check=True)
    program = compile_windows_exe(mingw_gcc, tmp_path / "main.c", tmp_path / "needs-helper.exe",
                                  f"-L{tmp_path}", "-lapphelper", "-Wl,--no-insert-timestamp")
    manifest = probe_manifest(tmp_path / "manifest", program)
    run_cli("fetch", "-q", "--cache", str(bundler_cache), str(manifest))
    out = tmp_path / "dist"
    proc = run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(out), str(manifest), check=False)

    assert proc.returncode == 7, proc.stderr
    assert "app/needs-helper.exe imports apphelper.dll, which is not in the payload" in proc.stderr
    assert "resolved from its own folder" in proc.stderr
    assert not out.exists() or not list(out.glob("*.zip"))


def test_readme_install_says_why_the_runtime_sits_beside_the_program() -> None:
    from integration.wine.test_scripts_windows import windows_context

    from bundler.assembly.render import EntryPoint, render_scripts

    text = render_scripts(windows_context(entry_point=EntryPoint(kind="program", value="app/ortprobe.exe")))[
        "README-INSTALL.txt"].decode("utf-8")
    folded = " ".join(text.split())
    assert "beside the program" in folded and "System32" in folded and "its own folder first" in folded
