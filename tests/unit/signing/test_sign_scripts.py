"""The Windows install-time check (templates/_bundle_signature.ps1.j2) as far as Linux can take it.

There is no PowerShell here: the include is rendered through the build's own Jinja2 environment,
parsed with tree-sitter-pwsh (no error node, no PowerShell-7-only construct) and walked for the calls
it must make; a script that includes it is signed with osslsigncode and must still parse and verify.
That Windows PowerShell 5.1 runs it, and that SignedCms accepts our SHA256SUMS.p7s, only a Windows
machine can show (see the README's Signing section).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import tree_sitter_pwsh
from fixtures.signing_pki import Pki
from integration.wine.test_scripts_windows import _walk, parse_problems, powershell7_constructs, windows_context
from tree_sitter import Language, Parser

from bundler.assembly.render import INSTALL_EXIT_CODES, encode_script, make_environment, render_scripts
from bundler.cli import main
from bundler.target_platform import WINDOWS

CALLER = """{% include "_bundle_signature.ps1.j2" %}
$problem = Get-BundleSignatureProblem -ScriptPath $PSCommandPath -Root $PSScriptRoot
if ($problem) { Write-Error $problem; exit 11 }
"""


def rendered(source: str = '{% include "_bundle_signature.ps1.j2" %}') -> bytes:
    text = make_environment().from_string(source).render({})
    return encode_script("install.ps1", text, target=WINDOWS)


def test_the_include_parses_as_windows_powershell_51() -> None:
    script = rendered()
    assert script.startswith(b"\xef\xbb\xbffunction Get-BundleSignatureProblem")
    assert parse_problems(script) == [] and powershell7_constructs(script) == []


def test_the_include_checks_its_own_signature_then_the_bundle_signature_by_the_same_certificate() -> None:
    """The order matters: the script's own status decides whether the bundle signature is required."""
    script = rendered()
    tree = Parser(Language(tree_sitter_pwsh.language())).parse(script)
    text = [script[n.start_byte:n.end_byte].decode() for n in _walk(tree.root_node) if n.type == "command_name"]
    assert text[:1] == ["Get-AuthenticodeSignature"]
    calls = script.decode().split("param(", 1)[1]  # the code, not the comment above it
    steps = ["Get-AuthenticodeSignature", "'NotSigned'", "'Valid'", "LanguageMode", "SHA256SUMS.p7s",
             "System.Security.Cryptography.Pkcs.SignedCms", "-ArgumentList $content, $true", ".CheckSignature($true)",
             ".SignerInfos.Count -ne 1", "$signer.Thumbprint -ne $own.SignerCertificate.Thumbprint"]
    positions = [calls.index(step) for step in steps]
    assert positions == sorted(positions)


def test_a_script_with_the_include_signed_by_osslsigncode_still_parses_and_verifies(tmp_path: Path) -> None:
    pki = Pki.make(tmp_path / "pki", "inc")
    source = tmp_path / "install.ps1"
    source.write_bytes(rendered(CALLER))
    signed = tmp_path / "signed.ps1"
    subprocess.run(["osslsigncode", "sign", "-certs", str(pki.cert), "-ac", str(pki.chain), "-key", str(pki.key),
                    "-h", "sha256", "-in", str(source), "-out", str(signed)], check=True, capture_output=True)
    data = signed.read_bytes()
    assert parse_problems(data) == [] and powershell7_constructs(data) == []
    proc = subprocess.run(["osslsigncode", "verify", "-CAfile", str(pki.root), "-in", str(signed)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "Succeeded" in proc.stdout


def test_sign_and_verify_trust_have_help_with_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sign", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--cert", "--key", "--pkcs12", "--password-env", "--chain", "--timestamp-url", "--signer", "examples:"):
        assert flag in out
    assert "--password " not in out  # a password is never an argument
    assert main(["verify", "--help"]) == 0
    assert "--trust CA.pem" in capsys.readouterr().out


def test_install_ps1_checks_the_bundle_signature_before_anything_changes() -> None:
    """In the rendered installer: the include is there once, and its check runs before the language-mode check
    and before Python is found or started (install.ps1 changes nothing itself: the engine does, after it)."""
    script = render_scripts(windows_context())["install.ps1"].decode("utf-8-sig")
    assert script.count("function Get-BundleSignatureProblem") == 1
    check = script.index("Get-BundleSignatureProblem -ScriptPath $PSCommandPath -Root $PSScriptRoot")
    for later in ("install.ps1 runs in {0} mode", "$python = Find-Python", "& $python -I -B $engine"):
        assert check < script.index(later), later
    assert "if ($signatureProblem) {" in script and f"exit {INSTALL_EXIT_CODES['integrity']}" in script


