"""Microsoft's test signature on the real onnxruntime-gpu 1.18.1 binaries: named for what it is, refused unless
`[ort] allow_test_signed` names the file and its exact bytes, and never a way around any other refusal.

The binaries are the real ones from `onnxruntime_gpu-1.18.1-cp311-cp311-win_amd64.whl` (fetched once with pip
into the test cache, 158 MB): `onnxruntime_providers_shared.dll` (21 kB) and `onnxruntime_providers_tensorrt.dll`
(750 kB) are both signed with "Code Sign Test (DO NOT TRUST)". The wheels the tests put in the payload hold only
those members, so checking them costs milliseconds.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pefile
import pytest
from fixtures.parts import part_inputs
from fixtures.wheels import pip_download

from bundler.assembly.assembly import Assembly
from bundler.assembly.signature_policy import ORT_RULE, TEST_SIGNER, check_signatures, signature_problem
from bundler.errors import BuildError, ManifestError
from bundler.hashing import file_sha256
from bundler.manifest import AllowedTestSignature, load, parse
from bundler.readers.signatures import signature_evidence

CAPI = "onnxruntime/capi/"
SHARED = "onnxruntime_providers_shared.dll"
TENSORRT = "onnxruntime_providers_tensorrt.dll"
WHEEL = "onnxruntime_gpu-1.18.1-cp311-cp311-win_amd64.whl"
TEST_SIGNED = (f"signed with Microsoft's test certificate '{TEST_SIGNER}', not a production signature")


@pytest.fixture(scope="module")
def gpu_members() -> dict[str, bytes]:
    wheel = pip_download("onnxruntime-gpu==1.18.1", "win_amd64")
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(CAPI + name) for name in (SHARED, TENSORRT)}


def small_wheel(folder: Path, members: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / WHEEL
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(CAPI + name, data)
    return path


def checked(tmp_path: Path, members: dict[str, bytes], allow: list[tuple[str, str]]) -> Assembly:
    """check_signatures over a payload holding one wheel with `members`, under a manifest allowing `allow`."""
    wheel = small_wheel(tmp_path / "wheel", members)
    assembly = Assembly()
    assembly.add_file(f"payload/wheels/{wheel.name}", wheel, file_sha256(wheel))
    entries = ", ".join(f'{{ file = "{name}", sha256 = "{sha}" }}' for name, sha in allow)
    manifest = tmp_path / "m" / "bundle.toml"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(f"""
[bundle]
name = "gpu"
version = "1.0.0"
platform = "win_amd64"
python = "3.11"

