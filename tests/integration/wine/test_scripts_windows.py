"""Windows scripts: every .ps1 parses as Windows PowerShell 5.1 code, and every .cmd runs under Wine.

There is no PowerShell here, so the .ps1 files are checked with the tree-sitter PowerShell grammar:
no ERROR or MISSING node, and no PowerShell-7-only construct (a guard that is itself tested on
snippets). The .cmd wrappers run under `wine64 cmd` and start python.org's CPython 3.11.9
(tests/fixtures/windows_python.py): the venv's `Scripts\\python.exe` of a venv that CPython made, its embeddable
layout as a bundle's `payload\\python`, and copies of it as machine Pythons. In the place of the program
(the entry point, selfcheck.py, the engine) is tests/fixtures/windows_reporter.py, which records how it was started
(the interpreter's command line, sys.executable, the DLL it loaded, -I/-B, the environment) and exits with a
code the test chooses. Wine's own powershell.exe is a stub that exits 0; its exit code is never taken as evidence.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import tree_sitter_pwsh
from fixtures.windows_python import (  # noqa: F401  (fixtures)
    WindowsPython,
    copy_interpreter,
    copy_venv,
    place_reporter,
    read_report,
    windows_python,
    windows_venv,
)
from fixtures.wine import Wine, wine  # noqa: F401  (fixtures)
from tree_sitter import Language, Node, Parser

from bundler.assembly.render import (
    INSTALL_EXIT_CODES,
    LAUNCH_CONFIG,
    EntryPoint,
    ScriptContext,
    render_scripts,
)
from bundler.assembly.shipped_package import package_files
from bundler.shipped.ort_bundle.launch_config import RUN_SCRIPT
from bundler.target_platform import WINDOWS

CODES = INSTALL_EXIT_CODES
DLL_DIRS = ("venv/Lib/site-packages/onnxruntime/capi",)
APP_VALUE = "it's 100% \"quoted\" & <piped> | ^caret! $HOME (x)"
def windows_context(**changes: object) -> ScriptContext:
    values: dict[str, object] = dict(
        name="demo", version="1.2.3", target=WINDOWS, python="3.11", vc_runtime_min="14.40.33810",
        vc_redist="payload/vc_redist/VC_redist.x64.exe", gpu_dll_dirs=("gpu",), gpu_preload=("gpu/cudart64_110.dll",),
        dll_dirs=DLL_DIRS, entry_point=EntryPoint(kind="script", value="app/main.py"), cache_dir=None,
        env={"APP_VALUE": APP_VALUE}, default_install_dir=r"%ProgramFiles%\demo")
    values.update(changes)
    return ScriptContext(**values)  # type: ignore[arg-type]


CONTEXTS = {
    "gpu-script": windows_context(),
    "cpu-module": windows_context(gpu_dll_dirs=(), gpu_preload=(), vc_redist=None,
                                  entry_point=EntryPoint(kind="module", value="demo.cli"), cache_dir="cache"),
    "no-entry-hostile": windows_context(entry_point=None, vc_runtime_min=None, vc_redist=None,
                                        cache_dir="D:\\x' + (Stop-Computer) + '", env={"X": "'; Stop-Computer; '"}),
    # [python] runtime: the bundled interpreter (bundler/assembly/runtime.py)
    "runtime-script": windows_context(runtime_python="python/python.exe",
                                      runtime_bundle_python="payload/python/python.exe"),
}


# --- the PowerShell 5.1 guard ----------------------------------------------------------------------

_PARSER = Parser(Language(tree_sitter_pwsh.language()))


def _walk(node: Node) -> Iterator[Node]:
    yield node
    for child in node.children:
        yield from _walk(child)


def parse_problems(source: bytes) -> list[str]:
    """ERROR and MISSING nodes: places the grammar could not read as PowerShell."""
    tree = _PARSER.parse(source)
    return [f"{'MISSING' if n.is_missing else 'ERROR'} at line {n.start_point[0] + 1}: {n.text.decode(errors='replace')[:60]!r}"
            for n in _walk(tree.root_node) if n.type == "ERROR" or n.is_missing]


def _squashed(node: Node) -> str:
    """A node's text with white space folded, so a check reads the code, not its indentation."""
    return " ".join(node.text.decode(errors="replace").split())


