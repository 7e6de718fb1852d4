"""The Windows runtime tier through the generated `run.cmd` (issue 7 §2–§5).

A real win_amd64 bundle is built from the quickstart manifest with the native probe as its `[launch]
program`, laid out as an install folder by the bundle's own install plan, and started through the
generated `run.cmd` under `wine64 cmd`. The probe then reports which `onnxruntime.dll` it really got and
what the bundled models computed, which is compared with the reference the build recorded in bundle.json
using the Linux onnxruntime of the same version.

The install folder is laid out by the bundle's own install engine (`bundler.shipped.ort_bundle.engine.engine.install`, what
install.ps1 runs on Windows), executing its install-plan.json: SHA256SUMS verified, every locked wheel
installed into the Windows layout by the pinned pypa installer with its `win-amd64` launchers, the
receipt written, the stage swapped in. The engine runs here on the Linux host, so the environment-creation
step (`python -m venv` of a Windows Python cannot run inside a Linux process) copies a venv that python.org's
CPython made under Wine (tests/fixtures/windows_python.py): run.cmd starts the shipped launcher with its
python.exe. The same install by that CPython under Wine, venv included, is
tests/integration/wine/test_windows_install.py's. Everything else the launcher and the probe touch comes from the
built bundle.

The tests without Wine at the end cover the program entry point in run.ps1 (parsed as Windows PowerShell 5.1)
and README-INSTALL; run.sh starts a program in test_launcher.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from fixtures.cli import MANIFESTS, run_cli
from fixtures.native import (  # noqa: F401  (fixtures)
    DECOY_ORT_VERSION,
    ProbeExit,
    ProbeReport,
    ort_win_capi,
    ortprobe_exe,
    write_path_cmd,
)
from fixtures.wheels import ORT_VERSION
from fixtures.windows_python import read_report, windows_python, windows_venv  # noqa: F401  (fixtures)
from fixtures.wine import Wine, mingw_gcc, wine  # noqa: F401  (fixtures)
from integration.wine.test_scripts_windows import make_install_root, parse_problems, powershell7_constructs, reporting
from unit.shipped.test_delta_refusals import pair  # noqa: F401  (the module fixture)

from bundler.assembly.render import (
    INSTALL_EXIT_CODES,
    LAUNCH_CONFIG,
    EntryPoint,
    ScriptContext,
    render_scripts,
)
from bundler.errors import BuildError
from bundler.hashing import file_sha256
from bundler.shipped.ort_bundle import synth
from bundler.shipped.ort_bundle.delta_apply import EXIT_CODES as DELTA_EXIT_CODES
from bundler.shipped.ort_bundle.engine import engine
from bundler.shipped.ort_bundle.records import InstallPlan
from bundler.target_platform import TARGETS

#: The install folder's parent: spaces and '&' in the path, as issue 7 §5 asks (every Wine test uses it).
HOSTILE_PARENT = "ort apps & tools"


# --- §2: the install layout, executed from the bundle's plan ---------------------------------------------


def lay_out_windows_install(bundle_root: Path, install_root: Path, venv: Path) -> dict:
    """The bundle's install engine executes its install-plan.json; the environment is a copy of `venv`, which
    python.org's CPython made under Wine (`python -m venv --without-pip`, what the engine runs on Windows)."""
    def copy_environment(stage_venv: Path, final_venv: Path) -> None:
        shutil.copytree(venv, stage_venv)  # copies, not links: the engine writes into it

    options = engine.Options(bundle=bundle_root, install_dir=install_root, self_check=False)
    assert engine.install(options, engine.Log(None), make_environment=copy_environment) == "installed"
    return InstallPlan.loads((install_root / "install-plan.json").read_text(encoding="utf-8")).to_json()


@dataclass(frozen=True, kw_only=True)
class Install:
    """A laid-out install folder and what the bundle says about it."""

    root: Path
    plan: dict
    bundle: dict

    @property
    def run_cmd(self) -> Path:
        return self.root / "run.cmd"

    @property
    def program(self) -> Path:
        return self.root / self.bundle["entry_point"]["program"]

    @property
    def ort_dll(self) -> Path:
        """The onnxruntime.dll beside the program: the one it must load (its own folder comes before System32)."""
        return self.program.parent / "onnxruntime.dll"


