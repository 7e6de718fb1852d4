"""Rendering: quoting filters, encodings, strict variables, and hostile values that must stay data."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import tree_sitter_pwsh
from tree_sitter import Language, Parser

from bundler.assembly.render import (
    INSTALL_EXIT_CODES,
    LAUNCH_CONFIG,
    EntryPoint,
    ScriptContext,
    cmd_quote,
    make_environment,
    ps_quote,
    render_scripts,
    sh_quote,
)
from bundler.errors import BuildError
from bundler.target_platform import TARGETS

HOSTILE = "it's \"$(touch PWNED)\" `touch PWNED` $HOME %PATH% & | ; > out ^ ! ‘’"
PS_HOSTILE = "'; Invoke-Pwned; '\u2019; Invoke-Pwned; \u2018$(Invoke-Pwned)"


def context(platform: str, **changes: object) -> ScriptContext:
    windows = platform == "win_amd64"
    values: dict[str, object] = dict(
        name="demo", version="1.2.3", target=TARGETS[platform], python="3.11",
        vc_runtime_min="14.40.33810" if windows else None,
        vc_redist="payload/vc_redist/VC_redist.x64.exe" if windows else None,
        gpu_dll_dirs=("gpu",), gpu_preload=("gpu/cudart64_110.dll",) if windows else ("gpu/libcudart.so.11.0",),
        dll_dirs=("venv/Lib/site-packages/onnxruntime/capi",) if windows
        else ("venv/lib/python3.11/site-packages/onnxruntime/capi",),
        entry_point=EntryPoint(kind="module", value="demo.app"), cache_dir=None, env={},
        default_install_dir=r"C:\ort\demo" if windows else "/opt/demo")
    values.update(changes)
    return ScriptContext(**values)  # type: ignore[arg-type]


def test_exit_codes_are_distinct_and_keep_the_deployment_tool_codes() -> None:
    assert INSTALL_EXIT_CODES["ok"] == 0 and INSTALL_EXIT_CODES["reboot"] == 3010 and INSTALL_EXIT_CODES["retry"] == 1618
    assert len(set(INSTALL_EXIT_CODES.values())) == len(INSTALL_EXIT_CODES)


def test_ps_quote_doubles_every_quote_powershell_accepts() -> None:
    assert ps_quote("a'b") == "'a''b'"
    assert ps_quote("x\u2019y") == "'x\u2019\u2019y'"
    assert ps_quote("$env:X `n") == "'$env:X `n'"


def test_cmd_quote_escapes_metacharacters_and_refuses_what_cmd_cannot_carry() -> None:
    assert cmd_quote('50% & "a|b" <c> (d) ^e !f') == '50%% ^& ^"a^|b^" ^<c^> ^(d^) ^^e !f'
    with pytest.raises(BuildError, match="only printable ASCII"):
        cmd_quote("café")
    with pytest.raises(BuildError, match="only printable ASCII"):
        cmd_quote("two\nlines")


def test_sh_quote_round_trips_through_a_real_shell() -> None:
    out = subprocess.run(["sh", "-c", f"printf '%s' {sh_quote(HOSTILE)}"], capture_output=True, text=True, check=True)
    assert out.stdout == HOSTILE


def test_a_missing_template_variable_is_an_error() -> None:
    env = make_environment()
    with pytest.raises(jinja2.UndefinedError):
        env.get_template("run.sh.j2").render({"name": "demo"})
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ nowhere|sh_quote }}").render()


@pytest.mark.parametrize("platform", ["win_amd64", "linux_x86_64"])
def test_outputs_line_endings_and_encodings(platform: str) -> None:
    greeting = "grüße" if platform == "linux_x86_64" else "hello"
    scripts = render_scripts(context(platform, env={"GREETING": greeting}))
    expected = {"README-INSTALL.txt", "payload/launchers/ort_bundle_hook.py", "payload/launchers/ort_bundle_hook.pth",
                LAUNCH_CONFIG}
    expected |= ({"install.ps1", "install.cmd", "uninstall.ps1", "uninstall.cmd", "payload/launchers/run.ps1",
                  "payload/launchers/run.cmd", "try-in-sandbox.cmd", "apply-delta.cmd"}
                 if platform == "win_amd64" else {"install.sh", "uninstall.sh", "payload/launchers/run.sh", "apply-delta.sh"})
    assert set(scripts) == expected
    for path, data in scripts.items():
        if path.endswith(".ps1"):
            assert data.startswith(b"\xef\xbb\xbf") and b"\n" not in data.replace(b"\r\n", b"")
        elif path.endswith(".cmd"):
            data.decode("ascii")
            assert b"\n" not in data.replace(b"\r\n", b"")
        elif path.endswith((".sh", ".py", ".pth", ".json")):
            assert b"\r" not in data
    # [launch] env reaches the launcher as data (launch.json, UTF-8), in no script's quoting.
    assert json.loads(scripts[LAUNCH_CONFIG].decode("utf-8"))["env"] == {"GREETING": greeting}


def test_a_non_ascii_value_in_a_cmd_script_is_refused() -> None:
    # [launch] env no longer goes through a .cmd script: launch.json carries any text.
    scripts = render_scripts(context("win_amd64", env={"GREETING": "grüße"}, entry_point=None))
    assert json.loads(scripts[LAUNCH_CONFIG])["env"] == {"GREETING": "grüße"}
    with pytest.raises(BuildError, match="only printable ASCII"):
        cmd_quote("grüße")
    with pytest.raises(BuildError, match=r"cache_dir 'D:\\\\caché' must be printable ASCII"):
        render_scripts(context("win_amd64", cache_dir="D:\\caché"))
    with pytest.raises(BuildError, match=r"default install dir 'C:\\\\x#> y' must be letters, digits"):
        render_scripts(context("win_amd64", default_install_dir="C:\\x#> y"))


@pytest.mark.parametrize("char", list('"%<>|?*;'))
def test_the_build_refuses_a_cache_dir_as_install_cmd_refuses_its_cache_switch(char: str) -> None:
    """One Windows cache-folder rule (bundler/shipped/ort_bundle/cache_folder.py) for the manifest's [launch]
    cache_dir and install.cmd's -CacheDir: the build refused only `"` and `%`, the engine also `< > | ? * ;`."""
    from bundler.shipped.ort_bundle.cache_folder import windows_cache_dir_problem

    value = f"D:\\cache{char}x"
    problem = windows_cache_dir_problem(value)
    assert problem == "must be printable ASCII without any of \" % < > | ? * ;"
    with pytest.raises(BuildError, match=re.escape(f"[launch] cache_dir {value!r} {problem} on Windows")):
        render_scripts(context("win_amd64", cache_dir=value))
    assert windows_cache_dir_problem("D:\\cache (x86)\\app-1.0") is None


