"""Authenticode for PowerShell scripts: the signature block, its digest, and signing with osslsigncode.

A signed `.ps1` is the script, then CRLF, then `# SIG # Begin signature block`, lines of
`# <base64 of a PKCS#7 SignedData>`, `# SIG # End signature block` and a final CRLF (the form
Windows PowerShell 5.1 writes and reads). The signed digest (inside the SignedData's
SpcIndirectDataContent) is over the script *before* the block, as UTF-16LE text: that is how
PowerShell's subject interface package hashes a script, and how osslsigncode 2.9 computes it
(`script.c`: a UTF-8 file is converted to UTF-16LE, byte-order mark included). So removing the block
gives back the unsigned script byte for byte.

osslsigncode does the signing (Debian package `osslsigncode`, 2.9 or later for scripts): it is the
one free tool that writes this block, and running it keeps us from re-implementing Authenticode's
structures. Signing without a timestamp passes `-time` so that the same script and key give the same
bytes; with `--timestamp-url` the signature is timestamped (RFC 3161, `-ts`) and differs each time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from pathlib import Path

from asn1crypto import cms

from bundler.integrations import tools
from bundler.runner import Runner
from bundler.signing.cms import HASHES, SignatureProblem, load_signed_data

HEADER = b"# SIG # Begin signature block"
FOOTER = b"# SIG # End signature block"
CRLF = b"\r\n"
SCRIPT_SUFFIXES = (".ps1", ".psm1", ".psd1")
@dataclass(frozen=True, kw_only=True)
class SplitScript:
    """A script cut at its signature block: `content` is what was signed, `block` the signature (or None)."""

    content: bytes
    block: bytes | None


def is_script(path: str) -> bool:
    return path.lower().endswith(SCRIPT_SUFFIXES)


def split_signature(data: bytes) -> SplitScript:
    """Find the block the way PowerShell does: a line that is exactly the header, and the CRLF before it."""
    position = 0 if data.startswith(HEADER) else data.find(CRLF + HEADER + CRLF)
    if position < 0:
        return SplitScript(content=data, block=None)
    start = position if position == 0 else position + len(CRLF)
    return SplitScript(content=data[:position], block=data[start:])


def block_signature(block: bytes) -> bytes:
    """The DER PKCS#7 inside a block; nothing may follow the footer (it would not be covered by the signature)."""
    lines = block.split(CRLF)
    if lines[-1] != b"" or lines[-2] != FOOTER or lines[0] != HEADER:
        msg = "the signature block does not end with '# SIG # End signature block' and CRLF"
        raise SignatureProblem(msg)
    body = lines[1:-2]
    if not body or any(not line.startswith(b"# ") for line in body):
        msg = "the signature block has a line that is not a '# ' comment"
        raise SignatureProblem(msg)
    try:
        return base64.b64decode(b"".join(line[2:] for line in body), validate=True)
    except binascii.Error as exc:
        msg = f"the signature block is not valid base64 ({exc})"
        raise SignatureProblem(msg) from None


def script_digest(content: bytes, algorithm: str) -> bytes:
    """PowerShell's script digest: the text as UTF-16LE (a UTF-8 byte-order mark becomes U+FEFF)."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"the script is not UTF-8 text (byte {exc.start})"
        raise SignatureProblem(msg) from None
    return hashlib.new(algorithm, text.encode("utf-16-le")).digest()


def signed_digest(signed_data: cms.SignedData) -> tuple[str, bytes, bytes]:
    """(algorithm, digest, the content a CMS message digest covers) of an Authenticode SignedData."""
    info = signed_data["encap_content_info"]
    if info["content_type"].native != "microsoft_spc_indirect_data_content":
        msg = f"the signature holds {info['content_type'].native}, expected Authenticode indirect data"
        raise SignatureProblem(msg)
    indirect = info["content"]["message_digest"]
    algorithm = indirect["digest_algorithm"]["algorithm"].native
    if algorithm not in HASHES:
        msg = f"the signature uses the unsupported digest algorithm {algorithm}"
        raise SignatureProblem(msg)
    # Authenticode's message digest covers the SpcIndirectDataContent without its outer tag and length.
    return algorithm, indirect["digest"].native, info["content"].contents


def load_script_signature(data: bytes) -> tuple[SplitScript, cms.SignedData, bytes]:
    """The signature of a signed script, checked against the script's own digest; returns the content that
    the CMS signer's message digest must cover."""
    split = split_signature(data)
    if split.block is None:
        msg = "the script carries no Authenticode signature block"
        raise SignatureProblem(msg)
    signed_data = load_signed_data(block_signature(split.block), what="the signature block")
    algorithm, digest, covered = signed_digest(signed_data)
    if script_digest(split.content, algorithm) != digest:
        msg = "the script's digest does not match the signed digest: it was changed after signing"
        raise SignatureProblem(msg)
    return split, signed_data, covered


def osslsigncode(runner: Runner) -> str:
    """The osslsigncode program, 2.8 or later (the first to sign PowerShell scripts), or a clear error."""
    return tools.find(tools.OSSLSIGNCODE, "signing the PowerShell scripts", runner=runner,
                      instead="hand the signing to your own tool with --signer COMMAND")


def sign_script(source: Path, dest: Path, *, tool: str, certs: Path, key: Path, passphrase: str, runner: Runner,
                signing_time: int | None, timestamp_url: str | None) -> None:
    """Sign one script with osslsigncode (`tool`): SHA-256, the chain in `certs`, a fixed or a timestamped time."""
    cmd = [tool, "sign", "-certs", str(certs), "-key", str(key), "-pass", passphrase, "-h", "sha256"]
    if timestamp_url:
        cmd += ["-ts", timestamp_url]
    elif signing_time is not None:
        cmd += ["-time", str(signing_time)]
    runner([*cmd, "-in", str(source), "-out", str(dest)])
