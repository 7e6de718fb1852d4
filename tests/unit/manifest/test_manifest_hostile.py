"""Hostile manifests (issue 18, items 1, 9, 11, 12): refused at validation with exit 3 and one line each.

Every case writes its own manifest, runs the real CLI (`fetch`, which validates before anything else) and
checks the exit code, the single error line, and that the folder around the manifest and the cache are
exactly as they were: a refused manifest writes nothing.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from fixtures.hostile import one_line, run, snapshot

from bundler.manifest import MAX_SHAPE_ELEMENTS, load
from bundler.sources.cache import Cache
from bundler.sources.fetch import FetchOptions, fetch_inputs
from bundler.sources.inputs import target_of

SHA = "a" * 64


def manifest_text(*, platform: str = "linux_x86_64", name: str = "app", launch: str = "",
                  model: str = 'path = "m1.onnx"', shapes: str = "{ x = [1, 3] }", model_name: str = "m1",
                  model_sha: str = SHA) -> str:
    return f"""
[bundle]
name = "{name}"
version = "1.0.0"
platform = "{platform}"
python = "3.11"

[ort]
version = "1.23.1"
capi = {{ requirement = "onnxruntime==1.23.1", sha256 = "{SHA}" }}

[[models]]
name = "{model_name}"
{model}
sha256 = "{model_sha}"
shapes = {shapes}

