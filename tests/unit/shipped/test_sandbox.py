"""try-in-sandbox (issue 28): the .wsb and the logon script that bundler/shipped/ort_bundle/sandbox/sandbox.py writes.

The logic runs here with this machine's Python on Windows path strings; the whole command, from a bundle
unpacked under a path with spaces, runs under Wine in the real Windows CPython (test_sandbox_wine.py).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import fields, replace
from pathlib import Path

import pytest

from bundler.shipped.ort_bundle.bundle_info import BundleInfo
from bundler.shipped.ort_bundle.sandbox import sandbox, sandbox_render
from bundler.shipped.ort_bundle.sandbox.sandbox import SandboxError
from bundler.shipped.ort_bundle.sandbox.sandbox_render import BundleFacts, Request

#: Every element Microsoft documents for a .wsb (docs/facts.md §9; the issue lists them): nothing else may appear.
DOCUMENTED = {"Configuration", "vGPU", "Networking", "MappedFolders", "MappedFolder", "HostFolder", "SandboxFolder",
              "ReadOnly", "LogonCommand", "Command", "MemoryInMB", "ClipboardRedirection", "ProtectedClient",
              "AudioInput", "VideoInput", "PrinterRedirection"}
BUNDLE = r"D:\deploy & test\app's bundles\demo-1.2.3-win_amd64"
CPU = BundleFacts(name="demo", version="1.2.3", python="3.11", gpu=False,
                  vc_redist="payload/vc_redist/VC_redist.x64.exe", bundled_python=True, entry_point=True,
                  models_bytes=300 << 20, longest_member=120)
GPU = replace(CPU, gpu=True)
MACHINE = replace(CPU, bundled_python=False, vc_redist=None, entry_point=False)


def parse_wsb(text: str) -> ET.Element:
    root = ET.fromstring(text)
    assert {element.tag for element in root.iter()} <= DOCUMENTED
    return root


def folders(root: ET.Element) -> dict[str, tuple[str, bool]]:
    """SandboxFolder -> (HostFolder, read-only)."""
    return {m.findtext("SandboxFolder"): (m.findtext("HostFolder"), m.findtext("ReadOnly") == "true")
            for m in root.iter("MappedFolder")}


def test_the_wsb_parses_maps_the_bundle_read_only_and_only_the_results_writable() -> None:
    files = sandbox.plan_files(Request(bundle=BUNDLE), CPU)
    assert files.folder == BUNDLE + "-sandbox" and files.wsb == BUNDLE + r"-sandbox\demo.wsb"
    text = dict(files.files)[files.wsb]
    assert "&amp;" in text and "&" not in text.replace("&amp;", "")  # escaped once, and parsed back exactly
    root = parse_wsb(text)
    assert root.findtext("Networking") == "Disable" and root.findtext("vGPU") == "Disable"
    assert folders(root) == {r"C:\ort-sandbox\bundle": (BUNDLE, True),
                             r"C:\ort-sandbox\steps": (BUNDLE + r"-sandbox\steps", True),
                             r"C:\ort-sandbox\results": (BUNDLE + r"-sandbox\results", False)}
    assert root.findtext("LogonCommand/Command") == r"C:\Windows\System32\cmd.exe /k C:\ort-sandbox\steps\try-bundle.cmd"
    assert int(root.findtext("MemoryInMB") or 0) == 5120  # 4096 + 2 x 300 MB of models, rounded up to whole GB
    assert "CUDA" not in text
    assert {path for path, _ in files.files} == {files.wsb, BUNDLE + r"-sandbox\steps\try-bundle.cmd"}
    assert files.folders == (BUNDLE + "-sandbox", BUNDLE + r"-sandbox\steps", BUNDLE + r"-sandbox\results")


def test_a_gpu_bundle_enables_vgpu_with_the_driver_note_and_more_memory() -> None:
    files = sandbox.plan_files(Request(bundle=BUNDLE), GPU)
    text = dict(files.files)[files.wsb]
    root = parse_wsb(text)
    assert root.findtext("vGPU") == "Enable" and root.findtext("Networking") == "Disable"
    assert "whether CUDA works inside the sandbox depends on that driver" in text
    assert int(root.findtext("MemoryInMB") or 0) == 7168
    override = dict(sandbox.plan_files(Request(bundle=BUNDLE, memory_mb=3000), GPU).files)[files.wsb]
    assert parse_wsb(override).findtext("MemoryInMB") == "3000"


def test_the_logon_script_installs_checks_runs_and_uninstalls_recording_each_exit_code() -> None:
    steps = sandbox_render.render_steps(Request(bundle=BUNDLE), CPU)
    steps.encode("ascii")
    lines = steps.split("\r\n")
    assert "\n" not in steps.replace("\r\n", "") and lines[0] == "@echo off"
    order = [r'start "" /wait "%B%\payload\vc_redist\VC_redist.x64.exe" /install /quiet /norestart /log "%R%\vc_redist.log"',
             r'cmd /d /c %B%\install.cmd -LogPath %R%\install.log < nul > "%R%\install-output.txt" 2>&1',
             r'cmd /d /c ""%INSTALL%\run.cmd" --self-check --json" < nul > "%R%\selfcheck.json" 2> "%R%\selfcheck-stderr.txt"',
             r'cmd /d /c ""%INSTALL%\run.cmd"" < nul > "%R%\entry-point.txt" 2>&1',
             r'cmd /d /c %B%\uninstall.cmd -InstallDir "%INSTALL%" -LogPath %R%\uninstall.log < nul > "%R%\uninstall-output.txt" 2>&1']
    assert [lines.index(line) for line in order] == sorted(lines.index(line) for line in order)
    for record in ("vc_redist", "install", "self-check", "entry-point", "uninstall"):
        index = lines.index(f'>> "%CODES%" echo {record} %CODE%')  # redirection first: "echo x 0>>f" would eat the 0
        assert lines[index - 1] == 'set "CODE=%ERRORLEVEL%"'
    assert r'set "B=C:\ort-sandbox\bundle"' in lines and r'set "R=C:\ort-sandbox\results"' in lines
    assert 'if not "%CODE%"=="0" if not "%CODE%"=="3010" goto :finish' in lines  # a failed install stops there
    assert any(r'reg query "HKLM\SOFTWARE\ort-bundler\demo" /v InstallDir /reg:64' in line for line in lines)
    assert r'if exist "%R%\exit-codes.txt" del /f /q "%R%\exit-codes.txt"' in lines  # the previous run's, by name
    commands = [line for line in lines if not line.startswith("if exist")]
    assert not any("python-install" in line or "msiexec" in line for line in commands)


def test_a_machine_python_bundle_installs_the_prereq_first_and_an_msi_replaces_install_cmd() -> None:
    request = Request(bundle=BUNDLE, prereq=r"E:\media\python-3.11.9-amd64.exe", msi=r"E:\media\demo-1.2.3.msi")
    files = sandbox.plan_files(request, MACHINE)
    root = parse_wsb(dict(files.files)[files.wsb])
    assert folders(root)[r"C:\ort-sandbox\input-1"] == (r"E:\media", True)  # one folder for both files
    assert len(folders(root)) == 4
    steps = dict(files.files)[BUNDLE + r"-sandbox\steps\try-bundle.cmd"].split("\r\n")
    prereq = (r'start "" /wait "C:\ort-sandbox\input-1\python-3.11.9-amd64.exe" /quiet InstallAllUsers=1 PrependPath=1 '
              r'Include_test=0 /log "%R%\python-install.log"')
    install = r'start "" /wait msiexec.exe /i "C:\ort-sandbox\input-1\demo-1.2.3.msi" /qn /norestart /l*v "%R%\msi-install.log"'
    remove = r'start "" /wait msiexec.exe /x "C:\ort-sandbox\input-1\demo-1.2.3.msi" /qn /norestart /l*v "%R%\msi-uninstall.log"'
    assert steps.index(prereq) < steps.index(install) < steps.index(remove)
    commands = [line for line in steps if not line.startswith("if exist")]
    assert not any("install.cmd" in line or "VC_redist" in line or "entry-point.txt" in line for line in commands)
    two = Request(bundle=BUNDLE, prereq=r"E:\media\python-3.11.9-amd64.exe", msi=r"F:\out\demo.msi")
    assert folders(parse_wsb(dict(sandbox.plan_files(two, MACHINE).files)[BUNDLE + r"-sandbox\demo.wsb"]))[
        r"C:\ort-sandbox\input-2"] == (r"F:\out", True)


@pytest.mark.parametrize(("path", "reason"), [
    ("D:\\b\u00fcndel\\demo", "non-ASCII"),
    ("\\\\fileserver\\share\\demo", "UNC path"),
    ("\\\\?\\D:\\deploy\\demo", "UNC path"),
    ("//fileserver/share/demo", "UNC path"),
    ("demo", "not an absolute path on a drive letter"),
    ("D:\\deploy\\demo\tx", "control character"),
    ("D:\\" + "x" * 131 + "\\demo", "too long: 260 characters"),
])
def test_paths_the_sandbox_cannot_map_are_refused_in_one_sentence(path: str, reason: str) -> None:
    with pytest.raises(SandboxError) as caught:
        sandbox.plan_files(Request(bundle=path), CPU)
    assert caught.value.code == sandbox.REFUSED_PATH
    message = str(caught.value)
    assert reason in message and message.count(". ") == 0 and message.endswith(".") and path in message


def test_refused_input_files_and_a_drive_root_bundle() -> None:
    with pytest.raises(SandboxError, match=r"The --msi file '\\\\srv\\share\\a.msi' is a UNC path"):
        sandbox.plan_files(Request(bundle=BUNDLE, msi="\\\\srv\\share\\a.msi"), CPU)
    with pytest.raises(SandboxError, match=r"drive's root"):
        sandbox.plan_files(Request(bundle="D:\\"), CPU)


def write_bundle(folder: Path, **changes: object) -> Path:
    """A bundle folder as far as the sandbox reads it: bundle.json through its one definition, SHA256SUMS, a model."""
    empty = {f.name: None for f in fields(BundleInfo)}
    values = {"name": "demo", "version": "1.2.3", "platform": "win_amd64", "python": "3.11", "python_tag": "cp311",
              "built_with": {}, "manifest": {}, "wheels": [], "expected_providers": ["CPUExecutionProvider"],
              "selfcheck": {}, "models": [], "signatures": [], "licenses": [], "app_local_runtime": [],
              "entry_point": {"module": "demo.app"}, "python_runtime": {"kind": "embeddable"},
              "vc_redist": {"file": "payload/vc_redist/VC_redist.x64.exe"}, **changes}
    (folder / "payload" / "models").mkdir(parents=True)
    (folder / "payload" / "models" / "m.onnx").write_bytes(b"\0" * 4096)
    (folder / "bundle.json").write_text(json.dumps(BundleInfo(**{**empty, **values}).to_json()))
    (folder / "SHA256SUMS").write_text(f"{'0' * 64}  bundle.json\n{'0' * 64}  payload/models/m.onnx\n")
    return folder


def test_read_facts_from_the_bundle_records(tmp_path: Path) -> None:
    facts = sandbox.read_facts(write_bundle(tmp_path / "b"))
    assert facts == BundleFacts(name="demo", version="1.2.3", python="3.11", gpu=False,
                                vc_redist="payload/vc_redist/VC_redist.x64.exe", bundled_python=True,
                                entry_point=True, models_bytes=4096, longest_member=len("payload/models/m.onnx"))
    gpu = sandbox.read_facts(write_bundle(tmp_path / "g", gpu={"cuda": "11.8"}, python_runtime=None, vc_redist=None))
    assert gpu.gpu and not gpu.bundled_python and gpu.vc_redist is None


@pytest.mark.parametrize("changes", [{"platform": "linux_x86_64"}, {"name": "demo & calc"},
                                     {"vc_redist": {"file": "payload/%x%/VC_redist.x64.exe"}}])
def test_a_bundle_record_that_could_reach_the_logon_script_unchecked_is_refused(tmp_path: Path, changes: dict) -> None:
    folder = write_bundle(tmp_path / "b", **changes)
    assert sandbox.main(["--write-only"], bundle=folder) == sandbox.BROKEN_BUNDLE
    assert not (tmp_path / "b-sandbox").exists()


def test_the_command_line_refuses_bad_arguments_before_writing_anything(tmp_path: Path, capsys) -> None:
    """The file arguments need Windows paths: test_sandbox_wine.py checks them in the real Windows CPython."""
    runtime = write_bundle(tmp_path / "runtime")
    machine = write_bundle(tmp_path / "machine", python_runtime=None)
    cases = [(runtime, ["--frobnicate"], "unrecognized arguments: --frobnicate"),
             (runtime, ["--memory", "12"], "--memory 12 is out of range"),
             (runtime, ["--memory", "lots"], "argument --memory: invalid int value: 'lots'"),
             (machine, [], "pass --prereq python-3.11.N-amd64.exe")]
    for bundle, argv, expected in cases:
        assert sandbox.main([*argv, "--write-only"], bundle=bundle) == sandbox.BAD_ARGUMENT, argv
        err = capsys.readouterr().err
        assert expected in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["machine", "runtime"]


def test_help_exits_zero(capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        sandbox.parser().parse_args(["--help"])
    assert caught.value.code == 0 and "--write-only" in capsys.readouterr().out
