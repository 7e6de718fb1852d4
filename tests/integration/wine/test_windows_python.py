"""The Windows interpreter the Windows tier runs on is python.org's own: its signatures, checked by our reader and
by osslsigncode, and the embeddable layout made from it."""

from __future__ import annotations

import shutil
import subprocess
import zipfile

import pytest
from fixtures.windows_python import ROOT_FILES, SIGNED_BY_PSF, WindowsPython, windows_python  # noqa: F401

from bundler.readers.signatures import signature_evidence

pytestmark = pytest.mark.integration


def test_the_interpreter_is_signed_by_the_psf_and_its_runtime_by_microsoft(windows_python: WindowsPython) -> None:
    for name in SIGNED_BY_PSF:
        evidence = signature_evidence(windows_python.full / name)
        assert (evidence.signed, evidence.verified, evidence.signer) == (True, True, "Python Software Foundation"), evidence
    runtime = signature_evidence(windows_python.full / "vcruntime140.dll")
    assert runtime.verified and runtime.signer is not None and "Microsoft" in runtime.signer, runtime


def test_osslsigncode_verifies_the_psf_signatures_against_the_system_roots(windows_python: WindowsPython) -> None:
    """An outside verifier (DigiCert's roots are in Debian's CA bundle; no network: CRLs are not fetched)."""
    tool = shutil.which("osslsigncode")
    if tool is None:
        pytest.fail("osslsigncode is not installed (.ci/run installs it)")
    for name in SIGNED_BY_PSF:
        proc = subprocess.run([tool, "verify", "-ignore-crl", "-in", str(windows_python.full / name)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "Python Software Foundation" in proc.stdout and "Signature verification: ok" in proc.stdout


def test_the_embeddable_layout_is_python_orgs(windows_python: WindowsPython) -> None:
    names = {path.name for path in windows_python.embeddable.iterdir()}
    assert set(ROOT_FILES) | {"python311.zip", "python311._pth", "_ssl.pyd", "_ctypes.pyd", "libffi-8.dll"} <= names
    assert not {"tcl86t.dll", "tk86t.dll", "_tkinter.pyd", "Lib", "DLLs"} & names
    assert (windows_python.embeddable / "python311._pth").read_bytes().startswith(b"python311.zip\r\n.\r\n")
    with zipfile.ZipFile(windows_python.embed_zip) as archive:
        assert sorted(archive.namelist()) == sorted(names)
    with zipfile.ZipFile(windows_python.embeddable / "python311.zip") as stdlib:
        listed = set(stdlib.namelist())
    assert {"os.py", "venv/__init__.py", "encodings/utf_8.py"} <= listed
    assert not any(name.startswith(("tkinter/", "test/", "site-packages/")) for name in listed)
