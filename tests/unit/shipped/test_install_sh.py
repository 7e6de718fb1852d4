"""Run the rendered install.sh, uninstall.sh and run.sh for real on a small bundle made in tmp.

The bundle has the real layout: a tiny wheel built here (with a console script), a hash-pinned
requirements.txt, install-plan.json written through the target's own definition, SHA256SUMS, the
install engine (bundler/shipped/ort_bundle) and the real pinned pypa installer wheel at the paths the scripts use. Its
selfcheck.py is a stand-in that only imports the tiny package; its entry point is a stand-in script
that reports its arguments and environment. One install is shared by the tests that only read it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from fixtures.models import make_identity_model
from fixtures.wheels import pip_download

from bundler.assembly.render import (
    INSTALL_EXIT_CODES,
    EntryPoint,
    ScriptContext,
    render_scripts,
)
from bundler.assembly.shipped_package import package_files
from bundler.shipped.ort_bundle.records import InstallPlan, PlanEntry, VenvPlan
from bundler.target_platform import LINUX

#: The pypa installer the engine uses, as `ort-bundler lock` pins it (a real wheel, fetched by pip).
INSTALLER_REQUIREMENT = "installer==1.1.0"

CODES = INSTALL_EXIT_CODES
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
ORT_DIR = f"venv/lib/python{PY}/site-packages/onnxruntime/capi"

SELFCHECK_STANDIN = """\
# Stand-in for the real self-check: proves the installed environment imports the bundled package.
import sys
import tinypkg
sys.exit(0 if tinypkg.VALUE == 42 else 1)
"""

ENTRY_STANDIN = """\
# Stand-in entry point: reports what the launcher handed over, exits with the code it is asked for.
import json, os, sys
keys = ("LD_LIBRARY_PATH", "PYTHONNOUSERSITE", "PIP_NO_INDEX", "TEMP", "TMP", "PYTHONPYCACHEPREFIX",
        "CUDA_CACHE_PATH", "ORT_TENSORRT_CACHE_PATH", "ORT_BUNDLE_CACHE_DIR", "APP_MODE")
report = {"argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in keys},
          "hook": "ort_bundle_hook" in sys.modules, "executable": sys.executable}
with open(os.environ["STANDIN_REPORT"], "w", encoding="utf-8") as f:
    json.dump(report, f)
sys.exit(int(os.environ.get("STANDIN_EXIT", "0")))
"""


def build_wheel(folder: Path, *, version: str = "1.0", broken: bool = False, modules: int = 0,
                big_file: int = 0, pycache: bool = False) -> Path:
    """A real pure-Python wheel with a correct RECORD; `broken` gives bytes pip must reject; `pycache` a stale
    bytecode file in it, as numpy's Windows wheels carry one (pypa installer skips it, with a warning)."""
    path = folder / f"tinypkg-{version}-py3-none-any.whl"
    if broken:
        path.write_bytes(b"PK\x03\x04 this is not a complete zip archive")
        return path
    dist = f"tinypkg-{version}.dist-info"
    files = {
        "tinypkg/__init__.py": b"VALUE = 42\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: tinypkg\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}/entry_points.txt": b"[console_scripts]\ntinytool = tinypkg:main\n",
    }
    files["tinypkg/__init__.py"] += b"def main():\n    print('tinytool', VALUE)\n"
    for number in range(modules):  # more files: an install that takes long enough to be interrupted
        files[f"tinypkg/mod{number:04d}.py"] = f"NUMBER = {number}\nVERSION = {version!r}\n".encode() * 20
    if big_file:  # compresses to almost nothing, expands to big_file bytes
        files["tinypkg/zeros.bin"] = bytes(big_file)
    if pycache:
        files["tinypkg/__pycache__/stale.cpython-311.pyc"] = b"\x00" * 16
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def script_context(*, version: str = "1.0", env: dict[str, str] | None = None, python: str = PY) -> ScriptContext:
    return ScriptContext(
        name="tiny", version=version, target=LINUX, python=python, vc_runtime_min=None,
        vc_redist=None, gpu_dll_dirs=(), gpu_preload=(), dll_dirs=(ORT_DIR.replace(PY, python),),
        entry_point=EntryPoint(kind="script", value="app/entry.py"), cache_dir=None,
        env=env or {"APP_MODE": "it's $HOME & `id`"}, default_install_dir="/nonexistent/tiny")


