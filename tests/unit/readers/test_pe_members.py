"""Windows binaries in a pinned archive read once per archive hash (bundler/readers/pe_members.py), on the real
onnxruntime win_amd64 wheel's DLLs, placed as the input cache places a file (a folder named by its sha256)."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

from bundler.hashing import file_sha256
from bundler.readers.archives import SafeArchive
from bundler.readers.pe import inspect_pe
from bundler.readers.pe_members import read_pe_members
from bundler.readers.scan_store import FOLDER
from bundler.readers.signatures import signature_evidence

DLLS = ("onnxruntime/capi/onnxruntime.dll", "onnxruntime/capi/onnxruntime_providers_shared.dll")


@pytest.fixture
def cached_wheel(ort_win_wheel: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "inputs" / file_sha256(ort_win_wheel)
    folder.mkdir(parents=True)
    os.link(ort_win_wheel, folder / ort_win_wheel.name)
    return folder / ort_win_wheel.name


def read(wheel: Path, work: Path, store: Path | None, *, shipped: bool = False) -> list:
    with SafeArchive.open(wheel, label="ort wheel") as archive:
        return read_pe_members(archive, wheel, DLLS, label="ort wheel", work=work, store=store, shipped=shipped)


def written(work: Path) -> list[str]:
    return sorted(p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file())


def test_a_second_build_reads_no_member_and_gets_the_same_facts_and_bytes(cached_wheel: Path, tmp_path: Path) -> None:
    store = tmp_path / "derived"
    first = read(cached_wheel, tmp_path / "work1", store)
    assert written(tmp_path / "work1") == list(DLLS)  # a first build reads and writes each one out, once
    with zipfile.ZipFile(cached_wheel) as zf:
        for member, name in zip(first, DLLS):
            assert member.file.sha256 == file_sha256(tmp_path / "work1" / name)
            assert member.info == inspect_pe(tmp_path / "work1" / name, label=name)
            assert member.file.packed.usize == zf.getinfo(name).file_size
    again = read(cached_wheel, tmp_path / "work2", store)
    assert not (tmp_path / "work2").exists()  # nothing read, nothing written
    assert [(m.file.sha256, m.file.packed, m.info) for m in again] == [(m.file.sha256, m.file.packed, m.info)
                                                                        for m in first]
    assert all(m.file.extracted is None for m in again)


def test_shipped_members_are_read_again_until_their_signature_evidence_is_kept(cached_wheel: Path,
                                                                                tmp_path: Path) -> None:
    store = tmp_path / "derived"
    first = read(cached_wheel, tmp_path / "work1", store, shipped=True)
    assert written(tmp_path / "work1") == list(DLLS)
    read(cached_wheel, tmp_path / "work2", store, shipped=True)
    assert written(tmp_path / "work2") == list(DLLS)  # the signature policy has not kept its evidence yet
    signature_evidence(first[0].file.extracted, store=store)  # as the signature policy does for the first
    read(cached_wheel, tmp_path / "work3", store, shipped=True)
    assert written(tmp_path / "work3") == [DLLS[1]]


@pytest.mark.parametrize("damage", ["not json", "wrong method", "not a hash"])
def test_a_damaged_scan_entry_is_read_again_not_trusted(cached_wheel: Path, tmp_path: Path, damage: str) -> None:
    store = tmp_path / "derived"
    first = read(cached_wheel, tmp_path / "work1", store)
    [entry] = (store / FOLDER).rglob("*.json")
    kept = json.loads(entry.read_text())
    if damage == "not json":
        entry.write_text("{")
    else:
        field, value = ("method", 12) if damage == "wrong method" else ("sha256", "0" * 63)
        kept[DLLS[0]][field] = value
        entry.write_text(json.dumps(kept))
    again = read(cached_wheel, tmp_path / "work2", store)
    assert written(tmp_path / "work2") == (list(DLLS) if damage == "not json" else [DLLS[0]])
    assert [m.file.packed for m in again] == [m.file.packed for m in first]


def test_an_archive_outside_the_input_cache_is_read_every_time(ort_win_wheel: Path, tmp_path: Path) -> None:
    store = tmp_path / "derived"
    read(ort_win_wheel, tmp_path / "work1", store)
    read(ort_win_wheel, tmp_path / "work2", store)
    assert written(tmp_path / "work2") == list(DLLS) and not (store / FOLDER).exists()
