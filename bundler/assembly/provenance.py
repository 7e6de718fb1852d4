"""Build provenance: an in-toto Statement v1 with a SLSA Provenance v1 predicate, in the bundle and beside it.

Two statements, because a reproducible bundle cannot say who built it or when:

- `provenance.intoto.json`, a member of the bundle, says what was built from what. Its subjects are the
  members as `SHA256SUMS` lists them (all but `SHA256SUMS` and the statement itself: neither can be named
  before it exists); its build definition is the manifest (as bundle.json records it), the lock, and every
  input's sha256 and source; its run details hold only what every rebuild repeats (ort-bundler's version).
  `source_date_epoch` goes in `buildDefinition.internalParameters`: SLSA's place for what the builder sets,
  since `runDetails.metadata` only has fields for this run's times, which no reproducible statement holds.
  Two builds from the same inputs write the same bytes, in any folder, as any user.
- `<zip>.intoto.jsonl`, beside the zip, names the zip's sha256 as its subject and adds the builder (user and
  host) and this run's times. It is one line of the in-toto bundle format (a DSSE envelope per line);
  `build` leaves its signature list empty, `sign` fills it (`bundler.signing.dsse`).

Paths on the build machine never enter either statement: a `path` input is named by its manifest key and
file name (the manifest itself, in externalParameters, holds the relative path as written).
"""

from __future__ import annotations

import base64
import datetime as dt
import getpass
import hashlib
import json
import socket
import tomllib
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from bundler import __version__
from bundler.manifest import Manifest
from bundler.manifest.records import Input
from bundler.sources.inputs import lock_inputs
from bundler.sources.lock import Lock, lock_text
from bundler.writer.members import Member

if TYPE_CHECKING:
    from bundler.assembly.assembly import Assembly, BuildInputs

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
#: What kind of build this is: ort-bundler's own, named without any network host.
BUILD_TYPE = "urn:ort-bundler:build-type:bundle:v1"
#: The reproducible builder: every machine running this ort-bundler version is the same builder.
BUILDER_ID = "urn:ort-bundler:builder:reproducible"
PROVENANCE_MEMBER = "provenance.intoto.json"
#: Where `sign` puts the DSSE envelope of the member above.
ENVELOPE_MEMBER = "provenance.intoto.dsse.json"
BESIDE_SUFFIX = ".intoto.jsonl"
SUMS = "SHA256SUMS"


def bundle_statement(members: Mapping[str, Member], *, manifest: Manifest, lock: Lock | None,
                     digests: Mapping[str, str]) -> bytes:
    """The in-bundle statement for `members` (bundle-relative names), as canonical JSON bytes.

    `digests` gives the actual sha256 of a requirement input pinned by several hashes (one per candidate
    wheel): the file the build used decides which one the statement names.
    """
    subjects = [{"name": name, "digest": {"sha256": members[name].digest}}
                for name in sorted(members) if name not in (SUMS, PROVENANCE_MEMBER, ENVELOPE_MEMBER)]
    inputs = manifest.inputs() + lock_inputs(lock)
    predicate = {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {"manifest": dict(manifest.raw),
                                   "lock": tomllib.loads(lock_text(lock)) if lock is not None else None},
            "internalParameters": {"source_date_epoch": manifest.bundle.source_date_epoch},
            "resolvedDependencies": [_dependency(item, digests) for item in sorted(inputs, key=lambda i: i.key)],
        },
        "runDetails": {"builder": {"id": BUILDER_ID, "version": {"ort-bundler": __version__}}},
    }
    return canonical({"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": PREDICATE_TYPE,
                      "predicate": predicate})


def ambiguous_inputs(manifest: Manifest) -> list[Input]:
    """The inputs pinned by more than one sha256, whose file must be hashed to know which one was used."""
    return [item for item in manifest.inputs() if len(item.sha256) > 1]


def _dependency(item: Input, digests: Mapping[str, str]) -> dict[str, Any]:
    """A SLSA ResourceDescriptor for one input: its sha256 and where it comes from, never a local path."""
    digest = item.sha256[0] if len(item.sha256) == 1 else digests[item.key]
    found: dict[str, Any] = {"name": item.key, "digest": {"sha256": digest}}
    if item.kind == "url" and not item.location.startswith("file:"):
        found["uri"] = item.location
    elif item.kind == "requirement":
        name, _, version = item.location.partition("==")
        found["uri"] = f"pkg:pypi/{quote(name.strip().lower())}@{quote(version.strip())}" if version else item.location
    annotations = {"kind": item.kind, **({"filename": item.filename} if item.filename else {})}
    found["annotations"] = annotations
    return found


