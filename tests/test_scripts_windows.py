"""Windows scripts: every .ps1 parses as Windows PowerShell 5.1 code, and every .cmd runs under Wine.

There is no PowerShell here, so the .ps1 files are checked with the tree-sitter PowerShell grammar:
no ERROR or MISSING node, and no PowerShell-7-only construct (a guard that is itself tested on
snippets). The .cmd wrappers run under `wine64 cmd`, with a stand-in for powershell.exe and
python.exe: a small C program, cross-compiled here, that writes its argv and a few environment
variables to a file and exits with a code the test chooses. Wine's own powershell.exe is a stub
that exits 0; its exit code is never taken as evidence.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import tree_sitter_pwsh
from tree_sitter import Language, Node, Parser
from wine import Wine, compile_windows_exe, mingw_gcc, wine  # noqa: F401  (fixtures)

from bundler.assembly.render import (
    INSTALL_EXIT_CODES,
    EntryPoint,
    ScriptContext,
    render_scripts,
)

CODES = INSTALL_EXIT_CODES
DLL_DIRS = ("venv/Lib/site-packages/onnxruntime/capi",)
APP_VALUE = "it's 100% \"quoted\" & <piped> | ^caret! $HOME (x)"
STANDIN_ENV = ("PATH", "PYTHONNOUSERSITE", "PIP_NO_INDEX", "TEMP", "TMP", "PYTHONPYCACHEPREFIX",
               "CUDA_CACHE_PATH", "ORT_TENSORRT_CACHE_PATH", "ORT_BUNDLE_CACHE_DIR", "APP_VALUE")

STANDIN_C = r"""
/* Stand-in for powershell.exe / python.exe: records argv and environment, deletes a file if told
   (as uninstall.ps1 deletes the uninstall.cmd that started it), exits as told. */
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    const char *names[] = {%NAMES%, 0};
    const char *out = getenv("STANDIN_OUT");
    const char *code = getenv("STANDIN_EXIT");
    const char *doomed = getenv("STANDIN_DELETE");
    if (doomed) remove(doomed);
    if (out) {
        FILE *f = fopen(out, "wb");
        for (int i = 0; i < argc; i++) fprintf(f, "ARG %s\n", argv[i]);
        for (int j = 0; names[j]; j++) {
            const char *v = getenv(names[j]);
            fprintf(f, "ENV %s=%s\n", names[j], v ? v : "<unset>");
        }
        fclose(f);
    }
    return code ? atoi(code) : 0;
}
"""


def windows_context(**changes: object) -> ScriptContext:
    values: dict[str, object] = dict(
        name="demo", version="1.2.3", platform="win_amd64", python="3.11", vc_runtime_min="14.40.33810",
        vc_redist="payload/vc_redist/VC_redist.x64.exe", gpu_dll_dirs=("gpu",), gpu_preload=("gpu/cudart64_110.dll",),
        dll_dirs=DLL_DIRS, entry_point=EntryPoint(kind="script", value="app/main.py"), cache_dir=None,
        env={"APP_VALUE": APP_VALUE}, default_install_dir=r"C:\ort\demo")
    values.update(changes)
    return ScriptContext(**values)  # type: ignore[arg-type]


CONTEXTS = {
    "gpu-script": windows_context(),
    "cpu-module": windows_context(gpu_dll_dirs=(), gpu_preload=(), vc_redist=None,
                                  entry_point=EntryPoint(kind="module", value="demo.cli"), cache_dir="cache"),
    "no-entry-hostile": windows_context(entry_point=None, vc_runtime_min=None, vc_redist=None,
                                        default_install_dir="C:\\a'b $(Stop-Computer) & c",
                                        cache_dir="D:\\x'; Stop-Computer; '", env={"X": "'; Stop-Computer; '"}),
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


def test_install_ps1_has_the_documented_interface() -> None:
    text = render_scripts(CONTEXTS["gpu-script"])["install.ps1"].decode("utf-8-sig")
    for fragment in ("SupportsShouldProcess = $true", "Set-StrictMode -Version Latest", "$ErrorActionPreference = 'Stop'",
                     "[string]$InstallDir", "[string]$PythonExe", "[string]$CacheDir", "[switch]$SkipVCRedist",
                     "[switch]$Force", "[switch]$NoSelfCheck", "[string]$LogPath", "Get-FileHash", "Unblock-File",
                     "'/install', '/quiet', '/norestart', '/log'", "Registry64", "Registry32",
                     "@('install', '--bundle', $BundleRoot, '--install-dir', $Target)", "$all = @('-I', '-B', $Engine)"):
        assert fragment in text, fragment
    for name, code in CODES.items():
        assert f"    {name} = {code}\r\n" in text


# --- .cmd wrappers under Wine ----------------------------------------------------------------------

def test_install_ps1_rechecks_build_time_signatures_before_and_after_installing() -> None:
    """Files signed and verified at build time are re-checked with Get-AuthenticodeSignature before the system
    is touched: loose files, and wheel members read out of their wheel (the engine no longer stages a venv
    the script could look into: changed from "in the staged venv"); HashMismatch is an integrity failure."""
    script = render_scripts(windows_context())["install.ps1"].decode("utf-8-sig")
    assert not parse_problems(script.encode("utf-8"))
    body = script[script.index("function Assert-Signature"):]
    assert "Get-AuthenticodeSignature -LiteralPath $File" in body
    assert any(block.startswith("{ Stop-Script 'integrity'") for block in if_bodies(body, "$status -eq 'HashMismatch'"))
    install = script[script.index("function Invoke-Install"):]
    order = [install.index(step) for step in ("Unblock-Bundle", "Assert-BundleSignatures", "Assert-WheelSignatures",
                                              "Install-VcRuntime", "Invoke-Engine $python $Engine (Get-EngineArguments $target $reboot")]
    assert order == sorted(order)
    wheels = script[script.index("function Assert-WheelSignatures"):script.index("function Get-SignedFiles")]
    assert "ExtractToFile($archive.GetEntry($member), $file, $true)" in wheels and "Assert-Signature $file $label" in wheels


def test_a_per_machine_install_is_not_writable_by_users() -> None:
    """The staging folder's ACL drops the inherited "Authenticated Users: Modify" before anything is copied.
    Changed: the engine creates the staging folder, so it runs icacls on it (--restrict-acl, which install.ps1
    passes when elevated) right after creating it, before the environment or any file."""
    import inspect

    from bundler.target import engine

    script = render_scripts(windows_context())["install.ps1"].decode("utf-8-sig")
    arguments = script[script.index("function Get-EngineArguments"):script.index("function Invoke-Install")]
    assert "if (Test-Administrator) { $arguments += '--restrict-acl' }" in arguments
    protect = inspect.getsource(engine.restrict_acl)
    assert '"/inheritance:r"' in protect and '"*S-1-5-32-545:(OI)(CI)RX"' in protect
    stage = inspect.getsource(engine._build_stage)
    assert stage.index("restrict_acl(stage)") < stage.index("make_environment(") < stage.index("place_files(")


@pytest.fixture(scope="module")
def standin_exe(mingw_gcc: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("standin")
    source = folder / "standin.c"
    source.write_text(STANDIN_C.replace("%NAMES%", ", ".join(f'"{n}"' for n in STANDIN_ENV)))
    return compile_windows_exe(mingw_gcc, source, folder / "standin.exe")


@pytest.fixture
def powershell_slot(wine: Wine) -> Iterator[Path]:
    """Wine's powershell.exe location, restored after the test (it is Wine's do-nothing stub)."""
    slot = wine.drive_c() / "windows" / "system32" / "WindowsPowerShell" / "v1.0" / "powershell.exe"
    backup = slot.with_name("powershell.exe.wine-stub")
    if slot.exists() or slot.is_symlink():
        os.replace(slot, backup)
    slot.parent.mkdir(parents=True, exist_ok=True)
    yield slot
    if slot.exists() or slot.is_symlink():
        slot.unlink()
    if backup.exists() or backup.is_symlink():
        os.replace(backup, slot)


def read_report(path: Path) -> tuple[list[str], dict[str, str]]:
    args, env = [], {}
    for line in path.read_text(encoding="latin-1").splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "ARG":
            args.append(rest)
        else:
            key, _, value = rest.partition("=")
            env[key] = value
    return args, env


def write_scripts(folder: Path, context: ScriptContext) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for rel, data in render_scripts(context).items():
        if rel.endswith(".cmd"):
            path = folder / Path(rel).name
            path.write_bytes(data)
            written[path.name] = path
    return written


@pytest.mark.wine
def test_install_cmd_passes_arguments_and_exit_code_through(wine: Wine, standin_exe: Path, powershell_slot: Path,
                                                            tmp_path: Path) -> None:
    shutil.copyfile(standin_exe, powershell_slot)
    bundle = tmp_path / "my bundle & co" / "demo-1.2.3-win_amd64"
    script = write_scripts(bundle, windows_context())["install.cmd"]
    report = tmp_path / "report.txt"
    result = wine.cmd(script, "-InstallDir", '"C:\\Program Files\\a & b"', "-PythonExe", "C:\\py\\python.exe", "-Force",
                      env={"STANDIN_OUT": wine.to_windows(report), "STANDIN_EXIT": str(CODES["install"])})
    assert result.returncode == CODES["install"], result.stdout + result.stderr
    args, _ = read_report(report)
    # No -NonInteractive (changed): it makes -Confirm throw; the scripts never prompt without -Confirm.
    assert args[1:6] == ["-NoProfile", "-ExecutionPolicy", "Bypass", "-File", wine.to_windows(bundle / "install.ps1")]
    assert args[6:] == ["-InstallDir", "C:\\Program Files\\a & b", "-PythonExe", "C:\\py\\python.exe", "-Force"]
    # A Linux exit status keeps 8 bits, so 3010 is read inside Windows: a caller prints %ERRORLEVEL%.
    # (`cmd /c` on a plain path: Wine's `call "script"` reports 1 whatever the script returned.)
    plain = write_scripts(tmp_path / "plain", windows_context())["install.cmd"]
    caller = tmp_path / "caller.cmd"
    caller.write_bytes(f'@echo off\r\ncmd /c {wine.to_windows(plain)} -Force\r\necho EXIT=%ERRORLEVEL%\r\n'.encode())
    reboot = wine.run(["cmd", "/c", wine.to_windows(caller)], env={"STANDIN_OUT": wine.to_windows(report), "STANDIN_EXIT": "3010"})
    assert "EXIT=3010" in reboot.stdout, reboot.stdout + reboot.stderr


@pytest.mark.wine
def test_install_cmd_without_powershell_is_a_prerequisite_failure(wine: Wine, powershell_slot: Path,
                                                                  tmp_path: Path) -> None:
    assert not powershell_slot.exists()
    script = write_scripts(tmp_path / "bundle", windows_context())["install.cmd"]
    result = wine.cmd(script, "-Force")
    assert result.returncode == CODES["prerequisite"]
    assert "Windows PowerShell 5.1 was not found at" in result.stdout + result.stderr


def make_install_root(folder: Path, standin_exe: Path, context: ScriptContext) -> Path:
    """An install folder as install.ps1 leaves it, with the stand-in as the venv's python.exe."""
    run_cmd = write_scripts(folder, context)["run.cmd"]
    python = folder / "venv" / "Scripts" / "python.exe"
    python.parent.mkdir(parents=True)
    shutil.copyfile(standin_exe, python)
    return run_cmd


