"""`verify` on a signed bundle (or with `--trust`): its provenance statements, checked offline.

The in-bundle statement (`provenance.intoto.json`) names the members of the UNSIGNED build: `sign` changes
the scripts (their Authenticode blocks) and SHA256SUMS, and re-issuing the statement would make it claim that
the build produced signed files. So its subjects must equal the digests of the unsigned view that `verify`
rebuilds from the signed bundle (every member but SHA256SUMS and the statement itself), its DSSE envelope
(`provenance.intoto.dsse.json`) must carry exactly the statement's bytes, signed by the certificate that signed
`SHA256SUMS.p7s` (whose chain `--trust` checks). The builder's statement beside the zip
(`<zip>.intoto.jsonl`), when present, must be signed by the same certificate and name the unsigned build's
sha256 (the one `signature.json` records and `verify` rebuilds) and the in-bundle statement's sha256.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509

from bundler.assembly.provenance import (
    BESIDE_SUFFIX,
    ENVELOPE_MEMBER,
    PREDICATE_TYPE,
    PROVENANCE_MEMBER,
    STATEMENT_TYPE,
)
from bundler.hashing import file_sha256
from bundler.signing import dsse
from bundler.signing.cms import SignatureProblem


@dataclass(frozen=True, kw_only=True)
class ProvenanceCheck:
    """What `verify` found about the two statements; any problem fails the bundle."""

    statement: bool  # the bundle carries provenance.intoto.json
    envelope: bool  # ... and its signed DSSE envelope
    beside: str | None  # the file name of `<zip>.intoto.jsonl`, when present
    notes: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, object]:
        return {"statement": PROVENANCE_MEMBER if self.statement else None,
                "envelope": ENVELOPE_MEMBER if self.envelope else None, "beside": self.beside, "ok": self.ok,
                "notes": list(self.notes), "problems": list(self.problems)}

    def summary(self) -> str:
        if not self.statement:
            head = "  provenance: none in this bundle"
        else:
            how = "DSSE-signed" if self.envelope else "covered by SHA256SUMS.p7s only"
            head = f"  provenance {PROVENANCE_MEMBER} ({how}): {'ok' if self.ok else 'FAILED'}"
            if self.beside:
                head += f"; {self.beside} checked"
        return "\n".join([head, *(f"    note: {n}" for n in self.notes), *(f"    problem: {p}" for p in self.problems)])


def provenance_of(archive: zipfile.ZipFile, top: str, names: Sequence[str], *, zip_path: Path,
                  unsigned: Mapping[str, str] | None, unsigned_zip: str | None) -> ProvenanceCheck:
    """`check_provenance` for an open bundle; `unsigned` None: the bundle is not signed, its members are its
    unsigned view and the zip itself the unsigned build."""
    from bundler.signing import cms
    from bundler.signing.layout import SUMS, SUMS_SIGNATURE

    def read(rel: str) -> bytes:
        return archive.read(f"{top}/{rel}")

    if unsigned is None:
        sums = read(SUMS).decode("utf-8", "replace") if SUMS in names else ""
        unsigned = {line[66:]: line[:64] for line in sums.splitlines() if len(line) > 66}
        unsigned_zip = file_sha256(zip_path)
    signer = None
    if SUMS_SIGNATURE in names and SUMS in names:
        try:
            signer = cms.check_signed_data(cms.load_signed_data(read(SUMS_SIGNATURE), what=SUMS_SIGNATURE),
                                           read(SUMS), what=SUMS_SIGNATURE).signer
        except SignatureProblem:
            signer = None  # reported by the signature check
    members = {rel: read(rel) for rel in (PROVENANCE_MEMBER, ENVELOPE_MEMBER) if rel in names}
    return check_provenance(members, unsigned, signer=signer, zip_path=zip_path, unsigned_zip=unsigned_zip)


def check_provenance(members: Mapping[str, bytes], unsigned: Mapping[str, str], *, signer: x509.Certificate | None,
                     zip_path: Path, unsigned_zip: str | None) -> ProvenanceCheck:
    """`members`: the statement and envelope bytes by name (when present); `unsigned`: every member of the
    unsigned view with its sha256; `signer`: the certificate of SHA256SUMS.p7s (None when it did not check
    out: then nothing here can be trusted and that is already a finding); `unsigned_zip`: the sha256 of the
    unsigned build, as rebuilt."""
    notes: list[str] = []
    problems: list[str] = []
    statement = members.get(PROVENANCE_MEMBER)
    envelope = members.get(ENVELOPE_MEMBER)
    beside_path = zip_path.with_name(zip_path.name + BESIDE_SUFFIX)
    beside = beside_path.name if beside_path.is_file() else None
    if statement is None:
        if envelope is not None:
            problems.append(f"{ENVELOPE_MEMBER} is present but {PROVENANCE_MEMBER} is not")
        return ProvenanceCheck(statement=False, envelope=envelope is not None, beside=beside, problems=tuple(problems))
    problems += _subjects(statement, unsigned)
    if envelope is None:
        notes.append(f"{PROVENANCE_MEMBER} has no DSSE envelope (signed with --signer, which makes CMS signatures "
                     "only); SHA256SUMS.p7s covers it as a listed member")
    else:
        problems += _envelope(envelope, statement, signer, what=ENVELOPE_MEMBER)
    if beside is not None:
        problems += _beside(beside_path, statement, signer, unsigned_zip, notes, keyed=envelope is not None)
    return ProvenanceCheck(statement=True, envelope=envelope is not None, beside=beside, notes=tuple(notes),
                           problems=tuple(problems))


def _subjects(statement: bytes, unsigned: Mapping[str, str]) -> list[str]:
    """The statement parses as ours and its subjects are exactly the unsigned build's members."""
    try:
        data: Any = json.loads(statement)
        found = {str(s["name"]): str(s["digest"]["sha256"]) for s in data["subject"]}
    except (KeyError, TypeError, ValueError) as exc:
        return [f"{PROVENANCE_MEMBER} is not an in-toto statement with subjects ({exc!r})"]
    problems = []
    if data.get("_type") != STATEMENT_TYPE or data.get("predicateType") != PREDICATE_TYPE:
        problems.append(f"{PROVENANCE_MEMBER} is not an in-toto Statement v1 with a SLSA Provenance v1 predicate")
    expected = {name: digest for name, digest in unsigned.items()
                if name not in ("SHA256SUMS", PROVENANCE_MEMBER, ENVELOPE_MEMBER)}
    for name in sorted(set(found) | set(expected)):
        if found.get(name) != expected.get(name):
            how = ("is not a member" if name not in expected else "is not named" if name not in found
                   else f"has sha256 {expected[name]}, the statement says {found[name]}")
            problems.append(f"{PROVENANCE_MEMBER}: subject {name} {how}")
    return problems[:20]


