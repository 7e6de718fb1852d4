"""PE inspection against the real ONNX Runtime 1.23.1 Windows binaries (docs/facts.md §1)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from fixtures.memory import PEAK_MIB
from fixtures.wine import mingw_gcc  # noqa: F401  (fixture)

from bundler.errors import BuildError, HashMismatchError, InputUnavailableError
from bundler.hashing import file_sha256
from bundler.readers import pe as pe_module
from bundler.readers import pe_source, pe_stream
from bundler.readers import wheel_binaries as wheel_binaries_module
from bundler.readers.pe import PeInfo, inspect_pe, is_pe, runtime_dll_names
from bundler.readers.pe_source import PackedPe
from bundler.readers.signatures import signature_evidence
from bundler.readers.wheel_binaries import wheel_binaries


def extract_capi_binaries(wheel: Path, dest: Path) -> Path:
    """Unzip the wheel's onnxruntime/capi/*.dll|*.pyd into dest; returns the capi folder."""
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith("onnxruntime/capi/") and name.endswith((".dll", ".pyd")):
                zf.extract(name, dest)
    return dest / "onnxruntime" / "capi"


@pytest.fixture(scope="module")
def capi(ort_win_wheel, tmp_path_factory) -> Path:
    return extract_capi_binaries(ort_win_wheel, tmp_path_factory.mktemp("ort-win"))


# ---- unit tests: no downloads ------------------------------------------------------------------

def test_is_pe_rejects_text_short_and_missing_files(tmp_path):
    text = tmp_path / "notes.dll"
    text.write_text("not a binary")
    mz_only = tmp_path / "mz.dll"
    mz_only.write_bytes(b"MZ" + b"\0" * 62 + b"garbage")
    assert not is_pe(text)
    assert not is_pe(mz_only)
    assert not is_pe(tmp_path / "missing.dll")


def test_inspect_pe_names_the_file_when_it_is_not_pe(tmp_path):
    bogus = tmp_path / "bogus.dll"
    bogus.write_bytes(b"MZ" + b"\xff" * 200)
    with pytest.raises(BuildError, match=r"wheel/bogus\.dll is not a valid PE file"):
        inspect_pe(bogus, label="wheel/bogus.dll")


def test_inspect_pe_reports_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.dll"
    empty.write_bytes(b"")
    with pytest.raises(BuildError, match="empty.dll is empty"):
        inspect_pe(empty)
    with pytest.raises(InputUnavailableError, match="missing.dll cannot be read"):
        inspect_pe(tmp_path / "missing.dll")


def test_runtime_dll_names_reads_ascii_and_utf16_strings():
    # Compilers align wide strings to 2 bytes after NUL padding, as here.
    data = (b"\0\0C:\\cuda\\bin\\cudnn_ops_infer64_8.dll\0junk\0\0\0"
            + "zlibwapi.dll".encode("utf-16-le") + b"\0\0"
            + b"..\\KERNEL32.dll\0cudnn64_8.dll\0CUDNN_OPS_INFER64_8.DLL\0.dll\0not.dllx\0")
    names = runtime_dll_names(data, exclude={"cudnn64_8.dll"})
    assert names == ("cudnn_ops_infer64_8.dll", "KERNEL32.dll", "zlibwapi.dll")


def test_machine_name_for_known_and_unknown_machines():
    info = PeInfo(machine=0x8664, is_dll=True, linker_version=(14, 40), file_version=None, product_version=None,
                  imports=(), delay_imports=(), runtime_names=(), has_signature=False)
    assert info.machine_name == "x64"
    assert dataclasses.replace(info, machine=0xAA64).machine_name == "arm64"
    assert dataclasses.replace(info, machine=0x1C4).machine_name == "0x01c4"


# ---- the real ORT 1.23.1 win_amd64 wheel -------------------------------------------------------

