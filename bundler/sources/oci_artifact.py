"""What a tag holds: an OCI image manifest of our own `artifactType`, one layer per file.

The same record serves both artifacts we store (a manifest's inputs, a released bundle). The manifest
is written with sorted keys and no timestamps, so the same files give the same manifest digest: a
second push tags the same bytes, and "does this tag already hold exactly this?" is one comparison.
Each layer names its file in the standard `org.opencontainers.image.title` annotation, which is what
`oras pull` and registry UIs show, so a person can see what a tag holds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bundler.errors import InputUnavailableError
from bundler.sources.oci import DIGEST_RE, EMPTY_CONFIG, EMPTY_JSON, OCI_MANIFEST, Blob, Reference

INPUTS_TYPE = "application/vnd.ort-bundler.inputs.v1"
BUNDLE_TYPE = "application/vnd.ort-bundler.bundle.v1"
TITLE = "org.opencontainers.image.title"
VERSION = "org.opencontainers.image.version"
INPUT_KEYS = "dev.ort-bundler.inputs"  # the manifest keys a layer serves, comma-separated
EMPTY_DIGEST = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
# A layer's title becomes a file name on pull and in the cache: a plain name that every file system can hold
# (no separators, no leading dot, no characters Windows forbids), whatever the registry says.
TITLE_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9 ._+()-]{0,198}[A-Za-z0-9_+()-])?$")


@dataclass(frozen=True, kw_only=True)
class Layer:
    digest: str
    size: int
    media_type: str
    title: str
    annotations: Mapping[str, str] = field(default_factory=dict)  # beyond the title

    def to_json(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size,
                "annotations": {**self.annotations, TITLE: self.title}}


@dataclass(frozen=True, kw_only=True)
class Artifact:
    artifact_type: str
    layers: tuple[Layer, ...]
    annotations: Mapping[str, str] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        document = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": self.artifact_type,
                    "config": {"mediaType": EMPTY_CONFIG, "digest": EMPTY_DIGEST, "size": len(EMPTY_JSON)},
                    "layers": [layer.to_json() for layer in self.layers], "annotations": dict(self.annotations)}
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()

    def layer(self, title: str) -> Layer | None:
        return next((layer for layer in self.layers if layer.title == title), None)

    def blob(self, layer: Layer) -> Blob:
        return Blob(digest=layer.digest, size=layer.size)


def read_artifact(data: bytes, *, ref: Reference, expected: str) -> Artifact:
    """Parse a manifest we wrote; anything else at that tag is named, not guessed at."""
    where = f"{ref}"
    try:
        document = json.loads(data)
    except ValueError:
        raise InputUnavailableError(f"{where}: the manifest is not JSON; expected an OCI image manifest") from None
    found = document.get("artifactType") if isinstance(document, dict) else None
    if found != expected:
        msg = f"{where}: holds an artifact of type {found!r}, expected {expected!r} (made by ort-bundler)"
        raise InputUnavailableError(msg)
    layers: list[Layer] = []
    for index, entry in enumerate(document.get("layers") or []):
        try:
            annotations = dict(entry.get("annotations") or {})
            title = annotations.pop(TITLE)
            layer = Layer(digest=entry["digest"], size=int(entry["size"]), media_type=entry["mediaType"],
                          title=title, annotations=annotations)
        except (KeyError, TypeError, ValueError, AttributeError):
            msg = f"{where}: layers[{index}] lacks a digest, size, media type or {TITLE} annotation"
            raise InputUnavailableError(msg) from None
        if not DIGEST_RE.match(layer.digest) or layer.size < 0 or not isinstance(title, str) \
                or not TITLE_RE.match(title):
            msg = (f"{where}: layers[{index}] names {title!r} ({layer.digest}), expected a plain file name and a "
                   f"sha256 digest")
            raise InputUnavailableError(msg)
        if any(other.title == title for other in layers):
            msg = f"{where}: layers[{index}] repeats the file name {title!r}; expected one layer per file"
            raise InputUnavailableError(msg)
        layers.append(layer)
    annotations = document.get("annotations") or {}
    return Artifact(artifact_type=expected, layers=tuple(layers),
                    annotations={str(k): str(v) for k, v in annotations.items()})


def sorted_layers(layers: Sequence[Layer]) -> tuple[Layer, ...]:
    return tuple(sorted(layers, key=lambda layer: (layer.title, layer.digest)))