def if_bodies(source: str, condition: str) -> list[str]:
    """The (white-space folded) bodies of every `if` whose condition is `condition`, found in the parse tree."""
    tree = _PARSER.parse(source.encode("utf-8"))
    bodies = []
    for node in _walk(tree.root_node):
        if node.type == "if_statement":
            parts = [c for c in node.children if c.type in ("pipeline", "statement_block")]
            if len(parts) >= 2 and _squashed(parts[0]) == condition:
                bodies.append(_squashed(parts[1]))
    return bodies


def catch_bodies(source: str) -> list[str]:
    """The (white-space folded) body of every catch clause, from the parse tree."""
    tree = _PARSER.parse(source.encode("utf-8"))
    return [_squashed(block) for node in _walk(tree.root_node) if node.type == "catch_clause"
            for block in node.children if block.type == "statement_block"]


def powershell7_constructs(source: bytes) -> list[str]:
    """Syntax Windows PowerShell 5.1 cannot run, found in the parse tree (not by text search)."""
    tree = _PARSER.parse(source)
    found = []
    for node in _walk(tree.root_node):
        text = node.text.decode(errors="replace")
        if node.type == "null_coalesce_expression":
            found.append("?? (null-coalescing)")
        elif node.type == "assignment_operator" and text == "??=":
            found.append("??= (null-coalescing assignment)")
        elif node.type == "ternary_expression":
            found.append("a ? b : c (ternary)")
        elif node.type == "pipeline_chain_tail":
            found.append("&& / || (pipeline chain)")
        elif node.type == "named_block" and node.children and node.children[0].text.decode().lower() == "clean":
            found.append("clean {} block")
        elif node.type == "command" and _is_parallel_foreach(node):
            found.append("ForEach-Object -Parallel")
        elif node.type in ("ERROR", "member_access", "element_access") and _null_conditional(node, source):
            found.append("?. / ?[ (null-conditional)")
    return found


def _is_parallel_foreach(node: Node) -> bool:
    name = node.child_by_field_name("command_name")
    if name is None or name.text.decode().lower() not in ("foreach-object", "%", "foreach"):
        return False
    return any(n.type == "command_parameter" and "-parallel".startswith(n.text.decode().lower()) and len(n.text) > 3
               for n in _walk(node))


def _null_conditional(node: Node, source: bytes) -> bool:
    """`$a?.b` / `${a}?[0]`: a variable directly followed by `?.` or `?[`."""
    for child in _walk(node):
        if child.type in ("variable", "braced_variable"):
            after = source[child.end_byte:child.end_byte + 2]
            if child.text.endswith(b"?") and source[child.end_byte:child.end_byte + 1] in (b".", b"["):
                return True
            if after in (b"?.", b"?["):
                return True
    return False


@pytest.mark.parametrize(("snippet", "construct"), [
    ("$a = $b ?? 'x'", "??"),
    ("$a ??= 1", "??="),
    ("$n = $obj?.Name", "?."),
    ("$n = ${obj}?[0]", "?["),
    ("$a = $ok ? 1 : 2", "ternary"),
    ("Get-Item x && Write-Host ok", "pipeline chain"),
    ("Get-Item x || Write-Host no", "pipeline chain"),
    ("1..3 | ForEach-Object -Parallel { $_ }", "-Parallel"),
    ("function f { process { 1 } clean { 2 } }", "clean"),
])
def test_the_guard_finds_each_powershell7_construct(snippet: str, construct: str) -> None:
    found = powershell7_constructs(snippet.encode())
    assert any(construct in item for item in found), found