@pytest.mark.wine
def test_run_cmd_sets_the_environment_and_passes_arguments_and_exit_code(wine: Wine, standin_exe: Path,
                                                                         tmp_path: Path) -> None:
    root = tmp_path / "ort & apps" / "demo"
    run_cmd = make_install_root(root, standin_exe, windows_context())
    (root / "selfcheck").mkdir()
    (root / "selfcheck" / "selfcheck.py").write_text("# the stand-in python.exe never reads this\n")
    report = tmp_path / "report.txt"
    cache = tmp_path / "cache & temp"
    env = {"STANDIN_OUT": wine.to_windows(report), "STANDIN_EXIT": "7", "ORT_BUNDLE_CACHE_DIR": wine.to_windows(cache)}
    result = wine.cmd(run_cmd, '"two words"', "--flag=1", '"a & b"', env=env)
    assert result.returncode == 7, result.stdout + result.stderr
    args, seen = read_report(report)
    win_root = wine.to_windows(root)
    assert args[1:] == [f"{win_root}\\app\\main.py", "two words", "--flag=1", "a & b"]
    assert seen["PATH"].startswith(f"{win_root}\\gpu;{win_root}\\venv\\Lib\\site-packages\\onnxruntime\\capi;")
    assert seen["PYTHONNOUSERSITE"] == "1" and seen["PIP_NO_INDEX"] == "1"
    win_cache = wine.to_windows(cache)
    assert seen["TEMP"] == seen["TMP"] == f"{win_cache}\\tmp" and (cache / "tmp").is_dir()
    assert seen["PYTHONPYCACHEPREFIX"] == f"{win_cache}\\pycache"
    assert seen["CUDA_CACHE_PATH"] == f"{win_cache}\\cuda" and seen["ORT_TENSORRT_CACHE_PATH"] == f"{win_cache}\\tensorrt"
    assert seen["APP_VALUE"] == APP_VALUE
    # Every argument reaches the self-check (changed: %2-%9 before); selfcheck.py ignores its own --self-check.
    args = ["--self-check", "--json", '"a b"', "3", "4", "5", "6", "7", "8", "9", "10"]
    check = wine.cmd(run_cmd, *args, env={**env, "STANDIN_EXIT": "0"})
    assert check.returncode == 0
    assert read_report(report)[0][1:] == [f"{win_root}\\selfcheck\\selfcheck.py", "--self-check", "--json", "a b",
                                          *(str(n) for n in range(3, 11))]