def probe_manifest(folder: Path, probe: Path) -> Path:
    """The quickstart-win manifest with `[launch]` replaced by the probe as the program, beside its inputs."""
    source = MANIFESTS / "quickstart-win.toml"
    text = source.read_text(encoding="utf-8")
    parsed = tomllib.loads(text)
    assert list(parsed)[-1] == "launch", f"{source.name} must end with its [launch] table"
    folder.mkdir(parents=True)
    for relative in [parsed["python"]["lock"], *(model["path"] for model in parsed["models"])]:
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(MANIFESTS / relative, folder / relative)
    shutil.copyfile(probe, folder / probe.name)
    launch = f'[launch]\nprogram = {{ path = "{probe.name}", sha256 = "{file_sha256(probe)}" }}\n'
    manifest = folder / source.name
    manifest.write_text(text[: text.index("\n[launch]") + 1] + launch, encoding="utf-8")
    return manifest


@pytest.fixture(scope="module")
def probe_bundle(tmp_path_factory: pytest.TempPathFactory, bundler_cache: Path, ortprobe_exe: Path) -> Path:
    """The built and extracted bundle; fetching adds only the probe to the shared cache."""
    work = tmp_path_factory.mktemp("probe-bundle")
    manifest = probe_manifest(work / "manifest", ortprobe_exe)
    run_cli("fetch", "-q", "--cache", str(bundler_cache), str(manifest))
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(work / "dist"), str(manifest))
    [archive] = (work / "dist").glob("*.zip")
    with zipfile.ZipFile(archive) as bundle_zip:
        bundle_zip.extractall(work / "extracted")
    [bundle_root] = (work / "extracted").iterdir()
    return bundle_root


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory, probe_bundle: Path, windows_venv: Path) -> Install:
    root = tmp_path_factory.mktemp("win-install") / HOSTILE_PARENT / "quickstart-win"
    plan = lay_out_windows_install(probe_bundle, root, windows_venv)
    return Install(root=root, plan=plan, bundle=json.loads((root / "bundle.json").read_text(encoding="utf-8")))


def quoted(wine: Wine, path: Path) -> str:
    return f'"{wine.to_windows(path)}"'


def same_windows_path(reported: str | None, expected: str) -> bool:
    return reported is not None and reported.lower() == expected.lower()


@pytest.mark.wine
@pytest.mark.integration
def test_the_engine_lays_out_the_windows_environment_exactly_as_pinned(install: Install) -> None:
    """Every locked wheel in venv/Lib/site-packages, no pip; RECORD matches the files; the console scripts
    are the installer's win-amd64 .exe launchers naming the final folder's python.exe; the receipt covers it."""
    from integration.linux_install.test_install_linux import record_problems

    site = install.root / "venv" / "Lib" / "site-packages"
    names = sorted(p.name.split("-")[0].lower() for p in site.glob("*.dist-info"))
    assert names == sorted(w["name"].replace("-", "_") for w in install.bundle["wheels"]) and "pip" not in names
    assert record_problems(site) == []
    scripts = install.root / "venv" / "Scripts"
    for name in ("coloredlogs", "humanfriendly", "isympy", "f2py"):
        launcher = (scripts / f"{name}.exe").read_bytes()
        assert launcher.startswith(b"MZ"), f"{name}.exe is not a Windows launcher"
        assert f"#!{install.root / 'venv' / 'Scripts' / 'python.exe'}".encode() in launcher
    assert b".staging" not in (install.root / "venv" / "pyvenv.cfg").read_bytes()
    assert engine.audit(install.root).ok
    assert (install.root / "uninstall.cmd").is_file() and (install.root / "installer" / "ort_bundle" / "__main__.py").is_file()


# --- §3: through the real launcher ------------------------------------------------------------------------


def model_arguments(wine: Wine, install: Install) -> list[str]:
    """The installed identity model, then every bundled model with the shapes the build fed it."""
    args = ["--check-identity", quoted(wine, install.root / install.bundle["selfcheck"]["identity_model"])]
    for model in install.bundle["models"]:
        for name, dims in model["shapes"].items():
            args += ["--shape", f"{name}={','.join(str(d) for d in dims)}"]
        args.append(quoted(wine, install.root / model["file"]))
    return args


