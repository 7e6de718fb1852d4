"""Provenance parts: the signing policy on real Microsoft/NVIDIA binaries and tampered copies, licence
collection from real wheels, and the CycloneDX SBOM validated against its schema."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pefile
import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from fixtures.cli import MANIFESTS
from fixtures.parts import part_inputs
from fixtures.wheels import pip_download
from license_expression import get_spdx_licensing
from packageurl import PackageURL

from bundler.assembly import licenses as licenses_module
from bundler.assembly.assembly import Assembly
from bundler.assembly.facts import Facts, GpuFact
from bundler.assembly.launch import add_scripts
from bundler.assembly.licenses import add_licenses
from bundler.assembly.parts import add_all
from bundler.assembly.provenance import PROVENANCE_MEMBER
from bundler.assembly.sbom import (
    PATH_PROPERTY,
    SBOM,
    SUMS,
    add_sbom,
    install_sbom,
    schema_errors,
    serial_number,
)
from bundler.assembly.signature_policy import (
    ORT_RULE,
    REPORT_RULE,
    VC_REDIST_RULE,
    check_signatures,
    signature_problem,
    signing_rule,
)
from bundler.errors import BuildError, InputUnavailableError
from bundler.hashing import file_sha256
from bundler.manifest import Manifest, load
from bundler.operations.build import build
from bundler.platforms.backends import backend_for
from bundler.readers.pe import inspect_pe
from bundler.readers.signatures import SignatureEvidence
from bundler.sources.cache import Cache
from bundler.sources.fetch import cached_inputs
from bundler.sources.inputs import all_inputs, load_lock

#: Members that hold the SBOM's hash, so they are written after it: listed in it, their hash not stated.
WRITTEN_AFTER = (SUMS, PROVENANCE_MEMBER)

ORT_WHEEL = "onnxruntime-1.23.1-cp311-cp311-win_amd64.whl"
ORT_DLL = "onnxruntime/capi/onnxruntime.dll"
SHA = "0" * 64


# -- helpers ----------------------------------------------------------------------------------------------------


def write_manifest(folder: Path, *, platform: str = "linux_x86_64", extra: str = "") -> Manifest:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "bundle.toml"
    path.write_text(f"""
[bundle]
name = "demo"
version = "2.0.0"
platform = "{platform}"
python = "3.11"
source_date_epoch = 1767225600