@pytest.mark.wine
def test_run_cmd_relative_cache_dir_from_the_install_and_module_entry(wine: Wine, standin_exe: Path,
                                                                      tmp_path: Path) -> None:
    root = tmp_path / "demo"
    context = windows_context(entry_point=EntryPoint(kind="module", value="demo.cli"), cache_dir="cache & (x)")
    run_cmd = make_install_root(root, standin_exe, context)
    report = tmp_path / "report.txt"
    env = {k: v for k, v in os.environ.items() if k != "ORT_BUNDLE_CACHE_DIR"}
    result = wine.cmd(run_cmd, "x", env={**env, "STANDIN_OUT": wine.to_windows(report), "STANDIN_EXIT": "0"})
    assert result.returncode == 0, result.stdout + result.stderr
    args, seen = read_report(report)
    assert args[1:] == ["-m", "demo.cli", "x"]
    assert seen["TEMP"] == f"{wine.to_windows(root)}\\cache & (x)\\tmp"


@pytest.mark.wine
def test_run_cmd_without_python_is_a_prerequisite_failure(wine: Wine, tmp_path: Path) -> None:
    root = tmp_path / "a & b"
    run_cmd = write_scripts(root, windows_context())["run.cmd"]
    result = wine.cmd(run_cmd, "x")
    assert result.returncode == CODES["prerequisite"]
    assert f"{wine.to_windows(root)}\\venv\\Scripts\\python.exe\" was not found" in result.stdout + result.stderr


