"""`ort-bundler sign` and `verify --trust` for real (issue 14): a test PKI, the quickstart bundles, outside checkers.

The PKI (root -> intermediate -> code-signing certificate) is made in the test with `cryptography`
(tests/fixtures/signing_pki.py). The bundles are the quickstart builds. Every claim is checked by a tool that
is not ours where one exists: osslsigncode for the Authenticode signatures, `openssl cms` (through
the shipped trust.py) for the bundle signature, `sha256sum -c` for the sums, tree-sitter-pwsh for
the signed scripts. What only Windows can confirm (PowerShell 5.1 accepting the block under
AllSigned) is not claimed here.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID
from fixtures.cli import MANIFESTS, REPO, run_cli
from fixtures.signing_pki import P12_PASSWORD, Pki, Tsa
from fixtures.wheels import cache_root
from integration.wine.test_scripts_windows import parse_problems, powershell7_constructs
from unit.shipped.test_install_signature_check import outside_check
from unit.shipped.test_selfcheck import oldest_python

from bundler.signing.authenticode import split_signature
from bundler.signing.verify import verify_bundle

pytestmark = pytest.mark.integration

WIN = "quickstart-win-1.0.0-win_amd64"
LINUX = "quickstart-linux-1.0.0-linux_x86_64"
TRUST_PY = REPO / "bundler" / "shipped" / "ort_bundle" / "engine" / "trust.py"
CACHE = cache_root() / "bundler-cache"  # the member cache and scratch folders of sign and verify
EXTERNAL_SIGNER = r'''
"""A stand-in for an organisation's signing tool, honouring the --signer contract with real tools."""
import os, subprocess, sys
cert, key, chain, source, dest = sys.argv[1:6]
if os.environ["ORT_BUNDLER_SIGN_KIND"] == "authenticode":
    cmd = ["osslsigncode", "sign", "-certs", cert, "-ac", chain, "-key", key, "-h", "sha256", "-in", source, "-out", dest]
else:
    cmd = ["openssl", "cms", "-sign", "-binary", "-outform", "DER", "-md", "sha256", "-nosmimecap", "-signer", cert,
           "-inkey", key, "-certfile", chain, "-in", source, "-out", dest]