def test_the_guard_accepts_windows_powershell_51_code() -> None:
    snippet = b"$a = if ($b) { 1 } else { 2 }\r\n1..3 | ForEach-Object { $_ }\r\nif ($x -and $y) { $z = $null }\r\n"
    assert powershell7_constructs(snippet) == []
    assert parse_problems(snippet) == []


@pytest.mark.parametrize("case", sorted(CONTEXTS))
def test_every_rendered_ps1_parses_as_windows_powershell_51(case: str) -> None:
    scripts = render_scripts(CONTEXTS[case])
    ps1 = {rel: data for rel, data in scripts.items() if rel.endswith(".ps1")}
    assert set(ps1) == {"install.ps1", "uninstall.ps1", "payload/launchers/run.ps1"}
    for rel, data in ps1.items():
        assert parse_problems(data) == [], rel
        assert powershell7_constructs(data) == [], rel
        commands = {n.text.decode() for n in _walk(_PARSER.parse(data).root_node) if n.type == "command_name"}
        assert "Stop-Computer" not in commands, rel


def write_scripts(folder: Path, context: ScriptContext) -> dict[str, Path]:
    """The .cmd scripts and the launcher's launch.json, as rendered, into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for rel, data in render_scripts(context).items():
        if rel.endswith(".cmd") or rel == LAUNCH_CONFIG:
            path = folder / Path(rel).name
            path.write_bytes(data)
            written[path.name] = path
    return written


def place_launcher(venv: Path) -> None:
    """The shipped ort_bundle package (ort_bundle.launcher, which run.cmd starts) in the venv's site-packages."""
    for relative, data in package_files().items():
        path = venv / "Lib" / "site-packages" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def make_install_root(folder: Path, venv: Path, context: ScriptContext, *, modules: tuple[str, ...] = ()) -> Path:
    """An install folder as install.ps1 leaves it: the real venv with the shipped ort_bundle package, REPORTER as
    the entry point and selfcheck.py (and as each `-m` module of `modules` in the venv), and the engine's place."""
    run_cmd = write_scripts(folder, context)["run.cmd"]
    copy_venv(venv, folder / "venv")
    place_launcher(folder / "venv")
    for name in modules:  # after the package: REPORTER stands in for its tools too
        *packages, module = name.split(".")
        site = folder / "venv" / "Lib" / "site-packages"
        place_reporter(site.joinpath(*packages, f"{module}.py"))
        for depth in range(1, len(packages) + 1):
            site.joinpath(*packages[:depth], "__init__.py").touch()
    for program in ("app/main.py", "installer/ort_bundle/__main__.py"):
        place_reporter(folder / program)
    return run_cmd


def reporting(wine: Wine, report: Path, code: int | str = 0, **more: str) -> dict[str, str]:
    """The variables that make REPORTER write into `report` and exit with `code`."""
    return {"REPORTER_OUT": wine.to_windows(report), "REPORTER_EXIT": str(code), **more}