def test_unsafe_context_values_are_refused_with_every_problem_named() -> None:
    with pytest.raises(BuildError) as caught:
        render_scripts(context("linux_x86_64", name="de mo", env={"BAD-NAME": "x"}, dll_dirs=("../escape",),
                               entry_point=EntryPoint(kind="module", value="os; import x")))
    message = str(caught.value)
    for fragment in ("bundle name 'de mo'", "'BAD-NAME'", "'../escape'", "'os; import x'"):
        assert fragment in message


def _sh_files(scripts: dict[str, bytes], folder: Path) -> list[Path]:
    paths = []
    for rel, data in scripts.items():
        if rel.endswith(".sh"):
            path = folder / Path(rel).name
            path.write_bytes(data)
            paths.append(path)
    return paths


def test_hostile_values_in_sh_scripts_parse_and_arrive_literally(tmp_path: Path) -> None:
    """The scripts of a bundle whose values are hostile parse, and carry them as data only. (run.sh carries
    none: launch.json does, and test_launcher.py runs the launcher in a hostile folder with hostile values.)"""
    scripts = render_scripts(context("linux_x86_64", env={"APP_VALUE": HOSTILE}, entry_point=None,
                                     cache_dir="cache $HOME 'x'", default_install_dir=f"/opt/{HOSTILE}"))
    for script in _sh_files(scripts, tmp_path):
        subprocess.run(["sh", "-n", str(script)], check=True)
    assert HOSTILE not in scripts["payload/launchers/run.sh"].decode()
    launch = json.loads(scripts[LAUNCH_CONFIG])
    assert (launch["env"], launch["cache_dir"]) == ({"APP_VALUE": HOSTILE}, "cache $HOME 'x'")
    help_text = subprocess.run(["sh", str(tmp_path / "install.sh"), "--help"], capture_output=True, text=True, check=True)
    assert f"Default install directory: /opt/{HOSTILE}" in help_text.stdout