@pytest.mark.wine
def test_uninstall_cmd_reaches_64_bit_powershell_and_keeps_the_exit_code_when_it_deletes_itself(
        wine: Wine, standin_exe: Path, powershell_slot: Path, tmp_path: Path) -> None:
    """uninstall.cmd (issue 11: the Intune uninstall ran 32-bit PowerShell) has install.cmd's Sysnative logic and
    every argument; run from the install folder, uninstall removes uninstall.cmd itself, and the code survives."""
    shutil.copyfile(standin_exe, powershell_slot)
    root = tmp_path / "apps" / "demo"  # `cmd /c <path> args` takes a path without spaces or & (cmd's quote rules)
    script = write_scripts(root, windows_context())["uninstall.cmd"]
    text = script.read_bytes().decode("ascii")
    [command] = [line for line in text.splitlines() if line.startswith('"%ORT_BUNDLE_POWERSHELL%"')]
    assert "%SystemRoot%\\Sysnative\\WindowsPowerShell\\v1.0\\powershell.exe" in text and "-NonInteractive" not in command
    report = tmp_path / "report.txt"
    caller = tmp_path / "caller.cmd"
    caller.write_bytes(f'@echo off\r\ncmd /c {wine.to_windows(script)} -InstallDir "C:\\ort\\a b" -WhatIf\r\n'
                       f'echo EXIT=%ERRORLEVEL%\r\n'.encode())
    env = {"STANDIN_OUT": wine.to_windows(report), "STANDIN_EXIT": str(CODES["usage"]),
           "STANDIN_DELETE": wine.to_windows(script)}
    result = wine.run(["cmd", "/c", wine.to_windows(caller)], env=env)
    assert "EXIT=10" in result.stdout, result.stdout + result.stderr
    assert not script.exists(), "the stand-in removed uninstall.cmd while it ran"
    args, _ = read_report(report)
    assert args[1:] == ["-NoProfile", "-ExecutionPolicy", "Bypass", "-File", wine.to_windows(root / "uninstall.ps1"),
                        "-InstallDir", "C:\\ort\\a b", "-WhatIf"]