[launch]
module = "myapp.main"
{launch}
"""


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *expected: str) -> str:
    """Write `text` as a manifest, fetch it, and check exit 3, one line naming `expected`, nothing written."""
    folder = tmp_path / "project"
    folder.mkdir(exist_ok=True)
    path = folder / "app.toml"
    path.write_text(text, encoding="utf-8")
    before = snapshot(tmp_path)
    code, err = run(capsys, "fetch", "-q", "--cache", str(tmp_path / "cache"), str(path))
    line = one_line(err, "fetch")
    assert code == 3, err
    for part in expected:
        assert part in line, line
    assert snapshot(tmp_path) == before
    return line


# -- item 1: [launch] env names the launcher or the runtime owns --------------------------------------

@pytest.mark.parametrize("name", ["PATH", "Path", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONHOME", "PYTHONPATH",
                                  "PYTHONSTARTUP", "PYTHONUSERBASE", "ORT_BUNDLE_ROOT", "ORT_BUNDLE_PYTHON",
                                  "ort_bundle_cache_dir", "root", "python", "TEMP", "DYLD_INSERT_LIBRARIES",
                                  "PYTHONPYCACHEPREFIX", "PythonDontWriteBytecode"])
def test_env_names_the_runtime_owns_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    line = refused(tmp_path, capsys, manifest_text(launch=f'env = {{ {name} = "/tmp/elsewhere" }}'),
                   f"launch.env.{name}: found '{name}', a variable the launcher or the runtime sets itself")
    assert "expected a name of your application's own" in line


def test_an_application_env_name_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "app.toml"
    path.write_text(manifest_text(launch='env = { OMP_NUM_THREADS = "2", MYAPP_ROOT_URL = "x" }'), encoding="utf-8")
    assert dict(load(path).launch.env) == {"OMP_NUM_THREADS": "2", "MYAPP_ROOT_URL": "x"}


# -- item 12: env values with a newline are refused at validation, not at render time ----------------

@pytest.mark.parametrize(("value", "code"), [("a\\nb", "U+000A"), ("line\\r", "U+000D"), ("nul\\u0000x", "U+0000"),
                                             ("esc\\u001b[31m", "U+001B")])
def test_env_values_with_control_characters_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         value: str, code: str) -> None:
    refused(tmp_path, capsys, manifest_text(launch=f'env = {{ MYAPP_MODE = "{value}" }}'),
            "launch.env.MYAPP_MODE: found", f"a one-line value without control characters (found {code})")


# -- item 9: [[models]] shapes are bounded -----------------------------------------------------------

@pytest.mark.parametrize("shapes", ["{ x = [1000000000000000] }", "{ x = [64, 3, 1024, 1024] }",
                                    "{ x = [4096, 4096], y = [4096, 4096] }"])
def test_shapes_beyond_the_cap_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], shapes: str) -> None:
    line = refused(tmp_path, capsys, manifest_text(shapes=shapes), "models[0].shapes: model 'm1' asks for",
                   f"expected at most {MAX_SHAPE_ELEMENTS}")
    assert "synthesised input elements" in line


def test_shapes_at_the_cap_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "app.toml"
    path.write_text(manifest_text(shapes=f"{{ x = [{MAX_SHAPE_ELEMENTS}] }}"), encoding="utf-8")
    assert load(path).models[0].shapes == {"x": (MAX_SHAPE_ELEMENTS,)}


# -- item 11: NUL, %00, %2e%2e, very long paths, deep nesting ----------------------------------------

@pytest.mark.parametrize(("model", "expected"), [
    ('url = "https://example.invalid/m%00.onnx"', "found U+0000"),
    ('url = "https://example.invalid/a/%2e%2e/%2E%2E/m.onnx"', "expected a URL without '..' segments"),
    ('url = "https://example.invalid/models/%2e%2e"', "expected a URL without '..' segments"),
    ('url = "https://example.invalid/a%5C..%5Cm.onnx"', "the character '\\\\'"),
    ('url = "https://example.invalid/m\\u0000.onnx"', "found U+0000"),
    ('path = "m\\u0000.onnx"', "found U+0000"),
    ('path = "dir/\\u0007bell.onnx"', "found U+0007"),
    ('path = "' + "d" * 300 + '/m.onnx"', "path components of at most 255 bytes"),
    ('path = "' + "a/" * 2500 + 'm.onnx"', "at most 2048 characters (found 5006)"),
    ('url = "https://example.invalid/' + "x" * 5000 + '.onnx"', "at most 2048 characters"),
    ('url = "https://example.invalid/CON.onnx"', "a device name that Windows reserves"),
])
def test_hostile_locations_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str,
                                       expected: str) -> None:
    refused(tmp_path, capsys, manifest_text(model=model), "models[0].", expected)


@pytest.mark.parametrize("nesting", ["a = " + "[" * 5000 + "]" * 5000, "a = " + "{b=" * 5000 + "}" * 5000])
def test_toml_nested_5000_deep_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], nesting: str) -> None:
    refused(tmp_path, capsys, nesting + "\n", "nests arrays or tables too deeply to parse")


def test_a_manifest_path_with_a_nul_or_5000_characters_is_refused(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(tmp_path)
    for path in (f"{tmp_path}/app\0.toml", f"{tmp_path}/" + "x" * 5000 + ".toml"):
        code, err = run(capsys, "fetch", "-q", "--cache", str(tmp_path / "cache"), path)
        assert code == 3, err
        one_line(err, "fetch")
    assert snapshot(tmp_path) == before


# -- item 12: names Windows reserves, relative file: URLs ------------------------------------------

@pytest.mark.parametrize(("kwargs", "where"), [({"name": "nul"}, "bundle.name: found 'nul'"),
                                               ({"name": "CON"}, "bundle.name: found 'CON'"),
                                               ({"model_name": "com1.v2"}, "models[0].name: found 'com1.v2'"),
                                               ({"model_name": "Aux"}, "models[0].name: found 'Aux'")])
def test_windows_reserved_names_are_refused_for_win_amd64(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          kwargs: dict[str, str], where: str) -> None:
    refused(tmp_path, capsys, manifest_text(platform="win_amd64", **kwargs), where,
            "expected a name that is not a device name Windows reserves")


def test_relative_file_urls_resolve_against_the_manifest_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "project"
    (project / "models").mkdir(parents=True)
    data = b"model bytes"
    (project / "models" / "m1.onnx").write_bytes(data)
    text = manifest_text(model='url = "file:models/m1.onnx"', model_sha=hashlib.sha256(data).hexdigest())
    (project / "app.toml").write_text(text, encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # a relative file: URL must not depend on the working directory
    manifest = load(project / "app.toml")
    assert manifest.models[0].source.location == (project / "models" / "m1.onnx").as_uri()
    found = fetch_inputs([manifest.models[0].source], cache=Cache(tmp_path / "cache"), target=target_of(manifest),
                         options=FetchOptions(quiet=True))
    assert found["models[0]"].read_bytes() == data
    line = refused(tmp_path, capsys, manifest_text(model='url = "file://server/share/m1.onnx"'),
                   "models[0].url: found", "expected a file URL on this machine")
    assert "'server'" in line