@pytest.mark.wine
@pytest.mark.integration
def test_the_plan_installs_the_program_and_the_bundles_own_dll(install: Install, probe_bundle: Path,
                                                               ortprobe_exe: Path) -> None:
    assert file_sha256(install.program) == file_sha256(ortprobe_exe)
    with zipfile.ZipFile(probe_bundle / "payload" / "wheels" / install.bundle["ort"]["wheel"]) as wheel:
        assert wheel.read("onnxruntime/capi/onnxruntime.dll") == install.ort_dll.read_bytes()
    assert install.run_cmd.is_file() and install.bundle["models"], "the quickstart ships a launcher and a model"


@pytest.mark.wine
@pytest.mark.integration
def test_run_cmd_starts_the_program_on_the_installed_ort_and_every_bundled_model_matches_its_reference(
        wine: Wine, install: Install, tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    dump.mkdir()
    result = wine.cmd(install.run_cmd, "--expect-version", ORT_VERSION, "--dump", quoted(wine, dump),
                      *model_arguments(wine, install))

    assert result.returncode == ProbeExit.OK, result.stdout + result.stderr
    report = ProbeReport.parse(result.stdout)
    assert same_windows_path(report.module, wine.to_windows(install.ort_dll))
    assert report.version == ORT_VERSION == install.bundle["ort"]["version"]
    identity, *models = report.models
    assert same_windows_path(identity.path, wine.to_windows(install.root / "installer" / "ort_bundle" / "selfcheck" / "identity.onnx"))
    assert identity.identity == "exact"
    for index, (record, run) in enumerate(zip(install.bundle["models"], models, strict=True), start=1):
        reference = record["reference"]
        assert same_windows_path(run.path, wine.to_windows(install.root / record["file"]))
        assert {t.name: t.sha256 for t in run.inputs} == reference["inputs"], "the probe fed other bytes than the build"
        assert [t.name for t in run.outputs] == list(reference["outputs"])
        for position, tensor in enumerate(run.outputs):
            recorded = reference["outputs"][tensor.name]
            value = np.fromfile(dump / f"{index}_{position}.bin", dtype=np.dtype(recorded["dtype"]).newbyteorder("<"))
            value = value.reshape(tensor.shape)
            assert synth.output_digest(value) == tensor.sha256, "the dump is not what the probe digested"
            # Equal digests pass at once; otherwise the recorded values decide within the recorded tolerance.
            assert synth.compare_output(tensor.name, value, recorded, rtol=reference["rtol"],
                                        atol=reference["atol"]) is None


# --- §4: shadowing ----------------------------------------------------------------------------------------


@pytest.mark.wine
@pytest.mark.integration
def test_a_decoy_ort_first_on_the_callers_path_loads_only_without_the_launcher(
        wine: Wine, install: Install, ort_win_capi, tmp_path: Path) -> None:
    decoy = ort_win_capi(DECOY_ORT_VERSION)
    identity = quoted(wine, install.root / "installer" / "ort_bundle" / "selfcheck" / "identity.onnx")
    through_launcher = write_path_cmd(tmp_path / "launcher.cmd", wine=wine, target=install.run_cmd, path_first=[decoy])
    # A copy of the probe without the app-local runtime beside it: nothing but PATH can then find an ORT.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    bare_probe = Path(shutil.copy2(install.program, elsewhere / install.program.name))
    direct = write_path_cmd(tmp_path / "direct.cmd", wine=wine, target=bare_probe, path_first=[decoy])

    launched = wine.cmd(through_launcher, "--check-identity", identity)
    bare = wine.cmd(direct, "--check-identity", identity)

    assert launched.returncode == ProbeExit.OK, launched.stdout + launched.stderr
    launched_report = ProbeReport.parse(launched.stdout)
    assert same_windows_path(launched_report.module, wine.to_windows(install.ort_dll))
    assert launched_report.version == ORT_VERSION
    assert bare.returncode == ProbeExit.OK, bare.stdout + bare.stderr
    bare_report = ProbeReport.parse(bare.stdout)
    assert same_windows_path(bare_report.module, wine.to_windows(decoy / "onnxruntime.dll"))
    assert bare_report.version == DECOY_ORT_VERSION


# --- §5: paths, arguments, exit codes ---------------------------------------------------------------------


@pytest.mark.wine
@pytest.mark.integration
def test_run_cmd_in_a_folder_with_spaces_and_ampersand_passes_arguments_environment_and_exit_code(
        wine: Wine, install: Install, tmp_path: Path) -> None:
    assert " " in str(install.root) and "&" in str(install.root)
    cache = tmp_path / "cache & temp"
    result = wine.cmd(install.run_cmd, '"say \\"hi\\" & bye"', "--echo-args", "--echo-env", "PATH", "--echo-env", "TEMP",
                      "--echo-env", "PYTHONNOUSERSITE", "--exit", "42", '"two words"', '""', '"a & b | c"', "plain",
                      env={"ORT_BUNDLE_CACHE_DIR": wine.to_windows(cache)})

    assert result.returncode == 42, result.stdout + result.stderr
    report = ProbeReport.parse(result.stdout)
    assert report.args == ('say "hi" & bye', "--echo-args", "--echo-env", "PATH", "--echo-env", "TEMP",
                           "--echo-env", "PYTHONNOUSERSITE", "--exit", "42", "two words", "", "a & b | c", "plain")
    dll_dirs = "".join(f"{wine.to_windows(install.root / folder)};" for folder in install.plan["dll_dirs"])
    assert (report.env["PATH"] or "").startswith(dll_dirs), report.env["PATH"]
    assert report.env["TEMP"] == f"{wine.to_windows(cache)}\\tmp" and (cache / "tmp").is_dir()
    assert report.env["PYTHONNOUSERSITE"] == "1"


@pytest.mark.wine
@pytest.mark.integration
def test_in_a_cache_folder_others_may_write_run_cmd_works_in_a_folder_of_its_own(wine: Wine, install: Install,
                                                                                 tmp_path: Path) -> None:
    """Issue 34: on Windows too the launcher reads who may write its cache folder before TEMP, CUDA's and TensorRT's
    caches go there. In a folder others may write (a machine-wide CACHEDIR) it works in a `user-<SID>` folder
    made for its account alone; one that is not (planted, or opened to others) is refused. Wine derives a folder's
    owner and DACL from the POSIX file (the mode's other-write bit is an Everyone ACE with write rights) and keeps
    the DACL a folder is created with, which GetFileSecurityW returns as Windows would; the judging is
    folder_trust's."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    env = {"ORT_BUNDLE_CACHE_DIR": wine.to_windows(shared)}
    result = wine.cmd(install.run_cmd, "--echo-env", "TEMP", "--exit", "0", env=env)

    assert result.returncode == 0, result.stdout + result.stderr
    temp = ProbeReport.parse(result.stdout).env["TEMP"] or ""
    [own] = [folder for folder in shared.iterdir() if folder.name.startswith("user-S-1-")]
    assert temp == f"{wine.to_windows(own)}\\tmp" and (own / "tmp").is_dir()
    assert own.stat().st_mode & 0o077 == 0o050, oct(own.stat().st_mode)  # Wine's mode for the DACL it was made with

    own.chmod(0o777)  # the account's folder opened to everyone
    refused = wine.cmd(install.run_cmd, "--exit", "0", env=env)
    assert refused.returncode == INSTALL_EXIT_CODES["prerequisite"], refused.stdout + refused.stderr
    assert (f"the cache directory {wine.to_windows(own)} (from ORT_BUNDLE_CACHE_DIR) is not safe to use: S-1-1-0 may "
            f"write it") in refused.stderr


@pytest.mark.wine
@pytest.mark.integration
def test_run_cmd_apply_rebuilds_the_next_release_with_the_installed_applier(wine: Wine, install: Install, pair,
                                                                            tmp_path: Path) -> None:
    """Issue 39: the air-gapped side applies a delta with the release it already installed (`run.cmd --apply`, the
    installed environment's own ort_bundle.delta_apply), with no ort-bundler anywhere: the zip it writes is NEW,
    byte for byte, with NEW's .sha256 line; a wrong OLD is refused with the applier's own exit code."""
    old, new, delta = pair
    out = tmp_path / "next release"
    result = wine.cmd(install.run_cmd, "--apply", quoted(wine, old), quoted(wine, delta), "-o", quoted(wine, out))

    assert result.returncode == 0, result.stdout + result.stderr
    assert (out / new.name).read_bytes() == new.read_bytes()
    sha256 = hashlib.sha256(new.read_bytes()).hexdigest()
    assert (out / f"{new.name}.sha256").read_text(encoding="utf-8") == f"{sha256}  {new.name}\n"
    wrong = wine.cmd(install.run_cmd, "-apply", quoted(wine, new), quoted(wine, delta), "-o",
                     quoted(wine, tmp_path / "again"))
    assert wrong.returncode == DELTA_EXIT_CODES["wrong_old"], wrong.stdout + wrong.stderr
    assert not (tmp_path / "again").exists()


# --- the program entry point in every launcher, without a bundle ------------------------------------------


def program_context(platform: str, program: str) -> ScriptContext:
    windows = platform == "win_amd64"
    return ScriptContext(
        name="demo", version="1.2.3", target=TARGETS[platform], python="3.11", vc_runtime_min=None, vc_redist=None,
        gpu_dll_dirs=(), gpu_preload=(),
        dll_dirs=(f"venv/{'Lib' if windows else 'lib/python3.11'}/site-packages/onnxruntime/capi",),
        entry_point=EntryPoint(kind="program", value=program), cache_dir=None, env={"APP_MODE": "fast & quiet"},
        default_install_dir="C:\\ort\\demo" if windows else "/opt/demo")


@pytest.mark.wine
def test_run_cmd_without_its_program_is_a_prerequisite_failure(wine: Wine, windows_venv: Path, tmp_path: Path) -> None:
    root = tmp_path / "a & b"
    run_cmd = make_install_root(root, windows_venv, program_context("win_amd64", "app/tool.exe"))
    result = wine.cmd(run_cmd, "x")

    assert result.returncode == INSTALL_EXIT_CODES["prerequisite"], result.stdout + result.stderr
    assert f'"{wine.to_windows(root)}\\app\\tool.exe" was not found' in result.stdout + result.stderr


@pytest.mark.wine
def test_run_cmd_self_check_of_a_program_bundle_still_runs_python_not_the_program(wine: Wine, windows_venv: Path,
                                                                                   tmp_path: Path) -> None:
    """REPORTER as selfcheck.py (the real one needs numpy, which Wine 8's ucrtbase cannot run), no program: the
    launcher starts the environment's Python on the self-check and never looks for the program."""
    root = tmp_path / "a & b"
    run_cmd = make_install_root(root, windows_venv, program_context("win_amd64", "app/tool.exe"))
    report = tmp_path / "report.json"
    result = wine.cmd(run_cmd, "--self-check", "--json", env=reporting(wine, report, 3))

    assert result.returncode == 3, result.stdout + result.stderr
    started = read_report(report)
    assert started["orig_argv"][1:] == ["-I", "-B", f"{wine.to_windows(root)}\\installer\\ort_bundle\\__main__.py", "selfcheck",
                                        "--json"]
    assert started["executable"] == f"{wine.to_windows(root)}\\venv\\Scripts\\python.exe"


def test_run_ps1_and_readme_for_a_program_entry_point() -> None:
    scripts = render_scripts(program_context("win_amd64", "app/tool.exe"))
    run_ps1 = scripts["payload/launchers/run.ps1"]

    assert parse_problems(run_ps1) == [] and powershell7_constructs(run_ps1) == []
    assert json.loads(scripts[LAUNCH_CONFIG])["entry_point"] == {"kind": "program", "value": "app/tool.exe"}
    readme = scripts["README-INSTALL.txt"].decode("utf-8").replace("\r\n", "\n")
    assert "starts the program app\\tool.exe (below the install folder) with the\narguments, through the launcher" in readme


@pytest.mark.parametrize(("platform", "program", "problem"), [
    ("win_amd64", "app/tool.py", "[launch] program 'app/tool.py' must be a .exe file on win_amd64"),
    ("win_amd64", "../tool.exe", "[launch] program '../tool.exe' must not contain empty, '.' or '..' parts"),
    ("linux_x86_64", "app/to&ol", "[launch] program 'app/to&ol' must be printable ASCII without shell metacharacters"),
])
def test_an_unsafe_program_path_is_refused(platform: str, program: str, problem: str) -> None:
    with pytest.raises(BuildError) as caught:
        render_scripts(program_context(platform, program))
    assert problem in str(caught.value)