[ort]
version = "1.23.1"
archive = {{ path = "onnxruntime-1.23.1.tgz", sha256 = "{'a' * 64}" }}
{extra}
""", encoding="utf-8")
    return load(path)


def allowing_unsigned(manifest: Manifest) -> Manifest:
    """The manifest with `[ort] allow_unsigned = true`."""
    return dataclasses.replace(manifest, ort=dataclasses.replace(manifest.ort, allow_unsigned=True))


def make_wheel(folder: Path, filename: str, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


def evidence(path: str, *, signed: bool, verified: bool, signer: str | None) -> SignatureEvidence:
    return SignatureEvidence(path=path, signed=signed, verified=verified, signer=signer,
                             reason=None if verified else "a reason")


def sbom_json(assembly: Assembly) -> dict:
    return json.loads(assembly.members[SBOM].data)


def all_components(components: list[dict]) -> list[dict]:
    found = []
    for component in components:
        found.append(component)
        found.extend(all_components(component.get("components", [])))
    return found


def covered_paths(document: dict) -> list[str]:
    return [p["value"] for c in all_components(document["components"]) for p in c.get("properties", [])
            if p["name"] == PATH_PROPERTY]


def assert_valid_cyclonedx(data: bytes) -> None:
    """Against the official CycloneDX 1.6 schema files, with jsonschema and its full format checker (what
    cyclonedx-python-lib's strict validator does), and with the build's own quicker check."""
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(data.decode("utf-8")) is None
    assert schema_errors(json.loads(data)) == []


# -- the signing policy, decided from the evidence --------------------------------------------------------------


@pytest.mark.parametrize(("name", "rule"), [
    (f"wheel:{ORT_WHEEL}!{ORT_DLL}", ORT_RULE),
    ("wheel:x.whl!onnxruntime/capi/onnxruntime_pybind11_state.pyd", ORT_RULE),
    ("payload/gpu/onnxruntime_providers_cuda.dll", ORT_RULE),
    ("payload/sdk/lib/onnxruntime_providers_shared.dll", ORT_RULE),
    ("payload/vc_redist/VC_redist.x64.exe", VC_REDIST_RULE),
    ("payload/gpu/cudart64_110.dll", REPORT_RULE),
    ("wheel:numpy.whl!numpy/_core/_multiarray_umath.cp311-win_amd64.pyd", REPORT_RULE),
])
def test_signing_rule_follows_the_file_name(name: str, rule) -> None:
    assert signing_rule(name) == rule


@pytest.mark.parametrize(("case", "rule", "problem"), [
    (evidence("ort.dll", signed=True, verified=True, signer="Microsoft Corporation"), ORT_RULE, None),
    (evidence("ort.dll", signed=False, verified=False, signer=None), ORT_RULE,
     "ort.dll: carries no Authenticode signature; expected one by Microsoft Corporation"),
    (evidence("ort.dll", signed=True, verified=True, signer="Evil Corp"), ORT_RULE,
     "ort.dll: signed by Evil Corp; expected a signature by Microsoft Corporation"),
    (evidence("ort.dll", signed=True, verified=False, signer="Microsoft Corporation"), ORT_RULE,
     "ort.dll: its Authenticode signature by Microsoft Corporation does not verify (a reason); "
     "expected a valid signature"),
    (evidence("cudart64_110.dll", signed=False, verified=False, signer=None), REPORT_RULE, None),
    (evidence("x.pyd", signed=True, verified=False, signer=None), REPORT_RULE,
     "x.pyd: its Authenticode signature by an unknown signer does not verify (a reason); expected a valid signature"),
    (evidence("VC_redist.x64.exe", signed=False, verified=False, signer=None), VC_REDIST_RULE,
     "VC_redist.x64.exe: carries no Authenticode signature; expected one by Microsoft Corporation"),
])
def test_signature_problem(case: SignatureEvidence, rule, problem: str | None) -> None:
    assert signature_problem(case, rule) == problem


def test_a_bundle_without_binaries_records_no_signatures(tmp_path: Path) -> None:
    assembly = Assembly()
    wheel = make_wheel(tmp_path, "pure-1.0-py3-none-any.whl", {"pure/__init__.py": "", "pure-1.0.dist-info/METADATA": "Name: pure\n"})
    assembly.add_file(f"payload/wheels/{wheel.name}", wheel, file_sha256(wheel))
    check_signatures(assembly, part_inputs(write_manifest(tmp_path / "m"), work=tmp_path / "work"))
    assert assembly.facts.signatures == ()


def test_a_file_named_like_a_binary_that_is_not_one_fails_naming_it(tmp_path: Path) -> None:
    assembly = Assembly()
    assembly.add_bytes("payload/gpu/cudart64_110.dll", b"not a PE file")
    with pytest.raises(BuildError, match=r"payload/gpu/cudart64_110\.dll is not a valid PE file"):
        check_signatures(assembly, part_inputs(write_manifest(tmp_path / "m"), work=tmp_path / "work"))


# -- licences and the SBOM on small generated inputs --------------------------------------------------------------


def demo_wheel(folder: Path) -> Path:
    return make_wheel(folder, "demo_pkg-1.2.3-py3-none-any.whl", {
        "demo_pkg/__init__.py": "",
        "demo_pkg/NOTICE": "notice text",
        "demo_pkg/license.py": "not a licence",
        "demo_pkg/vendored/LICENSE": "undeclared, deep: left to the declared files",
        "demo_pkg-1.2.3.dist-info/METADATA": ("Metadata-Version: 2.4\nName: demo-pkg\nVersion: 1.2.3\n"
                                              "License-Expression: MIT OR Apache-2.0\nLicense-File: LICENSE\n"
                                              "License-File: AUTHORS\n"),
        "demo_pkg-1.2.3.dist-info/licenses/LICENSE": "MIT text",
        "demo_pkg-1.2.3.dist-info/licenses/AUTHORS": "the authors",
        "demo_pkg-1.2.3.dist-info/COPYING.legacy": "legacy copying",
        "demo_pkg-1.2.3.dist-info/RECORD": "",
    })


def demo_assembly(tmp_path: Path) -> Assembly:
    assembly = Assembly()
    wheel = demo_wheel(tmp_path / "wheels")
    assembly.add_file(f"payload/wheels/{wheel.name}", wheel, file_sha256(wheel))
    assembly.add_bytes("payload/wheels/requirements.txt", b"demo-pkg==1.2.3\n")
    assembly.add_bytes("payload/sdk/LICENSE", b"MIT License\n")
    assembly.add_bytes("payload/sdk/ThirdPartyNotices.txt", b"notices\n")
    assembly.add_bytes("payload/sdk/include/onnxruntime_c_api.h", b"/* api */\n")
    assembly.add_bytes("payload/models/net.onnx", b"model bytes")
    assembly.add_bytes("payload/ort_bundle/selfcheck/selfcheck.py", b"print('ok')\n")
    assembly.add_bytes("payload/gpu/zlibwapi.dll", b"placed without a GPU record")
    assembly.add_bytes("install.sh", b"#!/bin/sh\n", executable=True)
    assembly.facts.gpu = None  # a bundle without [gpu]: what the GPU part sets then
    assembly.facts.runtime = None  # and without [python] runtime
    return assembly


def test_licences_come_from_dist_info_declared_files_and_package_notices(tmp_path: Path) -> None:
    assembly = demo_assembly(tmp_path)
    add_licenses(assembly, part_inputs(write_manifest(tmp_path / "m"), files={}, work=tmp_path / "work"))
    assert list(assembly.facts.licenses) == [
        {"component": "demo-pkg", "license": "MIT OR Apache-2.0", "declared": "MIT OR Apache-2.0", "notes": [],
         "files": ["licenses/demo-pkg/AUTHORS", "licenses/demo-pkg/COPYING.legacy", "licenses/demo-pkg/LICENSE",
                   "licenses/demo-pkg/demo_pkg/NOTICE"]},
        {"component": "onnxruntime-sdk", "license": "MIT", "declared": None, "notes": [], "files": [
            "licenses/onnxruntime-sdk/LICENSE", "licenses/onnxruntime-sdk/ThirdPartyNotices.txt"]},
    ]
    assert assembly.members["licenses/demo-pkg/LICENSE"].data == b"MIT text"
    assert assembly.members["licenses/demo-pkg/demo_pkg/NOTICE"].data == b"notice text"
    assert assembly.members["licenses/onnxruntime-sdk/ThirdPartyNotices.txt"].data == b"notices\n"
    installed = {c.target for c in assembly.copies}
    assert {"licenses/demo-pkg/AUTHORS", "licenses/onnxruntime-sdk/LICENSE"} <= installed


def test_sbom_validates_and_lists_every_member(tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "m")
    assembly = demo_assembly(tmp_path)
    add_licenses(assembly, part_inputs(manifest, files={}, work=tmp_path / "work"))
    install_sbom(assembly)
    add_sbom(assembly, manifest=manifest)
    data = assembly.members[SBOM].data
    assert_valid_cyclonedx(data)
    document = json.loads(data)
    paths = covered_paths(document)
    assert sorted(paths) == sorted({*assembly.members, *WRITTEN_AFTER} - {SBOM})
    assert document["specVersion"] == "1.6"
    assert document["metadata"]["timestamp"] == "2026-01-01T00:00:00+00:00"
    assert document["serialNumber"].startswith("urn:uuid:")
    by_name = {c["name"]: c for c in document["components"]}
    wheel = by_name["demo-pkg"]
    assert wheel["purl"] == "pkg:pypi/demo-pkg@1.2.3?file_name=demo_pkg-1.2.3-py3-none-any.whl"
    assert wheel["licenses"] == [{"expression": "MIT OR Apache-2.0"}]
    assert wheel["hashes"] == [{"alg": "SHA-256", "content": assembly.members[wheel["bom-ref"]].digest}]
    model = by_name["net"]
    assert model["type"] == "machine-learning-model"
    assert model["purl"].startswith(f"pkg:generic/net@{model['version']}?checksum=sha256:")
    sdk = by_name["onnxruntime-sdk"]
    assert sdk["hashes"] == [{"alg": "SHA-256", "content": "a" * 64}]
    assert {c["name"] for c in sdk["components"]} == {"payload/sdk/LICENSE", "payload/sdk/ThirdPartyNotices.txt",
                                                       "payload/sdk/include/onnxruntime_c_api.h"}
    assert "payload/ort_bundle/selfcheck/selfcheck.py" in {c["name"] for c in by_name["ort-bundler-selfcheck"]["components"]}
    assert [c["name"] for c in by_name["gpu-runtime"]["components"]] == ["payload/gpu/zlibwapi.dll"]
    assert str(tmp_path) not in data.decode("utf-8"), "the build machine's paths must not leak into the SBOM"
    assert SBOM in {c.target for c in assembly.copies}


def test_sbom_is_byte_identical_and_its_serial_follows_the_manifest(tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "m")
    first, second = demo_assembly(tmp_path / "a"), demo_assembly(tmp_path / "b")
    for assembly in (first, second):
        add_licenses(assembly, part_inputs(manifest, files={}, work=tmp_path / "work"))
        add_sbom(assembly, manifest=manifest)
    assert first.members[SBOM].data == second.members[SBOM].data
    crlf = write_manifest(tmp_path / "m2", extra="# only a comment")
    crlf.path.write_bytes(crlf.path.read_bytes().replace(b"\n", b"\r\n"))
    assert serial_number(load(crlf.path), first) == serial_number(manifest, first)  # same bundle, same serial
    other = demo_assembly(tmp_path / "c")
    other.add_bytes("payload/extra.txt", b"one more file\n")
    assert serial_number(manifest, other) != serial_number(manifest, first)


# -- real quickstart assemblies -------------------------------------------------------------------------------


def quickstart_assembly(name: str, cache_root: Path, work: Path) -> tuple[Manifest, Assembly]:
    """The assembly the build makes from a quickstart manifest, up to the provenance parts."""
    manifest = load(MANIFESTS / name)
    cache = Cache(cache_root)
    files = cached_inputs(all_inputs(manifest), cache)
    assembly = Assembly()
    inputs = part_inputs(manifest, lock=load_lock(manifest), files=files, work=work, cache=cache)
    parts = backend_for(inputs.target).parts
    add_all(assembly, inputs, parts=parts[:parts.index(add_scripts) + 1])
    return manifest, assembly


@pytest.fixture(scope="module")
def win_quickstart(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Manifest, Assembly]:
    work = tmp_path_factory.mktemp("win-work")
    manifest, assembly = quickstart_assembly("quickstart-win.toml", bundler_cache, work)
    check_signatures(assembly, part_inputs(manifest, work=work))
    add_licenses(assembly, part_inputs(manifest, files={}, work=work))
    install_sbom(assembly)
    add_sbom(assembly, manifest=manifest)
    return manifest, assembly


@pytest.mark.integration
def test_win_quickstart_passes_the_signing_policy_with_microsoft_signed_ort_binaries(win_quickstart) -> None:
    _, assembly = win_quickstart
    records = {r["path"]: r for r in assembly.facts.signatures}
    for member in (ORT_DLL, "onnxruntime/capi/onnxruntime_pybind11_state.pyd",
                   "onnxruntime/capi/onnxruntime_providers_shared.dll"):
        record = records[f"wheel:{ORT_WHEEL}!{member}"]
        assert (record["signed"], record["verified"], record["signer"]) == (True, True, "Microsoft Corporation")
        assert record["expected_signer"] == "Microsoft Corporation"
        assert record["bundle_path"] == f"payload/wheels/{ORT_WHEEL}"
    numpy = [r for p, r in records.items() if p.startswith("wheel:numpy-") and p.endswith(".pyd")]
    assert numpy and all(not r["signed"] and r["expected_signer"] is None for r in numpy)
    assert not any(r["allowed_by_manifest"] for r in records.values())


@pytest.mark.integration
def test_win_quickstart_licences_cover_ort_and_its_dependencies(win_quickstart) -> None:
    _, assembly = win_quickstart
    index = {entry["component"]: entry for entry in assembly.facts.licenses}
    assert {"numpy", "protobuf", "sympy", "packaging", "coloredlogs", "onnxruntime"} <= index.keys()
    assert index["onnxruntime"]["files"] == ["licenses/onnxruntime/onnxruntime/LICENSE",
                                             "licenses/onnxruntime/onnxruntime/ThirdPartyNotices.txt"]
    assert index["onnxruntime"]["license"] == "MIT"
    assert index["numpy"]["license"] == "BSD-3-Clause AND 0BSD AND MIT AND Zlib AND CC0-1.0"
    assert "licenses/numpy/numpy/linalg/lapack_lite/LICENSE.txt" in index["numpy"]["files"]
    assert b"Microsoft" in assembly.members["licenses/onnxruntime/onnxruntime/LICENSE"].data
    for entry in index.values():
        assert all(path in assembly.members for path in entry["files"])


@pytest.mark.integration
def test_win_quickstart_sbom_validates_and_lists_every_files_component(win_quickstart) -> None:
    _, assembly = win_quickstart
    data = assembly.members[SBOM].data
    assert_valid_cyclonedx(data)
    document = json.loads(data)
    assert sorted(covered_paths(document)) == sorted({*assembly.members, *WRITTEN_AFTER} - {SBOM})
    wheels = {c["bom-ref"]: c for c in document["components"] if c.get("purl", "").startswith("pkg:pypi/")}
    # The environment's wheels and, as its own component, the pinned pypa installer the install engine uses.
    assert set(wheels) == {p for p in assembly.members if p.startswith(("payload/wheels/", "payload/installer/"))
                           and p.endswith(".whl")}
    assert any(c["name"] == "installer" and c["bom-ref"].startswith("payload/installer/") for c in wheels.values())
    for path, component in wheels.items():
        assert component["hashes"] == [{"alg": "SHA-256", "content": assembly.members[path].sha256}]
    assert wheels[f"payload/wheels/{ORT_WHEEL}"]["licenses"] == [{"license": {"id": "MIT"}}]
    assert wheels[f"payload/wheels/{ORT_WHEEL}"]["pedigree"]["ancestors"][0]["purl"] == (
        f"pkg:pypi/onnxruntime@1.23.1?file_name={ORT_WHEEL}")
    model = next(c for c in document["components"] if c["type"] == "machine-learning-model")
    assert model["name"] == "tiny-mlp"


SBOM_SCRIPT = """
import pickle, sys
from pathlib import Path
from bundler.assembly.sbom import add_sbom
manifest, assembly = pickle.loads(Path(sys.argv[1]).read_bytes())
add_sbom(assembly, manifest=manifest)
sys.stdout.buffer.write(assembly.members["sbom.cdx.json"].data)
"""


@pytest.mark.integration
def test_sbom_is_byte_identical_in_another_process(win_quickstart, tmp_path: Path) -> None:
    """Another hash seed changes set and dict-of-set orders: nothing in the SBOM may depend on them."""
    manifest, assembly = win_quickstart
    before = Assembly(members={p: m for p, m in assembly.members.items() if p != SBOM}, facts=assembly.facts,
                      copies=[c for c in assembly.copies if c.source != SBOM])
    state = tmp_path / "assembly.pickle"
    state.write_bytes(pickle.dumps((manifest, before)))
    seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    proc = subprocess.run([sys.executable, "-c", SBOM_SCRIPT, str(state)], capture_output=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONHASHSEED": seed}, check=True)
    assert proc.stdout == assembly.members[SBOM].data


@pytest.mark.integration
def test_linux_quickstart_has_no_binaries_to_sign_and_a_valid_sbom(bundler_cache: Path, tmp_path: Path) -> None:
    manifest, assembly = quickstart_assembly("quickstart-linux.toml", bundler_cache, tmp_path)
    check_signatures(assembly, part_inputs(manifest, work=tmp_path))
    add_licenses(assembly, part_inputs(manifest, files={}, work=tmp_path))
    add_sbom(assembly, manifest=manifest)
    assert assembly.facts.signatures == ()
    assert {"numpy", "onnxruntime", "protobuf"} <= {e["component"] for e in assembly.facts.licenses}
    data = assembly.members[SBOM].data
    assert_valid_cyclonedx(data)
    assert sorted(covered_paths(json.loads(data))) == sorted({*assembly.members, *WRITTEN_AFTER} - {SBOM})


# -- tampered and unsigned binaries -------------------------------------------------------------------------------


def rewritten_wheel(source: Path, dest: Path, change) -> Path:
    """A copy of a wheel whose onnxruntime.dll went through `change` (stored, so the copy is quick)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(dest, "w", zipfile.ZIP_STORED) as out:
        for info in src.infolist():
            data = src.read(info)
            out.writestr(info.filename, change(data) if info.filename == ORT_DLL else data)
    return dest


def flip_one_byte(data: bytes) -> bytes:
    changed = bytearray(data)
    changed[5_000_000] ^= 0xFF
    return bytes(changed)


def strip_signature(data: bytes) -> bytes:
    pe = pefile.PE(data=data, fast_load=True)
    offset = pe.OPTIONAL_HEADER.DATA_DIRECTORY[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_SECURITY"]].get_file_offset()
    pe.close()
    changed = bytearray(data)
    changed[offset:offset + 8] = bytes(8)
    return bytes(changed)


def wheel_assembly(wheel: Path) -> Assembly:
    assembly = Assembly()
    assembly.add_file(f"payload/wheels/{wheel.name}", wheel, file_sha256(wheel))
    return assembly


@pytest.fixture(scope="module")
def tampered_wheel(ort_win_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rewritten_wheel(ort_win_wheel, tmp_path_factory.mktemp("tampered") / ORT_WHEEL, flip_one_byte)


@pytest.mark.integration
def test_an_ort_dll_with_one_flipped_byte_fails_the_build_naming_it(tampered_wheel: Path, tmp_path: Path) -> None:
    assembly = wheel_assembly(tampered_wheel)
    with pytest.raises(BuildError) as caught:
        check_signatures(assembly, part_inputs(write_manifest(tmp_path / "m", platform="win_amd64"), work=tmp_path / "w"))
    message = str(caught.value)
    assert message.startswith(f"wheel:{ORT_WHEEL}!{ORT_DLL}: its Authenticode signature by Microsoft Corporation "
                              f"does not verify (the file's Authenticode digest does not match")
    assert "set `allow_unsigned = true` under [ort] in bundle.toml" in message
    assert "onnxruntime_pybind11_state.pyd" not in message
    assert not Facts.signatures.is_set(assembly.facts)


@pytest.mark.integration
def test_allow_unsigned_lets_a_tampered_ort_dll_through_and_records_it(tampered_wheel: Path, tmp_path: Path) -> None:
    assembly = wheel_assembly(tampered_wheel)
    manifest = allowing_unsigned(write_manifest(tmp_path / "m", platform="win_amd64"))
    check_signatures(assembly, part_inputs(manifest, work=tmp_path / "w"))
    records = {r["path"]: r for r in assembly.facts.signatures}
    tampered = records[f"wheel:{ORT_WHEEL}!{ORT_DLL}"]
    assert (tampered["signed"], tampered["verified"], tampered["allowed_by_manifest"]) == (True, False, True)
    intact = records[f"wheel:{ORT_WHEEL}!onnxruntime/capi/onnxruntime_pybind11_state.pyd"]
    assert (intact["verified"], intact["allowed_by_manifest"]) == (True, False)


@pytest.mark.integration
def test_an_unsigned_ort_dll_fails_unless_allowed(ort_win_wheel: Path, tmp_path: Path) -> None:
    assembly = wheel_assembly(rewritten_wheel(ort_win_wheel, tmp_path / "stripped" / ORT_WHEEL, strip_signature))
    manifest = write_manifest(tmp_path / "m", platform="win_amd64")
    with pytest.raises(BuildError, match=rf"wheel:{ORT_WHEEL}!{ORT_DLL}: carries no Authenticode signature; "
                                         r"expected one by Microsoft Corporation"):
        check_signatures(assembly, part_inputs(manifest, work=tmp_path / "w1"))
    check_signatures(assembly, part_inputs(allowing_unsigned(manifest), work=tmp_path / "w2"))
    assert any(r["path"].endswith(ORT_DLL) and not r["signed"] for r in assembly.facts.signatures)


@pytest.fixture(scope="module")
def cudart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheel = pip_download("nvidia-cuda-runtime-cu11==11.8.89", "win_amd64")
    with zipfile.ZipFile(wheel) as archive:
        return Path(archive.extract("nvidia/cuda_runtime/bin/cudart64_110.dll", tmp_path_factory.mktemp("cudart")))


@pytest.mark.integration
def test_unsigned_nvidia_dll_is_reported_under_its_install_path(cudart: Path, tmp_path: Path) -> None:
    assembly = Assembly()
    assembly.add_file("payload/gpu/cudart64_110.dll", cudart, file_sha256(cudart))
    assembly.plan_copy("payload/gpu/cudart64_110.dll", "gpu/cudart64_110.dll")
    check_signatures(assembly, part_inputs(write_manifest(tmp_path / "m", platform="win_amd64"), work=tmp_path / "w"))
    [record] = assembly.facts.signatures
    assert record["path"] == "gpu/cudart64_110.dll"
    assert record["bundle_path"] == "payload/gpu/cudart64_110.dll"
    assert (record["signed"], record["verified"], record["expected_signer"]) == (False, False, None)


@pytest.mark.integration
def test_an_unsigned_vc_redist_fails_even_when_ort_may_be_unsigned(cudart: Path, tmp_path: Path) -> None:
    assembly = Assembly()
    assembly.add_file("payload/vc_redist/VC_redist.x64.exe", cudart, file_sha256(cudart))
    manifest = allowing_unsigned(write_manifest(tmp_path / "m", platform="win_amd64"))
    with pytest.raises(BuildError, match=r"payload/vc_redist/VC_redist\.x64\.exe: carries no Authenticode signature; "
                                         r"expected one by Microsoft Corporation"):
        check_signatures(assembly, part_inputs(manifest, work=tmp_path / "w"))


@pytest.mark.integration
def test_gpu_wheel_licences_and_sbom_grouping(cudart: Path, tmp_path: Path) -> None:
    wheel = pip_download("nvidia-cuda-runtime-cu11==11.8.89", "win_amd64")
    manifest = write_manifest(tmp_path / "m", platform="win_amd64", extra=f"""
[gpu]
cuda = "11.8"
cudnn = "8.6"
[[gpu.sources]]
path = "{wheel.as_posix()}"
sha256 = "{file_sha256(wheel)}"
include = ["nvidia/cuda_runtime/bin/*.dll"]
""")
    version = inspect_pe(cudart).file_version
    assembly = Assembly()
    assembly.add_file("payload/gpu/cudart64_110.dll", cudart, file_sha256(cudart))
    assembly.add_file("payload/vc_redist/VC_redist.x64.exe", cudart, file_sha256(cudart))
    origin = {"file": "gpu/cudart64_110.dll", "sha256": file_sha256(cudart), "source": "gpu.sources[0]", "version": version}
    assembly.facts.gpu = GpuFact(record={"files": [origin]}, dlls=("gpu/cudart64_110.dll",),
                                 origins={"payload/gpu/cudart64_110.dll": origin}, dll_dirs=("gpu",),
                                 preload=("gpu/cudart64_110.dll",))
    assembly.facts.runtime = None  # a bundle without [python] runtime: what the runtime part sets then
    add_licenses(assembly, part_inputs(manifest, files={"gpu.sources[0]": wheel}, work=tmp_path / "w"))
    assert list(assembly.facts.licenses) == [{
        "component": "nvidia-cuda-runtime-cu11", "files": ["licenses/nvidia-cuda-runtime-cu11/License.txt"],
        "license": None, "declared": "NVIDIA Proprietary Software",
        "notes": [("licence unknown: 'NVIDIA Proprietary Software' is no SPDX expression and names no single "
                   "SPDX licence")]}]
    assert b"NVIDIA" in assembly.members["licenses/nvidia-cuda-runtime-cu11/License.txt"].data
    add_sbom(assembly, manifest=manifest)
    data = assembly.members[SBOM].data
    assert_valid_cyclonedx(data)
    document = json.loads(data)
    by_name = {c["name"]: c for c in document["components"]}
    source = by_name["nvidia-cuda-runtime-cu11"]
    assert (source["version"], source["purl"]) == (
        "11.8.89", f"pkg:pypi/nvidia-cuda-runtime-cu11@11.8.89?checksum=sha256:{file_sha256(wheel)}")
    assert source["licenses"][0]["license"]["name"] == "NVIDIA Proprietary Software"
    assert source["hashes"] == [{"alg": "SHA-256", "content": file_sha256(wheel)}]
    assert [(c["name"], c["version"]) for c in source["components"]] == [("payload/gpu/cudart64_110.dll", version)]
    assert source["properties"] == [{"name": "ort-bundler:source",
                                     "value": f"gpu.sources[0]: {wheel.name} sha256:{file_sha256(wheel)}"}]
    assert "gpu-runtime" not in by_name
    redist = by_name["VC_redist.x64.exe"]
    assert version is not None and redist["version"] == version
    assert str(wheel.parent) not in data.decode("utf-8")


# -- whole builds of the quickstarts, checked with tools that are not ours --------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Built:
    """A quickstart built for real, unpacked: its SBOM, bundle.json, members and what the build logged."""

    manifest: Manifest
    sbom: dict
    bundle: dict
    members: dict[str, bytes]  # bundle-relative path -> bytes
    log: list[str]


def build_quickstart(name: str, cache_root: Path, out: Path) -> Built:
    manifest = load(MANIFESTS / name)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("bundler")
    logger.addHandler(handler)
    try:
        result = build(manifest, cache=Cache(cache_root), out_dir=out)
    finally:
        logger.removeHandler(handler)
    with zipfile.ZipFile(result.zip_path) as archive:
        members = {n.split("/", 1)[1]: archive.read(n) for n in archive.namelist() if not n.endswith("/")}
    return Built(manifest=manifest, sbom=json.loads(members[SBOM]), bundle=json.loads(members["bundle.json"]),
                 members=members, log=[r.getMessage() for r in records])


@pytest.fixture(scope="module", params=["quickstart-linux.toml", "quickstart-win.toml"])
def built(request: pytest.FixtureRequest, bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_quickstart(request.param, bundler_cache, tmp_path_factory.mktemp("built"))


def ancestors(component: dict) -> list[dict]:
    return component.get("pedigree", {}).get("ancestors", [])


def stated_sha256(component: dict) -> str | None:
    hashes = [h["content"] for h in component.get("hashes", []) if h["alg"] == "SHA-256"]
    return hashes[0] if hashes else None


@pytest.mark.integration
def test_built_sbom_is_valid_cyclonedx_with_formats(built: Built) -> None:
    assert_valid_cyclonedx(built.members[SBOM])


@pytest.mark.integration
def test_every_zip_member_but_the_sbom_is_in_a_component_with_its_hash(built: Built) -> None:
    files = {p["value"]: c for c in all_components(built.sbom["components"]) for p in c.get("properties", [])
             if p["name"] == PATH_PROPERTY}
    assert sorted(files) == sorted(set(built.members) - {SBOM})
    assert {"SHA256SUMS", "bundle.json", "install-plan.json"} <= set(files)
    for path, component in files.items():
        if path in WRITTEN_AFTER:  # holds the SBOM's hash, so it is written after it: said, not hashed
            assert "hashes" not in component
            assert any(p["name"] == "ort-bundler:hash" and p["value"].startswith("not stated")
                       for p in component["properties"])
            continue
        assert stated_sha256(component) == hashlib.sha256(built.members[path]).hexdigest(), path


@pytest.mark.integration
def test_every_purl_resolves_to_a_file_whose_hash_the_sbom_states(built: Built, bundler_cache: Path) -> None:
    """With packageurl-python: a purl naming a file names one of the bundle's wheels (or, for a rebuilt wheel's
    ancestor, the upstream file in the input cache) with the component's hash; otherwise it carries that hash."""
    wheels = {PurePosixPath(p).name: data for p, data in built.members.items() if p.endswith(".whl")}
    checked = 0
    for component in [*all_components(built.sbom["components"]),
                      *(a for c in built.sbom["components"] for a in ancestors(c))]:
        if "purl" not in component:
            continue
        purl = PackageURL.from_string(component["purl"])
        assert (purl.name, purl.version) == (component["name"], component.get("version")), component["purl"]
        stated = stated_sha256(component)
        assert stated is not None, f"{component['purl']}: a purl without a stated hash cannot be checked"
        if "file_name" in purl.qualifiers:
            name = purl.qualifiers["file_name"]
            data = wheels.get(name)
            if component["bom-ref"].startswith("upstream:"):  # the published file a rebuilt wheel came from
                data = Cache(bundler_cache).find(stated, name).read_bytes()
            assert data is not None and hashlib.sha256(data).hexdigest() == stated, component["purl"]
        else:
            assert purl.qualifiers.get("checksum") == f"sha256:{stated}", component["purl"]
        checked += 1
    assert checked >= 10


@pytest.mark.integration
def test_the_rebuilt_ort_wheel_names_its_upstream_file_only_in_its_pedigree(built: Built, bundler_cache: Path) -> None:
    [ort] = [c for c in built.sbom["components"] if c["name"] == "onnxruntime"]
    capi = built.manifest.ort.capi
    assert capi is not None
    [ancestor] = ancestors(ort)
    upstream = Cache(bundler_cache).find(capi.sha256[0])
    assert upstream is not None and stated_sha256(ancestor) == file_sha256(upstream) == capi.sha256[0]
    assert ancestor["purl"] == f"pkg:pypi/onnxruntime@1.23.1?file_name={upstream.name}"
    assert "file_name" not in PackageURL.from_string(ort["purl"]).qualifiers
    assert stated_sha256(ort) != stated_sha256(ancestor)
    assert {"name": "ort-bundler:rebuilt-from", "value": upstream.name} in ort["properties"]


@pytest.mark.integration
def test_every_licence_is_spdx_or_explicitly_unknown(built: Built) -> None:
    """Checked with license-expression's SPDX index; every top-level component states a licence."""
    licensing = get_spdx_licensing()
    unknown = {}
    for component in all_components(built.sbom["components"]):
        entries = component.get("licenses", [])
        if component["type"] != "file":
            assert entries, f"{component['name']}: no licence at all"
        for entry in entries:
            if "expression" in entry:
                assert not licensing.validate(entry["expression"]).errors, entry
            elif "id" in entry["license"]:
                assert not licensing.validate(entry["license"]["id"]).errors, entry
            else:
                marks = [p["value"] for p in entry["license"].get("properties", []) if p["name"] == "ort-bundler:spdx"]
                assert len(marks) == 1 and marks[0].startswith("unknown: "), entry
                unknown[component["name"]] = entry["license"]["name"]
    by_name = {c["name"]: c for c in built.sbom["components"]}
    assert by_name["flatbuffers"]["licenses"] == [{"license": {"id": "Apache-2.0"}}]
    assert by_name["protobuf"]["licenses"] == [{"license": {"id": "BSD-3-Clause"}}]
    # "BSD" alone names no single SPDX licence; the texts mpmath and sympy ship do (issue 26): concluded, with the file.
    assert not {"mpmath", "sympy"} & unknown.keys()
    assert by_name["mpmath"]["licenses"] == [{"license": {
        "id": "BSD-3-Clause", "acknowledgement": "concluded",
        "properties": [{"name": "ort-bundler:concluded-from", "value": "licenses/mpmath/LICENSE"}]}}]
    assert by_name["sympy"]["licenses"] == [{"expression": "BSD-3-Clause AND MIT", "acknowledgement": "concluded"}]


@pytest.mark.integration
def test_unmapped_licences_and_missing_licence_files_are_said_in_the_build_output(built: Built) -> None:
    index = {e["component"]: e for e in built.bundle["licenses"]}
    assert index["flatbuffers"]["files"] == [] and index["flatbuffers"]["notes"] == ["ships no licence file"]
    assert (index["sympy"]["license"], index["sympy"]["declared"]) == ("BSD-3-Clause AND MIT", "BSD")
    assert "licences: flatbuffers: ships no licence file" in built.log
    # A licence concluded from a text rather than declared is said, naming the text.
    assert "licences: sympy: licence BSD-3-Clause AND MIT, concluded from the text of licenses/sympy/LICENSE" in built.log
    assert "licences: mpmath: licence BSD-3-Clause, concluded from the text of licenses/mpmath/LICENSE" in built.log
    flatbuffers = next(c for c in built.sbom["components"] if c["name"] == "flatbuffers")
    assert {"name": "ort-bundler:license-files", "value": "none: the package ships no licence file"} in (
        flatbuffers["properties"])


def test_build_time_schema_check_catches_what_the_full_validator_catches(tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "m")
    assembly = demo_assembly(tmp_path)
    add_licenses(assembly, part_inputs(manifest, files={}, work=tmp_path / "work"))
    add_sbom(assembly, manifest=manifest)
    document = json.loads(assembly.members[SBOM].data)
    full = JsonStrictValidator(SchemaVersion.V1_6)
    for change in (lambda d: d["metadata"].__setitem__("timestamp", "yesterday"),  # a format error
                   lambda d: d["components"][0].__setitem__("type", "thing"),  # not in the enum
                   lambda d: d.__setitem__("extra", 1)):  # additional properties are not allowed
        broken = json.loads(json.dumps(document))
        change(broken)
        assert schema_errors(broken), broken
        assert full.validate_str(json.dumps(broken)) is not None


def test_wheel_facts_are_kept_for_later_builds_and_a_damaged_entry_is_read_again(tmp_path: Path) -> None:
    wheel = demo_wheel(tmp_path / "wheels")
    sha = file_sha256(wheel)
    licenses_module._FACTS.clear()  # earlier tests read the same demo wheel in this process
    read = licenses_module.wheel_facts(wheel, sha, label="w", store=tmp_path / "derived")
    [entry] = list((tmp_path / "derived" / licenses_module.WHEEL_FACTS).rglob(f"{sha}.json"))
    licenses_module._FACTS.clear()  # as in a new process
    wheel.unlink()  # a later build answers from the entry, without opening the wheel
    assert licenses_module.wheel_facts(wheel, sha, label="w", store=tmp_path / "derived") == read
    assert dict(read.texts)["LICENSE"] == b"MIT text"
    entry.write_text("[]", encoding="utf-8")
    licenses_module._FACTS.clear()
    with pytest.raises(InputUnavailableError):  # a damaged entry is not trusted: the wheel is read again
        licenses_module.wheel_facts(wheel, sha, label="w", store=tmp_path / "derived")