sys.exit(subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode)
'''


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pki]:
    folder = tmp_path_factory.mktemp("pki")
    past = dt.datetime.now(dt.UTC) - dt.timedelta(days=2)
    return {"good": Pki.make(folder, "good"), "other": Pki.make(folder, "other"),
            "expired": Pki.make(folder, "expired", not_after=past),
            "tls": Pki.make(folder, "tls", eku=[ExtendedKeyUsageOID.SERVER_AUTH])}


def _build(cache: Path, out: Path, manifest: str) -> Path:
    run_cli("build", "-q", "--cache", str(cache), "-o", str(out), str(MANIFESTS / manifest))
    return out / f"{manifest.removesuffix('.toml').replace('quickstart-linux', LINUX).replace('quickstart-win', WIN)}.zip"


@pytest.fixture(scope="module")
def win_zip(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(bundler_cache, tmp_path_factory.mktemp("win"), "quickstart-win.toml")


@pytest.fixture(scope="module")
def linux_zip(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(bundler_cache, tmp_path_factory.mktemp("linux"), "quickstart-linux.toml")


def sign(bundle: Path, out: Path, pki: Pki, *extra: str, check: bool = True, env: dict[str, str] | None = None):
    return run_cli("sign", "--cache", str(CACHE), "-q", str(bundle), "-o", str(out), "--cert", str(pki.cert), "--key", str(pki.key),
                   "--chain", str(pki.chain), *extra, check=check, env=env)


@pytest.fixture(scope="module")
def signed_win(win_zip: Path, pki: dict[str, Pki], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("signed-win")
    sign(win_zip, out, pki["good"])
    return out / win_zip.name


def unpack(zip_path: Path, dest: Path) -> Path:
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(dest)
    return dest / zip_path.name.removesuffix(".zip")


def verify_json(zip_path: Path, *args: str) -> tuple[int, dict]:
    proc = run_cli("verify", "--cache", str(CACHE), "--json", *args, str(zip_path), check=False)
    assert "Traceback" not in proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_a_signed_windows_bundle_passes_osslsigncode_sha256sum_and_our_verifier(
        signed_win: Path, win_zip: Path, pki: dict[str, Pki], tmp_path: Path) -> None:
    root = unpack(signed_win, tmp_path)
    scripts = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.ps1"))
    assert scripts == ["install.ps1", "payload/launchers/run.ps1", "uninstall.ps1"]
    for rel in scripts:
        proc = subprocess.run(["osslsigncode", "verify", "-CAfile", str(pki["good"].root), "-in", str(root / rel)],
                              capture_output=True, text=True)
        assert proc.returncode == 0 and "Succeeded" in proc.stdout, proc.stdout + proc.stderr
        data = (root / rel).read_bytes()
        assert b"\r\n# SIG # Begin signature block\r\n" in data and data.endswith(b"# SIG # End signature block\r\n")
        assert parse_problems(data) == [] and powershell7_constructs(data) == []
    subprocess.run(["sha256sum", "-c", "--strict", "--quiet", "SHA256SUMS"], cwd=root, check=True)
    code, report = verify_json(signed_win, "--trust", str(pki["good"].root))
    assert code == 0 and report["ok"] and report["signed"], report
    checks = {c["path"]: c for c in report["signatures"]}
    assert sorted(checks) == sorted([*scripts, "SHA256SUMS.p7s"])
    for check in checks.values():
        assert check["ok"] and check["trusted"] and check["signer"] == "good Code Signing"
        assert check["chain"] == ["good Code Signing", "good Intermediate CA", "good Root CA"]
        assert check["timestamp"] is None
    assert report["unsigned_build"]["equal"]
    assert report["unsigned_build"]["rebuilt_sha256"] == (win_zip.parent / f"{win_zip.name}.sha256").read_text().split()[0]


def test_removing_the_signatures_gives_back_the_unsigned_build(signed_win: Path, win_zip: Path, tmp_path: Path) -> None:
    """Member by member: every unsigned file is the build's, every script is the build's plus a block."""
    with zipfile.ZipFile(win_zip) as unsigned, zipfile.ZipFile(signed_win) as signed:
        before = {i.filename: unsigned.read(i) for i in unsigned.infolist() if not i.is_dir()}
        after = {i.filename: signed.read(i) for i in signed.infolist() if not i.is_dir()}
    assert set(after) - set(before) == {f"{WIN}/SHA256SUMS.p7s", f"{WIN}/signature.json",
                                        f"{WIN}/provenance.intoto.dsse.json"}  # the provenance's DSSE envelope
    for name, data in before.items():
        if name.endswith(".ps1"):
            assert split_signature(after[name]).content == data
        elif not name.endswith("SHA256SUMS"):
            assert after[name] == data, name
    record = json.loads(after[f"{WIN}/signature.json"])
    assert record["unsigned_bundle"]["sha256"] == (win_zip.parent / f"{win_zip.name}.sha256").read_text().split()[0]


def test_signing_twice_and_with_pkcs12_gives_the_same_bytes(win_zip: Path, signed_win: Path, pki: dict[str, Pki],
                                                           tmp_path: Path) -> None:
    again = tmp_path / "again"
    sign(win_zip, again, pki["good"])
    assert (again / win_zip.name).read_bytes() == signed_win.read_bytes()
    p12 = tmp_path / "p12"
    run_cli("sign", "--cache", str(CACHE), "-q", str(win_zip), "-o", str(p12), "--pkcs12", str(pki["good"].p12), "--password-env",
            "TEST_P12_PASSWORD", env={**os.environ, "TEST_P12_PASSWORD": P12_PASSWORD})
    assert (p12 / win_zip.name).read_bytes() == signed_win.read_bytes()
    sidecar = (p12 / f"{win_zip.name}.sha256").read_text()
    assert sidecar.split() == [hashlib.sha256(signed_win.read_bytes()).hexdigest(), win_zip.name]


def _tampered(signed: Path, dest: Path, member: str) -> Path:
    """Flip one byte of `member` and rewrite its SHA256SUMS line: what an attacker with write access does."""
    top = signed.name.removesuffix(".zip")
    with zipfile.ZipFile(signed) as archive:
        files = {i.filename: (i, archive.read(i)) for i in archive.infolist()}
    info, data = files[f"{top}/{member}"]
    changed = bytearray(data)
    changed[len(changed) // 2] ^= 0x01
    files[f"{top}/{member}"] = (info, bytes(changed))
    sums_info, sums = files[f"{top}/SHA256SUMS"]
    old, new = (hashlib.sha256(d).hexdigest() for d in (data, bytes(changed)))
    assert old.encode() in sums
    files[f"{top}/SHA256SUMS"] = (sums_info, sums.replace(old.encode(), new.encode()))
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest / signed.name, "w", zipfile.ZIP_DEFLATED) as out:
        for info, content in files.values():
            out.writestr(info, content)
    return dest / signed.name


def test_a_script_whose_signature_would_depend_on_the_code_page_is_not_signed(win_zip: Path, pki: dict[str, Pki],
                                                                              tmp_path: Path) -> None:
    """A bundle (consistent SHA256SUMS) whose run.ps1 lost its byte-order mark and CRLFs, as an editor may do."""
    top = win_zip.name.removesuffix(".zip")
    with zipfile.ZipFile(win_zip) as archive:
        files = {i.filename: (i, archive.read(i)) for i in archive.infolist()}
    name = f"{top}/payload/launchers/run.ps1"
    old = files[name][1]
    new = old.removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n")
    files[name] = (files[name][0], new)
    sums_info, sums = files[f"{top}/SHA256SUMS"]
    files[f"{top}/SHA256SUMS"] = (sums_info, sums.replace(hashlib.sha256(old).hexdigest().encode(),
                                                          hashlib.sha256(new).hexdigest().encode()))
    (tmp_path / "in").mkdir()
    with zipfile.ZipFile(tmp_path / "in" / win_zip.name, "w", zipfile.ZIP_DEFLATED) as out:
        for info, content in files.values():
            out.writestr(info, content)
    assert run_cli("verify", "--cache", str(CACHE), str(tmp_path / "in" / win_zip.name)).returncode == 0
    proc = sign(tmp_path / "in" / win_zip.name, tmp_path / "out", pki["good"], check=False)
    assert proc.returncode == 7 and "payload/launchers/run.ps1 is not UTF-8 with a byte-order mark" in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("member", ["payload/ort_bundle/selfcheck/selfcheck.py", "install.ps1"])
def test_a_changed_file_with_rewritten_sums_is_refused(signed_win: Path, pki: dict[str, Pki], tmp_path: Path,
                                                       member: str) -> None:
    tampered = _tampered(signed_win, tmp_path, member)
    code, report = verify_json(tampered, "--trust", str(pki["good"].root))
    assert code == 8 and not report["ok"]
    failed = {c["path"]: c["problems"] for c in report["signatures"] if not c["ok"]}
    assert "changed after signing" in " ".join(failed["SHA256SUMS.p7s"])
    if member == "install.ps1":
        assert "changed after signing" in " ".join(failed["install.ps1"])
    assert run_cli("verify", "--cache", str(CACHE), str(tampered), check=False).returncode == 8  # the mathematics fail without --trust too


def test_a_bundle_signed_by_another_ca_or_not_signed_is_refused(signed_win: Path, win_zip: Path,
                                                                pki: dict[str, Pki]) -> None:
    code, report = verify_json(signed_win, "--trust", str(pki["other"].root))
    assert code == 8
    assert all(not c["trusted"] and "does not reach the trust anchor" in c["problems"][0] for c in report["signatures"])
    code, report = verify_json(win_zip, "--trust", str(pki["good"].root))
    assert code == 8 and report["signed"] is False
    problems = " ".join(p for c in report["signatures"] for p in c["problems"])
    assert "no Authenticode signature block" in problems and "SHA256SUMS.p7s is missing" in problems
    code, report = verify_json(signed_win)  # no anchor: the mathematics pass, trust is not claimed
    assert code == 0 and all(c["trusted"] is None for c in report["signatures"])


def test_the_external_signer_contract_and_an_expired_certificate_without_timestamp(
        win_zip: Path, pki: dict[str, Pki], tmp_path: Path) -> None:
    script = tmp_path / "org-signer.py"
    script.write_text(EXTERNAL_SIGNER)
    for name in ("good", "expired"):
        p = pki[name]
        command = f"{sys.executable} {script} {p.cert} {p.key} {p.chain}"
        run_cli("sign", "--cache", str(CACHE), "-q", str(win_zip), "-o", str(tmp_path / name), "--signer", command)
        code, report = verify_json(tmp_path / name / win_zip.name, "--trust", str(p.root))
        assert report["unsigned_build"]["equal"]
        if name == "good":
            assert code == 0, report
            continue
        assert code == 8
        for check in report["signatures"]:
            assert check["signer"] == "expired Code Signing" and check["timestamp"] is None
            assert "expired on" in check["problems"][0] and "no trusted timestamp" in check["problems"][0]


BAD_SIGNER = r'''
"""A signing tool that breaks the contract on purpose: it edits the script, or signs SHA256SUMS as someone else."""
import os, shutil, subprocess, sys
how, cert, key, chain, other_cert, other_key, source, dest = sys.argv[1:9]
if os.environ["ORT_BUNDLER_SIGN_KIND"] == "authenticode":
    if how == "edits":
        edited = dest + ".edited.ps1"
        shutil.copyfile(source, edited)
        with open(edited, "ab") as fh:
            fh.write(b"Write-Host 'added by the signer'\r\n")
        source = edited
    cmd = ["osslsigncode", "sign", "-certs", cert, "-ac", chain, "-key", key, "-h", "sha256", "-in", source, "-out", dest]