def _pwsh_tree(data: bytes):
    return Parser(Language(tree_sitter_pwsh.language())).parse(data)


def _nodes(node):
    yield node
    for child in node.children:
        yield from _nodes(child)


def test_hostile_values_in_ps1_scripts_stay_inside_string_literals() -> None:
    with pytest.raises(BuildError, match="default install dir"):
        render_scripts(context("win_amd64", default_install_dir="C:\\x'; Invoke-Pwned; '"))
    scripts = render_scripts(context("win_amd64", env={"APP_VALUE": PS_HOSTILE.encode("ascii", "ignore").decode()},
                                     cache_dir="D:\\$(Invoke-Pwned)"))
    for rel in ("payload/launchers/run.ps1", "install.ps1", "uninstall.ps1"):
        tree = _pwsh_tree(scripts[rel])
        nodes = list(_nodes(tree.root_node))
        assert not [n for n in nodes if n.type == "ERROR" or n.is_missing], rel
        commands = {n.text.decode() for n in nodes if n.type == "command_name"}
        assert "Invoke-Pwned" not in commands, rel
    # run.ps1 carries no bundle value at all: the launcher reads them from launch.json.
    assert b"Invoke-Pwned" not in scripts["payload/launchers/run.ps1"]
    assert json.loads(scripts[LAUNCH_CONFIG])["cache_dir"] == "D:\\$(Invoke-Pwned)"
    # The typographic quotes PowerShell also ends a '...' string with cannot reach a .cmd (ASCII only),
    # but ps_quote must still hold them: a snippet shows it.
    snippet = f"$value = {ps_quote(PS_HOSTILE)}\r\nWrite-Output $value\r\n".encode()
    nodes = list(_nodes(_pwsh_tree(snippet).root_node))
    assert not [n for n in nodes if n.type == "ERROR" or n.is_missing]
    assert {n.text.decode() for n in nodes if n.type == "command_name"} == {"Write-Output"}