[ort]
version = "1.18.1"
archive = {{ path = "ort.zip", sha256 = "{'a' * 64}" }}
allow_test_signed = [{entries}]
""", encoding="utf-8")
    check_signatures(assembly, part_inputs(load(manifest), work=tmp_path / "w"))
    return assembly


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def label(name: str) -> str:
    return f"wheel:{WHEEL}!{CAPI}{name}"


def without_signature(data: bytes) -> bytes:
    pe = pefile.PE(data=data, fast_load=True)
    offset = pe.OPTIONAL_HEADER.DATA_DIRECTORY[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_SECURITY"]].get_file_offset()
    pe.close()
    changed = bytearray(data)
    changed[offset:offset + 8] = bytes(8)
    return bytes(changed)


@pytest.mark.integration
def test_the_test_signature_is_named_for_what_it_is(gpu_members, tmp_path):
    path = tmp_path / SHARED
    path.write_bytes(gpu_members[SHARED])
    evidence = signature_evidence(path, label=SHARED)
    assert (evidence.signed, evidence.verified, evidence.signer) == (True, False, TEST_SIGNER)
    problem = signature_problem(evidence, ORT_RULE)
    assert problem is not None
    assert problem.startswith(f"{SHARED}: {TEST_SIGNED} (the certificate chain of {TEST_SIGNER} "
                              f"does not reach a trusted root (stuck at Microsoft Testing PCA 2010))")
    assert problem.endswith("expected Microsoft Corporation")


@pytest.mark.integration
def test_test_signed_files_are_refused_with_the_entries_that_would_allow_them(gpu_members, tmp_path):
    with pytest.raises(BuildError) as caught:
        checked(tmp_path, gpu_members, allow=[])
    message = str(caught.value)
    for name in (SHARED, TENSORRT):
        assert f"{label(name)}: {TEST_SIGNED}" in message
        assert f'{{ file = "{name}", sha256 = "{sha(gpu_members[name])}" }}' in message
    assert "allow_test_signed = [" in message


@pytest.mark.integration
def test_allowed_test_signed_files_pass_and_are_recorded_as_allowed(gpu_members, tmp_path):
    assembly = checked(tmp_path, gpu_members, allow=[(n, sha(d)) for n, d in gpu_members.items()])
    records = {r["path"]: r for r in assembly.facts.signatures}
    for name in (SHARED, TENSORRT):
        record = records[label(name)]
        assert (record["signed"], record["verified"], record["signer"]) == (True, False, TEST_SIGNER)
        assert record["allowed_by_manifest"] is True


@pytest.mark.integration
def test_a_test_signed_file_the_manifest_does_not_name_is_still_refused(gpu_members, tmp_path):
    with pytest.raises(BuildError) as caught:
        checked(tmp_path, gpu_members, allow=[(SHARED, sha(gpu_members[SHARED]))])
    message = str(caught.value)
    assert f"{label(TENSORRT)}: {TEST_SIGNED}" in message
    assert label(SHARED) not in message


@pytest.mark.integration
def test_other_bytes_under_an_allowed_name_are_refused_and_the_stale_entry_named(gpu_members, tmp_path):
    stale = sha(b"other bytes")
    with pytest.raises(BuildError) as caught:
        checked(tmp_path, {SHARED: gpu_members[SHARED]}, allow=[(SHARED, stale)])
    message = str(caught.value)
    assert f"{label(SHARED)}: {TEST_SIGNED}" in message
    assert (f"bundle.toml: ort.allow_test_signed[0] allows {SHARED} with sha256 {stale}, but the bundle has no "
            f"test-signed {SHARED} with those bytes") in message


@pytest.mark.integration
def test_an_unsigned_ort_file_is_refused_even_when_named_by_its_hash(gpu_members, tmp_path):
    unsigned = without_signature(gpu_members[SHARED])
    with pytest.raises(BuildError) as caught:
        checked(tmp_path, {SHARED: unsigned}, allow=[(SHARED, sha(unsigned))])
    message = str(caught.value)
    assert f"{label(SHARED)}: carries no Authenticode signature; expected one by Microsoft Corporation" in message
    assert "ort.allow_test_signed[0] allows" in message  # the entry allowed nothing: only test signatures


BASE = """
[bundle]
name = "gpu"
version = "1.0.0"
platform = "win_amd64"
python = "3.11"

[ort]
version = "1.18.1"
archive = { path = "ort.zip", sha256 = "%s" }
""" % ("a" * 64)


def parsed(extra: str, tmp_path: Path):
    import tomllib

    return parse(tomllib.loads(BASE + extra), path=tmp_path / "bundle.toml")


def test_allow_test_signed_entries_are_read(tmp_path):
    manifest = parsed(f'allow_test_signed = [{{ file = "{SHARED}", sha256 = "{"b" * 64}" }}]\n', tmp_path)
    assert manifest.ort.allow_test_signed == (AllowedTestSignature(file=SHARED, sha256="b" * 64),)
    assert parsed("", tmp_path).ort.allow_test_signed == ()


@pytest.mark.parametrize(("value", "expected"), [
    ('true', "bundle.toml: ort.allow_test_signed: found True, expected an array of"),
    ('["x.dll"]', "bundle.toml: ort.allow_test_signed[0]: found 'x.dll', expected an array of"),
    ('[{ file = "x.dll" }]', "bundle.toml: ort.allow_test_signed[0].sha256: missing, expected the file's sha256"),
    (f'[{{ file = "../x.dll", sha256 = "{"b" * 64}" }}]',
     "bundle.toml: ort.allow_test_signed[0].file: found '../x.dll', expected an ONNX Runtime file name"),
    ('[{ file = "x.dll", sha256 = "B" }]', "bundle.toml: ort.allow_test_signed[0].sha256: found 'B', expected"),
    (f'[{{ file = "x.dll", sha256 = "{"b" * 64}", signer = "x" }}]',
     "bundle.toml: ort.allow_test_signed[0].signer: unknown key"),
])
def test_a_bad_allow_test_signed_entry_is_named(tmp_path, value, expected):
    with pytest.raises(ManifestError) as caught:
        parsed(f"allow_test_signed = {value}\n", tmp_path)
    assert expected in str(caught.value)
