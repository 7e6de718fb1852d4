"""The provenance statements of a published release, as OCI referrers in the referrers tag scheme.

The release itself is one manifest under its tag (`bundler.releases.registry`). Its statements (the DSSE
envelope of the bundle's `provenance.intoto.json`, or the statement itself when the bundle is not signed,
and the builder's `<zip>.intoto.jsonl`) are a second manifest, of artifactType `application/vnd.in-toto+json`,
whose `subject` is the release manifest: what OCI 1.1 calls a referrer. Distribution 2.8 has no referrers
API, so the distribution spec's fallback is used: an image index under the tag `sha256-<release digest hex>`
lists the referrers of that release; a client (oras, cosign, ours) reads that tag to find them. An index
already there keeps its other entries: another tool's referrers are not dropped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundler.assembly.provenance import BESIDE_SUFFIX, ENVELOPE_MEMBER, PAYLOAD_TYPE, PROVENANCE_MEMBER
from bundler.errors import InputUnavailableError, VerificationError
from bundler.hashing import file_sha256
from bundler.readers.bundlezip import open_bundle
from bundler.sources.oci import EMPTY_CONFIG, EMPTY_JSON, OCI_MANIFEST, Registry
from bundler.sources.oci_artifact import EMPTY_DIGEST, TITLE

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DSSE_MEDIA = "application/vnd.dsse.envelope.v1+json"
#: The artifactType of the referrer manifest (the in-toto media type, as the payloads carry it).
ATTESTATION_TYPE = PAYLOAD_TYPE


@dataclass(frozen=True, kw_only=True)
class Statements:
    """The files to push: (title, media type, bytes), in a fixed order."""

    files: tuple[tuple[str, str, bytes], ...]


def collect(zip_path: Path) -> Statements:
    """The statements of a verified bundle, read before anything is pushed; a statement beside the zip
    that describes another build is refused (publishing it would attach a false claim to the release)."""
    bundle = open_bundle(zip_path)
    files: list[tuple[str, str, bytes]] = []
    if ENVELOPE_MEMBER in bundle.infos:
        files.append((f"{bundle.top}.{ENVELOPE_MEMBER}", DSSE_MEDIA, bundle.read(ENVELOPE_MEMBER)))
    elif PROVENANCE_MEMBER in bundle.infos:
        files.append((f"{bundle.top}.{PROVENANCE_MEMBER}", PAYLOAD_TYPE, bundle.read(PROVENANCE_MEMBER)))
    beside = zip_path.with_name(zip_path.name + BESIDE_SUFFIX)
    if beside.is_file():
        data = beside.read_bytes()
        expected = {file_sha256(zip_path), _unsigned_digest(bundle.read("signature.json"))
                    if "signature.json" in bundle.infos else ""}
        for number, line in enumerate(data.splitlines(), 1):
            if not _subjects(line) <= expected - {""} or not _subjects(line):
                msg = (f"{beside.name} line {number}: its subject is not {zip_path.name} nor the unsigned build it "
                       f"was signed from; it describes another build: remove it or build again")
                raise VerificationError(msg)
        files.append((beside.name, DSSE_MEDIA, data))
    return Statements(files=tuple(files))


def push(registry: Registry, statements: Statements, *, subject: str) -> str | None:
    """Push the referrer manifest for the release `subject` (its manifest digest) and list it in the index
    under `sha256-<hex>`; returns that tag, or None when there was nothing to push."""
    if not statements.files:
        return None
    found = registry.get_manifest(subject)
    if found is None:
        msg = f"{registry.ref}: the release manifest {subject} is not there; publish it first"
        raise InputUnavailableError(msg)
    layers = []
    for title, media, data in statements.files:
        blob = registry.push_bytes(data, media=title)
        layers.append({"mediaType": media, "digest": blob.digest, "size": blob.size, "annotations": {TITLE: title}})
    registry.push_bytes(EMPTY_JSON)
    document = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": ATTESTATION_TYPE,
                "config": {"mediaType": EMPTY_CONFIG, "digest": EMPTY_DIGEST, "size": len(EMPTY_JSON)},
                "layers": layers, "subject": {"mediaType": OCI_MANIFEST, "digest": subject, "size": len(found[0])}}
    manifest = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    digest = registry.put_manifest("sha256:" + hashlib.sha256(manifest).hexdigest(), manifest)
    tag = "sha256-" + subject.removeprefix("sha256:")
    entry = {"mediaType": OCI_MANIFEST, "digest": digest, "size": len(manifest), "artifactType": ATTESTATION_TYPE}
    _put_index(registry, tag, entry)
    return tag


def _put_index(registry: Registry, tag: str, entry: dict[str, Any]) -> None:
    """Add `entry` to the index under `tag` (made when absent), keeping every other referrer listed there."""
    response = registry.request("GET", f"/v2/{registry.ref.repository}/manifests/{tag}", ok=(200, 404),
                                what=f"the referrers index {tag}", headers={"Accept": OCI_INDEX})
    with response:
        try:
            existing: Any = response.json() if response.status_code == 200 else {"manifests": []}
        except ValueError:
            existing = None
    if not isinstance(existing, dict) or not isinstance(existing.get("manifests"), list):
        msg = f"{registry.ref.with_tag(tag)}: holds something other than an OCI image index; expected the referrers index"
        raise InputUnavailableError(msg)
    manifests = [m for m in existing["manifests"] if isinstance(m, dict) and m.get("digest") != entry["digest"]]
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [*manifests, entry]}
    data = json.dumps(index, sort_keys=True, separators=(",", ":")).encode()
    put = registry.request("PUT", f"/v2/{registry.ref.repository}/manifests/{tag}", ok=(201,),
                           what=f"the referrers index {tag}", retry=False, headers={"Content-Type": OCI_INDEX},
                           data=data)
    put.close()


def _subjects(line: bytes) -> set[str]:
    import base64

    try:
        statement = json.loads(base64.b64decode(json.loads(line)["payload"]))
        return {str(s["digest"]["sha256"]) for s in statement["subject"]}
    except (KeyError, TypeError, ValueError):
        return set()


def _unsigned_digest(record: bytes) -> str:
    try:
        return str(json.loads(record)["unsigned_bundle"]["sha256"])
    except (KeyError, TypeError, ValueError):
        return ""
