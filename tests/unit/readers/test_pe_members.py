"""Windows binaries in a pinned archive read once per archive hash (bundler/readers/pe_members.py), on the real
onnxruntime win_amd64 wheel's DLLs, placed as the input cache places a file (a folder named by its sha256)."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from fixtures.signing_pki import Pki

from bundler.errors import BundleError
from bundler.hashing import file_sha256
from bundler.readers import pe_stream
from bundler.readers.archives import SafeArchive
from bundler.readers.pe import inspect_pe, known_pe_facts
from bundler.readers.pe_members import read_pe_members
from bundler.readers.pe_source import PackedPe
from bundler.readers.scan_store import FOLDER
from bundler.readers.signatures import known_evidence, signature_evidence

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


def test_a_first_build_writes_no_member_and_keeps_what_reading_the_file_finds(cached_wheel: Path,
                                                                              tmp_path: Path) -> None:
    """Read as they stream past (`pe_stream`): the facts and the evidence kept are those the readers find in the
    file itself, written out by zipfile (not by us) and read with no store."""
    store = tmp_path / "derived"
    first = read(cached_wheel, tmp_path / "work1", store, shipped=True)
    assert not (tmp_path / "work1").exists()  # nothing written out
    with zipfile.ZipFile(cached_wheel) as zf:
        zf.extractall(tmp_path / "zipfile", members=DLLS)
        for member, name in zip(first, DLLS):
            extracted = tmp_path / "zipfile" / name
            assert member.file.sha256 == file_sha256(extracted) and member.file.extracted is None
            assert member.info == inspect_pe(extracted, label=name)
            assert member.file.packed.usize == zf.getinfo(name).file_size
            source = PackedPe(cached_wheel, name, member.file.sha256)
            assert known_pe_facts(source, store) and known_evidence(source, store)
            kept, own = signature_evidence(source, label=name, store=store), signature_evidence(extracted, label=name)
            assert kept == own and own.verified  # Microsoft's signature, checked against the digest of the whole file


def test_a_second_build_reads_none_of_the_members(tmp_path: Path, ort_win_wheel: Path) -> None:
    """After the first read, the members' compressed bytes in the wheel are overwritten: a second read that gave
    the same facts without an error read none of them."""
    folder = tmp_path / "inputs" / file_sha256(ort_win_wheel)
    folder.mkdir(parents=True)
    wheel = folder / ort_win_wheel.name
    wheel.write_bytes(ort_win_wheel.read_bytes())  # a copy: its bytes are changed below
    store = tmp_path / "derived"
    first = read(wheel, tmp_path / "work1", store, shipped=True)
    with wheel.open("r+b") as fh:
        for member in first:
            fh.seek(member.file.packed.offset)
            fh.write(b"\xff" * min(4096, member.file.packed.csize))
    again = read(wheel, tmp_path / "work2", store, shipped=True)
    assert [(m.file.sha256, m.file.packed, m.info) for m in again] == [(m.file.sha256, m.file.packed, m.info)
                                                                        for m in first]
    assert all(m.file.extracted is None for m in again) and not (tmp_path / "work2").exists()
    with pytest.raises(BundleError, match="onnxruntime"):  # without the kept scans the damage is found
        read(wheel, tmp_path / "work3", None)


@pytest.mark.parametrize(("limits", "read_whole"), [
    ({"KEPT_MAX": 1024}, DLLS),
    # providers_shared.dll is 11 KB: the headers' 64 KiB hold all of it, whatever else is kept
    ({"NEAR": 0, "SMALL_SECTION": 0}, DLLS[:1]),
], ids=["more than a stream keeps", "names beyond what is kept"])
def test_a_layout_the_stream_cannot_keep_is_written_out_and_read_whole(cached_wheel: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       limits: dict[str, int],
                                                                       read_whole: tuple[str, ...]) -> None:
    """A DLL whose needed ranges are larger than a stream keeps, or whose import names lie beyond the kept ranges
    (the limits lowered here), is read as before: written out under the work folder, with the same facts."""
    for name, value in limits.items():
        monkeypatch.setattr(pe_stream, name, value)
    first = read(cached_wheel, tmp_path / "work1", tmp_path / "derived", shipped=True)
    assert written(tmp_path / "work1") == list(read_whole)
    with zipfile.ZipFile(cached_wheel) as zf:
        zf.extractall(tmp_path / "zipfile", members=DLLS)
    for member, name in zip(first, DLLS):
        assert member.file.extracted == (tmp_path / "work1" / name if name in read_whole else None)
        assert member.info == inspect_pe(tmp_path / "zipfile" / name, label=name)


def test_a_sha1_signature_is_checked_on_the_whole_file(tmp_path: Path, ort_win_wheel: Path) -> None:
    """The stream computes only the SHA-256 Authenticode digest as the bytes pass; a DLL signed with SHA-1
    (re-signed here by osslsigncode with a test certificate) is written out and its digest computed from the file:
    the evidence names the untrusted test root, not a digest mismatch."""
    pki = Pki.make(tmp_path / "pki", "Sha1 Test")
    with zipfile.ZipFile(ort_win_wheel) as zf:
        original = zf.read(DLLS[1])
    (tmp_path / "signed.dll").write_bytes(original)
    subprocess.run(["osslsigncode", "remove-signature", "-in", tmp_path / "signed.dll", "-out",
                    tmp_path / "unsigned.dll"], check=True, capture_output=True)
    subprocess.run(["osslsigncode", "sign", "-certs", pki.cert, "-ac", pki.chain, "-key", pki.key, "-h", "sha1",
                    "-in", tmp_path / "unsigned.dll", "-out", tmp_path / "sha1.dll"], check=True, capture_output=True)
    wheel = tmp_path / "inputs" / ("a" * 64) / "sha1-1.0-py3-none-win_amd64.whl"
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(tmp_path / "sha1.dll", "sha1/sha1.dll")
    with SafeArchive.open(wheel, label="sha1 wheel") as archive:
        [member] = read_pe_members(archive, wheel, ["sha1/sha1.dll"], label="sha1 wheel", work=tmp_path / "work",
                                   store=tmp_path / "derived", shipped=True)
    assert written(tmp_path / "work") == ["sha1/sha1.dll"]  # the fallback: written out, read whole
    kept = signature_evidence(PackedPe(wheel, "sha1/sha1.dll", member.file.sha256), label="sha1.dll",
                              store=tmp_path / "derived")
    assert kept == signature_evidence(tmp_path / "sha1.dll", label="sha1.dll")
    assert kept.signed and not kept.verified and "digest" not in (kept.reason or "")


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
    assert [m.file.packed for m in again] == [m.file.packed for m in first]
    rescanned = json.loads(entry.read_text())  # the member was read again and its scan kept afresh
    assert rescanned[DLLS[0]]["method"] == first[0].file.packed.method
    assert rescanned[DLLS[0]]["sha256"] == first[0].file.sha256


def test_an_archive_outside_the_input_cache_is_read_every_time(ort_win_wheel: Path, tmp_path: Path) -> None:
    store = tmp_path / "derived"
    first = read(ort_win_wheel, tmp_path / "work1", store)
    again = read(ort_win_wheel, tmp_path / "work2", store)
    assert not (store / FOLDER).exists()  # no scan kept: the next build reads the archive again
    assert [m.info for m in again] == [m.info for m in first]