def builder_statement(zip_name: str, zip_sha256: str, inner: bytes, *, started: dt.datetime,
                      finished: dt.datetime) -> bytes:
    """The statement beside the zip: the same build definition, with who built it, where and when.

    `inner` is the bundle's own statement (read back from the zip, so a reused build gets one too); its
    digest is listed as a byproduct so that the two statements can be matched.
    """
    definition = json.loads(inner)["predicate"]["buildDefinition"]
    user, host = _who()
    predicate = {
        "buildDefinition": definition,
        "runDetails": {
            "builder": {"id": f"urn:ort-bundler:builder:{quote(user, safe='')}@{quote(host, safe='')}",
                        "version": {"ort-bundler": __version__}},
            "metadata": {"invocationId": str(uuid.uuid4()), "startedOn": _rfc3339(started),
                         "finishedOn": _rfc3339(finished)},
            "byproducts": [{"name": PROVENANCE_MEMBER, "digest": {"sha256": hashlib.sha256(inner).hexdigest()}}],
        },
    }
    return canonical({"_type": STATEMENT_TYPE, "subject": [{"name": zip_name, "digest": {"sha256": zip_sha256}}],
                      "predicateType": PREDICATE_TYPE, "predicate": predicate})


def envelope_line(payload: bytes, signatures: list[dict[str, str]]) -> bytes:
    """One line of a `.intoto.jsonl` file: a DSSE envelope (signatures may be empty: not signed yet)."""
    envelope = {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(payload).decode("ascii"),
                "signatures": signatures}
    return json.dumps(envelope, sort_keys=True, separators=(",", ":")).encode("utf-8") + b"\n"


def canonical(data: Mapping[str, Any]) -> bytes:
    """Sorted keys, fixed separators, UTF-8: the same statement always has the same bytes."""
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def _who() -> tuple[str, str]:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's random user)
        user = "unknown"
    return user, socket.gethostname() or "unknown"


def _rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def add_provenance(assembly: Assembly, build: BuildInputs) -> None:
    """The in-bundle statement, added after every other member but `SHA256SUMS` (it names them all)."""
    from bundler.hashing import file_sha256

    digests = {item.key: file_sha256(build.files[item.key]) for item in ambiguous_inputs(build.manifest)}
    assembly.add_bytes(PROVENANCE_MEMBER, bundle_statement(assembly.members, manifest=build.manifest, lock=build.lock,
                                                           digests=digests))


def write_beside(zip_path: Path, zip_sha256: str, *, top: str, started: dt.datetime) -> Path:
    """`<zip>.intoto.jsonl`, written atomically after the zip; a zip without a statement (an older build that
    a build reused) gets none, and an old one beside it is removed rather than left naming another zip."""
    import zipfile

    from bundler.atomic import write_atomic

    beside = zip_path.with_name(zip_path.name + BESIDE_SUFFIX)
    with zipfile.ZipFile(zip_path) as archive:
        name = f"{top}/{PROVENANCE_MEMBER}"
        inner = archive.read(name) if name in archive.namelist() else None
    if inner is None:
        beside.unlink(missing_ok=True)
        return beside
    statement = builder_statement(zip_path.name, zip_sha256, inner, started=started, finished=dt.datetime.now(dt.UTC))
    write_atomic(beside, envelope_line(statement, []))
    return beside


def provenance_difference(ours: bytes, theirs: bytes) -> str:
    """Why two in-bundle statements differ, in `reproduce`'s words: which subjects, which inputs, which parts."""
    try:
        a, b = json.loads(ours), json.loads(theirs)
        subjects = _by_name(a["subject"]), _by_name(b["subject"])
        definitions = a["predicate"]["buildDefinition"], b["predicate"]["buildDefinition"]
        inputs = _by_name(definitions[0]["resolvedDependencies"]), _by_name(definitions[1]["resolvedDependencies"])
    except (KeyError, TypeError, ValueError):
        return "the build provenance statement differs, and one of the two is not a statement ort-bundler writes"
    parts = []
    for label, (mine, other) in (("subjects", subjects), ("inputs", inputs)):
        names = sorted(n for n in set(mine) | set(other) if mine.get(n) != other.get(n))
        if names:
            parts.append(f"{label} {', '.join(names[:5])}{' …' if len(names) > 5 else ''}")
    for key in ("externalParameters", "internalParameters", "buildType"):
        if definitions[0].get(key) != definitions[1].get(key):
            parts.append(f"buildDefinition.{key}")
    if a["predicate"].get("runDetails") != b["predicate"].get("runDetails"):
        parts.append("runDetails (the builder or its version)")
    return f"the build provenance differs: {'; '.join(parts) or 'the same claims, written differently'}"


def _by_name(entries: Any) -> dict[str, Any]:
    return {str(e.get("name")): e.get("digest") for e in entries if isinstance(e, dict)}
