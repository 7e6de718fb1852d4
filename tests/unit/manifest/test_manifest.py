"""Manifest validation: every bad manifest gets one clear line per problem, exit code 3, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundler.cli import main
from bundler.errors import ManifestError
from bundler.manifest import load

SHA = "a" * 64
GOOD = f"""
[bundle]
name = "app"
version = "1.0.0"
platform = "win_amd64"
python = "3.11"

[ort]
version = "1.23.1"
capi = {{ requirement = "onnxruntime==1.23.1", sha256 = "{SHA}" }}

[python]
lock = "app.lock.toml"

[[models]]
name = "m1"
path = "m1.onnx"
sha256 = "{SHA}"
shapes = {{ x = [1, 3] }}

[launch]
module = "myapp.main"
env = {{ OMP_NUM_THREADS = "2" }}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "app.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_good_manifest_parses_into_typed_records(tmp_path: Path) -> None:
    manifest = load(write(tmp_path, GOOD))
    assert manifest.bundle.stem == "app-1.0.0-win_amd64"
    assert manifest.bundle.python_tag == "cp311"
    assert manifest.ort.capi.kind == "requirement" and manifest.ort.capi.location == "onnxruntime==1.23.1"
    assert manifest.models[0].source.location == str(tmp_path / "m1.onnx")
    assert manifest.models[0].shapes == {"x": (1, 3)}
    assert manifest.python.lock == tmp_path / "app.lock.toml"
    assert [i.key for i in manifest.inputs()] == ["ort.capi", "models[0]"]
    with pytest.raises(AttributeError):
        manifest.bundle.name = "other"  # type: ignore[misc]
    assert manifest.bundle.publisher is None
    published = load(write(tmp_path, GOOD.replace('python = "3.11"', 'python = "3.11"\npublisher = "Example Corp"')))
    assert published.bundle.publisher == "Example Corp"


