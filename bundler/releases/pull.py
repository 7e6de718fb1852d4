"""`pull`: a released bundle from a registry into `-o DIR`, and nothing there that was not verified.

A release is what `publish` writes (`releases.registry`): the zip, its `.sha256`, and the SBOM and
`SHA256SUMS.p7s` taken from the zip. A registry, or whoever can push to it, may add layers or change
them, so pull takes exactly those four and checks each against something verified:

- the zip: its digest, then `verify` (its SHA256SUMS, its signature with `--trust`);
- the `.sha256`: byte for byte the line the build writes for that zip (`<sha256>  <name>`);
- the SBOM and the signature: byte for byte the zip's own members, their sizes known before a byte is fetched.

Any other layer is refused by name before anything is fetched. Every size is the release's own
declaration, checked against the output folder's free space first and enforced while the bytes come
(`oci_origin`). What lands in DIR is the staged file that was checked, moved there only when every file
passed; a name DIR already holds is refused unless `--force` (a folder always is).
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bundler.errors import HashMismatchError, InputUnavailableError, UsageError
from bundler.readers.bundlezip import open_bundle
from bundler.releases.registry import (
    SBOM_MEDIA,
    SBOM_MEMBER,
    SHA256_MEDIA,
    SIGNATURE_MEDIA,
    SIGNATURE_MEMBER,
    ZIP_MEDIA,
)
from bundler.sources.download import FREE_SPACE_MARGIN
from bundler.sources.oci import Blob, Reference, Registry
from bundler.sources.oci_artifact import BUNDLE_TYPE, Artifact, Layer, read_artifact

# The members a release carries beside the zip, by media type: each must equal the zip's own member.
MEMBER_LAYERS = {SBOM_MEDIA: SBOM_MEMBER, SIGNATURE_MEDIA: SIGNATURE_MEMBER}
DECLARED_BY = "the release's manifest declares for it"


@dataclass(frozen=True, kw_only=True)
class PullReport:
    reference: Reference
    digest: str
    zip_path: Path
    files: tuple[Path, ...]

    def to_json(self) -> dict[str, object]:
        return {"reference": str(self.reference), "digest": self.digest, "zip": str(self.zip_path),
                "files": [str(path) for path in self.files]}


@dataclass(frozen=True, kw_only=True)
class Release:
    """The layers of a release, sorted out before anything is fetched."""

    zip: Layer
    sidecar: Layer | None
    members: tuple[Layer, ...]  # the SBOM and the signature, each a copy of a member of the zip

    @property
    def layers(self) -> tuple[Layer, ...]:
        return (self.zip, *([self.sidecar] if self.sidecar else []), *self.members)


def pull_bundle(registry: Registry, out_dir: Path, *, check: Callable[[Path], None], force: bool = False) -> PullReport:
    """The release into a private folder inside `out_dir`, every file checked, then moved to its name.

    Nothing reaches `out_dir` unless every file matched and `check(zip)` passed.
    """
    ref = registry.ref
    wanted = ref.digest or ref.tag or "latest"
    found = registry.get_manifest(wanted)
    if found is None:
        msg = f"{ref}: the registry {ref.host} has no tag or digest {wanted} in {ref.repository}"
        raise InputUnavailableError(msg)
    release = sort_release(read_artifact(found[0], ref=ref, expected=BUNDLE_TYPE), ref=ref)
    check_destination(out_dir, release.layers, force=force)
    require_room(registry, out_dir, release.layers)
    staging = _make_staging(out_dir)
    try:
        zip_path = _fetch(registry, release.zip, staging)
        check(zip_path)
        _fetch_checked(registry, release, staging, zip_path)
        check_destination(out_dir, release.layers, force=force)
        finals = _move(staging, out_dir, release.layers, force=force)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return PullReport(reference=ref, digest=found[1], zip_path=out_dir / release.zip.title, files=finals)


def sort_release(artifact: Artifact, *, ref: Reference) -> Release:
    """The zip, its `.sha256`, the SBOM and the signature; any other layer is refused, by name."""
    zips = [layer for layer in artifact.layers if layer.media_type == ZIP_MEDIA]
    if len(zips) != 1 or not zips[0].title.endswith(".zip"):
        msg = f"{ref}: holds {len(zips)} zip layers, expected exactly one bundle (a .zip)"
        raise InputUnavailableError(msg)
    zip_layer, sidecar, members = zips[0], None, list[Layer]()
    for layer in artifact.layers:
        if layer is zip_layer:
            continue
        if layer.media_type == SHA256_MEDIA and layer.title == f"{zip_layer.title}.sha256" and sidecar is None:
            sidecar = layer
        elif (member := MEMBER_LAYERS.get(layer.media_type)) and layer.title.endswith(f".{member}") and \
                not any(other.media_type == layer.media_type for other in members):
            members.append(layer)
        else:
            msg = (f"{ref}: the layer {layer.title!r} ({layer.media_type}) is not part of a release (the zip "
                   f"{zip_layer.title}, its .sha256, and the SBOM and signature from the zip); refused, nothing "
                   f"written")
            raise InputUnavailableError(msg)
    folded: dict[str, str] = {}
    for layer in artifact.layers:  # one file system's two names may be another's one file
        if (seen := folded.setdefault(layer.title.casefold(), layer.title)) != layer.title:
            msg = f"{ref}: the layers {seen!r} and {layer.title!r} name the same file on a case-insensitive disk"
            raise InputUnavailableError(msg)
    return Release(zip=zip_layer, sidecar=sidecar, members=tuple(members))


def check_destination(out_dir: Path, layers: Sequence[Layer], *, force: bool) -> None:
    """Before anything is fetched and again before anything moves: a folder at a file's name is an error,
    and so is a file there unless `force`."""
    for layer in layers:
        final = out_dir / layer.title
        if final.is_dir() and not final.is_symlink():
            msg = f"-o: {final} is a folder, where the release's file {layer.title} goes; move it away"
            raise UsageError(msg)
        if os.path.lexists(final) and not force:
            msg = f"-o: {final} already exists; pull does not overwrite it unless --force"
            raise UsageError(msg)


def require_room(registry: Registry, out_dir: Path, layers: Sequence[Layer]) -> None:
    """The release's declared sizes must fit the output folder's disk (keeping the download margin free)."""
    total = sum(layer.size for layer in layers)
    existing = next((p for p in (out_dir, *out_dir.parents) if p.is_dir()), Path("."))
    free = shutil.disk_usage(existing).free
    if total + FREE_SPACE_MARGIN > free:
        largest = max(layers, key=lambda layer: layer.size)
        msg = (f"registry {registry.name}: {registry.ref} declares {total:,} bytes ({largest.title}: "
               f"{largest.size:,}), and {existing} has {free:,} free ({FREE_SPACE_MARGIN:,} kept free); refused "
               f"before a byte was fetched: free some space or pull into another folder with -o")
        raise InputUnavailableError(msg)


def _make_staging(out_dir: Path) -> Path:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        staging = out_dir / f".ort-bundler-pull-{secrets.token_hex(8)}"
        staging.mkdir()
    except OSError as exc:
        msg = f"-o: {out_dir} cannot be written ({exc.strerror}); choose another folder"
        raise UsageError(msg) from None
    return staging


def _fetch(registry: Registry, layer: Layer, staging: Path) -> Path:
    """One layer into the staging folder, bounded by its declared size, its digest checked."""
    target = staging / layer.title
    actual = registry.fetch_blob(Blob(digest=layer.digest, size=layer.size), target, label=layer.title,
                                 declared_by=DECLARED_BY)
    if f"sha256:{actual}" != layer.digest:
        msg = (f"{layer.title}: hash mismatch for {registry.blob_url(layer.digest)}: expected {layer.digest}, "
               f"got sha256:{actual}")
        raise HashMismatchError(msg)
    return target


def _fetch_checked(registry: Registry, release: Release, staging: Path, zip_path: Path) -> None:
    """The small layers, each equal to what the verified zip says it must be: its size known (and checked
    against the layer's) before a byte is fetched, its bytes compared after."""
    bundle = open_bundle(zip_path)
    expected: list[tuple[Layer, bytes, str]] = []
    if release.sidecar is not None:
        line = f"{release.zip.digest.removeprefix('sha256:')}  {release.zip.title}\n".encode("ascii")
        expected.append((release.sidecar, line, f"the line `sha256  {release.zip.title}` the build writes"))
    for layer in release.members:
        member = MEMBER_LAYERS[layer.media_type]
        if layer.title != f"{bundle.top}.{member}" or member not in bundle.infos:
            msg = (f"{registry.ref}: the layer {layer.title!r} is not {bundle.top}.{member}, a member of "
                   f"{release.zip.title}; refused, nothing written")
            raise InputUnavailableError(msg)
        expected.append((layer, bundle.read(member), f"{bundle.top}/{member} inside {release.zip.title}"))
    for layer, data, what in expected:
        if layer.size != len(data):
            msg = (f"{registry.ref}: the layer {layer.title} declares {layer.size:,} bytes, but {what} has "
                   f"{len(data):,}; refused, nothing written")
            raise HashMismatchError(msg)
        if _fetch(registry, layer, staging).read_bytes() != data:
            msg = f"{registry.ref}: the layer {layer.title} differs from {what}; refused, nothing written"
            raise HashMismatchError(msg)


def _move(staging: Path, out_dir: Path, layers: Sequence[Layer], *, force: bool) -> tuple[Path, ...]:
    """The checked files to their names, the zip first. Without `force` a name that appeared meanwhile is
    not replaced (a hard link fails where a file exists) and what this pull placed is taken back."""
    placed: list[Path] = []
    try:
        for layer in layers:
            final = out_dir / layer.title
            if force:
                os.replace(staging / layer.title, final)
            else:
                _place_new(staging / layer.title, final)
            placed.append(final)
    except BaseException:
        if not force:
            for path in placed:
                path.unlink(missing_ok=True)
        raise
    return tuple(placed)


def _place_new(source: Path, final: Path) -> None:
    try:
        os.link(source, final)
    except FileExistsError:
        msg = f"-o: {final} appeared while pulling; pull does not overwrite it unless --force"
        raise UsageError(msg) from None
    except OSError:  # a file system without hard links: checked just before, so only a race remains
        if os.path.lexists(final):
            raise UsageError(f"-o: {final} already exists; pull does not overwrite it unless --force") from None
        os.replace(source, final)
