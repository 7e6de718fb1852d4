"""How much of a new release the delta finds in the old one: a wheel upgraded to its next release, renamed
with its version and rebuilt at another time (every member's timestamp differs, one file changed), is
matched member by member inside the wheel, so the delta carries little more than that one file.

The wheel is sympy 1.14.0, fetched for real with pip, rewritten by zipfile into the two releases; the
bundles around it are real zips with a top folder, as tests/unit/shipped/test_delta_refusals.py makes them."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from fixtures.wheels import pip_download
from unit.shipped.test_delta_refusals import deltafile, make_zip, standalone

from bundler.writer.delta import plan

pytestmark = pytest.mark.integration

CHANGED = "sympy/__init__.py"


def release_of(source: Path, version: str, stamp: tuple[int, int, int, int, int, int], *, change: bool) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(source) as wheel, zipfile.ZipFile(out, "w") as rebuilt:
        for info in wheel.infolist():
            data = wheel.read(info)
            name = info.filename.replace("sympy-1.14.0.dist-info", f"sympy-{version}.dist-info")
            data += b"\n# changed in this release\n" if change and name == CHANGED else b""
            rebuilt.writestr(zipfile.ZipInfo(name, stamp), data, compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue()


def test_an_upgraded_wheel_is_matched_member_by_member(tmp_path: Path) -> None:
    source = pip_download("sympy==1.14.0", "win_amd64")
    before = release_of(source, "1.14.0", (2025, 1, 1, 0, 0, 0), change=False)
    after = release_of(source, "1.14.1", (2025, 2, 1, 0, 0, 0), change=True)
    old = make_zip(tmp_path / "app-1.0.0-linux_x86_64.zip", "app-1.0.0-linux_x86_64",
                   {"payload/wheels/sympy-1.14.0-py3-none-any.whl": before})
    new = make_zip(tmp_path / "app-1.1.0-linux_x86_64.zip", "app-1.1.0-linux_x86_64",
                   {"payload/wheels/sympy-1.14.1-py3-none-any.whl": after})
    steps = plan(old, new)
    delta = deltafile(steps, old, new, tmp_path / "app.delta")
    with zipfile.ZipFile(io.BytesIO(after)) as wheel:
        changed = wheel.getinfo(CHANGED).compress_size
        members = len(wheel.infolist())
    # The changed file's deflated bytes, and a few bytes per member (its new timestamp, its new offset, the ops).
    assert delta.stat().st_size <= changed + 8 * members, (delta.stat().st_size, changed, members)
    assert steps.members.added == ("payload/wheels/sympy-1.14.1-py3-none-any.whl",)
    proc = standalone(old, delta, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / new.name).read_bytes() == new.read_bytes()
