"""Provenance of a bundle: signature evidence, licence texts and the CycloneDX SBOM (issue 5 §3-§5).

These parts describe what the other parts put into the bundle, so they run after all of them, in this
order: `check_signatures` (fails the build before anything is written), `add_licenses`, then `add_sbom`,
which also lists the licence files. Each reads members through the `Assembly` and opens wheels and
archives only through `SafeArchive`.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from cyclonedx import spdx
from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.license import DisjunctiveLicense, License, LicenseExpression
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL
from packaging.utils import parse_wheel_filename

from bundler import __version__
from bundler.assembly.assembly import Assembly
from bundler.assembly.identity import source_identity
from bundler.assembly.licenses import (
    LICENSES,
    ORT_LICENSE,
    WHEELS,
    _member_file,
    wheel_license,
)
from bundler.assembly.runtime import LICENSE_COMPONENT, PSF_LICENSE, RUNTIME_BUNDLE_DIR
from bundler.errors import BuildError
from bundler.manifest import Input, Manifest
from bundler.readers.archives import SafeArchive
from bundler.readers.pe import inspect_pe
from bundler.readers.wheels import wheel_metadata
from bundler.writer.zipwriter import Member

SBOM = "sbom.cdx.json"
# ORT's own SPDX licence: the project is MIT (its LICENSE file); the archive carries no metadata saying so.

_SCHEMA = SchemaVersion.V1_6


# -- shared: the wheels in the bundle -------------------------------------------------------------------














# -- §5 signature evidence -----------------------------------------------------------------------------
























# -- §4 licence and notice files ---------------------------------------------------------------------------






















# -- §3 the SBOM -----------------------------------------------------------------------------------------------

PATH_PROPERTY = "ort-bundler:bundle-path"
SOURCE_PROPERTY = "ort-bundler:source"


@dataclass(frozen=True, kw_only=True)
class Group:
    """Bundle members that form one component: its identity, and the members listed inside it as files."""

    name: str
    type: ComponentType
    version: str | None
    license: str | None = None
    purl: PackageURL | None = None
    sha256: str | None = None
    sources: tuple[str, ...] = ()


def add_sbom(assembly: Assembly, *, manifest: Manifest) -> None:
    """sbom.cdx.json: every member of the bundle, as a component or a file inside one, validated against
    the CycloneDX 1.6 schema. Reproducible: the serial number follows from the bundle's name and manifest,
    the timestamp from source_date_epoch, and the library sorts components."""
    text = JsonV1Dot6(sbom(assembly, manifest=manifest)).output_as_string(indent=2)
    error = JsonStrictValidator(_SCHEMA).validate_str(text)
    if error is not None:
        msg = f"{SBOM}: the generated SBOM is not valid CycloneDX {_SCHEMA.to_version()}: {error}"
        raise BuildError(msg)
    assembly.add_bytes(SBOM, (text + "\n").encode("utf-8"))
    assembly.install(SBOM, SBOM)


def sbom(assembly: Assembly, *, manifest: Manifest) -> Bom:
    """The bundle is the BOM's subject; every top-level component is one of its direct dependencies, which
    completes the dependency graph (the library warns about a root without dependencies)."""
    bundle = manifest.bundle
    root = Component(type=ComponentType.APPLICATION, name=bundle.name, version=bundle.version, bom_ref=bundle.stem,
                     properties=[Property(name="ort-bundler:platform", value=bundle.platform),
                                 Property(name="ort-bundler:python", value=bundle.python)])
    bom = Bom(serial_number=serial_number(manifest, assembly))
    bom.metadata.timestamp = datetime.fromtimestamp(bundle.source_date_epoch, tz=UTC)
    bom.metadata.component = root
    bom.metadata.tools.components.add(Component(type=ComponentType.APPLICATION, name="ort-bundler",
                                                version=__version__, bom_ref="tool:ort-bundler"))
    components = member_components(assembly, manifest=manifest)
    for component in components:
        bom.components.add(component)
    bom.register_dependency(root, components)
    return bom


def serial_number(manifest: Manifest, assembly: Assembly) -> uuid.UUID:
    """The same bundle gets the same serial number on every machine, and a different bundle another one.

    Derived from what the manifest says (not its bytes: line endings and comments do not change the
    bundle) and from every member's hash (the lock's wheels, the models, everything else).
    """
    content = hashlib.sha256(json.dumps(manifest.raw, sort_keys=True, default=str).encode("utf-8"))
    for path in sorted(assembly.members):
        content.update(f"{assembly.members[path].digest}  {path}\n".encode())
    return uuid.uuid5(uuid.NAMESPACE_URL, f"ort-bundler:{manifest.bundle.stem}:{content.hexdigest()}")


def member_components(assembly: Assembly, *, manifest: Manifest) -> list[Component]:
    """One component per wheel, model and VC redistributable; the other members as files of a group."""
    gpu_files = gpu_origins(assembly)
    singles, grouped = [], {}
    for path in sorted(assembly.members):
        member = assembly.members[path]
        single = _single_component(path, member)
        if single is not None:
            singles.append(single)
            continue
        origin = gpu_files.get(path, {})
        key = f"gpu:{origin['source']}" if origin else _group_key(path)
        grouped.setdefault(key, []).append(_file_component(path, member, version=origin.get("version")))
    groups = _groups(manifest) | _runtime_group(assembly, manifest)
    return singles + [_group_component(key, groups[key], files) for key, files in sorted(grouped.items())]


def gpu_origins(assembly: Assembly) -> dict[str, dict[str, Any]]:
    """The GPU part's record of each DLL it placed (install path, source key, file version), by bundle path."""
    gpu = assembly.facts.gpu
    return gpu.origins if gpu else {}


