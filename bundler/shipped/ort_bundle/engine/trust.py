"""The install-time signature check on Linux: `install.sh --trust CA.pem` runs this before anything changes.

Standard library only (it runs with the target's Python 3.8+ before any environment exists); the
cryptography is `openssl`'s, which every Linux server has. The steps, each a refusal with exit 11
(integrity) when it fails:

1. the bundle folder holds `SHA256SUMS` and its detached signature `SHA256SUMS.p7s` (an unsigned
   bundle is refused: the administrator asked for a signed one);
2. when the signature carries an RFC 3161 timestamp (id-aa-signatureTimeStampToken, found with the
   small DER reader below): `openssl ts -verify -token_in -in TOKEN -digest <sha256 of the signature
   value> -CAfile CA.pem`, and its time is the moment at which step 3 checks lifetimes (`-attime`);
   a token that does not verify against the anchor is ignored, and lifetimes are checked now;
3. `openssl cms -verify -binary -inform DER -in SHA256SUMS.p7s -content SHA256SUMS -CAfile CA.pem
   -no-CApath [-no-CAstore] -purpose any [-attime T]`: the signature over `SHA256SUMS` holds and its
   chain reaches the given anchor and nothing else (not the system's CA store);
4. the signer's certificate (written by `-signer`) has the code-signing extended key usage (OpenSSL
   3.0 has no code-signing purpose, hence `-purpose any` and this separate check);
5. the bundle folder holds nothing `SHA256SUMS` does not list (besides `SHA256SUMS` and its signature):
   an added file is refused by name (issue 27 §1: an unlisted `__pycache__/*.pyc` beside the engine's
   sources would have run), as a stray `Thumbs.db` is;
6. every file `SHA256SUMS` lists exists inside the bundle folder and has that sha256.

This check ships in the bundle it checks, so it guards against accidents and mix-ups, not against
someone who can rewrite the bundle: install.sh runs it only from a private copy whose bytes match the
signed SHA256SUMS, after openssl has checked the signature, and README-INSTALL gives the check to run
from outside (`ort-bundler verify --trust` on a trusted machine, or the openssl commands).

Exit codes: 0 verified, 10 usage (the anchor file is missing), 11 integrity, 12 prerequisite
(`openssl` not found). Prints who signed on success.
"""

from __future__ import annotations

import argparse
import calendar
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path, PurePosixPath
from typing import Iterable, List, Optional, Tuple

SUMS = "SHA256SUMS"
SIGNATURE = "SHA256SUMS.p7s"
EXIT_OK, EXIT_USAGE, EXIT_INTEGRITY, EXIT_PREREQUISITE = 0, 10, 11, 12
CHUNK = 1 << 20
# DER of id-aa-signatureTimeStampToken, 1.2.840.113549.1.9.16.2.14 (RFC 3161 appendix A)
TIMESTAMP_TOKEN_OID = bytes.fromhex("2a864886f70d010910020e")


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
        moment = _timestamp_time(tool, bundle / SIGNATURE, anchor, Path(tmp))
        _cms_verify(tool, bundle, anchor, signer, moment)
        subject, text = _signer_details(tool, signer)
    if not code_signing(text):
        raise TrustError(EXIT_INTEGRITY, f"{SIGNATURE} was signed by {subject}, whose certificate is not for code signing")
    _check_sums(bundle)
    return subject


def _cms_verify(tool: str, bundle: Path, anchor: Path, signer: Path, moment: Optional[int]) -> None:
    cmd = [tool, "cms", "-verify", "-binary", "-inform", "DER", "-in", str(bundle / SIGNATURE),
           "-content", str(bundle / SUMS), *_anchor_only(tool, anchor), "-purpose", "any",
           "-signer", str(signer), "-out", os.devnull]
    if moment is not None:
        cmd += ["-attime", str(moment)]
    code, output = _run(cmd)
    if code != 0:
        reason = _reason(output)
        raise TrustError(EXIT_INTEGRITY, f"{SIGNATURE} does not verify against {anchor} ({reason}): the bundle was "
                                         "changed after signing, or signed by someone else; nothing was installed")


def _anchor_only(tool: str, anchor: Path) -> List[str]:
    """Trust the anchor file and nothing else: openssl would otherwise add the system's CA folder."""
    return ["-CAfile", str(anchor), "-no-CApath"] + (["-no-CAstore"] if _major_version(tool) >= 3 else [])


def _timestamp_time(tool: str, signature: Path, anchor: Path, work: Path) -> Optional[int]:
    """The time of a timestamp token that verifies against the anchor, as a Unix time; else None."""
    try:
        signature_value, token = signature_parts(signature.read_bytes())
    except ValueError as exc:
        raise TrustError(EXIT_INTEGRITY, f"{SIGNATURE} is not a CMS signature ({exc})") from None
    if token is None:
        return None
    (work / "token.der").write_bytes(token)
    digest = hashlib.sha256(signature_value).hexdigest()
    # `openssl ts` trusts only the stores it is given (no -no-CApath there), so -CAfile alone is the anchor only.
    code, _ = _run([tool, "ts", "-verify", "-token_in", "-in", str(work / "token.der"), "-digest", digest,
                    "-CAfile", str(anchor)])
    if code != 0:
        return None
    code, text = _run([tool, "ts", "-reply", "-token_in", "-in", str(work / "token.der"), "-text"])
    when = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Time stamp:")]
    if code != 0 or not when:
        return None
    return calendar.timegm(time.strptime(when[0].replace(" GMT", ""), "%b %d %H:%M:%S %Y"))


