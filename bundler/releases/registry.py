"""Released bundles on a registry: `publish` puts one under a tag, `pull` (`releases.pull`) brings it back checked.

A release is one image manifest (artifactType `application/vnd.ort-bundler.bundle.v1`) whose layers
are the zip, its `.sha256`, the SBOM taken from the zip and, for a signed bundle, `SHA256SUMS.p7s`:
layers, not OCI 1.1 referrers. The referrers API needs distribution 3 (2.8 only has the tag-schema
fallback, a second tag per subject to keep in step), and our signature is not added later by someone
else: it is part of the release, made before it is published. One manifest, one tag, one pull.

Releases are immutable: a tag that holds something else is refused unless `--force`. The manifest is
deterministic (`oci_artifact`), so publishing the same zip again is recognised as the same release.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from bundler.errors import HashMismatchError, UsageError, VerificationError
from bundler.hashing import file_sha256
from bundler.readers.bundlezip import open_bundle
from bundler.sources.oci import Reference, Registry, tag_for
from bundler.sources.oci_artifact import BUNDLE_TYPE, VERSION, Artifact, Layer

ZIP_MEDIA = "application/zip"
SHA256_MEDIA = "text/plain"
SBOM_MEDIA = "application/vnd.cyclonedx+json"
SIGNATURE_MEDIA = "application/pkcs7-signature"
SBOM_MEMBER = "sbom.cdx.json"
SIGNATURE_MEMBER = "SHA256SUMS.p7s"


@dataclass(frozen=True, kw_only=True)
class PublishReport:
    reference: Reference
    digest: str
    files: tuple[str, ...]
    unchanged: bool  # the tag already held exactly this release

    def to_json(self) -> dict[str, object]:
        return {"reference": str(self.reference), "digest": self.digest, "files": list(self.files),
                "unchanged": self.unchanged}


def publish_bundle(zip_path: Path, *, registry: Registry, tag: str | None, force: bool) -> PublishReport:
    bundle = open_bundle(zip_path)
    version = str(bundle.record.get("version", ""))
    if not version:
        msg = f"{zip_path.name}: bundle.json has no version; expected a bundle made by `ort-bundler build`"
        raise VerificationError(msg)
    sha256 = file_sha256(zip_path)
    sidecar = _sidecar(zip_path, sha256)
    small: list[tuple[str, str, bytes]] = [(f"{zip_path.name}.sha256", SHA256_MEDIA, sidecar)]
    if SBOM_MEMBER in bundle.infos:
        small.append((f"{bundle.top}.{SBOM_MEMBER}", SBOM_MEDIA, bundle.read(SBOM_MEMBER)))
    if SIGNATURE_MEMBER in bundle.infos:
        small.append((f"{bundle.top}.{SIGNATURE_MEMBER}", SIGNATURE_MEDIA, bundle.read(SIGNATURE_MEMBER)))
    layers = [Layer(digest=f"sha256:{sha256}", size=zip_path.stat().st_size, media_type=ZIP_MEDIA, title=zip_path.name)]
    layers += [Layer(digest="sha256:" + hashlib.sha256(data).hexdigest(), size=len(data), media_type=media,
                     title=title) for title, media, data in small]
    artifact = Artifact(artifact_type=BUNDLE_TYPE, layers=tuple(layers),
                        annotations={VERSION: version, "dev.ort-bundler.bundle": bundle.top,
                                     "dev.ort-bundler.platform": str(bundle.record.get("platform", ""))})
    data = artifact.to_bytes()
    tag = tag or tag_for(version)
    ref = registry.ref.with_tag(tag)
    existing = registry.get_manifest(tag)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    if existing is not None and existing[1] == digest:
        return PublishReport(reference=ref, digest=digest, files=tuple(layer.title for layer in layers), unchanged=True)
    if existing is not None and not force:
        msg = (f"{ref} already holds another release ({existing[1]}); releases are immutable: publish under another "
               f"tag, or pass --force to replace it")
        raise UsageError(msg)
    registry.push_blob(zip_path, digest=f"sha256:{sha256}")
    for _title, _media, blob in small:
        registry.push_bytes(blob)
    registry.push_bytes(b"{}")
    registry.put_manifest(tag, data)
    return PublishReport(reference=ref, digest=digest, files=tuple(layer.title for layer in layers), unchanged=False)


def _sidecar(zip_path: Path, sha256: str) -> bytes:
    """The build's `<zip>.sha256`, which must name this zip's hash; written as the build writes it when absent."""
    path = zip_path.with_name(zip_path.name + ".sha256")
    expected = f"{sha256}  {zip_path.name}\n".encode()
    if not path.is_file():
        return expected
    text = path.read_bytes()
    if text.split(b" ", 1)[0].strip().decode("ascii", "replace") != sha256:
        msg = f"{path.name}: names another sha256 than {zip_path.name} has ({sha256}); rebuild or remove it"
        raise HashMismatchError(msg)
    return text
