"""The build puts every member under the bundle's top folder: each kind keeps what it is made from."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bundler.operations.build import _rooted
from bundler.writer.members import DEFLATED, Member, Prepared


def test_rooting_keeps_every_field_of_every_kind_of_member(tmp_path: Path) -> None:
    """A member of an input archive (the Linux GPU libraries) lost its packed bytes here once, and the build of
    manifests/gpu-linux-cuda12.toml stopped ("exactly one of source, data and packed is needed")."""
    source = tmp_path / "f"
    source.write_bytes(b"x")
    packed = Prepared(method=DEFLATED, crc=1, usize=2, csize=3, path=source, offset=4, within="lib/a.so", packed_sha256="b" * 64)
    members = [Member(name="payload/f", source=source, sha256="a" * 64, executable=True),
               Member(name="payload/g", data=b"g"),
               Member(name="payload/gpu/a.so", packed=packed, sha256="c" * 64),
               Member(name="payload/h", source=source, crc=7)]
    for member in members:
        rooted = _rooted("top", member)
        assert rooted.name == f"top/{member.name}"
        assert {f.name: getattr(rooted, f.name) for f in dataclasses.fields(rooted) if f.name != "name"} == \
            {f.name: getattr(member, f.name) for f in dataclasses.fields(member) if f.name != "name"}