@pytest.mark.wine
def test_install_cmd_passes_whatif_and_confirm_without_noninteractive(wine: Wine, standin_exe: Path,
                                                                       powershell_slot: Path, tmp_path: Path) -> None:
    shutil.copyfile(standin_exe, powershell_slot)
    script = write_scripts(tmp_path / "bundle", windows_context())["install.cmd"]
    report = tmp_path / "report.txt"
    result = wine.cmd(script, "-WhatIf", "-Confirm", env={"STANDIN_OUT": wine.to_windows(report), "STANDIN_EXIT": "0"})
    assert result.returncode == 0, result.stdout + result.stderr
    args, _ = read_report(report)
    assert args[-2:] == ["-WhatIf", "-Confirm"] and "-NonInteractive" not in args


@pytest.mark.wine
def test_a_trailing_backslash_before_a_quote_reaches_install_ps1_as_a_quote_it_refuses(
        wine: Wine, standin_exe: Path, powershell_slot: Path, tmp_path: Path) -> None:
    """`install.cmd -InstallDir "C:\\x\\" -Force`: the Windows command-line rules turn \\" into a literal quote, so the
    next arguments land inside -InstallDir (seen here by the stand-in, which parses argv as powershell.exe does).
    install.ps1 refuses any -InstallDir with a '"' as a usage error instead of installing into a strange folder."""
    shutil.copyfile(standin_exe, powershell_slot)
    script = write_scripts(tmp_path / "bundle", windows_context())["install.cmd"]
    report = tmp_path / "report.txt"
    wine.cmd(script, "-InstallDir", '"C:\\x\\"', "-Force", env={"STANDIN_OUT": wine.to_windows(report)})
    args, _ = read_report(report)
    assert args[-1].rstrip() == 'C:\\x" -Force', args
    ps1 = render_scripts(windows_context())["install.ps1"].decode("utf-8-sig")
    guard = ps1[ps1.index("function Get-FullInstallDir"):ps1.index("function Assert-CacheDir")]
    assert "if ($Path.Contains('\"')) {" in guard and "Stop-Script 'usage'" in guard