@pytest.mark.integration
def test_real_onnxruntime_dll(capi):
    info = inspect_pe(capi / "onnxruntime.dll")
    assert info.machine == 0x8664 and info.machine_name == "x64"
    assert info.is_dll
    assert info.linker_version == (14, 40)
    assert info.file_version == "1.23.20251002.1.d9b2048"
    assert info.product_version == "1.23.20251002.1.d9b2048"
    assert info.has_signature
    assert {"KERNEL32.dll", "MSVCP140.dll", "VCRUNTIME140.dll", "dxgi.dll"} <= set(info.imports)
    # ORT probes for its optional providers by name: visible only in strings.
    assert "onnxruntime_providers_cuda.dll" in info.runtime_names
    assert "onnxruntime.dll" not in {n.lower() for n in info.runtime_names}
    assert not set(info.imports) & set(info.runtime_names)


@pytest.mark.integration
def test_real_pyd_links_python311_and_not_onnxruntime_dll(capi):
    info = inspect_pe(capi / "onnxruntime_pybind11_state.pyd")
    assert info.machine_name == "x64"
    assert info.linker_version == (14, 40)
    assert "python311.dll" in info.imports
    assert "onnxruntime.dll" not in {name.lower() for name in info.imports}
    assert {"MSVCP140_1.dll", "VCRUNTIME140_1.dll", "SETUPAPI.dll", "dbghelp.dll"} <= set(info.imports)
    assert any(name.startswith("api-ms-win-crt-") for name in info.imports)


@pytest.mark.integration
def test_every_binary_in_the_wheel_is_x64_and_signed(capi):
    binaries = sorted(capi.iterdir())
    assert [p.name for p in binaries] == [
        "onnxruntime.dll", "onnxruntime_providers_shared.dll", "onnxruntime_pybind11_state.pyd"]
    for path in binaries:
        assert is_pe(path)
        info = inspect_pe(path)
        assert (info.machine_name, info.linker_version, info.has_signature) == ("x64", (14, 40), True), path.name


# -- each PE file parsed once per process, and once per wheel hash extracted --------------------------------------


@pytest.mark.integration
def test_a_file_is_parsed_once_and_again_only_when_it_changes(capi: Path, tmp_path: Path) -> None:
    dll = tmp_path / "onnxruntime.dll"
    dll.write_bytes((capi / "onnxruntime.dll").read_bytes())
    before = len(pe_module._PARSED)
    first = inspect_pe(dll, label="payload/gpu/onnxruntime.dll")
    second = inspect_pe(dll, label="wheel:ort.whl!onnxruntime/capi/onnxruntime.dll")
    assert len(pe_module._PARSED) == before + 1, "two labels, one file: one parse"
    assert first == second
    assert "onnxruntime.dll" not in {n.lower() for n in first.runtime_names}  # its own name, whatever the label
    data = bytearray(dll.read_bytes())
    security = data.find(b"PE\0\0") + 24 + 144  # IMAGE_DIRECTORY_ENTRY_SECURITY of a PE32+ optional header
    data[security:security + 8] = bytes(8)  # the same file without its signature
    dll.write_bytes(bytes(data))
    changed = inspect_pe(dll)
    assert (first.has_signature, changed.has_signature) == (True, False), "a rewritten file is parsed again"


@pytest.mark.integration
def test_wheel_binaries_are_read_where_they_lie_once_per_wheel_hash(ort_win_wheel: Path, capi: Path,
                                                                    tmp_path: Path) -> None:
    """A first build writes no copy of a wheel's DLLs (issue 37): their sha256 is indexed, their facts come from
    the member's bytes in memory and equal the facts of the extracted file, and a later build opens no wheel."""
    sha, label = file_sha256(ort_win_wheel), "payload/wheels/ort.whl!onnxruntime/capi/onnxruntime.dll"
    first = wheel_binaries("payload/wheels/ort.whl", ort_win_wheel, sha, store=tmp_path)
    dll = first[label]
    assert isinstance(dll, PackedPe) and dll.sha256 == file_sha256(capi / "onnxruntime.dll")
    assert [p.name for p in (tmp_path / "wheel-binaries" / sha).iterdir()] == ["INDEX.json"], "nothing written out"
    pe_module._PARSED.clear()
    assert inspect_pe(dll, label=label) == inspect_pe(capi / "onnxruntime.dll", label=label)
    assert signature_evidence(dll, label=label) == signature_evidence(capi / "onnxruntime.dll", label=label)
    again = wheel_binaries("payload/wheels/ort.whl", tmp_path / "absent.whl", sha, store=tmp_path)
    assert {k: v.sha256 for k, v in again.items() if isinstance(v, PackedPe)} == {
        k: v.sha256 for k, v in first.items() if isinstance(v, PackedPe)}, "answered from the index alone"
    (tmp_path / "wheel-binaries" / sha / "INDEX.json").write_text("{ damaged", encoding="utf-8")
    assert wheel_binaries("payload/wheels/ort.whl", ort_win_wheel, sha, store=tmp_path) == first


