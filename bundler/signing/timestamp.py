"""An RFC 3161 timestamp for the bundle signature, from the server `--timestamp-url` names.

The token is over the signature value (as Authenticode and CAdES do), and goes into the signer's
unsigned attributes (id-aa-signatureTimeStampToken), where it proves that the signature existed
while the certificate was valid: `verify --trust` then checks the certificate's lifetime at the
token's time, not now. A request carries a random nonce that the reply must echo, and asks for the
authority's certificate so that the token can be checked offline later.
"""

from __future__ import annotations

import hashlib
import secrets

import requests
from asn1crypto import cms, tsp

from bundler.errors import InputUnavailableError
from bundler.names import redact_url

TIMEOUT = 60


def request_token(url: str, signature: bytes) -> cms.ContentInfo:
    """Ask `url` for a token over `signature`; a refusal or a wrong reply is an error naming the server."""
    nonce = secrets.randbits(63)
    query = tsp.TimeStampReq({
        "version": "v1", "nonce": nonce, "cert_req": True,
        "message_imprint": {"hash_algorithm": {"algorithm": "sha256"},
                            "hashed_message": hashlib.sha256(signature).digest()}})
    try:
        response = requests.post(url, data=query.dump(), headers={"Content-Type": "application/timestamp-query"},
                                 timeout=TIMEOUT)
        response.raise_for_status()
    except requests.RequestException as exc:
        msg = f"--timestamp-url {redact_url(url)}: the timestamp request failed ({redact_url(str(exc))})"
        raise InputUnavailableError(msg) from None
    try:
        reply = tsp.TimeStampResp.load(response.content)
        status = reply["status"]["status"].native
        token = reply["time_stamp_token"]
        info = token["content"]["encap_content_info"]["content"].parsed
        echoed = info["nonce"].native
    except (ValueError, TypeError, KeyError) as exc:
        msg = f"--timestamp-url {redact_url(url)}: the reply is not an RFC 3161 timestamp response ({exc})"
        raise InputUnavailableError(msg) from None
    if status not in ("granted", "granted_with_mods") or echoed != nonce:
        msg = f"--timestamp-url {redact_url(url)}: the server answered {status} (nonce {'ok' if echoed == nonce else 'wrong'})"
        raise InputUnavailableError(msg)
    return token
