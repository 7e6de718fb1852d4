"""Checking the signatures of a signed bundle: each one's mathematics always, its trust when given an anchor.

For every `.ps1`: the Authenticode block parses, the script's digest is the signed one, the signer's
key signed it. For `SHA256SUMS.p7s`: the detached signature over `SHA256SUMS` holds. With `--trust`,
each signer's chain must reach the anchor and may sign code, with lifetimes checked at the time of
a timestamp whose own chain reaches the anchor, or else now: an expired certificate without a
timestamp is reported as exactly that. Every signature in one bundle must come from one certificate.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from cryptography import x509

from bundler.signing import authenticode, cms
from bundler.signing.credentials import may_sign_code, may_stamp_time
from bundler.signing.layout import SUMS, SUMS_SIGNATURE
from bundler.signing.pkix import build_chain, describe, fingerprint


@dataclass(frozen=True, kw_only=True)
class SignatureCheck:
    """One signature as `verify` reports it."""

    path: str
    kind: str  # "authenticode" or "cms"
    signer: str | None = None
    signer_sha256: str | None = None
    chain: tuple[str, ...] = ()
    trusted: bool | None = None  # None: no anchor was given
    signing_time: str | None = None
    timestamp: str | None = None
    timestamp_authority: str | None = None
    notes: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems and self.trusted is not False

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "kind": self.kind, "ok": self.ok, "signer": self.signer,
                "signer_sha256": self.signer_sha256, "chain": list(self.chain), "trusted": self.trusted,
                "signing_time": self.signing_time, "timestamp": self.timestamp,
                "timestamp_authority": self.timestamp_authority, "notes": list(self.notes),
                "problems": list(self.problems)}

    def summary(self) -> str:
        trust = {None: "not checked against an anchor", True: "chain reaches the anchor",
                 False: "NOT trusted"}[self.trusted]
        when = f"timestamped {self.timestamp} by {self.timestamp_authority}" if self.timestamp else "no timestamp"
        if self.signer is None:  # the signature could not be read far enough to know who made it
            line = f"  signature {self.path} ({self.kind}): {'ok' if self.ok else 'FAILED'}, signer unknown"
        else:
            line = (f"  signature {self.path} ({self.kind}): {'ok' if self.ok else 'FAILED'}, signed by {self.signer}, "
                    f"{trust}, {when}")
        return "\n".join([line, *(f"    note: {n}" for n in self.notes), *(f"    problem: {p}" for p in self.problems)])


def check_signatures(names: Sequence[str], read: Callable[[str], bytes], *, anchors: Sequence[x509.Certificate] | None,
                     now: dt.datetime) -> list[SignatureCheck]:
    """A check for every script and for SHA256SUMS.p7s; `read` gives a member's bytes by bundle path."""
    checks = [_script(rel, read(rel), anchors=anchors, now=now) for rel in sorted(names) if authenticode.is_script(rel)]
    if SUMS_SIGNATURE in names:
        checks.append(_sums(read(SUMS_SIGNATURE), read(SUMS) if SUMS in names else b"", anchors=anchors, now=now))
    else:
        checks.append(SignatureCheck(path=SUMS_SIGNATURE, kind="cms", problems=(
            f"{SUMS_SIGNATURE} is missing: the bundle as a whole is not signed",)))
    return _one_signer(checks)


def _script(rel: str, data: bytes, *, anchors: Sequence[x509.Certificate] | None, now: dt.datetime) -> SignatureCheck:
    try:
        _, signed_data, covered = authenticode.load_script_signature(data)
        checked = cms.check_signed_data(signed_data, covered, what="the Authenticode signature")
    except cms.SignatureProblem as exc:
        return SignatureCheck(path=rel, kind="authenticode", problems=(str(exc),))
    return evaluate(rel, "authenticode", checked, anchors=anchors, now=now)


def _sums(p7s: bytes, sums: bytes, *, anchors: Sequence[x509.Certificate] | None, now: dt.datetime) -> SignatureCheck:
    try:
        checked = cms.check_signed_data(cms.load_signed_data(p7s, what=SUMS_SIGNATURE), sums, what=SUMS_SIGNATURE)
    except cms.SignatureProblem as exc:
        return SignatureCheck(path=SUMS_SIGNATURE, kind="cms", problems=(str(exc),))
    return evaluate(SUMS_SIGNATURE, "cms", checked, anchors=anchors, now=now)


def evaluate(path: str, kind: str, checked: cms.Checked, *, anchors: Sequence[x509.Certificate] | None,
             now: dt.datetime) -> SignatureCheck:
    """Who signed, and with an anchor: does the chain reach it at the moment that counts."""
    notes, problems = [], []
    stamp = checked.timestamp
    if checked.timestamp_problem:
        notes.append(f"timestamp not used: {checked.timestamp_problem}")
    moment, trusted, chain = now, None, tuple([describe(checked.signer)])
    if anchors is not None:
        if stamp is not None:
            stamp_chain = build_chain(stamp.authority, stamp.certificates, anchors, at=stamp.time)
            if not may_stamp_time(stamp.authority):
                notes.append(f"{describe(stamp.authority)} is not a time-stamping certificate; lifetimes checked now")
            elif stamp_chain.trusted:
                moment = stamp.time
            else:
                notes.append(f"the timestamp's authority is not trusted ({stamp_chain.reason}); lifetimes checked now")
        result = build_chain(checked.signer, checked.certificates, anchors, at=moment)
        trusted, chain = result.trusted, result.subjects
        if result.expired and moment is now:
            problems.append(f"{result.reason}, and the signature has no trusted timestamp, so it no longer vouches "
                            "for the bundle: sign it again (with --timestamp-url to outlive the certificate)")
        elif not result.trusted:
            problems.append(str(result.reason))
        if not may_sign_code(checked.signer):
            problems.append(f"{describe(checked.signer)} is not a code-signing certificate")
    return SignatureCheck(
        path=path, kind=kind, signer=describe(checked.signer), signer_sha256=fingerprint(checked.signer),
        chain=chain, trusted=trusted, signing_time=_iso(checked.signing_time),
        timestamp=_iso(stamp.time) if stamp else None,
        timestamp_authority=describe(stamp.authority) if stamp else None, notes=tuple(notes), problems=tuple(problems))


def _one_signer(checks: list[SignatureCheck]) -> list[SignatureCheck]:
    """The installers trust the bundle signature because install.ps1's signer made it: so one signer only."""
    first = next((c.signer_sha256 for c in checks if c.signer_sha256), None)
    return [c if c.signer_sha256 in (None, first) else replace(
        c, problems=(*c.problems, f"signed by {c.signer}, not by the signer of the other files")) for c in checks]


def _iso(moment: dt.datetime | None) -> str | None:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if moment else None