@pytest.mark.integration
def test_a_wheel_binary_too_large_to_hold_is_read_as_it_streams_past_and_never_held_whole(
        ort_win_wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As the 349 MB CUDA provider is (the limit lowered so that the 15 MB onnxruntime.dll stands for it): nothing
    written out, its facts and evidence those of the file, and the index trusted only while they are kept."""
    monkeypatch.setattr(wheel_binaries_module, "IN_MEMORY_MAX", 1 << 20)
    sha, label = file_sha256(ort_win_wheel), "payload/wheels/ort.whl!onnxruntime/capi/onnxruntime.dll"
    pe_source._INFLATED.clear()
    first = wheel_binaries("payload/wheels/ort.whl", ort_win_wheel, sha, store=tmp_path)
    dll = first[label]
    assert isinstance(dll, PackedPe)
    assert [p.name for p in (tmp_path / "wheel-binaries" / sha).iterdir()] == ["INDEX.json"], "nothing written out"
    with zipfile.ZipFile(ort_win_wheel) as archive:
        archive.extract("onnxruntime/capi/onnxruntime.dll", tmp_path / "zipfile")
    whole = tmp_path / "zipfile" / "onnxruntime/capi/onnxruntime.dll"
    pe_module._PARSED.clear()
    assert inspect_pe(dll, label=label, store=tmp_path) == inspect_pe(whole, label=label)
    assert signature_evidence(dll, label=label, store=tmp_path) == signature_evidence(whole, label=label)
    assert dll.sha256 not in pe_source._INFLATED, "read from the kept facts, not inflated into memory"
    shutil.rmtree(tmp_path / "signature-facts")  # as a newer bundler, whose evidence is kept elsewhere, finds it
    assert wheel_binaries("payload/wheels/ort.whl", ort_win_wheel, sha, store=tmp_path) == first
    assert (tmp_path / "signature-facts").is_dir(), "the wheel was read again and the evidence kept afresh"


@pytest.mark.integration
def test_a_wheel_binary_too_large_to_hold_and_to_stream_is_written_out_once_and_checked_before_use(
        ort_win_wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheel_binaries_module, "IN_MEMORY_MAX", 1 << 20)  # onnxruntime.dll is 15 MB
    monkeypatch.setattr(pe_stream, "KEPT_MAX", 1024)  # and its directory sections more than a stream keeps
    sha = file_sha256(ort_win_wheel)
    first = wheel_binaries("payload/wheels/ort.whl", ort_win_wheel, sha, store=tmp_path)
    dll = first["payload/wheels/ort.whl!onnxruntime/capi/onnxruntime.dll"]
    assert isinstance(dll, Path)
    with zipfile.ZipFile(ort_win_wheel) as archive:
        assert dll.read_bytes() == archive.read("onnxruntime/capi/onnxruntime.dll")
    inode = dll.stat().st_ino
    again = wheel_binaries("payload/wheels/ort.whl", ort_win_wheel, sha, store=tmp_path)
    assert again == first and dll.stat().st_ino == inode, "a later build reuses the extracted files"
    data = bytearray(dll.read_bytes())
    data[1000] ^= 0xFF
    dll.write_bytes(bytes(data))
    repaired = wheel_binaries("payload/wheels/ort.whl", ort_win_wheel, sha, store=tmp_path)
    assert repaired == first
    with zipfile.ZipFile(ort_win_wheel) as archive:
        assert file_sha256(dll) == hashlib.sha256(archive.read("onnxruntime/capi/onnxruntime.dll")).hexdigest()


@pytest.mark.integration
def test_a_wheel_binary_whose_bytes_changed_since_they_were_indexed_is_refused(ort_win_wheel: Path) -> None:
    member = "onnxruntime/capi/onnxruntime_providers_shared.dll"
    pe_source._INFLATED.clear()
    changed = PackedPe(ort_win_wheel, member, "0" * 64)  # the index recorded other bytes than the wheel now holds
    with pytest.raises(HashMismatchError, match=f"expected {'0' * 64}"):
        inspect_pe(changed, label=f"ort.whl!{member}")
    with pytest.raises(InputUnavailableError, match="has no entry 'onnxruntime/capi/gone.dll'"):
        inspect_pe(PackedPe(ort_win_wheel, "onnxruntime/capi/gone.dll", "1" * 64), label="ort.whl!gone.dll")


@pytest.mark.integration
def test_pe_facts_are_kept_for_later_builds_by_content_hash(capi: Path, tmp_path: Path) -> None:
    dll = capi / "onnxruntime_providers_shared.dll"
    fresh = inspect_pe(dll)
    pe_module._PARSED.clear()  # as in a new process
    stored = inspect_pe(dll, store=tmp_path)
    [entry] = list((tmp_path / pe_module.PE_FACTS).rglob("*.json"))
    assert entry.name == f"{file_sha256(dll)}.json" and stored == fresh
    pe_module._PARSED.clear()
    assert inspect_pe(dll, store=tmp_path) == fresh  # answered from the entry
    entry.write_text("{ damaged", encoding="utf-8")
    pe_module._PARSED.clear()
    assert inspect_pe(dll, store=tmp_path) == fresh  # a damaged entry is parsed again and rewritten
    assert json.loads(entry.read_text(encoding="utf-8"))["imports"] == list(fresh.imports)


def test_a_large_signed_dll_is_scanned_and_hashed_a_window_at_a_time(mingw_gcc: str, tmp_path: Path) -> None:
    """cuDNN 9's and cuBLASLt's DLLs are 500-700 MB: scanned for names and hashed for Authenticode through a map
    that kept every page it touched, they took a build past 700 MiB. A real DLL padded to 160 MiB, a name cut by
    the first window's end, signed by osslsigncode (not ours): read in a child process, the name is found, the
    Authenticode digest is the one osslsigncode calculates, and the peak memory stays far below the file."""
    source = tmp_path / "a.c"
    source.write_text("int f(void) { return 0; }\n")
    dll = tmp_path / "big.dll"
    subprocess.run([mingw_gcc, "-shared", "-o", str(dll), str(source)], check=True, capture_output=True)
    with dll.open("r+b") as handle:
        handle.seek(pe_module.MAPPED_WINDOW - 6)
        handle.write(b"\0cudnn_graph64_9.dll\0")
        handle.truncate(160 << 20)
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=ort-bundler test signer"], check=True, capture_output=True)
    signed = tmp_path / "signed.dll"
    subprocess.run(["osslsigncode", "sign", "-certs", str(cert), "-key", str(key), "-h", "sha256", "-in", str(dll),
                    "-out", str(signed)], check=True, capture_output=True)
    verify = subprocess.run(["osslsigncode", "verify", "-in", str(signed)], capture_output=True, text=True).stdout
    calculated = re.search(r"Calculated message digest\s*:\s*([0-9A-Fa-f]+)", verify)
    assert calculated, verify[-500:]
    child = ("from pathlib import Path; from bundler.readers.pe import inspect_pe; "
             "from bundler.readers.signatures import authenticode_sha256; "
             f"path = Path({str(signed)!r}); info = inspect_pe(path, label='signed.dll'); "
             "print(' '.join(info.runtime_names), authenticode_sha256(path).hex(), "
             f"{PEAK_MIB})")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout.split()
    assert "cudnn_graph64_9.dll" in out[:-2]
    assert out[-2] == calculated.group(1).lower()
    assert int(out[-1]) < 120, f"peak RSS {out[-1]} MiB reading a 160 MiB DLL"