BAD = {
    "unknown key with hint": (GOOD.replace('python = "3.11"', 'pyhton = "3.11"'),
                              ["bundle.pyhton: unknown key; did you mean 'python'?", "bundle.python: missing"]),
    "unknown section": (GOOD + "\n[bundel]\nx = 1\n", ["bundel: unknown key; did you mean 'bundle'?"]),
    "missing sha256": (GOOD.replace(f'path = "m1.onnx"\nsha256 = "{SHA}"', 'path = "m1.onnx"'),
                       ["models[0].sha256: missing; every input must be pinned by its sha256"]),
    "malformed sha256": (GOOD.replace(f'sha256 = "{SHA}"\nshapes', 'sha256 = "abc123"\nshapes'),
                         ["models[0].sha256: found 'abc123', expected 64 lowercase hex digits"]),
    "uppercase sha256": (GOOD.replace(f'sha256 = "{SHA}"\nshapes', f'sha256 = "{SHA.upper()}"\nshapes'),
                         ["models[0].sha256: found", "expected 64 lowercase hex digits"]),
    "publisher with a line break": (GOOD.replace('python = "3.11"', 'python = "3.11"\npublisher = "A\\nB"'),
                                    ["bundle.publisher: found 'A\\nB', expected 1 to 128 characters without control"]),
    "duplicate model names": (GOOD + f'\n[[models]]\nname = "M1"\npath = "other.onnx"\nsha256 = "{SHA}"\n',
                              ["models[1].name: found 'M1' again (also models[0]), expected unique model names"]),
    "bad platform": (GOOD.replace('platform = "win_amd64"', 'platform = "win32"'),
                     ["bundle.platform: found 'win32', expected one of win_amd64, linux_x86_64"]),
    "bad python": (GOOD.replace('python = "3.11"', 'python = "311"'),
                   ["bundle.python: found '311', expected a Python version such as '3.11'"]),
    "two sources": (GOOD.replace('path = "m1.onnx"', 'path = "m1.onnx"\nurl = "https://example.com/m1.onnx"'),
                    ["models[0]: found 'url' and 'path', expected exactly one of"]),
    "ftp url": (GOOD.replace('path = "m1.onnx"', 'url = "ftp://example.com/m1.onnx"'),
                ["models[0].url: found 'ftp://example.com/m1.onnx', expected an https, http or file URL"]),
    "unpinned requirement": (GOOD.replace('requirement = "onnxruntime==1.23.1"', 'requirement = "onnxruntime>=1.23"'),
                             ["ort.capi.requirement: found 'onnxruntime>=1.23', expected an exact pin 'name==version'"]),
    "requirement disagrees with ort.version": (
        GOOD.replace('requirement = "onnxruntime==1.23.1"', 'requirement = "onnxruntime==1.22.0"'),
        ["ort.capi.requirement: found 'onnxruntime==1.22.0', expected 'onnxruntime==1.23.1' to match ort.version"]),
    "wheel and capi": (GOOD.replace("[python]", f'wheel = {{ path = "x.whl", sha256 = "{SHA}" }}\n[python]'),
                       ["ort: found both 'wheel' and 'capi', expected one Python binding source"]),
    "no ort source": (GOOD.replace(f'capi = {{ requirement = "onnxruntime==1.23.1", sha256 = "{SHA}" }}', ""),
                      ["ort: missing 'wheel', 'capi' or 'archive'"]),
    "missing section": ("\n".join(GOOD.split("\n")[7:]), ["bundle: missing section [bundle]"]),
    "bad shapes": (GOOD.replace("x = [1, 3]", "x = [1, -3]"),
                   ["models[0].shapes.x: found [1, -3], expected a list of positive integers"]),
    "bad module": (GOOD.replace('module = "myapp.main"', 'module = "my-app"'),
                   ["launch.module: found 'my-app', expected a dotted Python module name"]),
    "bad env": (GOOD.replace('OMP_NUM_THREADS = "2"', "OMP_NUM_THREADS = 2"),
                ["launch.env: found {'OMP_NUM_THREADS': 2}, expected a table of NAME = \"value\" strings"]),
    "vc_redist on linux": (GOOD.replace('platform = "win_amd64"', 'platform = "linux_x86_64"')
                           + f'\n[vc_redist]\npath = "vc.exe"\nsha256 = "{SHA}"\n',
                           ["vc_redist: found a VC++ redistributable for platform 'linux_x86_64'"]),
    "bad epoch": (GOOD.replace('python = "3.11"', 'python = "3.11"\nsource_date_epoch = 12'),
                  ["bundle.source_date_epoch: found 12, expected whole seconds since 1970 between 1980 and 2100"]),
    "bad extra requirement": (GOOD.replace('lock = "app.lock.toml"', 'lock = "app.lock.toml"\nrequirements = ["numpy>>"]'),
                              ["python.requirements[0]: found 'numpy>>', expected a requirement such as 'numpy>=1.21'"]),
    "allow_unsigned not a boolean": (GOOD.replace('version = "1.23.1"', 'version = "1.23.1"\nallow_unsigned = "yes"'),
                                     ["ort.allow_unsigned: found 'yes', expected true or false"]),
    "empty gpu section": (GOOD + "\n[gpu]\n", ["gpu.cuda: missing, expected a CUDA version such as '11.8'"]),
    "empty vc_redist section": (GOOD + "\n[vc_redist]\n", ["vc_redist: found none, expected exactly one of 'url', 'path' or 'requirement'"]),
    "gpu without sources": (GOOD + '\n[gpu]\ncuda = "11.8"\ncudnn = "8.6"\n',
                            ["gpu.sources: found [], expected a non-empty array of tables [[gpu.sources]]"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_manifest_reports_every_problem_with_exit_code_3(tmp_path: Path, case: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    text, expected = BAD[case]
    path = write(tmp_path, text)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ManifestError) as info:
        load(path)
    message = str(info.value)
    for fragment in expected:
        assert fragment in message, message
    assert all(line.startswith("app.toml: ") for line in info.value.problems)
    code = main(["build", str(path), "--cache", str(tmp_path / "cache"), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 3
    assert expected[0] in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_all_problems_are_reported_at_once(tmp_path: Path) -> None:
    text = GOOD.replace('platform = "win_amd64"', 'platform = "mac"').replace('python = "3.11"', 'python = "x"')
    text = text.replace(f'sha256 = "{SHA}"\nshapes', 'shapes')
    with pytest.raises(ManifestError) as info:
        load(write(tmp_path, text))
    assert len(info.value.problems) == 3


def test_not_toml_and_not_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "[bundle\nname = 1")
    assert main(["fetch", str(path), "--cache", str(tmp_path / "c")]) == 3
    assert "app.toml: not valid TOML" in capsys.readouterr().err
    assert main(["fetch", str(tmp_path / "missing.toml"), "--cache", str(tmp_path / "c")]) == 3
    assert "manifest not found" in capsys.readouterr().err
    path.write_bytes(b"\xff\xfe[bundle]")
    assert main(["fetch", str(path), "--cache", str(tmp_path / "c")]) == 3
    assert "not UTF-8" in capsys.readouterr().err


def test_platform_python_pair_the_wheel_cannot_serve(tmp_path: Path) -> None:
    """A pinned wheel that cannot serve the target is refused while loading, before any download."""
    wheel = f'capi = {{ path = "onnxruntime-1.23.1-cp312-cp312-win_amd64.whl", sha256 = "{SHA}" }}'
    text = GOOD.replace(f'capi = {{ requirement = "onnxruntime==1.23.1", sha256 = "{SHA}" }}', wheel)
    with pytest.raises(ManifestError, match=r"ort.capi: found 'onnxruntime-1.23.1-cp312-cp312-win_amd64.whl', "
                                            r"expected a wheel for win_amd64 and Python 3.11"):
        load(write(tmp_path, text))
    linux = text.replace('platform = "win_amd64"', 'platform = "linux_x86_64"').replace('python = "3.11"', 'python = "3.12"')
    with pytest.raises(ManifestError, match=r"expected a wheel for linux_x86_64 and Python 3.12"):
        load(write(tmp_path, linux))
    with pytest.raises(ManifestError, match=r"bundle.python: found '3.99', expected a Python from 3.8 to 3.14"):
        load(write(tmp_path, GOOD.replace('python = "3.11"', 'python = "3.99"')))