def make_bundle(root: Path, *, version: str = "1.0", broken_wheel: bool = False, modules: int = 0, big_file: int = 0,
                python: str = PY, installer: str = INSTALLER_REQUIREMENT,
                selfcheck: str = SELFCHECK_STANDIN, pycache: bool = False) -> Path:
    """Lay out an extracted bundle exactly as the build writes it."""
    root.mkdir(parents=True)
    wheels = root / "payload" / "wheels"
    wheels.mkdir(parents=True)
    wheel = build_wheel(wheels, version=version, broken=broken_wheel, modules=modules, big_file=big_file,
                        pycache=pycache)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (wheels / "requirements.txt").write_text(f"tinypkg=={version} --hash=sha256:{digest}\n")
    (root / "payload" / "models").mkdir(parents=True)
    make_identity_model(root / "payload" / "models" / "m.onnx")
    (root / "payload" / "app").mkdir(parents=True)
    (root / "payload" / "app" / "entry.py").write_text(ENTRY_STANDIN)
    (root / "payload" / "installer").mkdir(parents=True)
    installer_wheel = pip_download(installer, "any", python_version=python)
    shutil.copyfile(installer_wheel, root / "payload" / "installer" / installer_wheel.name)
    (root / "bundle.json").write_text(json.dumps({"name": "tiny", "version": version}))
    for rel, data in {**render_scripts(script_context(version=version, python=python)),
                      **{f"payload/{rel}": data for rel, data in package_files().items()}}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "payload" / "ort_bundle" / "selfcheck" / "selfcheck.py").write_text(selfcheck)  # the stand-in
    copies = [("bundle.json", "bundle.json"), ("payload/models/m.onnx", "models/m.onnx"),
              ("payload/app/entry.py", "app/entry.py"),
              ("payload/launchers/run.sh", "run.sh"), ("payload/launchers/launch.json", "launch.json"),
              *((f"payload/{rel}", f"installer/{rel}") for rel in package_files())]
    site_files = [(f"payload/launchers/ort_bundle_hook.{ext}", f"ort_bundle_hook.{ext}") for ext in ("py", "pth")]
    site_files += [(f"payload/{rel}", rel) for rel in package_files()]
    plan = InstallPlan(
        install_id=f"tiny-{version}", name="tiny", version=version, platform="linux_x86_64", python=python,
        dll_path_variable="LD_LIBRARY_PATH", installer_wheel=f"payload/installer/{installer_wheel.name}",
        venv=VenvPlan(dir="venv", interpreter="bin/python", scripts="bin", site_packages=f"lib/python{python}/site-packages",
                      script_kind="posix", wheels=(f"payload/wheels/{wheel.name}",),
                      requirements="payload/wheels/requirements.txt",
                      site_packages_files=tuple(PlanEntry(source=a, target=b) for a, b in site_files)),
        copy=tuple(PlanEntry(source=a, target=b) for a, b in copies), dll_dirs=(ORT_DIR.replace(PY, python),)).to_json()
    (root / "install-plan.json").write_text(json.dumps(plan, indent=2))
    write_sums(root)
    return root


def write_sums(root: Path) -> None:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != "SHA256SUMS")
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(root).as_posix()}" for p in files]
    (root / "SHA256SUMS").write_text("\n".join(lines) + "\n")