def _single_component(path: str, member: Member) -> Component | None:
    top = path.rsplit("/", 1)[0] + "/"
    if top in (WHEELS, "payload/installer/") and path.endswith(".whl"):  # the environment's and the engine's
        return wheel_component(path, _member_file(member), member.digest)
    if path.startswith("payload/models/"):
        return model_component(path, member.digest)
    if path.startswith("payload/vc_redist/") and path.lower().endswith(".exe"):
        return vc_redist_component(path, _member_file(member), member.digest)
    return None


def wheel_component(path: str, wheel: Path, sha256: str) -> Component:
    name, version, _, _ = parse_wheel_filename(wheel.name)
    with SafeArchive.open(wheel, label=path) as archive:
        license_ = wheel_license(str(name), wheel_metadata(archive, label=path)[1])
    purl = PackageURL(type="pypi", name=str(name), version=str(version), qualifiers={"file_name": wheel.name})
    return Component(type=ComponentType.LIBRARY, name=str(name), version=str(version), bom_ref=path, purl=purl,
                     hashes=[_sha256(sha256)], licenses=_licenses(license_), properties=_path_property(path))


def model_component(path: str, sha256: str) -> Component:
    name = PurePosixPath(path).stem
    purl = PackageURL(type="generic", name=name, version=sha256[:12], qualifiers={"checksum": f"sha256:{sha256}"})
    return Component(type=ComponentType.MACHINE_LEARNING_MODEL, name=name, version=sha256[:12], bom_ref=path,
                     purl=purl, hashes=[_sha256(sha256)], properties=_path_property(path))


def vc_redist_component(path: str, file: Path, sha256: str) -> Component:
    """The version is the one the installer's own version resource states."""
    name = PurePosixPath(path).name
    version = inspect_pe(file, label=path).file_version
    purl = PackageURL(type="generic", name=name, version=version)
    return Component(type=ComponentType.APPLICATION, name=name, version=version, bom_ref=path, purl=purl,
                     hashes=[_sha256(sha256)], properties=_path_property(path))


def _file_component(path: str, member: Member, *, version: str | None) -> Component:
    return Component(type=ComponentType.FILE, name=path, version=version, bom_ref=path,
                     hashes=[_sha256(member.digest)], properties=_path_property(path))


GROUP_PREFIXES = (
    ("payload/sdk/", "sdk"),
    ("payload/gpu/", "gpu"),
    ("payload/selfcheck/", "selfcheck"),
    ("payload/app/", "app"),
    (RUNTIME_BUNDLE_DIR + "/", "python-runtime"),
    (LICENSES, "licenses"),
)


