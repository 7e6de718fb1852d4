"""The delta applier on Windows: python.org's embeddable CPython 3.11.9 (what a Windows bundle with a
`[python] runtime` carries as its python.exe) runs the shipped applier under Wine, with Windows paths
(Z:\\...), Windows file semantics for the temporary file and the rename into place, and CRLF-free output.

The zips are the fast tier's (tests/unit/shipped/test_delta_refusals.py: real zips with a top folder, a stored wheel-like
member and deflated members) and the delta the real writer's. `run.cmd --apply` of an installed Windows bundle
is tests/integration/wine/test_wine_launcher.py's; a Windows quickstart pair end to end is not covered (its builds
take minutes), the launcher's dispatch to the applier being the same Python on both platforms
(tests/integration/real_wheels/test_delta.py runs it through run.sh)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from fixtures.windows_python import WindowsPython, copy_interpreter, windows_python  # noqa: F401
from fixtures.wine import wine  # noqa: F401
from unit.shipped.test_apply_delta_script import unpacked_bundle
from unit.shipped.test_delta_refusals import APPLIER, pair  # noqa: F401 (the module fixture)

from bundler.shipped.ort_bundle.delta_apply import EXIT_CODES

pytestmark = pytest.mark.wine


def test_the_bundled_python_exe_applies_a_delta_under_wine(wine, windows_python: WindowsPython, pair,
                                                           tmp_path: Path) -> None:
    old, new, delta = pair
    python = copy_interpreter(windows_python.embeddable, tmp_path / "python")
    out = tmp_path / "result"
    proc = wine.run([wine.to_windows(python), "-I", wine.to_windows(APPLIER), wine.to_windows(old),
                     wine.to_windows(delta), "-o", wine.to_windows(out)], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out / new.name).read_bytes() == new.read_bytes()
    line = (out / f"{new.name}.sha256").read_bytes()
    assert line == f"{hashlib.sha256(new.read_bytes()).hexdigest()}  {new.name}\n".encode()
    assert sorted(p.name for p in out.iterdir()) == [new.name, f"{new.name}.sha256"]

    wrong = wine.run([wine.to_windows(python), "-I", wine.to_windows(APPLIER), wine.to_windows(new),
                      wine.to_windows(delta), "-o", wine.to_windows(tmp_path / "again")], timeout=300)
    assert wrong.returncode == EXIT_CODES["wrong_old"], wrong.stdout + wrong.stderr
    assert "Traceback" not in wrong.stderr and not (tmp_path / "again").exists()


def test_apply_delta_cmd_of_an_unpacked_release_finds_python_on_path_or_refuses(wine, windows_python: WindowsPython,
                                                                                pair, tmp_path: Path) -> None:
    """A Windows release that was never installed: apply-delta.cmd in its unpacked folder runs its own applier with
    the python.exe it finds on PATH (py.exe does not exist under Wine, so the PATH step is the one shown); with no
    Python anywhere it refuses in one sentence and writes nothing."""
    old, new, delta = pair
    script = unpacked_bundle(tmp_path / "app 1.0.0 & co", "win_amd64", script="apply-delta.cmd")
    python = copy_interpreter(windows_python.embeddable, tmp_path / "python")
    out = tmp_path / "result"
    args = [wine.to_windows(old), wine.to_windows(delta), "-o", wine.to_windows(out)]
    found = wine.cmd(script, *(f'"{arg}"' for arg in args),
                     env={"WINEPATH": wine.to_windows(python.parent)})  # Wine's PATH is the registry's; WINEPATH goes first
    assert found.returncode == 0, found.stdout + found.stderr
    assert (out / new.name).read_bytes() == new.read_bytes()

    missing = wine.cmd(script, *(f'"{arg}"' for arg in [*args[:3], wine.to_windows(tmp_path / "again")]))
    assert missing.returncode == EXIT_CODES["unavailable"], missing.stdout + missing.stderr
    assert ("apply-delta.cmd: no Python 3.8 or newer found (tried py -3 and python.exe on PATH); install one, or apply "
            "with run.cmd --apply of an installed release") in missing.stderr
    assert not (tmp_path / "again").exists()
