"""`init` never writes a manifest that fails its own validation (issue 18, item 12).

The hostile inputs are `--from` files whose names would make invalid or clashing [[models]] names:
two `model.onnx` from two folders, stems with characters a name may not hold, a Windows device name,
and a file whose name no manifest may carry (refused with exit 2, nothing written).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.hostile import one_line, run, snapshot
from fixtures.models import make_identity_model

from bundler.manifest import load


def models(tmp_path: Path, *names: str) -> list[str]:
    paths = []
    for i, name in enumerate(names):
        path = tmp_path / f"d{i}" / name
        path.parent.mkdir()
        make_identity_model(path)
        paths.append(str(path))
    return paths


@pytest.mark.parametrize(("names", "expected"), [
    (["model.onnx", "model.onnx", "MODEL.onnx"], ["model", "model-2", "MODEL-3"]),
    ([".hidden.onnx", "-dash.onnx", "my model (v2).onnx"], ["hidden", "dash", "my-model--v2-"]),
    (["con.onnx", "NUL.onnx", "x" * 90 + ".onnx"], ["con-model", "NUL-model", "x" * 56]),
])
def test_init_names_models_uniquely_and_validly(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                names: list[str], expected: list[str]) -> None:
    out = tmp_path / "app.toml"
    code, err = run(capsys, "init", "-q", "--from", *models(tmp_path, *names), "-o", str(out))
    assert code == 0, err
    text = out.read_text(encoding="utf-8").replace("<sha256 of the wheel for your platform>", "0" * 64)
    out.write_text(text, encoding="utf-8")
    assert [m.name for m in load(out).models] == expected


def test_init_refuses_a_file_no_manifest_may_name_and_writes_nothing(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(tmp_path)
    bad = tmp_path / "new\nline.onnx"
    make_identity_model(bad)
    before = snapshot(tmp_path)
    code, err = run(capsys, "init", "--from", str(bad), "-o", str(tmp_path / "app.toml"))
    assert code == 2, err
    line = one_line(err, "init")
    assert "the starter manifest for these --from files would not be valid" in line
    assert "found U+000A" in line
    assert snapshot(tmp_path) == before