def test_the_startup_hook_preloads_by_absolute_path_and_reports_what_failed(tmp_path: Path) -> None:
    libm = next((p for p in (Path("/lib/x86_64-linux-gnu/libm.so.6"), Path("/usr/lib/x86_64-linux-gnu/libm.so.6"),
                             Path("/lib64/libm.so.6")) if p.exists()), None)
    if libm is None:
        pytest.skip("no libm.so.6 to preload on this machine")
    scripts = render_scripts(context("linux_x86_64", gpu_preload=("gpu/libm.so.6", "gpu/missing.so")))
    hook_source = scripts["payload/launchers/ort_bundle_hook.py"].decode()
    ast.parse(hook_source)
    assert scripts["payload/launchers/ort_bundle_hook.pth"] == b"import ort_bundle_hook\n"
    (tmp_path / "gpu").mkdir()
    shutil.copyfile(libm, tmp_path / "gpu" / "libm.so.6")
    hook = tmp_path / "ort_bundle_hook.py"
    hook.write_text(hook_source)
    probe = (f"import sys; sys.prefix = {str(tmp_path / 'venv')!r}; sys.path.insert(0, {str(tmp_path)!r}); "
             "import ort_bundle_hook as h; print([getattr(k, '_name', '') for k in h._keep]); print(h.problems)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            env={**os.environ, "ORT_BUNDLE_CACHE_DIR": str(tmp_path), "ORT_BUNDLE_CACHE_MIN_FREE_MB": "0"})
    loaded, problems = result.stdout.splitlines()
    assert str(tmp_path / "gpu" / "libm.so.6") in loaded
    assert "could not preload" in problems and "missing.so" in problems
    assert "ort_bundle_hook: could not preload" in result.stderr


@pytest.mark.parametrize("runtime", [True, False])
def test_try_in_sandbox_cmd_is_thin_and_hands_every_argument_to_the_sandbox_module(runtime: bool) -> None:
    """Issue 28: at most 30 lines; it finds a Python and hands over %*, returning its exit code; the .wsb is Python's."""
    values = dict(runtime_python="python/python.exe", runtime_bundle_python="payload/python/python.exe") if runtime else {}
    data = render_scripts(context("win_amd64", **values))["try-in-sandbox.cmd"]
    lines = data.decode("ascii").split("\r\n")
    assert b"\n" not in data.replace(b"\r\n", b"") and lines[-1] == "" and len(lines) - 1 <= 30
    handovers = [line for line in lines if "%*" in line]
    assert handovers and all(line.endswith('-I -B "%ORT_BUNDLE_START%" sandbox %* & goto :eof') for line in handovers)
    assert 'set "ORT_BUNDLE_START=%~dp0payload\\ort_bundle\\__main__.py"' in lines
    assert "powershell" not in data.decode().lower() and "wsb" not in " ".join(handovers)
    if runtime:
        assert handovers == ['"%ORT_BUNDLE_PYTHON%" -I -B "%ORT_BUNDLE_START%" sandbox %* & goto :eof']
        assert 'set "ORT_BUNDLE_PYTHON=%~dp0payload\\python\\python.exe"' in lines and "py.exe" not in data.decode()
    else:
        assert handovers == ['"%ORT_BUNDLE_PY%" -I -B "%ORT_BUNDLE_START%" sandbox %* & goto :eof']
        probes = [line.split("('", 1)[1].split(" -c ")[0] for line in lines if "for /f" in line]
        assert probes == ["py.exe -3.11 -I", "py.exe -3 -I", "python.exe -I"]  # in this order, as install.cmd looks
        assert "echo try-in-sandbox.cmd: writing the .wsb with %ORT_BUNDLE_PY%" in lines  # it says which
    assert "try-in-sandbox.cmd" not in render_scripts(context("linux_x86_64"))


def test_readme_install_says_how_to_try_the_bundle_in_windows_sandbox() -> None:
    """Issue 28: the section names every file the logon script leaves in results\\ and what the sandbox proves."""
    from bundler.shipped.ort_bundle.sandbox.sandbox import ENABLE_COMMAND, RESULT_FILES

    def section(**changes: object) -> str:
        text = render_scripts(context("win_amd64", **changes))["README-INSTALL.txt"].decode().replace("\r\n", "\n")
        return text[text.index("Try it first in Windows Sandbox"):text.index("Install (the one command)")]

    machine_gpu = section()
    assert all(name in machine_gpu for name in RESULT_FILES) and ENABLE_COMMAND in machine_gpu
    for phrase in ("try-in-sandbox.cmd", "--prereq python-3.11.N-amd64.exe", "demo.wsb", "mapped read-only",
                   "networking is disabled", "virtual GPU (vGPU) is enabled", "depends on that driver",
                   "Intune's SYSTEM context", "32-bit host process", "domain policies", "py -3.11"):
        assert phrase in machine_gpu, phrase
    runtime_cpu = section(runtime_python="python/python.exe", runtime_bundle_python="payload/python/python.exe",
                          gpu_dll_dirs=(), gpu_preload=(), vc_redist=None, entry_point=None)
    assert "The virtual GPU is disabled" in runtime_cpu and "vGPU) is enabled" not in runtime_cpu
    assert "--prereq python" not in runtime_cpu and "bundle's own Python" in runtime_cpu
    assert "vc_redist.log" not in runtime_cpu and "entry-point.txt" not in runtime_cpu
    linux = render_scripts(context("linux_x86_64"))["README-INSTALL.txt"].decode()
    assert "Sandbox" not in linux


@pytest.mark.parametrize("platform", ["win_amd64", "linux_x86_64"])
def test_readme_install_describes_every_switch_the_launcher_takes(platform: str) -> None:
    """An admin reads README-INSTALL.txt, not the launcher: a switch it takes and the README leaves out is unusable."""
    from bundler.shipped.ort_bundle.launcher import SWITCHES

    text = render_scripts(context(platform))["README-INSTALL.txt"].decode().replace("\r\n", "\n")
    launcher = "run.cmd" if platform == "win_amd64" else "run.sh"
    missing = [switch for switch in SWITCHES if f'"{launcher} {switch}' not in text]
    assert not missing, f"README-INSTALL.txt ({platform}) does not describe {missing}"