else:
    cmd = ["openssl", "cms", "-sign", "-binary", "-outform", "DER", "-md", "sha256", "-nosmimecap", "-signer",
           other_cert, "-inkey", other_key, "-in", source, "-out", dest]
sys.exit(subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode)
'''


@pytest.mark.parametrize(("how", "expected"), [("edits", "changed the script itself"),
                                               ("two-signers", "expected one signer")])
def test_a_signer_command_that_breaks_the_contract_is_refused(win_zip: Path, pki: dict[str, Pki], tmp_path: Path,
                                                              how: str, expected: str) -> None:
    script = tmp_path / "bad-signer.py"
    script.write_text(BAD_SIGNER)
    good, other = pki["good"], pki["other"]
    command = f"{sys.executable} {script} {how} {good.cert} {good.key} {good.chain} {other.cert} {other.key}"
    proc = run_cli("sign", "--cache", str(CACHE), str(win_zip), "-o", str(tmp_path / "out"), "--signer", command, check=False)
    assert proc.returncode == 7 and expected in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_signer_command_that_writes_nothing_is_a_clear_error(win_zip: Path, tmp_path: Path) -> None:
    proc = run_cli("sign", "--cache", str(CACHE), str(win_zip), "-o", str(tmp_path / "out"), "--signer", "true", check=False)
    assert proc.returncode == 2 and "wrote no install.ps1" in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("case", ["wrong-password", "unset-password-env", "foreign-key", "no-code-signing-usage",
                                  "expired", "two-ways", "already-signed"])
def test_bad_credentials_are_one_clear_error_and_nothing_is_written(win_zip: Path, signed_win: Path,
                                                                   pki: dict[str, Pki], tmp_path: Path,
                                                                   case: str) -> None:
    out = tmp_path / "out"
    good = pki["good"]
    args = {
        "wrong-password": ["--pkcs12", str(good.p12), "--password-env", "P12"],
        "unset-password-env": ["--pkcs12", str(good.p12), "--password-env", "NOT_SET_ANYWHERE"],
        "foreign-key": ["--cert", str(good.cert), "--key", str(pki["other"].key)],
        "no-code-signing-usage": ["--cert", str(pki["tls"].cert), "--key", str(pki["tls"].key)],
        "expired": ["--cert", str(pki["expired"].cert), "--key", str(pki["expired"].key)],
        "two-ways": ["--cert", str(good.cert), "--key", str(good.key), "--signer", "true"],
        "already-signed": ["--cert", str(good.cert), "--key", str(good.key)],
    }[case]
    expected = {"wrong-password": "cannot be opened with the password", "unset-password-env": "is not set",
                "foreign-key": "does not belong to the certificate", "no-code-signing-usage": "is not for code signing",
                "expired": "expired on", "two-ways": "exactly one of", "already-signed": "already signed"}[case]
    bundle = signed_win if case == "already-signed" else win_zip
    proc = run_cli("sign", "--cache", str(CACHE), str(bundle), "-o", str(out), *args, check=False, env={**os.environ, "P12": "wrong"})
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists() or not any(out.iterdir())


def test_a_missing_osslsigncode_names_the_tool_and_how_to_install_it(win_zip: Path, pki: dict[str, Pki],
                                                                      tmp_path: Path) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    proc = sign(win_zip, tmp_path / "out", pki["good"], check=False, env={**os.environ, "PATH": str(empty)})
    assert proc.returncode == 4
    assert "osslsigncode is not installed" in proc.stderr and "install the Debian package osslsigncode" in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_an_osslsigncode_too_old_for_scripts_is_refused_by_version(win_zip: Path, pki: dict[str, Pki],
                                                                    tmp_path: Path) -> None:
    """A stand-in named osslsigncode that reports Debian 12's own 2.5 (which cannot sign scripts)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "osslsigncode"
    fake.write_text("#!/bin/sh\necho 'osslsigncode 2.5, using:'\nexit 0\n")
    fake.chmod(0o755)
    proc = sign(win_zip, tmp_path / "out", pki["good"], check=False, env={**os.environ, "PATH": str(bin_dir)})
    assert proc.returncode == 4
    assert "is osslsigncode 2.5" in proc.stderr and "2.8 or later" in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the Linux install-time check runs openssl")
def test_the_linux_install_time_check_with_openssl(linux_zip: Path, pki: dict[str, Pki], tmp_path: Path) -> None:
    """bundler/shipped/ort_bundle/engine/trust.py, as install.sh --trust will run it, on the unpacked Linux bundle; with the
    oldest Python a target may have (3.8) when this machine has one."""
    sign(linux_zip, tmp_path / "signed", pki["good"])
    signed = tmp_path / "signed" / linux_zip.name
    python = oldest_python() or sys.executable

    def trust(zip_path: Path, anchor: Path, where: str) -> subprocess.CompletedProcess[str]:
        root = unpack(zip_path, tmp_path / where)
        return subprocess.run([python, str(TRUST_PY), str(root), "--trust", str(anchor)],
                              capture_output=True, text=True)

    good = trust(signed, pki["good"].root, "good")
    assert good.returncode == 0 and "signed by CN=good Code Signing" in good.stdout, good.stderr
    subprocess.run(["sha256sum", "-c", "--strict", "--quiet", "SHA256SUMS"], cwd=tmp_path / "good" / LINUX, check=True)
    # The outside check README-INSTALL.txt prints (issue 27, section 1), as printed, on the signed quickstart bundle.
    folder = tmp_path / "good" / LINUX
    for command in outside_check((folder / "README-INSTALL.txt").read_text()):
        proc = subprocess.run(["sh", "-c", command.replace("CA.pem", str(pki["good"].root))], cwd=folder,
                              capture_output=True, text=True)
        assert proc.returncode == 0 and "ERROR" not in proc.stdout + proc.stderr, (command, proc.stdout, proc.stderr)
        assert command.startswith("openssl") or proc.stdout == "", (command, proc.stdout)
    cases = {"tampered": (_tampered(signed, tmp_path / "t", "payload/ort_bundle/selfcheck/selfcheck.py"), pki["good"].root),
             "other-ca": (signed, pki["other"].root), "system-ca": (signed, Path("/etc/ssl/certs/ca-certificates.crt")),
             "unsigned": (linux_zip, pki["good"].root)}
    for where, (zip_path, anchor) in cases.items():
        if not anchor.is_file():
            continue
        proc = trust(zip_path, anchor, where)
        assert proc.returncode == 11, (where, proc.stdout, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1
    assert "not signed" in trust(linux_zip, pki["good"].root, "unsigned-2").stderr
    missing = trust(signed, tmp_path / "no-such-ca.pem", "missing")
    assert missing.returncode == 10 and "no such file" in missing.stderr


def test_install_sh_trust_refuses_an_altered_foreign_or_unsigned_bundle_before_anything_changes(
        linux_zip: Path, pki: dict[str, Pki], tmp_path: Path) -> None:
    """The Linux bundle, installed for real with install.sh --trust; each refusal is exit 11 and leaves no folder."""
    sign(linux_zip, tmp_path / "signed", pki["good"])
    signed = tmp_path / "signed" / linux_zip.name
    cases = {"altered": (_tampered(signed, tmp_path / "t", "payload/models/tiny-mlp.onnx"), pki["good"].root, 11),
             "other-ca": (signed, pki["other"].root, 11), "unsigned": (linux_zip, pki["good"].root, 11),
             "no-anchor-file": (signed, tmp_path / "missing.pem", 10)}
    for name, (zip_path, anchor, code) in cases.items():
        bundle = unpack(zip_path, tmp_path / name)
        root = tmp_path / f"{name}-root"
        proc = subprocess.run(["sh", str(bundle / "install.sh"), "--trust", str(anchor), "--install-dir", str(root)],
                              capture_output=True, text=True)
        assert proc.returncode == code, (name, proc.stdout, proc.stderr)
        # openssl's own check comes first (issue 27, section 1): its refusals are install.sh's, the rest trust.py's
        assert ("ERROR: install.sh --trust:" in proc.stderr or "ERROR: trust.py:" in proc.stderr) and not root.exists(), \
            (name, proc.stderr)
    bundle = unpack(signed, tmp_path / "good")
    root = tmp_path / "good-root"
    proc = subprocess.run(["sh", str(bundle / "install.sh"), "--trust", str(pki["good"].root), "--install-dir", str(root)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "bundle signature verified: signed by CN=good Code Signing" in proc.stdout
    assert json.loads((root / "receipt.json").read_text())["selfcheck"]["passed"] is True


def test_the_library_reports_an_expired_certificate_against_the_moment_of_verification(
        signed_win: Path, pki: dict[str, Pki]) -> None:
    """The same signatures, checked as if two years had passed: expired, and no timestamp to rescue them."""
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=730)
    report = verify_bundle(signed_win, trust=pki["good"].root, now=later)
    assert not report.ok
    assert all("expired on" in c.problems[0] for c in report.signatures)


@pytest.fixture(scope="module")
def tsa(tmp_path_factory: pytest.TempPathFactory) -> Tsa:
    return Tsa.make(tmp_path_factory.mktemp("tsa"))


@pytest.fixture(scope="module")
def tsa_url(tsa: Tsa) -> Iterator[str]:
    """A real RFC 3161 server on 127.0.0.1: each POSTed query is answered by `openssl ts -reply`."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            query = self.rfile.read(int(self.headers["Content-Length"]))
            with tempfile.TemporaryDirectory() as tmp:
                (Path(tmp) / "q.tsq").write_bytes(query)
                subprocess.run(["openssl", "ts", "-reply", "-queryfile", str(Path(tmp) / "q.tsq"), "-signer",
                                str(tsa.cert), "-inkey", str(tsa.key), "-config", str(tsa.config), "-out",
                                str(Path(tmp) / "r.tsr")], check=True, capture_output=True)
                body = (Path(tmp) / "r.tsr").read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/timestamp-reply")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_a_timestamped_bundle_outlives_its_certificate(win_zip: Path, pki: dict[str, Pki], tsa: Tsa, tsa_url: str,
                                                       tmp_path: Path) -> None:
    """Scripts timestamped by osslsigncode, SHA256SUMS.p7s by us: both checked at the token's time."""
    sign(win_zip, tmp_path / "ts", pki["good"], "--timestamp-url", tsa_url)
    signed = tmp_path / "ts" / win_zip.name
    anchors = tmp_path / "anchors.pem"
    anchors.write_bytes(pki["good"].root.read_bytes() + tsa.root.read_bytes())
    code, report = verify_json(signed, "--trust", str(anchors))
    assert code == 0, report
    assert all(c["timestamp"] and c["timestamp_authority"] == "test Time Stamping" for c in report["signatures"])
    assert report["unsigned_build"]["equal"]
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=730)
    assert verify_bundle(signed, trust=anchors, now=later).ok  # the certificate has expired by then
    untrusted_tsa = verify_bundle(signed, trust=pki["good"].root, now=later)
    assert not untrusted_tsa.ok
    for check in untrusted_tsa.signatures:
        assert any("timestamp's authority is not trusted" in n for n in check.notes)
        assert "expired on" in check.problems[0]


def test_a_certificate_that_expires_after_signing_needs_the_timestamp(linux_zip: Path, tsa: Tsa, tsa_url: str,
                                                                      tmp_path: Path) -> None:
    """For real, no clock games: a certificate that lives 20 seconds signs two bundles, one timestamped;
    after it has expired, only the timestamped one passes verify --trust and the Linux install-time check."""
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=20)
    short = Pki.make(tmp_path / "pki", "short", not_after=expires)
    sign(linux_zip, tmp_path / "plain", short)
    sign(linux_zip, tmp_path / "stamped", short, "--timestamp-url", tsa_url)
    anchors = tmp_path / "anchors.pem"
    anchors.write_bytes(short.root.read_bytes() + tsa.root.read_bytes())
    time.sleep(max(0.0, (expires - dt.datetime.now(dt.UTC)).total_seconds() + 1.5))

    def install_check(kind: str, anchor: Path) -> subprocess.CompletedProcess[str]:
        root = unpack(tmp_path / kind / linux_zip.name, tmp_path / f"unpacked-{kind}-{anchor.stem}")
        return subprocess.run([sys.executable, str(TRUST_PY), str(root), "--trust", str(anchor)],
                              capture_output=True, text=True)

    assert install_check("stamped", anchors).returncode == 0
    refused = install_check("plain", anchors)
    assert refused.returncode == 11 and "expired" in refused.stderr
    assert install_check("stamped", short.root).returncode == 11  # the token's authority is not trusted
    code, report = verify_json(tmp_path / "stamped" / linux_zip.name, "--trust", str(anchors))
    assert code == 0 and report["signatures"][0]["timestamp_authority"] == "test Time Stamping"
    code, report = verify_json(tmp_path / "plain" / linux_zip.name, "--trust", str(anchors))
    assert code == 8 and "no trusted timestamp" in report["signatures"][0]["problems"][0]
