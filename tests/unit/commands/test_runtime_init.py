"""`ort-bundler init --from` recognises the two interpreters a bundle can carry and pins them under [python]."""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli

from bundler.manifest import parse
from bundler.operations.init import SHA256_PLACEHOLDER


def _file(folder: Path, name: str) -> Path:
    """init recognises a file by its name and pins its bytes; these bytes are not an interpreter."""
    path = folder / name
    path.write_bytes(f"stand-in bytes for {name}\n".encode())
    return path


@pytest.mark.parametrize(("name", "platform", "python"), [
    ("python-3.11.9-embed-amd64.zip", "win_amd64", "3.11"),
    ("cpython-3.12.7+20241016-x86_64-unknown-linux-gnu-install_only.tar.gz", "linux_x86_64", "3.12"),
    ("cpython-3.11.14+20251014-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz", "linux_x86_64", "3.11"),
])
def test_init_pins_the_runtime_and_takes_platform_and_python_from_it(name: str, platform: str, python: str,
                                                                     tmp_path: Path) -> None:
    runtime = _file(tmp_path, name)
    run_cli("init", "--from", str(runtime), "-o", str(tmp_path / "app.toml"))
    data = tomllib.loads((tmp_path / "app.toml").read_text())
    assert data["bundle"]["platform"] == platform and data["bundle"]["python"] == python
    assert data["python"]["runtime"] == {"path": name, "sha256": hashlib.sha256(runtime.read_bytes()).hexdigest()}
    text = (tmp_path / "app.toml").read_text().replace(SHA256_PLACEHOLDER, "0" * 64)  # the wheel is not given
    manifest = parse(tomllib.loads(text), path=tmp_path / "app.toml")
    assert manifest.python.runtime is not None and manifest.python.runtime.key == "python.runtime"
    assert manifest.python.runtime in manifest.inputs()


def test_init_refuses_a_runtime_for_another_platform_than_the_wheel(ort_win_wheel: Path, tmp_path: Path) -> None:
    runtime = _file(tmp_path, "cpython-3.11.14+20251014-x86_64-unknown-linux-gnu-install_only.tar.gz")
    proc = run_cli("init", "--from", str(ort_win_wheel), str(runtime), "-o", str(tmp_path / "app.toml"), check=False)
    assert proc.returncode == 2
    assert "the files are for different platforms" in proc.stderr and "(win_amd64)" in proc.stderr
    assert not (tmp_path / "app.toml").exists()


def test_init_refuses_a_runtime_for_another_python_than_the_wheel(ort_win_wheel: Path, tmp_path: Path) -> None:
    runtime = _file(tmp_path, "python-3.12.4-embed-amd64.zip")
    proc = run_cli("init", "--from", str(ort_win_wheel), str(runtime), "-o", str(tmp_path / "app.toml"), check=False)
    assert proc.returncode == 2 and "Python 3.12 (tag cp312)" in proc.stderr
    assert not (tmp_path / "app.toml").exists()


def test_a_runtime_cannot_be_a_requirement(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text(
        '[bundle]\nname = "a"\nversion = "1"\nplatform = "win_amd64"\npython = "3.11"\n'
        '[ort]\nversion = "1.23.1"\narchive = { path = "x.zip", sha256 = "' + "0" * 64 + '" }\n'
        '[python]\nruntime = { requirement = "python==3.11.9", sha256 = "' + "0" * 64 + '" }\n')
    proc = run_cli("build", str(tmp_path / "m.toml"), check=False)
    assert proc.returncode == 3 and "python.runtime.requirement" in proc.stderr and "init --from" in proc.stderr


def test_the_starter_without_runtime_explains_how_to_pin_one(tmp_path: Path) -> None:
    run_cli("init", "-o", str(tmp_path / "app.toml"))
    text = (tmp_path / "app.toml").read_text()
    assert "# runtime = {" in text and "init --from" in text


def test_the_linux_example_pins_a_runtime_and_is_otherwise_the_quickstart() -> None:
    from bundler.manifest import load
    from bundler.operations.init import PY_STANDALONE

    example, quickstart = load(MANIFESTS / "quickstart-linux-runtime.toml"), load(MANIFESTS / "quickstart-linux.toml")
    runtime = example.python.runtime
    assert runtime is not None and runtime.kind == "url" and PY_STANDALONE.match(runtime.filename or "")
    assert (example.ort, example.python.lock, example.models) == (quickstart.ort, quickstart.python.lock,
                                                                  quickstart.models)


def test_the_windows_example_is_refused_until_its_runtime_is_pinned(tmp_path: Path) -> None:
    """python.org's bytes cannot be pinned from here: the example names the one key the user must fill in."""
    from bundler.operations.init import PY_EMBED

    text = (MANIFESTS / "quickstart-win-runtime.toml").read_text()
    proc = run_cli("build", str(MANIFESTS / "quickstart-win-runtime.toml"), check=False)
    assert proc.returncode == 3 and "python.runtime.sha256" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, "only the placeholder may be wrong"
    pinned = re.sub(r'sha256 = "<sha256 of python[^"]*"', f'sha256 = "{"0" * 64}"', text)
    manifest = parse(tomllib.loads(pinned), path=MANIFESTS / "quickstart-win-runtime.toml")
    assert manifest.python.runtime is not None and PY_EMBED.match(manifest.python.runtime.filename or "")
