"""apply-delta.sh (issue 39): a release that was never installed applies a delta with its own applier, found in the
unpacked bundle (payload/ort_bundle, started through the package's start file), and a Python 3.8+ on PATH; with
none it refuses in one sentence. The bundle folder here is the rendered script beside a copy of the shipped
package, which is what an unpacked bundle holds of them; the Windows script is tests/integration/wine/test_delta_wine.py's."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from fixtures.cli import REPO
from unit.assembly.test_render import context
from unit.shipped.test_delta_refusals import pair  # noqa: F401  (the module fixture)

from bundler.assembly.render import render_scripts
from bundler.shipped.ort_bundle.delta_apply import EXIT_CODES


def unpacked_bundle(folder: Path, platform: str, *, script: str) -> Path:
    """The rendered `script` and the shipped package where a bundle puts them."""
    folder.mkdir()
    (folder / script).write_bytes(render_scripts(context(platform, runtime_python=None, runtime_bundle_python=None))[script])
    shutil.copytree(REPO / "bundler" / "shipped" / "ort_bundle", folder / "payload" / "ort_bundle",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return folder / script


def path_with(folder: Path, **programs: str) -> str:
    """A PATH of one folder holding only the named programs (links to the real ones)."""
    folder.mkdir()
    for name, target in programs.items():
        (folder / name).symlink_to(target)
    return str(folder)


def test_apply_delta_sh_rebuilds_the_next_release_with_the_python_on_path(pair, tmp_path: Path) -> None:
    old, new, delta = pair
    script = unpacked_bundle(tmp_path / "app-1.0.0", "linux_x86_64", script="apply-delta.sh")
    env = {"PATH": path_with(tmp_path / "bin", python3=sys.executable, dirname=shutil.which("dirname") or "")}
    out = tmp_path / "out"
    result = subprocess.run(["/bin/sh", str(script), str(old), str(delta), "-o", str(out)], env=env,
                            capture_output=True, text=True, cwd=tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr
    assert (out / new.name).read_bytes() == new.read_bytes()
    sha256 = hashlib.sha256(new.read_bytes()).hexdigest()
    assert (out / f"{new.name}.sha256").read_text(encoding="utf-8") == f"{sha256}  {new.name}\n"
    assert f"rebuilt {out / new.name}" in result.stdout


def test_apply_delta_sh_without_a_python_refuses_in_one_sentence(pair, tmp_path: Path) -> None:
    old, _, delta = pair
    script = unpacked_bundle(tmp_path / "app-1.0.0", "linux_x86_64", script="apply-delta.sh")
    env = {"PATH": path_with(tmp_path / "bin", dirname=shutil.which("dirname") or "")}
    result = subprocess.run(["/bin/sh", str(script), str(old), str(delta), "-o", str(tmp_path / "out")], env=env,
                            capture_output=True, text=True, cwd=tmp_path)

    assert result.returncode == EXIT_CODES["unavailable"], result.stdout + result.stderr
    assert result.stderr.splitlines() == ["apply-delta.sh: no Python 3.8 or newer found (tried: python3 python); "
                                          "install one, or apply with run.sh --apply of an installed release"]
    assert not (tmp_path / "out").exists()


def test_the_start_file_names_the_apply_program() -> None:
    from bundler.shipped.ort_bundle.__main__ import PROGRAMS

    assert PROGRAMS["apply"] == "delta_apply"