def signature_parts(der: bytes) -> Tuple[bytes, Optional[bytes]]:
    """(the signer's signature value, its RFC 3161 token or None) from a one-signer CMS ContentInfo.

    ContentInfo { oid, [0] SignedData { version, digestAlgorithms, encapContentInfo, [0] certificates?,
    [1] crls?, signerInfos { SignerInfo { version, sid, digestAlgorithm, [0] signedAttrs?,
    signatureAlgorithm, signature OCTET STRING, [1] unsignedAttrs? } } } } (RFC 5652).
    """
    content_info = _children(der, *_tlv(der, 0)[1:])
    signed_data = _children(der, *_tlv(der, content_info[1][1])[1:])  # inside the [0] EXPLICIT wrapper
    signer_infos = [c for c in signed_data if c[0] == 0x31][-1]
    signer_info = _children(der, signer_infos[1], signer_infos[2])
    if len(signer_info) != 1:
        raise ValueError(f"{len(signer_info)} signers, expected one")
    fields = _children(der, signer_info[0][1], signer_info[0][2])
    signature = next(der[start:end] for tag, start, end in fields if tag == 0x04)
    token = None
    for tag, start, end in fields:
        if tag != 0xA1:
            continue
        for _, attr_start, attr_end in _children(der, start, end):
            oid, values = _children(der, attr_start, attr_end)
            if der[oid[1]:oid[2]] == TIMESTAMP_TOKEN_OID:  # the SET's first value, header included
                token = der[values[1]:_children(der, values[1], values[2])[0][2]]
    return signature, token


def _tlv(data: bytes, pos: int) -> Tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER element at `pos`."""
    if pos + 2 > len(data):
        raise ValueError("truncated DER")
    tag, length, pos = data[pos], data[pos + 1], pos + 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or pos + count > len(data):
            raise ValueError("unsupported DER length")
        length, pos = int.from_bytes(data[pos:pos + count], "big"), pos + count
    if pos + length > len(data):
        raise ValueError("DER element longer than its container")
    return tag, pos, pos + length


def _children(data: bytes, start: int, end: int) -> List[Tuple[int, int, int]]:
    found, pos = [], start
    while pos < end:
        tag, content, stop = _tlv(data, pos)
        found.append((tag, content, stop))
        pos = stop
    return found


def _signer_details(tool: str, signer: Path) -> Tuple[str, str]:
    code, subject = _run([tool, "x509", "-in", str(signer), "-noout", "-subject", "-nameopt", "RFC2253"])
    code_text, text = _run([tool, "x509", "-in", str(signer), "-noout", "-text"])
    if code != 0 or code_text != 0:
        raise TrustError(EXIT_INTEGRITY, f"the signer's certificate cannot be read ({_reason(subject + text)})")
    return subject.strip().replace("subject=", "", 1).strip(), text


def code_signing(text: str) -> bool:
    """Whether `openssl x509 -text` shows the code-signing extended key usage: the line after the extension's
    heading, not anywhere in the text (a subject such as `CN=tls Code Signing` says nothing)."""
    lines = text.splitlines()
    return any("X509v3 Extended Key Usage" in line and "Code Signing" in (lines[i + 1] if i + 1 < len(lines) else "")
               for i, line in enumerate(lines))


def _check_sums(bundle: Path) -> None:
    listed = []
    for number, line in enumerate((bundle / SUMS).read_text(encoding="utf-8").splitlines(), 1):
        expected, sep, name = line.partition("  ")
        if not sep or len(expected) != 64 or not _safe(name):
            raise TrustError(EXIT_INTEGRITY, f"{SUMS} line {number} is not '<sha256>  <path inside the bundle>'")
        listed.append((name, expected))
    extra = unlisted(bundle, (name for name, _ in listed))
    if extra:
        raise TrustError(EXIT_INTEGRITY, unlisted_message(extra))
    for name, expected in listed:
        path = bundle.joinpath(*PurePosixPath(name).parts)
        if path.is_symlink() or not path.is_file():
            raise TrustError(EXIT_INTEGRITY, f"{name} is listed in {SUMS} but is not a file in {bundle}")
        if _sha256(path) != expected:
            raise TrustError(EXIT_INTEGRITY, f"{name} does not match {SUMS}: the bundle was changed or damaged")


def unlisted(bundle: Path, listed: Iterable[str]) -> List[str]:
    """Every file, link or other entry below `bundle` that is neither listed nor SHA256SUMS or its signature,
    '/'-separated and sorted (a link to a folder counts; links are never followed; empty folders hold nothing)."""
    allowed = set(listed) | {SUMS, SIGNATURE}
    found = []
    for folder, dirs, files in os.walk(str(bundle)):
        base = Path(folder).relative_to(bundle).as_posix()
        prefix = "" if base == "." else base + "/"
        found += [prefix + name for name in files if prefix + name not in allowed]
        found += [prefix + name for name in dirs if os.path.islink(os.path.join(folder, name))]
    return sorted(found)


def unlisted_message(extra: List[str]) -> str:
    """One sentence naming what is in the bundle folder but not in SHA256SUMS (the engine says the same)."""
    named = extra[0] if len(extra) == 1 else ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
    verb = "is" if len(extra) == 1 else "are"
    return (f"{named} {verb} in the bundle folder but not in {SUMS}; a bundle folder holds only the files {SUMS} "
            f"lists: remove {'it' if len(extra) == 1 else 'them'} or extract the bundle's zip again into an empty "
            f"folder (nothing was changed)")


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