@pytest.mark.wine
def test_run_cmd_sets_the_environment_and_passes_arguments_and_exit_code(wine: Wine, windows_venv: Path,
                                                                         tmp_path: Path) -> None:
    root = tmp_path / "ort & apps" / "demo"
    run_cmd = make_install_root(root, windows_venv, windows_context())
    report = tmp_path / "report.json"
    cache = tmp_path / "cache & temp"
    # The caller's PYTHONPYCACHEPREFIX is cleared: no bytecode folder is named (issue 27 §5).
    env = reporting(wine, report, 7, ORT_BUNDLE_CACHE_DIR=wine.to_windows(cache), PYTHONPYCACHEPREFIX="C:\\shared\\pycache")
    result = wine.cmd(run_cmd, '"two words"', "--flag=1", '"a & b"', env=env)
    assert result.returncode == 7, result.stdout + result.stderr
    started = read_report(report)
    seen = started["environ"]
    win_root = wine.to_windows(root)
    assert started["executable"] == f"{win_root}\\venv\\Scripts\\python.exe" and started["dll"] == "C:\\Python311\\python311.dll"
    # Isolated (issue 34 §3): the launcher runs the script with its own folder first on sys.path itself.
    assert started["orig_argv"][1:] == ["-I", "-B", "-c", RUN_SCRIPT, *started["argv"]] and started["isolated"] == 1
    assert started["argv"] == [f"{win_root}\\app\\main.py", "two words", "--flag=1", "a & b"]
    assert seen["PATH"].startswith(f"{win_root}\\gpu;{win_root}\\venv\\Lib\\site-packages\\onnxruntime\\capi;")
    assert seen["PYTHONNOUSERSITE"] == "1" and seen["PIP_NO_INDEX"] == "1"
    win_cache = wine.to_windows(cache)
    assert seen["TEMP"] == seen["TMP"] == f"{win_cache}\\tmp" and (cache / "tmp").is_dir()
    assert "PYTHONPYCACHEPREFIX" not in seen and seen["PYTHONDONTWRITEBYTECODE"] == "1"  # issue 27 §5
    assert not (cache / "pycache").exists()
    assert seen["CUDA_CACHE_PATH"] == f"{win_cache}\\cuda" and seen["ORT_TENSORRT_CACHE_PATH"] == f"{win_cache}\\tensorrt"
    assert seen["APP_VALUE"] == APP_VALUE
    # Every argument after the launcher's own switch reaches the self-check (%2-%9 once; %* with the switch since).
    args = ["--self-check", "--json", '"a b"', "3", "4", "5", "6", "7", "8", "9", "10"]
    check = wine.cmd(run_cmd, *args, env={**env, "REPORTER_EXIT": "0"})
    assert check.returncode == 0
    assert read_report(report)["orig_argv"][1:] == ["-I", "-B", f"{win_root}\\installer\\ort_bundle\\__main__.py", "selfcheck", "--json",
                                                    "a b", *(str(n) for n in range(3, 11))]


@pytest.mark.wine
def test_run_cmd_relative_cache_dir_from_the_install_and_module_entry(wine: Wine, windows_venv: Path,
                                                                      tmp_path: Path) -> None:
    root = tmp_path / "demo"
    context = windows_context(entry_point=EntryPoint(kind="module", value="demo.cli"), cache_dir="cache & (x)")
    run_cmd = make_install_root(root, windows_venv, context, modules=("demo.cli",))
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "ORT_BUNDLE_CACHE_DIR"}
    result = wine.cmd(run_cmd, "x", env={**env, **reporting(wine, report)})
    assert result.returncode == 0, result.stdout + result.stderr
    started = read_report(report)
    assert started["orig_argv"][1:] == ["-I", "-B", "-m", "demo.cli", "x"]
    assert started["argv"] == [f"{wine.to_windows(root)}\\venv\\Lib\\site-packages\\demo\\cli.py", "x"]
    assert started["environ"]["TEMP"] == f"{wine.to_windows(root)}\\cache & (x)\\tmp"


@pytest.mark.wine
def test_run_cmd_without_python_is_a_prerequisite_failure(wine: Wine, tmp_path: Path) -> None:
    root = tmp_path / "a & b"
    run_cmd = write_scripts(root, windows_context())["run.cmd"]
    result = wine.cmd(run_cmd, "x")
    assert result.returncode == CODES["prerequisite"]
    assert f"{wine.to_windows(root)}\\venv\\Scripts\\python.exe\" was not found" in result.stdout + result.stderr