@pytest.mark.wine
def test_run_cmd_verify_and_a_manifest_env_naming_the_launchers_own_variables(wine: Wine, standin_exe: Path,
                                                                              tmp_path: Path) -> None:
    """[launch] env cannot take over run.cmd (issue 18 item 1): its values are set before the launcher's own."""
    root = tmp_path / "demo"
    hostile = {"ORT_BUNDLE_ROOT": "C:\\evil", "ORT_BUNDLE_PYTHON": "C:\\evil\\python.exe", "APP_VALUE": "ok"}
    run_cmd = make_install_root(root, standin_exe, windows_context(env=hostile))
    report = tmp_path / "report.txt"
    env = {"STANDIN_OUT": wine.to_windows(report), "STANDIN_EXIT": "0", "ORT_BUNDLE_CACHE_DIR": wine.to_windows(tmp_path / "c")}
    result = wine.cmd(run_cmd, "--verify", "--json", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    args, seen = read_report(report)
    win_root = wine.to_windows(root)
    assert args[0].lower().endswith("\\demo\\venv\\scripts\\python.exe")
    assert args[1:] == ["-I", "-B", f"{win_root}\\installer\\engine.py", "verify", "--root", win_root, "--verify", "--json"]
    assert seen["APP_VALUE"] == "ok"


def _function(script: str, name: str) -> str:
    """The text of one function of a rendered script, found in its parse tree."""
    tree = _PARSER.parse(script.encode("utf-8"))
    for node in _walk(tree.root_node):
        if node.type == "function_statement" and any(c.text.decode() == name for c in node.children):
            return node.text.decode()
    raise AssertionError(f"no function {name}")


def test_install_ps1_takes_the_mutex_before_the_log_and_every_exit_path_has_a_code() -> None:
    """Reviewed against PowerShell 5.1 behaviour (no PowerShell here): the order of the steps, the mutex a normal
    user cannot open (SYSTEM made it) meaning 1618, a log that cannot throw, one handler mapping every error."""
    for script_name in ("install.ps1", "uninstall.ps1"):
        script = render_scripts(windows_context())[script_name].decode("utf-8-sig")
        main = _function(script, "Invoke-Install" if script_name == "install.ps1" else "Invoke-Uninstall")
        steps = [main.index(step) for step in ("Assert-", "Enter-Mutex", "Initialize-Log", "Invoke-Engine")]
        assert steps == sorted(steps), script_name
        mutex = _function(script, "Enter-Mutex")
        assert "catch [UnauthorizedAccessException]" in mutex and "Stop-Script 'retry'" in mutex
        log = _function(script, "Write-Log")
        assert log.count("try {") == 2 and log.count("catch { }") == 2 and "Add-Content" not in log
        handler = script[script.rindex("$exitCode = $ExitCodes.install"):]
        assert any(block.startswith("{ $exitCode = Exit-Script $_") for block in catch_bodies(script))
        assert handler.rstrip().endswith("exit $exitCode")
        assert "Assert-64BitHost" in main or "Assert-64BitHost" in _function(script, "Assert-Platform")


def test_install_ps1_writes_detection_and_add_remove_programs_on_every_success() -> None:
    script = render_scripts(windows_context())["install.ps1"].decode("utf-8-sig")
    main = _function(script, "Invoke-Install")
    tail = main[main.index("$run = Invoke-Engine $python $Engine (Get-EngineArguments $target $reboot $false)"):]
    assert tail.index("return $run.Code") < tail.index("Set-DetectionValue") < tail.index("Set-UninstallEntry")
    entry = _function(script, "Set-UninstallEntry")
    for value in ("DisplayName", "DisplayVersion", "Publisher", "InstallLocation", "UninstallString",
                  "QuietUninstallString", "NoModify", "NoRepair", "EstimatedSize", "uninstall.cmd"):
        assert f"'{value}'" in entry or value in entry, value
    assert "if (-not (Test-Administrator)) { return }" in entry
    deferred = _function(script, "Register-DeferredSelfCheck")
    assert "RunOnce" in deferred and "after-reboot --root" in deferred
    assert "if ($run.Code -eq $ExitCodes.reboot) { Register-DeferredSelfCheck $python $target }" in main
    python = _function(script, "Assert-PythonForMachine")
    assert "$env:LOCALAPPDATA" in python and "Stop-Script 'prerequisite'" in python and "-PythonExe" in python
    installdir = _function(script, "Get-FullInstallDir")
    assert "$Path.Contains(';')" in installdir and "$full.Length + $StagingExtra -gt $MaxInstallDirLength" in installdir
    uninstall = render_scripts(windows_context())["uninstall.ps1"].decode("utf-8-sig")
    removal = _function(uninstall, "Invoke-Uninstall")
    nothing = removal[removal.index("nothing to uninstall"):]
    assert nothing.index("Remove-Registration $root") < nothing.index("return $ExitCodes.ok")
    assert "CurrentVersion\\Uninstall\\ort-bundler-" in _function(uninstall, "Remove-Registration")


def test_readme_install_says_what_an_administrator_needs_to_know() -> None:
    readme = render_scripts(windows_context())["README-INSTALL.txt"].decode("utf-8").replace("\r\n", "\n")
    flat = " ".join(readme.split())
    for fragment in ("Unblock-File -LiteralPath", "Group Policy execution policy", "MachinePolicy or UserPolicy",
                     "powershell.exe -NoProfile -ExecutionPolicy Bypass -File <install folder>\\run.ps1",
                     "uninstall.cmd -InstallDir", "32-bit process", "Uninstall is idempotent",
                     "run.cmd --verify", "Add/Remove Programs", "RunOnce"):
        assert fragment in flat, fragment
    codes = readme[readme.index("Exit codes\n"):readme.index("Log and receipt")]
    for code in CODES.values():
        assert f"    {code} " in codes
