"""The launcher in Python (issue 25 §3): run.sh, run.cmd and run.ps1 only find the interpreter; ort_bundle.launcher
does the rest, once.

On Linux for real: a venv made by this machine's Python holds the shipped `ort_bundle` package
(shipped_package.package_files, the bytes a bundle ships), the install folder holds the rendered run.sh and
launch.json, and run.sh is started as a user would. The same module under python.org's Windows CPython is
test_scripts_windows.py's, test_tuning_launchers.py's and test_wine_launcher.py's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bundler.assembly.render import INSTALL_EXIT_CODES, LAUNCH_CONFIG, EntryPoint, ScriptContext, render_scripts
from bundler.assembly.shipped_package import package_files
from bundler.shipped.ort_bundle.launch_config import PREREQUISITE_FALLBACK, LaunchConfig, LaunchConfigError
from bundler.target_platform import TARGETS

PREREQUISITE = INSTALL_EXIT_CODES["prerequisite"]
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
#: The entry point: reports its arguments, flags, pid and the variables the launcher sets, as JSON; exits 7.
REPORTER = """import json, os, sys
names = ("LD_LIBRARY_PATH", "TEMP", "TMP", "TMPDIR", "CUDA_CACHE_PATH", "ORT_TENSORRT_CACHE_PATH", "ORT_BUNDLE_CACHE_DIR",
         "ORT_BUNDLE_CACHE_MIN_FREE_MB", "ORT_BUNDLE_PROFILE_DIR", "PIP_NO_INDEX", "PYTHONNOUSERSITE",
         "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "ORT_BUNDLE_APPLY_TUNING", "APP_MODE")
print(json.dumps({"argv": sys.argv, "isolated": sys.flags.isolated, "pid": os.getpid(),
                  "env": {name: os.environ.get(name) for name in names}}))
sys.exit(7)
"""
HOSTILE = "it's \"$(touch PWNED)\" `touch PWNED` $HOME %PATH% & | ; > out ^ ! \u2018\u2019"
DISPATCH_WORDS = ("--self-check", "--verify", "--tune", "--profile", "--support-bundle", "-SelfCheck", "-Tune",
                  "-Profile", "-SupportBundle", "LD_LIBRARY_PATH", "CUDA_CACHE_PATH", "TEMP", "cache_dir.txt",
                  "PYTHONNOUSERSITE", "PIP_NO_INDEX", "app/", "app\\")


def context(platform: str = "linux_x86_64", **changes: object) -> ScriptContext:
    windows = platform == "win_amd64"
    site = "venv/Lib/site-packages" if windows else f"venv/lib/python{PY}/site-packages"
    values: dict[str, object] = dict(
        name="demo", version="1.2.3", target=TARGETS[platform], python=PY, vc_runtime_min=None, vc_redist=None,
        gpu_dll_dirs=("gpu",), gpu_preload=(), dll_dirs=(f"{site}/onnxruntime/capi",),
        entry_point=EntryPoint(kind="script", value="app/main.py"), cache_dir=None,
        env={"APP_MODE": "fast & 'quiet' $HOME"}, default_install_dir="C:\\ort\\demo" if windows else "/opt/demo")
    values.update(changes)
    return ScriptContext(**values)  # type: ignore[arg-type]


# --- the scripts are thin ----------------------------------------------------------------------------------


THIN_CASES = [
    context(platform, entry_point=entry, runtime_python=runtime, runtime_bundle_python=runtime and f"payload/{runtime}",
            apply_tuning=True, cache_dir="cache")
    for platform, runtime in (("linux_x86_64", None), ("linux_x86_64", "python/bin/python3.11"),
                              ("win_amd64", None), ("win_amd64", "python/python.exe"))
    for entry in (None, EntryPoint(kind="module", value="demo.cli"),
                  EntryPoint(kind="program", value="app/tool.exe" if platform == "win_amd64" else "app/tool"))
]


@pytest.mark.parametrize("ctx", THIN_CASES, ids=lambda c: f"{c.target.tag}-{c.runtime_python}-{c.entry_point}")
def test_every_rendered_launcher_only_finds_the_interpreter(ctx: ScriptContext) -> None:
    """At most 30 non-empty lines, and nothing of the dispatch, the environment or the bundle's entry point."""
    scripts = render_scripts(ctx)
    launchers = {rel: data for rel, data in scripts.items() if rel.startswith("payload/launchers/run.")}
    assert len(launchers) == (2 if ctx.target.tag == "win_amd64" else 1)
    for rel, data in launchers.items():
        text = data.decode("utf-8-sig")
        lines = [line for line in text.splitlines() if line.strip()]
        assert len(lines) <= 30, (rel, len(lines))
        assert [word for word in DISPATCH_WORDS if word in text] == [], rel
        assert "-m ort_bundle.launcher" in text or "'ort_bundle.launcher'" in text, rel
    config = json.loads(scripts[LAUNCH_CONFIG])
    assert config["dll_dirs"] == [*ctx.gpu_dll_dirs, *ctx.dll_dirs] and "isolated" not in config  # always, now
    assert config["entry_point"] == (None if ctx.entry_point is None else
                                     {"kind": ctx.entry_point.kind, "value": ctx.entry_point.value})
    assert config["exit_prerequisite"] == PREREQUISITE == PREREQUISITE_FALLBACK


def test_launch_json_reads_back_and_a_damaged_one_names_the_key() -> None:
    text = render_scripts(context(cache_dir="c"))[LAUNCH_CONFIG].decode()
    config = LaunchConfig.loads(text)
    assert config.dumps() == text and config.cache_dir == "c" and config.env == {"APP_MODE": "fast & 'quiet' $HOME"}
    with pytest.raises(LaunchConfigError, match="format 7"):
        LaunchConfig.loads(json.dumps({**json.loads(text), "format": 7}))
    with pytest.raises(LaunchConfigError, match='launch.json has no "format" key'):
        LaunchConfig.loads(json.dumps({key: value for key, value in json.loads(text).items() if key != "format"}))
    with pytest.raises(LaunchConfigError, match="launch.json holds list, expected a JSON object"):
        LaunchConfig.loads("[]")
    with pytest.raises(LaunchConfigError, match="dll_dirs must be a list of strings"):
        LaunchConfig.loads(json.dumps({**json.loads(text), "dll_dirs": "gpu"}))
    with pytest.raises(LaunchConfigError, match="entry_point must be null or"):
        LaunchConfig.loads(json.dumps({**json.loads(text), "entry_point": {"kind": "shell", "value": "x"}}))


# --- run.sh and the launcher, for real --------------------------------------------------------------------


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv of this Python with the shipped ort_bundle package and the start-up hook in its site-packages, as the
    installer leaves it."""
    folder = tmp_path_factory.mktemp("launcher-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, capture_output=True)
    site = folder / "lib" / f"python{PY}" / "site-packages"
    hook = {f"ort_bundle_hook.{ext}": render_scripts(context())[f"payload/launchers/ort_bundle_hook.{ext}"]
            for ext in ("py", "pth")}
    for relative, data in {**package_files(), **hook}.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_bytes(data)
    return folder


def install(root: Path, venv: Path, ctx: ScriptContext) -> Path:
    """An install folder: the venv, run.sh and launch.json as rendered, the reporter as app/main.py."""
    root.mkdir(parents=True)
    shutil.copytree(venv, root / "venv", symlinks=True)
    scripts = render_scripts(ctx)
    (root / "run.sh").write_bytes(scripts["payload/launchers/run.sh"])
    (root / "run.sh").chmod(0o755)
    (root / "launch.json").write_bytes(scripts[LAUNCH_CONFIG])
    (root / "app").mkdir()
    (root / "app" / "main.py").write_text(REPORTER, encoding="utf-8")
    return root / "run.sh"


def start(run_sh: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    caller = {k: v for k, v in os.environ.items() if not k.startswith(("ORT_BUNDLE_", "XDG_"))}
    return subprocess.run([str(run_sh), *args], capture_output=True, text=True, env={**caller, **env}, timeout=120,
                          check=False)


def report(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 7, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_run_sh_sets_the_environment_and_execs_the_entry_point(venv: Path, tmp_path: Path) -> None:
    """In a hostile folder with hostile values: all of it stays data."""
    root = tmp_path / "it's $HOME & `touch PWNED`" / "demo"
    run_sh = install(root, venv, context(apply_tuning=True, env={"APP_MODE": HOSTILE}))
    cache = tmp_path / "cache $(touch PWNED)"
    process = subprocess.Popen([str(run_sh), "two words", "", "$HOME", "--self-check"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "ORT_BUNDLE_CACHE_DIR": str(cache),
                                               "LD_LIBRARY_PATH": "/caller/lib::", "PYTHONPYCACHEPREFIX": "/shared"})
    out, err = process.communicate(timeout=120)
    assert process.returncode == 7 and err == ""  # the hook has nothing to say about a cache folder made just now
    seen = json.loads(out)
    # One process from run.sh to the entry point: the environment was complete when it started (glibc reads
    # LD_LIBRARY_PATH then), and signals and the exit code are the entry point's own.
    assert seen["pid"] == process.pid
    assert seen["argv"] == [str(root / "app" / "main.py"), "two words", "", "$HOME", "--self-check"]
    env = seen["env"]
    assert env["LD_LIBRARY_PATH"] == f"{root}/gpu:{root}/venv/lib/python{PY}/site-packages/onnxruntime/capi:/caller/lib"
    assert env["TEMP"] == env["TMP"] == env["TMPDIR"] == f"{cache}/tmp"
    assert (env["CUDA_CACHE_PATH"], env["ORT_TENSORRT_CACHE_PATH"], env["ORT_BUNDLE_PROFILE_DIR"]) == (
        f"{cache}/cuda", f"{cache}/tensorrt", f"{cache}/profiles")
    assert all((cache / sub).is_dir() for sub in ("tmp", "cuda", "tensorrt", "profiles"))
    assert env["ORT_BUNDLE_CACHE_DIR"] == str(cache) and env["ORT_BUNDLE_CACHE_MIN_FREE_MB"] == "512"
    assert (env["PIP_NO_INDEX"], env["PYTHONNOUSERSITE"], env["PYTHONDONTWRITEBYTECODE"]) == ("1", "1", "1")
    assert env["PYTHONPYCACHEPREFIX"] is None and env["ORT_BUNDLE_APPLY_TUNING"] == "1"
    assert env["APP_MODE"] == HOSTILE and seen["isolated"] == 1  # the venv's Python too (issue 34 §3)
    assert not list(tmp_path.rglob("PWNED"))


def test_the_launchers_own_variables_win_over_launch_env(venv: Path, tmp_path: Path) -> None:
    hostile = {"TEMP": "/evil", "PYTHONDONTWRITEBYTECODE": "", "PIP_NO_INDEX": "0", "APP_MODE": "ok"}
    run_sh = install(tmp_path / "root", venv, context(env=hostile))
    env = report(start(run_sh, ORT_BUNDLE_CACHE_DIR=str(tmp_path / "c")))["env"]
    assert (env["TEMP"], env["PYTHONDONTWRITEBYTECODE"], env["PIP_NO_INDEX"], env["APP_MODE"]) == (
        f"{tmp_path}/c/tmp", "1", "1", "ok")
    assert env["ORT_BUNDLE_APPLY_TUNING"] is None  # only when [launch] apply_tuning says so


def test_launch_env_naming_the_old_scripts_variables_changes_nothing_that_runs(venv: Path, tmp_path: Path) -> None:
    """[launch] env `root` / `python` (issue 18 item 1) named run.sh's own shell variables; the launcher has none
    to take over: its installation's interpreter still starts its entry point, and the values are plain variables."""
    evil = tmp_path / "evil"
    (evil / "app").mkdir(parents=True)
    (evil / "app" / "main.py").write_text("print('EVIL')\n")
    run_sh = install(tmp_path / "root", venv, context(env={"root": str(evil), "python": "/bin/false"}))
    seen = report(start(run_sh, "a b", ORT_BUNDLE_CACHE_DIR=str(tmp_path / "c")))
    assert seen["argv"] == [str(tmp_path / "root" / "app" / "main.py"), "a b"]


def test_the_cache_folder_is_the_variable_then_cache_dir_txt_then_the_bundle_then_per_user(venv: Path,
                                                                                          tmp_path: Path) -> None:
    root = tmp_path / "root"
    run_sh = install(root, venv, context(cache_dir="bundle cache"))
    assert report(start(run_sh))["env"]["TEMP"] == f"{root}/bundle cache/tmp"  # relative: below the install
    (root / "cache_dir.txt").write_text(f"{tmp_path}/from install\n", encoding="utf-8")
    assert report(start(run_sh))["env"]["TEMP"] == f"{tmp_path}/from install/tmp"
    assert report(start(run_sh, ORT_BUNDLE_CACHE_DIR="rel"))["env"]["TEMP"] == f"{root}/rel/tmp"
    plain = install(tmp_path / "plain", venv, context())
    assert report(start(plain, XDG_CACHE_HOME=str(tmp_path / "xdg")))["env"]["TEMP"] == f"{tmp_path}/xdg/ort-bundles/demo/tmp"


def test_a_cache_folder_that_cannot_be_made_is_a_prerequisite_failure(venv: Path, tmp_path: Path) -> None:
    run_sh = install(tmp_path / "root", venv, context())
    (tmp_path / "file").write_text("x")
    result = start(run_sh, ORT_BUNDLE_CACHE_DIR=str(tmp_path / "file" / "cache"))
    assert result.returncode == PREREQUISITE and result.stdout == ""
    assert f"cannot create the cache directory {tmp_path}/file/cache" in result.stderr
    assert "set ORT_BUNDLE_CACHE_DIR to a writable folder" in result.stderr


def test_module_none_and_program_entry_points_and_the_bundled_interpreter(venv: Path, tmp_path: Path) -> None:
    cache = str(tmp_path / "c")
    module = install(tmp_path / "module", venv, context(entry_point=EntryPoint(kind="module", value="demo_cli")))
    installed = tmp_path / "module" / "venv" / "lib" / f"python{PY}" / "site-packages" / "demo_cli.py"
    installed.write_text(REPORTER, encoding="utf-8")  # where a wheel of the bundle puts its module
    seen = report(start(module, "x", ORT_BUNDLE_CACHE_DIR=cache, PYTHONPATH=str(tmp_path / "module" / "app")))
    assert seen["argv"] == [str(installed), "x"] and seen["isolated"] == 1  # -I -m demo_cli: PYTHONPATH ignored
    bare = install(tmp_path / "bare", venv, context(entry_point=None))
    seen = report(start(bare, str(tmp_path / "bare" / "app" / "main.py"), "y", ORT_BUNDLE_CACHE_DIR=cache))
    assert seen["argv"][1:] == ["y"]
    # [python] runtime: the interpreter the bundle carries starts every Python child isolated (-I -B).
    isolated = install(tmp_path / "isolated", venv, context(runtime_python="venv/bin/python",
                                                            runtime_bundle_python="payload/python/bin/python3"))
    seen = report(start(isolated, ORT_BUNDLE_CACHE_DIR=cache))
    assert seen["isolated"] == 1 and seen["env"]["PYTHONDONTWRITEBYTECODE"] == "1"
    program = install(tmp_path / "program", venv, context(entry_point=EntryPoint(kind="program", value="app/tool")))
    tool = tmp_path / "program" / "app" / "tool"
    tool.write_text(f"#!{sys.executable}\n{REPORTER}", encoding="utf-8")
    tool.chmod(0o755)
    seen = report(start(program, "two words", "", ORT_BUNDLE_CACHE_DIR=cache))
    assert seen["argv"] == [str(tool), "two words", ""]
    tool.chmod(0o644)
    refused = start(program, ORT_BUNDLE_CACHE_DIR=cache)
    assert refused.returncode == PREREQUISITE and f'run: cannot start "{tool}" (Permission denied)' in refused.stderr
    tool.unlink()
    missing = start(program, ORT_BUNDLE_CACHE_DIR=cache)
    assert missing.returncode == PREREQUISITE
    assert f'"{tool}" was not found; install the bundle again with install.sh' in missing.stderr


def test_the_switches_start_the_self_check_the_audit_and_the_tools(venv: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    run_sh = install(root, venv, context(apply_tuning=True))
    cache = str(tmp_path / "c")
    # A stand-in for the start file of the install's package, which runs the self-check and the engine: it reports
    # how it was started.
    for place in ("installer/ort_bundle/__main__.py",):
        (root / place).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / "app" / "main.py", root / place)
    seen = report(start(run_sh, "--self-check", "--json", ORT_BUNDLE_CACHE_DIR=cache))
    assert seen["argv"] == [str(root / "installer" / "ort_bundle" / "__main__.py"), "selfcheck", "--json"]
    assert seen["isolated"] == 1
    assert seen["env"]["ORT_BUNDLE_APPLY_TUNING"] is None  # the self-check's sessions stay at ORT's defaults
    seen = report(start(run_sh, "--verify", "--json", ORT_BUNDLE_CACHE_DIR=cache))
    assert seen["argv"] == [str(root / "installer" / "ort_bundle" / "__main__.py"), "engine", "verify", "--root", str(root), "--json"]
    assert seen["isolated"] == 1  # the installation's own tools always run isolated
    # The real tools of the shipped package: each names the install folder it was given.
    tune = start(run_sh, "--tune", "--runs", "3", ORT_BUNDLE_CACHE_DIR=cache)
    assert tune.stderr.startswith(f"run --tune: {root}/bundle.json"), tune.stderr
    support = start(run_sh, "--support-bundle", ORT_BUNDLE_CACHE_DIR=cache)
    assert support.returncode != 0 and support.stderr.startswith(f"run --support-bundle: {root} holds neither"), support.stderr
    profile = start(run_sh, "--profile", "p", ORT_BUNDLE_CACHE_DIR=cache)
    assert profile.returncode == 7, profile.stderr
    seen = json.loads(profile.stdout)
    assert seen["argv"] == [str(root / "app" / "main.py"), "p"] and seen["env"]["ORT_BUNDLE_APPLY_TUNING"] == "1"
    assert "run --profile: no trace was written" in profile.stderr
    # On Linux the PowerShell-style names are arguments like any other: they reach the entry point.
    assert report(start(run_sh, "-SelfCheck", ORT_BUNDLE_CACHE_DIR=cache))["argv"][1:] == ["-SelfCheck"]


def test_without_the_interpreter_or_launch_json_the_launcher_says_what_to_do(venv: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    run_sh = install(root, venv, context())
    (root / "launch.json").unlink()
    result = start(run_sh)
    assert result.returncode == PREREQUISITE
    assert f"run: cannot read {root}/launch.json" in result.stderr and "install.sh" in result.stderr
    (root / "launch.json").write_text('{"format": 99}', encoding="utf-8")
    assert "has format 99; this launcher reads format 1" in start(run_sh).stderr
    shutil.rmtree(root / "venv")
    result = start(run_sh)
    assert result.returncode == PREREQUISITE
    assert f"run.sh: {root}/venv/bin/python was not found; install the bundle again with install.sh" in result.stderr
