"""A non-editable install of ort-bundler finds its templates and target code (package data)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import REPO

pytestmark = pytest.mark.integration


def test_wheel_carries_templates_and_a_plain_install_uses_them(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
                   check=True, capture_output=True)
    wheel = next(dist.glob("ort_bundler-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for required in ("bundler/templates/install.sh.j2", "bundler/templates/install.ps1.j2",
                     "bundler/templates/manifest.toml.j2", "bundler/shipped/ort_bundle/selfcheck/selfcheck.py", "bundler/shipped/ort_bundle/engine/engine.py",
                     "bundler/shipped/ort_bundle/selfcheck/identity.onnx", "bundler/templates/try-in-sandbox.cmd.j2", "bundler/shipped/ort_bundle/sandbox/sandbox.py",
                     "bundler/templates/windows/README-INSTALL.txt.j2", "bundler/templates/linux/README-INSTALL.txt.j2"):
        assert required in names
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    probe = subprocess.run([sys.executable, "-c", "import bundler, sys; print(bundler.__file__)"], env=env, cwd=work,
                           capture_output=True, text=True, check=True)
    assert probe.stdout.startswith(str(site))  # not the checkout
    subprocess.run([sys.executable, "-m", "bundler", "init", "-o", "app.toml"], env=env, cwd=work, check=True)
    assert "[bundle]" in (work / "app.toml").read_text()
    script = ("from bundler.assembly.render import EntryPoint, ScriptContext, render_scripts;"
              "from bundler.target_platform import WINDOWS;"
              "ctx = ScriptContext(name='a', version='1', target=WINDOWS, python='3.11', vc_runtime_min=None,"
              " vc_redist=None, gpu_dll_dirs=(), gpu_preload=(), dll_dirs=(), entry_point=None, cache_dir=None, env={},"
              " default_install_dir='C:\\\\ort\\\\a');"
              "print(sorted(render_scripts(ctx)))")
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=work, capture_output=True, text=True, check=True)
    assert "install.ps1" in out.stdout and "payload/launchers/run.cmd" in out.stdout and "README-INSTALL.txt" in out.stdout