def _group_key(path: str) -> str:
    """Members that are not a component of their own: whatever is not upstream content is the installer.
    GPU DLLs the GPU part recorded are grouped by their source; others under payload/gpu/ stay together."""
    return next((key for prefix, key in GROUP_PREFIXES if path.startswith(prefix)), "installer")


def _groups(manifest: Manifest) -> dict[str, Group]:
    bundle, ort = manifest.bundle, manifest.ort
    archive = ort.archive
    gpu = manifest.gpu
    by_source = {f"gpu:{s.source.key}": _gpu_source_group(s.source) for s in (gpu.sources if gpu else ())}
    return by_source | {
        "sdk": Group(name="onnxruntime-sdk", type=ComponentType.LIBRARY, version=ort.version, license=ORT_LICENSE,
                     purl=PackageURL(type="generic", name="onnxruntime", version=ort.version),
                     sha256=archive.sha256[0] if archive else None, sources=_source_names([archive] if archive else [])),
        "gpu": Group(name="gpu-runtime", type=ComponentType.LIBRARY,
                     version=f"cuda-{gpu.cuda}+cudnn-{gpu.cudnn}" if gpu else None,
                     sources=_source_names([s.source for s in gpu.sources] if gpu else [])),
        "selfcheck": Group(name="ort-bundler-selfcheck", type=ComponentType.APPLICATION, version=__version__),
        "app": Group(name=f"{bundle.name}-app", type=ComponentType.APPLICATION, version=bundle.version),
        "licenses": Group(name="licenses", type=ComponentType.DATA, version=None),
        "installer": Group(name="ort-bundler-installer", type=ComponentType.APPLICATION, version=__version__),
    }


def _runtime_group(assembly: Assembly, manifest: Manifest) -> dict[str, Group]:
    """The bundled interpreter (bundler.assembly.runtime) as one component: CPython at its own version, PSF
    licence, the pinned archive's hash; its files are listed inside it."""
    runtime, source = assembly.facts.runtime, manifest.python.runtime
    if runtime is None or source is None:
        return {}
    purl = PackageURL(type="generic", name=LICENSE_COMPONENT, version=runtime.version,
                      qualifiers={"checksum": f"sha256:{runtime.sha256}"})
    return {"python-runtime": Group(name=LICENSE_COMPONENT, type=ComponentType.APPLICATION, version=runtime.version,
                                    license=PSF_LICENSE, purl=purl, sha256=runtime.sha256,
                                    sources=_source_names([source]))}


def _gpu_source_group(source: Input) -> Group:
    """A requirement pins one hash per candidate wheel: only a single hash identifies the file used."""
    identity = source_identity(source)
    return Group(name=identity.name, type=ComponentType.LIBRARY, version=identity.version, purl=identity.purl,
                 sha256=source.sha256[0] if len(source.sha256) == 1 else None, sources=_source_names([source]))


def _source_names(sources: list[Input]) -> tuple[str, ...]:
    """Where each input came from, without the build machine's paths: a URL or requirement as written, a
    local file by its name only."""
    named = []
    for source in sources:
        where = source.filename if source.kind == "path" else source.location
        named.append(f"{source.key}: {where} sha256:{source.sha256[0]}")
    return tuple(named)


def _group_component(key: str, group: Group, files: list[Component]) -> Component:
    properties = [Property(name=SOURCE_PROPERTY, value=s) for s in group.sources]
    return Component(type=group.type, name=group.name, version=group.version, bom_ref=f"group:{key}",
                     purl=group.purl, hashes=[_sha256(group.sha256)] if group.sha256 else [],
                     licenses=_licenses(group.license), properties=properties, components=files)


def _licenses(value: str | None) -> list[License]:
    """An SPDX id or expression when it is one; otherwise the name as the package states it."""
    if value is None:
        return []
    spdx_id = spdx.fixup_id(value)
    if spdx_id is not None:
        return [DisjunctiveLicense(id=spdx_id)]
    if spdx.is_expression(value):
        return [LicenseExpression(value)]
    return [DisjunctiveLicense(name=value)]


def _sha256(digest: str) -> HashType:
    return HashType(alg=HashAlgorithm.SHA_256, content=digest)


def _path_property(path: str) -> list[Property]:
    return [Property(name=PATH_PROPERTY, value=path)]
