"""The install-time signature check on Linux: `install.sh --trust CA.pem` runs this before anything changes.

Standard library only (it runs with the target's Python 3.8+ before any environment exists); the
cryptography is `openssl`'s, which every Linux server has. The steps, each a refusal with exit 11
(integrity) when it fails:

1. the bundle folder holds `SHA256SUMS` and its detached signature `SHA256SUMS.p7s` (an unsigned
   bundle is refused: the administrator asked for a signed one);
2. `openssl cms -verify -binary -inform DER -in SHA256SUMS.p7s -content SHA256SUMS -CAfile CA.pem
   -no-CApath [-no-CAstore] -purpose any`: the signature over `SHA256SUMS` holds and its chain reaches
   the given anchor and nothing else (not the system's CA store); openssl checks lifetimes at the
   present time (the bundle signature carries no timestamp);
3. the signer's certificate (written by `-signer`) has the code-signing extended key usage (OpenSSL
   3.0 has no code-signing purpose, hence `-purpose any` and this separate check);
4. every file `SHA256SUMS` lists exists inside the bundle folder and has that sha256.

Exit codes: 0 verified, 10 usage (the anchor file is missing), 11 integrity, 12 prerequisite
(`openssl` not found). Prints who signed on success.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath
from typing import List, Optional, Tuple

SUMS = "SHA256SUMS"
SIGNATURE = "SHA256SUMS.p7s"
EXIT_OK, EXIT_USAGE, EXIT_INTEGRITY, EXIT_PREREQUISITE = 0, 10, 11, 12
CHUNK = 1 << 20


class TrustError(Exception):
    """A check failed; carries the installer exit code and one sentence."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def verify(bundle: Path, anchor: Path, *, openssl: Optional[str] = None) -> str:
    """Run every step; return the signer's subject, or raise TrustError."""
    if not anchor.is_file():
        raise TrustError(EXIT_USAGE, f"--trust {anchor}: no such file; give the PEM file of the CA you trust")
    for name in (SUMS, SIGNATURE):
        if not (bundle / name).is_file():
            raise TrustError(EXIT_INTEGRITY, f"{bundle / name} is missing: this bundle is not signed, and --trust "
                                             "asks for a signed one")
    tool = openssl or shutil.which("openssl")
    if tool is None:
        raise TrustError(EXIT_PREREQUISITE, "openssl was not found on PATH; it checks the bundle's signature "
                                            "(install the 'openssl' package)")
    with tempfile.TemporaryDirectory(prefix="ort-bundle-trust-") as tmp:
        signer = Path(tmp) / "signer.pem"
        _cms_verify(tool, bundle, anchor, signer)
        subject, text = _signer_details(tool, signer)
    if "Code Signing" not in text:
        raise TrustError(EXIT_INTEGRITY, f"{SIGNATURE} was signed by {subject}, whose certificate is not for code signing")
    _check_sums(bundle)
    return subject


def _cms_verify(tool: str, bundle: Path, anchor: Path, signer: Path) -> None:
    cmd = [tool, "cms", "-verify", "-binary", "-inform", "DER", "-in", str(bundle / SIGNATURE),
           "-content", str(bundle / SUMS), "-CAfile", str(anchor), "-no-CApath", "-purpose", "any",
           "-signer", str(signer), "-out", os.devnull]
    if _major_version(tool) >= 3:
        cmd[cmd.index("-no-CApath") + 1:cmd.index("-no-CApath") + 1] = ["-no-CAstore"]
    code, output = _run(cmd)
    if code != 0:
        reason = _reason(output)
        raise TrustError(EXIT_INTEGRITY, f"{SIGNATURE} does not verify against {anchor} ({reason}): the bundle was "
                                         "changed after signing, or signed by someone else; nothing was installed")


def _signer_details(tool: str, signer: Path) -> Tuple[str, str]:
    code, subject = _run([tool, "x509", "-in", str(signer), "-noout", "-subject", "-nameopt", "RFC2253"])
    code_text, text = _run([tool, "x509", "-in", str(signer), "-noout", "-text"])
    if code != 0 or code_text != 0:
        raise TrustError(EXIT_INTEGRITY, f"the signer's certificate cannot be read ({_reason(subject + text)})")
    return subject.strip().replace("subject=", "", 1).strip(), text


def _check_sums(bundle: Path) -> None:
    for number, line in enumerate((bundle / SUMS).read_text(encoding="utf-8").splitlines(), 1):
        expected, sep, name = line.partition("  ")
        if not sep or len(expected) != 64 or not _safe(name):
            raise TrustError(EXIT_INTEGRITY, f"{SUMS} line {number} is not '<sha256>  <path inside the bundle>'")
        path = bundle.joinpath(*PurePosixPath(name).parts)
        if path.is_symlink() or not path.is_file():
            raise TrustError(EXIT_INTEGRITY, f"{name} is listed in {SUMS} but is not a file in {bundle}")
        if _sha256(path) != expected:
            raise TrustError(EXIT_INTEGRITY, f"{name} does not match {SUMS}: the bundle was changed or damaged")


def _safe(name: str) -> bool:
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and "\\" not in name and all(p not in ("", ".", "..") for p in parts)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _major_version(tool: str) -> int:
    code, output = _run([tool, "version"])
    try:
        return int(output.split()[1].split(".")[0]) if code == 0 else 0
    except (IndexError, ValueError):
        return 0


def _run(cmd: List[str]) -> Tuple[int, str]:
    try:
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    except OSError as exc:
        raise TrustError(EXIT_PREREQUISITE, f"{cmd[0]} cannot be run ({exc})") from None
    return done.returncode, done.stdout.decode("utf-8", "replace")


def _reason(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["no output"])[-1][:300]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="trust.py", description="check a signed bundle before installing it")
    parser.add_argument("bundle", type=Path, help="the extracted bundle folder")
    parser.add_argument("--trust", type=Path, required=True, metavar="CA.pem", help="the CA certificate(s) you trust")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2; the installers' usage code is 10
        return EXIT_USAGE if exc.code else EXIT_OK
    try:
        subject = verify(args.bundle, args.trust)
    except TrustError as exc:
        print(f"trust.py: {exc}", file=sys.stderr)
        return exc.code
    print(f"bundle signature verified: signed by {subject}, chain reaches {args.trust}; every file matches {SUMS}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