def run_sh(script: Path, *args: str, env: dict[str, str] | None = None,
           cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    merged = {**os.environ, **(env or {})}
    return subprocess.run(["sh", str(script), *args], capture_output=True, text=True, env=merged, timeout=300, cwd=cwd)


def tree(folder: Path) -> dict[str, str]:
    """Every file below `folder` with its hash: what 'untouched' is compared by."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def full_tree(folder: Path) -> dict[str, str]:
    """Every file and link below `folder`, hashed as the receipt records them (bytecode included)."""
    from bundler.shipped.ort_bundle.engine.engine import entry_sha256, walk

    return {rel: entry_sha256(folder / rel) for rel in walk(folder)}


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".staging" in p.name or ".previous" in p.name)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_bundle(tmp_path_factory.mktemp("bundle") / "tiny-1.0-linux_x86_64")


@pytest.fixture(scope="module")
def installed(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real install (venv + offline pip) shared by the read-only tests."""
    target = tmp_path_factory.mktemp("prefix") / "my apps" / "tiny"
    logs = tmp_path_factory.mktemp("logs")
    result = run_sh(bundle / "install.sh", "--install-dir", str(target), "--log-path", str(logs / "install.log"),
                    "--cache-dir", str(logs / "install-time cache"))
    assert result.returncode == 0, result.stderr
    # Issue 40: progress on stdout, nothing on stderr from a run that succeeds (PowerShell 5.1 hosts make each
    # stderr line an error record).
    assert result.stderr == "" and "installed tiny-1.0 into" in result.stdout, result.stdout + result.stderr
    return target


def test_install_creates_the_environment_receipt_and_hook(installed: Path, bundle: Path) -> None:
    receipt = json.loads((installed / "receipt.json").read_text())
    assert receipt["install_id"] == "tiny-1.0"
    assert receipt["bundle_sha256"] == hashlib.sha256((bundle / "SHA256SUMS").read_bytes()).hexdigest()
    assert receipt["format"] == 2 and receipt["install_dir"] == str(installed)
    assert receipt["selfcheck"] == {"ran": True, "exit_code": 0, "passed": True, "failed_checks": [],
                                    "deferred_until_reboot": False, "after_reboot": None}
    files = {entry["path"]: entry["sha256"] for entry in receipt["files"]}
    assert {"venv/pyvenv.cfg", "models/m.onnx", "run.sh", "install-plan.json", "installer/ort_bundle/__main__.py"} <= set(files)
    assert files == {rel: digest for rel, digest in full_tree(installed).items() if rel != "receipt.json"}
    site = installed / "venv" / "lib" / f"python{PY}" / "site-packages"
    assert (site / "ort_bundle_hook.pth").read_text() == "import ort_bundle_hook\n"
    probe = subprocess.run([str(installed / "venv" / "bin" / "python"), "-c",
                            "import tinypkg, sys; print(tinypkg.__file__); print('ort_bundle_hook' in sys.modules)"],
                           capture_output=True, text=True, check=True)
    module_file, hook_loaded = probe.stdout.splitlines()
    assert Path(module_file).is_relative_to(installed) and hook_loaded == "True"
    assert leftovers(installed.parent) == []


def test_rerun_of_the_same_bundle_is_a_no_op(installed: Path, bundle: Path, tmp_path: Path) -> None:
    before = tree(installed)
    result = run_sh(bundle / "install.sh", "--install-dir", str(installed), "--log-path", str(tmp_path / "log"))
    assert result.returncode == 0, result.stderr
    assert "already installed" in result.stdout
    assert tree(installed) == before


#: Run by an installed environment's interpreter: every .pyc below site-packages that no distribution's
#: `importlib.metadata` files list, and whether each listed file exists.
UNLISTED_BYTECODE = """
import importlib.metadata, json, pathlib, sys
site = pathlib.Path(sys.argv[1])
listed = {str(f.locate()) for d in importlib.metadata.distributions(path=[str(site)]) for f in d.files or ()}
print(json.dumps({"unlisted": sorted(str(p.relative_to(site)) for p in site.rglob("*.pyc") if str(p) not in listed),
                  "pycs": sorted(p for p in listed if p.endswith(".pyc")),
                  "absent": sorted(p for p in listed if not pathlib.Path(p).exists())}))
"""


def test_record_lists_the_bytecode_the_engine_compiled(installed: Path) -> None:
    """Issue 26: pip lists the .pyc it compiles in RECORD (`path,,`); so does the engine, and the receipt
    holds each RECORD's hash after that."""
    site = installed / "venv" / "lib" / f"python{PY}" / "site-packages"
    proc = subprocess.run([str(installed / "venv" / "bin" / "python"), "-I", "-c", UNLISTED_BYTECODE, str(site)],
                          capture_output=True, text=True, check=True)
    found = json.loads(proc.stdout)
    tag = sys.implementation.cache_tag
    own = sorted(f"{Path(rel).parent.as_posix()}/__pycache__/{Path(rel).stem}.{tag}.pyc" for rel in package_files()
                 if rel.endswith(".py"))
    assert found["unlisted"] == [f"__pycache__/ort_bundle_hook.{tag}.pyc", *own]  # no distribution's
    assert f"{site}/tinypkg/__pycache__/__init__.{sys.implementation.cache_tag}.pyc" in found["pycs"]
    assert found["absent"] == []
    record = site / "tinypkg-1.0.dist-info" / "RECORD"
    assert f"tinypkg/__pycache__/__init__.{sys.implementation.cache_tag}.pyc,,\n" in record.read_text()
    receipt = {e["path"]: e["sha256"] for e in json.loads((installed / "receipt.json").read_text())["files"]}
    assert receipt[record.relative_to(installed).as_posix()] == hashlib.sha256(record.read_bytes()).hexdigest()


def test_the_default_log_is_named_after_the_install_folder_and_the_receipt_records_it(bundle: Path,
                                                                                       tmp_path: Path) -> None:
    """Issue 26, defect 1: two installs of one version into two folders write two logs (the name carries the
    first 8 hex digits of the sha256 of the folder's absolute path, as records.log_file_name computes it),
    and each receipt records its own log's absolute path."""
    from bundler.shipped.ort_bundle.records import log_file_name

    state = tmp_path / "state"
    folder = Path("/var/log/ort-bundler") if os.geteuid() == 0 else state / "ort-bundler"
    roots = [tmp_path / "one" / "tiny", tmp_path / "two" / "tiny"]
    logs = [folder / log_file_name("tiny-1.0", str(root), "install") for root in roots]
    try:
        for root in roots:
            result = run_sh(bundle / "install.sh", "--install-dir", f"{root}/", "--no-self-check",
                            env={"XDG_STATE_HOME": str(state)})
            assert result.returncode == 0, result.stderr
        assert logs[0] != logs[1]
        for root, log in zip(roots, logs):
            assert json.loads((root / "receipt.json").read_text())["install_log"] == str(log)
            assert f"into {root} with" in log.read_text() and f"into {roots[0] if root != roots[0] else roots[1]} " \
                not in log.read_text()
        relative = run_sh(bundle / "install.sh", "--install-dir", "rel/tiny", "--no-self-check",
                          "--log-path", "relative.log", env={"XDG_STATE_HOME": str(state)}, cwd=tmp_path)
        assert relative.returncode == 0, relative.stderr
        assert json.loads((tmp_path / "rel" / "tiny" / "receipt.json").read_text())["install_log"] == \
            str(tmp_path / "relative.log")
    finally:
        for log in logs:
            log.unlink(missing_ok=True)


def test_tampered_file_is_an_integrity_failure_and_installs_nothing(tmp_path: Path) -> None:
    bad = make_bundle(tmp_path / "bundle")
    (bad / "payload" / "models" / "m.onnx").write_bytes(b"tampered")
    target = tmp_path / "prefix" / "tiny"
    result = run_sh(bad / "install.sh", "--install-dir", str(target), "--log-path", str(tmp_path / "log"))
    assert result.returncode == CODES["integrity"], result.stderr
    assert "payload/models/m.onnx: FAILED" in result.stderr
    assert not (tmp_path / "prefix").exists()


def test_failed_install_leaves_the_previous_installation_untouched(installed: Path, tmp_path: Path) -> None:
    broken = make_bundle(tmp_path / "bundle", version="2.0", broken_wheel=True)
    before = tree(installed)
    result = run_sh(broken / "install.sh", "--install-dir", str(installed), "--log-path", str(tmp_path / "log"))
    assert result.returncode == CODES["install"], result.stderr
    assert "installing payload/wheels/tinypkg-2.0-py3-none-any.whl failed" in result.stderr
    assert tree(installed) == before
    assert leftovers(installed.parent) == []


def test_failed_self_check_installs_nothing(tmp_path: Path) -> None:
    failing = make_bundle(tmp_path / "bundle", selfcheck="import sys\nsys.exit(3)\n")
    target = tmp_path / "prefix" / "tiny"
    result = run_sh(failing / "install.sh", "--install-dir", str(target), "--log-path", str(tmp_path / "log"))
    assert result.returncode == CODES["selfcheck"], result.stderr
    [error] = result.stderr.splitlines()  # the one sentence that says why; the check's own lines went to stdout
    assert " ERROR: the self-check failed with exit code 3" in error and "previous installation is untouched" in error
    assert "running the self-check" in result.stdout
    assert not target.exists() and leftovers(target.parent) == []


def test_dry_run_changes_nothing(bundle: Path, installed: Path, tmp_path: Path) -> None:
    target = tmp_path / "prefix" / "tiny"
    log = tmp_path / "logs" / "install.log"
    fresh = run_sh(bundle / "install.sh", "--dry-run", "--install-dir", str(target), "--log-path", str(log))
    assert fresh.returncode == 0, fresh.stderr
    assert "nothing was changed" in fresh.stdout
    assert not (tmp_path / "prefix").exists() and not log.parent.exists()
    before = tree(installed)
    forced = run_sh(bundle / "install.sh", "--dry-run", "--force", "--install-dir", str(installed))
    assert forced.returncode == 0, forced.stderr
    assert tree(installed) == before


def test_usage_and_prerequisite_errors_have_their_codes(bundle: Path, tmp_path: Path) -> None:
    unknown = run_sh(bundle / "install.sh", "--instal-dir", str(tmp_path))
    assert unknown.returncode == CODES["usage"] and "unknown argument '--instal-dir'" in unknown.stderr
    old_python = tmp_path / "python3.9"
    old_python.write_text("#!/bin/sh\necho 3.9\n")
    old_python.chmod(0o755)
    wrong = run_sh(bundle / "install.sh", "--python", str(old_python), "--install-dir", str(tmp_path / "t"),
                   "--log-path", str(tmp_path / "log"))
    assert wrong.returncode == CODES["prerequisite"], wrong.stderr
    assert f"is Python 3.9 but this bundle's wheels need Python {PY}" in wrong.stderr
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("not ours")
    refused = run_sh(bundle / "install.sh", "--install-dir", str(foreign), "--log-path", str(tmp_path / "log"))
    assert refused.returncode == CODES["usage"] and "holds no receipt.json" in refused.stderr
    assert sorted(p.name for p in foreign.iterdir()) == ["keep.txt"]


def test_run_sh_passes_arguments_and_exit_code_and_sets_the_environment(installed: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    cache = tmp_path / "cache dir"
    args = ["two words", "it's \"quoted\"", "$HOME", "a;b&c", ""]
    result = subprocess.run(
        [str(installed / "run.sh"), *args], capture_output=True, text=True, timeout=60,
        env={**os.environ, "STANDIN_REPORT": str(report), "STANDIN_EXIT": "7", "ORT_BUNDLE_CACHE_DIR": str(cache),
             "LD_LIBRARY_PATH": "/previous/lib"})
    assert result.returncode == 7, result.stderr
    seen = json.loads(report.read_text())
    assert seen["argv"] == args
    assert seen["hook"] is True
    assert Path(seen["executable"]).parent == installed / "venv" / "bin"
    env = seen["env"]
    assert env["LD_LIBRARY_PATH"] == f"{installed}/{ORT_DIR}:/previous/lib"
    assert env["PYTHONNOUSERSITE"] == "1" and env["PIP_NO_INDEX"] == "1"
    assert env["TEMP"] == env["TMP"] == f"{cache}/tmp" and Path(env["TEMP"]).is_dir()
    assert env["PYTHONPYCACHEPREFIX"] is None and not (cache / "pycache").exists()  # issue 27 §5: no bytecode folder
    assert env["CUDA_CACHE_PATH"] == f"{cache}/cuda" and env["ORT_TENSORRT_CACHE_PATH"] == f"{cache}/tensorrt"
    assert env["APP_MODE"] == "it's $HOME & `id`"


def test_run_sh_self_check_and_missing_environment(installed: Path, tmp_path: Path) -> None:
    ok = subprocess.run([str(installed / "run.sh"), "--self-check"], capture_output=True, text=True,
                        env={**os.environ, "ORT_BUNDLE_CACHE_DIR": str(tmp_path / "c")}, timeout=60)
    assert ok.returncode == 0, ok.stderr
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copyfile(installed / "run.sh", moved / "run.sh")
    missing = subprocess.run(["sh", str(moved / "run.sh")], capture_output=True, text=True, timeout=60)
    assert missing.returncode == CODES["prerequisite"]
    assert f"{moved}/venv/bin/python was not found" in missing.stderr


def test_uninstall_removes_exactly_what_install_created(installed: Path, bundle: Path, tmp_path: Path) -> None:
    """Removes the shared install: keep it below every test that reads `installed`."""
    assert (installed / "cache_dir.txt").read_text().endswith("install-time cache\n")
    (installed / "models" / "mine.onnx").write_bytes(b"user data")
    before = tree(installed)
    dry = run_sh(bundle / "uninstall.sh", "--install-dir", str(installed), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would remove" in dry.stdout and tree(installed) == before
    result = run_sh(bundle / "uninstall.sh", "--install-dir", str(installed), "--log-path", str(tmp_path / "u.log"))
    assert result.returncode == 0, result.stderr
    remaining = sorted(p.relative_to(installed).as_posix() for p in installed.rglob("*"))
    assert remaining == ["models", "models/mine.onnx"]
    again = run_sh(bundle / "uninstall.sh", "--install-dir", str(installed))  # idempotent: nothing left is success
    assert again.returncode == 0 and "nothing to uninstall" in again.stdout


def test_the_engine_refuses_paths_outside_its_roots_and_unverified_inputs(tmp_path: Path) -> None:
    from bundler.shipped.ort_bundle.engine import engine
    from bundler.shipped.ort_bundle.engine.image import copy_entries
    from bundler.shipped.ort_bundle.records import RecordError

    root = make_bundle(tmp_path / "bundle")
    plan = engine.load_plan(root)
    copy_entries([(e.source, e.target) for e in plan.copy], root, tmp_path / "install")
    assert (tmp_path / "install" / "models" / "m.onnx").read_bytes() == (root / "payload/models/m.onnx").read_bytes()
    engine.verify_bundle(root, plan, engine.Log(None))
    sums = (root / "SHA256SUMS").read_text().splitlines()
    (root / "SHA256SUMS").write_text("\n".join(line for line in sums if not line.endswith("payload/app/entry.py")) + "\n")
    with pytest.raises(engine.EngineError, match="does not cover payload/app/entry.py"):
        engine.verify_bundle(root, plan, engine.Log(None))
    original = json.loads((root / "install-plan.json").read_text())
    for key in ("to", "from"):
        for bad in ("../evil", "/etc/passwd", "C:/x", "a/../../b", "a\\..\\..\\b", "..\\x", "a//b", "./a", ""):
            hostile = json.loads(json.dumps(original))
            hostile["copy"][0][key] = bad
            with pytest.raises(RecordError, match="not a relative path below its root"):
                InstallPlan.from_json(hostile)


def test_the_engine_refuses_to_follow_a_link_out_of_the_install_root(tmp_path: Path) -> None:
    """A receipt entry under a folder that is a link elsewhere must not delete outside the install."""
    from bundler.shipped.ort_bundle.engine import engine
    from bundler.shipped.ort_bundle.records import InstalledFile, Receipt, SelfcheckOutcome

    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "keep.txt").write_text("not ours\n")
    root = tmp_path / "inst"
    root.mkdir()
    (root / "venv").symlink_to(outside, target_is_directory=True)
    receipt = Receipt(install_id="tiny-1.0", name="tiny", version="1.0", platform="linux_x86_64",
                      bundle_sha256="0" * 64, installed_at="2026-01-01T00:00:00Z", install_dir=str(root),
                      python_executable=sys.executable, python_version="3.11.0", selfcheck=SelfcheckOutcome(ran=False),
                      reboot_required=False, files=(InstalledFile(path="venv/keep.txt", sha256="0" * 64),))
    (root / "receipt.json").write_text(receipt.dumps())
    with pytest.raises(engine.EngineError, match="leads outside .* through a link"):
        engine.uninstall(root, engine.Log(None), name="tiny", dry_run=False)
    assert (outside / "keep.txt").exists() and (outside / "sub").is_dir()
