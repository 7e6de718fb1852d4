"""A manifest's inputs on a registry: `cache push` puts them there, `fetch --mirror oci://` takes them back.

A registry addresses blobs by their sha256, exactly as our cache does, so an input's blob is simply its
cached file, pushed once per registry (HEAD first) however many manifests share it. The tag
`<name>-<version>-inputs` holds an image manifest listing them with their file names: a fetch takes
each input by its digest, and its file name from that list when the manifest does not name it (a
`requirement` wheel, whose name pip chose), so the cache ends up exactly as a fetch from the sources
would leave it and a build from it gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bundler.errors import InputUnavailableError
from bundler.manifest import Input, Manifest
from bundler.sources.cache import Cache, cached_sha256
from bundler.sources.fetch import cached_inputs
from bundler.sources.oci import Blob, Reference, Registry, tag_for
from bundler.sources.oci_artifact import INPUT_KEYS, INPUTS_TYPE, Artifact, Layer, read_artifact, sorted_layers

INPUT_MEDIA = "application/octet-stream"


def inputs_tag(manifest: Manifest) -> str:
    return tag_for(f"{manifest.bundle.name}-{manifest.bundle.version}-inputs")


@dataclass(frozen=True, kw_only=True)
class PushReport:
    reference: Reference  # with the tag
    digest: str  # the image manifest's
    uploaded: tuple[str, ...]  # file names whose bytes went up
    present: tuple[str, ...]  # file names the registry had already
    uploaded_bytes: int

    def to_json(self) -> dict[str, object]:
        return {"reference": str(self.reference), "digest": self.digest, "uploaded": list(self.uploaded),
                "present": list(self.present), "uploaded_bytes": self.uploaded_bytes}


def push_inputs(inputs: Sequence[Input], manifest: Manifest, *, cache: Cache, registry: Registry,
                progress: Callable[[int], None] | None = None) -> PushReport:
    """Every input from the cache to the registry (each blob once, skipped when there), then the tag."""
    files = cached_inputs(inputs, cache)  # one error listing every input not fetched yet
    by_digest: dict[str, tuple[Path, list[str]]] = {}
    for item in inputs:
        path = files[item.key]
        by_digest.setdefault(f"sha256:{cached_sha256(path)}", (path, []))[1].append(item.key)
    uploaded, present, sent = [], [], 0
    for digest, (path, _keys) in sorted(by_digest.items()):
        if registry.push_blob(path, digest=digest, progress=progress):
            uploaded.append(path.name)
            sent += path.stat().st_size
        else:
            present.append(path.name)
    registry.push_bytes(b"{}", media="the empty config")
    layers = [Layer(digest=digest, size=path.stat().st_size, media_type=INPUT_MEDIA, title=path.name,
                    annotations={INPUT_KEYS: ",".join(keys)}) for digest, (path, keys) in by_digest.items()]
    artifact = Artifact(artifact_type=INPUTS_TYPE, layers=sorted_layers(layers),
                        annotations={"dev.ort-bundler.bundle": f"{manifest.bundle.name} {manifest.bundle.version}",
                                     "dev.ort-bundler.platform": manifest.bundle.platform})
    tag = inputs_tag(manifest)
    digest = registry.put_manifest(tag, artifact.to_bytes())
    return PushReport(reference=registry.ref.with_tag(tag), digest=digest, uploaded=tuple(sorted(uploaded)),
                      present=tuple(sorted(present)), uploaded_bytes=sent)


@dataclass(frozen=True, kw_only=True)
class RegistryMirror:
    """A registry as the one place inputs come from (`fetch --mirror oci://…`): blobs by digest.

    `names` and `sizes` map a sha256 to the file name and size the inputs tag gives it; empty when the
    registry has no such tag (then each input must name its file itself, and each blob costs a HEAD).
    """

    registry: Registry
    tag: str
    names: Mapping[str, str] = field(default_factory=dict)
    sizes: Mapping[str, int] = field(default_factory=dict)

    def blob(self, sha256: str) -> Blob | None:
        digest = f"sha256:{sha256}"
        if sha256 in self.sizes:  # the tag lists it: no HEAD needed, a missing blob is reported by the GET
            return Blob(digest=digest, size=self.sizes[sha256])
        size = self.registry.blob_size(digest)
        return None if size is None else Blob(digest=digest, size=size)

    def filename(self, item: Input, sha256: str) -> str:
        name = item.filename or self.names.get(sha256)
        if name is None:
            msg = (f"{item.display}: the registry {self.registry.ref} has its blob, but no tag {self.tag} naming its "
                   f"file; run `ort-bundler cache push` for this manifest on a machine that has fetched it")
            raise InputUnavailableError(msg)
        return name

    def __str__(self) -> str:
        return str(self.registry.ref)


def open_mirror(registry: Registry, manifest: Manifest) -> RegistryMirror:
    """The registry and the file names its `<name>-<version>-inputs` tag lists (if it has that tag)."""
    tag = inputs_tag(manifest)
    found = registry.get_manifest(tag)
    if found is None:
        return RegistryMirror(registry=registry, tag=tag)
    artifact = read_artifact(found[0], ref=registry.ref.with_tag(tag), expected=INPUTS_TYPE)
    return RegistryMirror(registry=registry, tag=tag,
                          names={layer.digest.removeprefix("sha256:"): layer.title for layer in artifact.layers},
                          sizes={layer.digest.removeprefix("sha256:"): layer.size for layer in artifact.layers})
