"""Authenticode evidence on real Microsoft- and NVIDIA-built files, and on tampered copies of them."""

from __future__ import annotations

import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pefile
import pytest
from asn1crypto import cms
from fixtures.wheels import pip_download

from bundler.errors import BuildError
from bundler.hashing import file_sha256
from bundler.readers.signatures import NOT_CHECKED, SIGNATURE_FACTS, authenticode_sha256, signature_evidence


@pytest.fixture(scope="module")
def ort_dll(ort_win_wheel, tmp_path_factory) -> Path:
    with zipfile.ZipFile(ort_win_wheel) as zf:
        return Path(zf.extract("onnxruntime/capi/onnxruntime.dll", tmp_path_factory.mktemp("ort-win")))


def tampered_copy(source: Path, dest: Path, offset: int) -> Path:
    data = bytearray(source.read_bytes())
    data[offset] ^= 0xFF
    dest.write_bytes(data)
    return dest


def certificate_table(path: Path) -> tuple[bytes, int, cms.SignedData]:
    data = path.read_bytes()
    pe = pefile.PE(data=data, fast_load=True)
    directory = pe.OPTIONAL_HEADER.DATA_DIRECTORY[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_SECURITY"]]
    pe.close()
    start = directory.VirtualAddress
    return data, start, cms.ContentInfo.load(data[start + 8:start + directory.Size])["content"]


def test_a_non_pe_file_is_an_error_naming_it(tmp_path):
    text = tmp_path / "readme.dll"
    text.write_text("hello")
    with pytest.raises(BuildError, match=r"payload/readme\.dll is not a valid PE file"):
        signature_evidence(text, label="payload/readme.dll")


@pytest.mark.integration
def test_microsoft_signature_is_found_and_verified(ort_dll):
    evidence = signature_evidence(ort_dll, label="capi/onnxruntime.dll")
    assert evidence.path == "capi/onnxruntime.dll"
    assert (evidence.signed, evidence.verified, evidence.reason) == (True, True, None)
    assert evidence.signer == "Microsoft Corporation"
    assert evidence.to_json() == {"path": "capi/onnxruntime.dll", "signed": True, "verified": True,
                                  "signer": "Microsoft Corporation", "reason": None, "not_checked": NOT_CHECKED}


@pytest.mark.integration
def test_one_flipped_byte_in_the_signed_content_fails_verification(ort_dll, tmp_path):
    copy = tampered_copy(ort_dll, tmp_path / "onnxruntime.dll", offset=5_000_000)
    evidence = signature_evidence(copy)
    assert (evidence.signed, evidence.verified) == (True, False)
    assert evidence.signer == "Microsoft Corporation"
    assert "was modified after signing" in evidence.reason


@pytest.mark.integration
def test_the_digest_computed_ahead_on_another_thread_is_the_one_checked(ort_dll, tmp_path):
    """The build hashes DLLs on a thread while it checks other files' certificates (`authenticode_sha256`):
    the digest handed in decides, so the tampered copy's digest fails the original file, and each file's own
    digest gives the answer the inline check gives."""
    copy = tampered_copy(ort_dll, tmp_path / "onnxruntime.dll", offset=5_000_000)
    with ThreadPoolExecutor(max_workers=1) as pool:
        own, tampered = pool.submit(authenticode_sha256, ort_dll), pool.submit(authenticode_sha256, copy)
        assert signature_evidence(ort_dll, ahead=own).verified is True
        assert signature_evidence(copy, ahead=tampered).verified is False
        crossed = signature_evidence(ort_dll, ahead=tampered)
    assert (crossed.verified, crossed.signer) == (False, "Microsoft Corporation")
    assert "was modified after signing" in (crossed.reason or "")
    text = tmp_path / "readme.dll"
    text.write_text("hello")
    assert authenticode_sha256(text) is None  # signature_evidence names what is wrong with it


@pytest.mark.integration
def test_a_damaged_signer_signature_fails_verification(ort_dll, tmp_path):
    data, start, signed_data = certificate_table(ort_dll)
    signature = signed_data["signer_infos"][0]["signature"].native
    offset = data.index(signature, start)
    evidence = signature_evidence(tampered_copy(ort_dll, tmp_path / "x.dll", offset=offset + len(signature) // 2))
    assert (evidence.signed, evidence.verified) == (True, False)
    assert evidence.reason == ("the signer's signature over the signed attributes is invalid "
                               "for Microsoft Corporation")


@pytest.mark.integration
def test_a_damaged_intermediate_certificate_breaks_the_chain(ort_dll, tmp_path):
    data, start, signed_data = certificate_table(ort_dll)
    pca = next(c.chosen for c in signed_data["certificates"]
               if c.chosen.subject.native["common_name"] == "Microsoft Code Signing PCA 2011")
    offset = data.index(pca["signature_value"].native, start) + 10
    evidence = signature_evidence(tampered_copy(ort_dll, tmp_path / "x.dll", offset=offset))
    assert (evidence.signed, evidence.verified) == (True, False)
    assert evidence.reason == ("the certificate chain of Microsoft Corporation does not reach a trusted root "
                               "(stuck at Microsoft Code Signing PCA 2011)")


@pytest.mark.integration
def test_a_removed_signature_reads_as_unsigned(ort_dll, tmp_path):
    data = bytearray(ort_dll.read_bytes())
    pe = pefile.PE(data=bytes(data), fast_load=True)
    entry = pe.OPTIONAL_HEADER.DATA_DIRECTORY[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_SECURITY"]]
    offset = entry.get_file_offset()
    pe.close()
    data[offset:offset + 8] = bytes(8)
    stripped = tmp_path / "stripped.dll"
    stripped.write_bytes(data)
    evidence = signature_evidence(stripped)
    assert (evidence.signed, evidence.verified, evidence.signer) == (False, False, None)


@pytest.mark.integration
def test_nvidia_cudart_is_unsigned_and_reported_not_failed(tmp_path):
    wheel = pip_download("nvidia-cuda-runtime-cu11==11.8.89", "win_amd64")
    with zipfile.ZipFile(wheel) as zf:
        cudart = Path(zf.extract("nvidia/cuda_runtime/bin/cudart64_110.dll", tmp_path))
    evidence = signature_evidence(cudart, label="gpu/cudart64_110.dll")
    assert evidence.to_json() == {"path": "gpu/cudart64_110.dll", "signed": False, "verified": False,
                                  "signer": None, "reason": "the file carries no Authenticode signature",
                                  "not_checked": NOT_CHECKED}


def _certificate(name: str, *, ca: bool, key_cert_sign: bool = True):
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
               .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                                      key_encipherment=False, data_encipherment=False,
                                                      key_agreement=False, key_cert_sign=key_cert_sign, crl_sign=True,
                                                      encipher_only=False, decipher_only=False), critical=True)
    return builder.sign(key, hashes.SHA256())


def test_only_a_certificate_authority_may_vouch_for_another_certificate() -> None:
    """An ordinary (code-signing) certificate must not be able to issue one named "Microsoft Corporation"."""
    from bundler.readers.certificates import is_ca

    assert is_ca(_certificate("Some CA", ca=True))
    assert not is_ca(_certificate("Some Code Signer", ca=False))
    assert not is_ca(_certificate("CA without keyCertSign", ca=True, key_cert_sign=False))


@pytest.mark.integration
def test_evidence_is_kept_for_later_builds_by_content_and_never_shared_with_a_changed_file(ort_dll, tmp_path):
    store = tmp_path / "derived"
    fresh = signature_evidence(ort_dll, label="first")
    assert signature_evidence(ort_dll, label="first", store=store) == fresh
    [entry] = list((store / SIGNATURE_FACTS).rglob("*.json"))
    assert entry.name == f"{file_sha256(ort_dll)}.json"
    again = signature_evidence(ort_dll, label="second", store=store)
    assert (again.path, again.verified, again.signer) == ("second", True, "Microsoft Corporation")
    tampered = tampered_copy(ort_dll, tmp_path / "tampered.dll", 5_000_000)
    evidence = signature_evidence(tampered, store=store)
    assert (evidence.signed, evidence.verified) == (True, False)  # another hash: checked, not answered from the store
    assert len(list((store / SIGNATURE_FACTS).rglob("*.json"))) == 2