@pytest.mark.wine
def test_run_cmd_verify_and_a_manifest_env_naming_the_launchers_own_variables(wine: Wine, windows_venv: Path,
                                                                              tmp_path: Path) -> None:
    """[launch] env cannot take over the launcher (issue 18 item 1): run.cmd's old variable names change nothing."""
    root = tmp_path / "demo"
    hostile = {"ORT_BUNDLE_ROOT": "C:\\evil", "ORT_BUNDLE_PYTHON": "C:\\evil\\python.exe", "APP_VALUE": "ok"}
    run_cmd = make_install_root(root, windows_venv, windows_context(env=hostile))
    report = tmp_path / "report.json"
    env = reporting(wine, report, ORT_BUNDLE_CACHE_DIR=wine.to_windows(tmp_path / "c"))
    result = wine.cmd(run_cmd, "--verify", "--json", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    started = read_report(report)
    win_root = wine.to_windows(root)
    assert started["executable"].lower().endswith("\\demo\\venv\\scripts\\python.exe")
    assert started["orig_argv"][1:] == ["-I", "-B", f"{win_root}\\installer\\ort_bundle\\__main__.py", "engine", "verify", "--root", win_root,
                                        "--json"]
    assert (started["isolated"], started["dont_write_bytecode"]) == (1, 1)
    assert started["environ"]["APP_VALUE"] == "ok"


# --- install.cmd, uninstall.cmd and the .ps1 front ends: thin, and only hand over ------------------------


def code_lines(rel: str, data: bytes) -> list[str]:
    """The lines that are code: comment-based help, comments and blank lines are not counted."""
    text = data.decode("utf-8-sig").replace("\r\n", "\n")
    if rel.endswith(".ps1"):
        while "<#" in text:
            start = text.index("<#")
            text = text[:start] + text[text.index("#>", start) + 2:]
        return [line for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [line for line in text.splitlines()
            if line.strip() and not line.strip().lower().startswith(("rem ", "::")) and line.strip().lower() != "rem"]


@pytest.mark.parametrize("case", sorted(CONTEXTS))
def test_the_install_scripts_are_thin(case: str) -> None:
    """Issue 22's targets: every install step is the engine's; what is left in a script is finding a Python."""
    scripts = render_scripts(CONTEXTS[case])
    limits = {"install.ps1": 150, "uninstall.ps1": 80, "install.cmd": 30, "uninstall.cmd": 30}
    counts = {rel: len(code_lines(rel, scripts[rel])) for rel in limits}
    assert all(counts[rel] <= limit for rel, limit in limits.items()), counts
    for rel in ("install.cmd", "uninstall.cmd", "install.ps1", "uninstall.ps1"):
        text = "\n".join(code_lines(rel, scripts[rel]))
        assert "powershell.exe" not in text.lower() or rel.endswith(".ps1"), rel  # no PowerShell on the .cmd path
        assert "-I -B" in text, rel
        for step in ("HKLM", "VC_redist", "Mutex", "icacls", "RunOnce", "Unblock-File"):
            assert step not in text, (rel, step)


def _top_statements(source: bytes) -> list[Node]:
    tree = _PARSER.parse(source)
    [statements] = [c for c in tree.root_node.children if c.type == "statement_list"] or [tree.root_node]
    return [c for c in statements.children if c.type != "comment"]


def _net_uses(node: Node) -> list[int]:
    """Where Constrained Language Mode would stop the script: a .NET type's static member (`[X]::Y`),
    New-Object, Add-Type. (Casts to core types such as `[string]` are allowed there.)"""
    return [n.start_byte for n in _walk(node)
            if (n.type == "type_literal" and n.next_sibling is not None and n.next_sibling.type == "::")
            or (n.type == "command_name" and n.text.decode().lower() in ("new-object", "add-type"))]


@pytest.mark.parametrize("rel", ["install.ps1", "uninstall.ps1"])
def test_the_ps1_checks_the_language_mode_before_any_net_type(rel: str) -> None:
    """Under WDAC/AppLocker an unsigned or untrusted script runs in Constrained Language Mode: before the
    mode is checked, nothing it forbids may run (it used to: the mutex and WindowsIdentity gave 13/1, no log)."""
    source = render_scripts(windows_context())[rel]
    statements = _top_statements(source)
    [check] = [i for i, s in enumerate(statements) if s.type == "if_statement" and b"LanguageMode" in s.text]
    assert f"exit {CODES['integrity']}" in _squashed(statements[check])
    assert _net_uses(statements[-1]) == [] and any(_net_uses(s) for s in statements[check:]) is False
    for statement in statements[:check]:
        uses = _net_uses(statement)
        if statement.type == "function_statement" and uses:  # the signed-bundle check: its own mode check first
            assert statement.start_byte + statement.text.index(b"LanguageMode") < min(uses), _squashed(statement)[:80]
        else:
            assert uses == [], _squashed(statement)[:120]


@pytest.mark.parametrize("rel", ["install.ps1", "uninstall.ps1"])
def test_the_ps1_front_ends_pass_the_engine_s_exit_code_on_whatever_the_caller_s_error_preference(rel: str) -> None:
    """Issue 40: Windows PowerShell 5.1 turns a native program's stderr line into an error record where stderr is
    captured (ISE, remoting, 2>&1); a caller's $ErrorActionPreference = 'Stop', which a script run with & or .
    inherits, then stops the script at that line, before `exit $code`. The engine writes only its error there
    (tests/unit/shipped/test_install_sh.py), and the front sets 'Continue' in its own scope before it starts the
    engine. PowerShell does not run here (Wine's is a stub): the order is read from the parsed script."""
    statements = _top_statements(render_scripts(windows_context())[rel])
    squashed = [_squashed(statement) for statement in statements]
    [engine] = [i for i, text in enumerate(squashed) if "$engine engine" in text]
    preference = [i for i, text in enumerate(squashed) if text.replace(" ", "").startswith("$ErrorActionPreference=")]
    assert preference and squashed[preference[-1]].endswith("'Continue'") and preference[-1] < engine, squashed
    assert "exit $code" in squashed[engine + 1:], squashed


def test_run_ps1_checks_the_language_mode_before_any_net_type() -> None:
    """run.ps1 starts the program through .NET (ProcessStartInfo), which Constrained Language Mode forbids: it
    says so and names run.cmd before the first such call, not with a PowerShell error half-way (issue 22, m9)."""
    statements = _top_statements(render_scripts(windows_context())["payload/launchers/run.ps1"])
    [check] = [i for i, s in enumerate(statements) if s.type == "if_statement" and b"LanguageMode" in s.text]
    assert f"exit {CODES['prerequisite']}" in _squashed(statements[check]) and b"run.cmd" in statements[check].text
    assert [s for s in statements[:check] if _net_uses(s)] == []
    assert any(_net_uses(s) for s in statements[check:])  # the check guards something


def write_bundle(folder: Path, context: ScriptContext, windows_python: WindowsPython) -> dict[str, Path]:
    """A bundle's top folder with its .cmd scripts, REPORTER as its install engine and, for a runtime bundle,
    python.org's embeddable layout as its payload\\python."""
    scripts = write_scripts(folder, context)
    place_reporter(folder / "payload" / "ort_bundle" / "__main__.py")
    if context.runtime_bundle_python:
        copy_interpreter(windows_python.embeddable, folder.joinpath(*context.runtime_bundle_python.split("/")).parent)
    return scripts


def exit_code_in_windows(wine: Wine, script: Path, *args: str, env: dict[str, str], tmp_path: Path) -> int:
    """The script's exit code as a Windows caller reads %ERRORLEVEL% (a Linux status keeps 8 bits only)."""
    caller = tmp_path / "caller.cmd"
    caller.write_bytes(f'@echo off\r\ncmd /c {wine.to_windows(script)} {" ".join(args)}\r\necho EXIT=%ERRORLEVEL%\r\n'.encode())
    result = wine.run(["cmd", "/c", wine.to_windows(caller)], env=env)
    [line] = [line for line in result.stdout.splitlines() if line.startswith("EXIT=")]
    return int(line[5:])


@pytest.mark.wine
def test_install_cmd_starts_the_bundled_python_with_every_argument(wine: Wine, windows_python: WindowsPython,
                                                                   tmp_path: Path) -> None:
    """The bundled python.exe (python.org's embeddable layout) runs isolated; the engine's code passes through."""
    bundle = tmp_path / "my bundle & co" / "demo-1.2.3-win_amd64"
    script = write_bundle(bundle, CONTEXTS["runtime-script"], windows_python)["install.cmd"]
    report = tmp_path / "report.json"
    env = reporting(wine, report, CODES["install"])
    result = wine.cmd(script, "-InstallDir", '"C:\\Program Files\\a & b"', "-Force", env=env)
    assert result.returncode == CODES["install"], result.stdout + result.stderr
    started = read_report(report)
    win = wine.to_windows(bundle)
    assert started["executable"].lower() == f"{win}\\payload\\python\\python.exe".lower()
    assert started["dll"].lower() == f"{win}\\payload\\python\\python311.dll".lower()
    assert (started["isolated"], started["dont_write_bytecode"]) == (1, 1)
    assert started["orig_argv"][1:] == ["-I", "-B", f"{win}\\payload\\ort_bundle\\__main__.py", "engine", "windows-install",
                                        "--bundle", f"{win}\\.", "-InstallDir", "C:\\Program Files\\a & b", "-Force"]
    plain = write_bundle(tmp_path / "plain", CONTEXTS["runtime-script"], windows_python)["install.cmd"]
    assert exit_code_in_windows(wine, plain, "-Force", env={**env, "REPORTER_EXIT": "3010"}, tmp_path=tmp_path) == 3010


@pytest.mark.wine
def test_install_cmd_of_a_machine_python_bundle_finds_pythonexe_then_path(wine: Wine, windows_python: WindowsPython,
                                                                         tmp_path: Path) -> None:
    """Two copies of python.org's CPython as machine Pythons: one named with -PythonExe, one on PATH."""
    bundle = tmp_path / "bundle"
    script = write_bundle(bundle, windows_context(), windows_python)["install.cmd"]
    named = copy_interpreter(windows_python.full, tmp_path / "named py")
    on_path = copy_interpreter(windows_python.full, tmp_path / "path py")
    report = tmp_path / "report.json"
    env = reporting(wine, report)
    assert wine.cmd(script, "-PythonExe", f'"{wine.to_windows(named)}"', "-Force", env=env).returncode == 0
    started = read_report(report)
    win_bundle = wine.to_windows(bundle)
    assert started["executable"] == wine.to_windows(named) and started["dll"] == wine.to_windows(named.parent / "python311.dll")
    assert started["orig_argv"][1:] == ["-I", "-B", f"{win_bundle}\\payload\\ort_bundle\\__main__.py", "engine", "windows-install",
                                        "--bundle", f"{win_bundle}\\.", "-PythonExe", wine.to_windows(named), "-Force"]
    # PATH is set inside Windows: Wine reads a Unix PATH variable as Unix folders.
    caller = tmp_path / "caller.cmd"
    caller.write_bytes(f'@echo off\r\nset "PATH={wine.to_windows(on_path.parent)};%PATH%"\r\n'
                       f'"{wine.to_windows(script)}" -Force\r\n'.encode())
    assert wine.run(["cmd", "/c", wine.to_windows(caller)], env=env).returncode == 0
    assert read_report(report)["executable"].lower() == wine.to_windows(on_path).lower()
    missing = wine.cmd(script)
    assert missing.returncode == CODES["prerequisite"]
    assert "no usable Python 3.11 was found" in missing.stdout + missing.stderr


@pytest.mark.wine
def test_uninstall_cmd_runs_a_copy_of_the_interpreter_and_keeps_the_code_when_it_deletes_itself(
        wine: Wine, windows_python: WindowsPython, tmp_path: Path) -> None:
    """From the install folder: the interpreter runs from a copy (a running python.exe cannot be removed) in a folder
    the real uninstall-copy program (installer/ort_bundle/__main__.py uninstall-copy) makes under a random name (issue 34 §8: never %TEMP%\\...-%RANDOM%%RANDOM%,
    which another user could make first); the engine removes uninstall.cmd itself (REPORTER does here, as the
    engine does), the code survives and the copy is gone afterwards. Wine enforces no ACL: the folder's ACL is
    test_uninstall_copy.py's to check."""
    root = tmp_path / "apps" / "demo"  # `cmd /c <path> args` takes a path without spaces or & (cmd's quote rules)
    context = CONTEXTS["runtime-script"]
    script = write_scripts(root, context)["uninstall.cmd"]
    copy_interpreter(windows_python.embeddable, root / "python")
    for relative, data in package_files().items():  # the real package, its start file and uninstall-copy ...
        (root / "installer" / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / "installer" / relative).write_bytes(data)
    place_reporter(root / "installer" / "ort_bundle" / "engine" / "engine.py")  # ... and REPORTER in the engine's place
    temp = wine.drive_c() / "users" / os.environ.get("USER", "root") / "Temp"
    report = tmp_path / "report.json"
    env = reporting(wine, report, CODES["in_use"], REPORTER_DELETE=wine.to_windows(script))
    assert exit_code_in_windows(wine, script, "-WhatIf", env=env, tmp_path=tmp_path) == CODES["in_use"]
    assert not script.exists(), "REPORTER removed uninstall.cmd while it ran"
    started = read_report(report)
    copy = re.fullmatch(r"C:\\(users\\[^\\]+\\Temp\\ort-bundler-uninstall-[0-9a-f]{16})\\python\.exe",
                        started["executable"], re.IGNORECASE)
    assert copy is not None, started["executable"]
    assert started["dll"].lower() == f"C:\\{copy.group(1)}\\python311.dll".lower()  # the copy's, not the install's
    assert started["orig_argv"][1:] == ["-I", "-B", f"{wine.to_windows(root)}\\installer\\ort_bundle\\__main__.py",
                                        "engine", "windows-uninstall", "--script-dir", f"{wine.to_windows(root)}\\.", "-WhatIf"]
    assert not wine.drive_c().joinpath(*copy.group(1).split("\\")).exists(), "the copy is removed once it has exited"
    assert not list(temp.glob("ort-bundler-uninstall-*"))  # (Wine's cmd leaves CMD*.tmp files of its own there)


def test_readme_install_says_what_an_administrator_needs_to_know() -> None:
    readme = render_scripts(windows_context())["README-INSTALL.txt"].decode("utf-8").replace("\r\n", "\n")
    flat = " ".join(readme.split())
    for fragment in ("install.cmd needs no PowerShell", "Unblock-File -LiteralPath", "MachinePolicy or UserPolicy",
                     "powershell.exe -NoProfile -ExecutionPolicy Bypass -File <install folder>\\run.ps1",
                     "uninstall.cmd [-InstallDir DIR]", "32-bit Python is refused", "Uninstall is idempotent",
                     "run.cmd --verify", "Add/Remove Programs", "scheduled task ort-bundler-demo-selfcheck",
                     "only catches corruption", "ort-bundler verify --trust CA.pem BUNDLE.zip", "runs in ort-bundler's tests under Wine",
                     "Constrained Language Mode and Get-AuthenticodeSignature are reviewed, not tested",
                     "%ProgramFiles%\\demo", "-SkipVCRedist", "systemprofile"):
        assert fragment in flat, fragment
    assert "RunOnce" not in flat and "-Confirm" not in flat
    codes = readme[readme.index("Exit codes\n"):readme.index("Log and receipt")]
    for code in CODES.values():
        assert f"    {code} " in codes, code
    # Without VC_redist: say what the machine needs, and offer no switch that does nothing.
    bare = " ".join(render_scripts(CONTEXTS["cpu-module"])["README-INSTALL.txt"].decode("utf-8").split())
    assert "does not carry the redistributable, so nothing here installs it" in bare
    assert "a dependency of this app" in bare and "-SkipVCRedist" not in bare