def _envelope(data: bytes, statement: bytes | None, signer: x509.Certificate | None, *, what: str) -> list[str]:
    try:
        envelope = dsse.parse(data, what=what)
    except SignatureProblem as exc:
        return [str(exc)]
    problems = []
    if statement is not None and envelope.payload != statement:
        problems.append(f"{what} signs other bytes than {PROVENANCE_MEMBER}")
    if signer is None:
        problems.append(f"{what}: cannot be checked, SHA256SUMS.p7s gives no usable certificate")
        return problems
    try:
        dsse.check(envelope, signer, what=what)
    except SignatureProblem as exc:
        problems.append(str(exc))
    return problems


def _beside(path: Path, statement: bytes, signer: x509.Certificate | None, unsigned_zip: str | None,
            notes: list[str], *, keyed: bool) -> list[str]:
    """`keyed`: the bundle was signed with our key, so the builder's statement must be signed too; after a
    `--signer` signing it cannot be, and is reported as vouched for by nobody."""
    problems = []
    lines = path.read_bytes().splitlines()
    if not lines:
        return [f"{path.name} is empty, expected a DSSE envelope per line"]
    inner = hashlib.sha256(statement).hexdigest()
    for number, line in enumerate(lines, 1):
        what = f"{path.name} line {number}"
        try:
            envelope = dsse.parse(line, what=what)
        except SignatureProblem as exc:
            problems.append(str(exc))
            continue
        if envelope.signatures or keyed:
            problems += _envelope(line, None, signer, what=what)
        else:
            notes.append(f"{what} is not signed (the bundle was signed with --signer): its builder and times are "
                         "nobody's claim")
        try:
            data: Any = json.loads(envelope.payload)
            subjects = [str(s["digest"]["sha256"]) for s in data["subject"]]
            byproducts = {str(b["name"]): str(b["digest"]["sha256"]) for b in data["predicate"]["runDetails"]["byproducts"]}
        except (KeyError, TypeError, ValueError):
            problems.append(f"{what} is not the builder's provenance statement ort-bundler writes")
            continue
        if subjects != [unsigned_zip]:
            problems.append(f"{what}: its subject is {', '.join(subjects)}, expected the unsigned build {unsigned_zip}")
        if byproducts.get(PROVENANCE_MEMBER) != inner:
            problems.append(f"{what}: names another {PROVENANCE_MEMBER} (sha256 {byproducts.get(PROVENANCE_MEMBER)}, "
                            f"the bundle's is {inner})")
    return problems
