"""Provenance of a bundle: signature evidence, licence texts and the CycloneDX SBOM (issue 5 §3-§5).

These parts describe what the other parts put into the bundle, so they run after all of them, in this
order: `check_signatures` (fails the build before anything is written), `add_licenses`, then `add_sbom`,
which also lists the licence files. Each reads members through the `Assembly` and opens wheels and
archives only through `SafeArchive`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import Message
from email.parser import Parser
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType, Pedigree
from cyclonedx.model.license import (
    DisjunctiveLicense,
    License,
    LicenseAcknowledgement,
    LicenseExpression,
)
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from packageurl import PackageURL
from packaging.utils import parse_wheel_filename

from bundler import __version__
from bundler.assembly.assembly import Assembly
from bundler.assembly.identity import source_identity
from bundler.assembly.licenses import (
    LICENSES,
    NO_LICENSE_FILE,
    ORT_LICENSE,
    WHEELS,
    _member_file,
    bundled_texts,
    wheel_facts,
    wheel_license,
)
from bundler.assembly.provenance import PROVENANCE_MEMBER
from bundler.assembly.runtime import LICENSE_COMPONENT, PSF_FINDING, RUNTIME_BUNDLE_DIR
from bundler.assembly.wheelbuild import MARKER_FIELD, PROVENANCE_FILE
from bundler.errors import BuildError
from bundler.manifest import Gpu, Input, Manifest
from bundler.readers.pe import inspect_pe
from bundler.readers.wheels import wheel_metadata  # noqa: F401  (re-exported: python_env, operations/inspect)
from bundler.sources.license_pins import LicensePin, pinned
from bundler.spdx import LicenseFinding, checked
from bundler.writer.members import Member

SBOM = "sbom.cdx.json"
SUMS = "SHA256SUMS"
RECORDS = ("bundle.json", "install-plan.json", PROVENANCE_MEMBER, SUMS)  # describe the bundle; written after every part
_SCHEMA = SchemaVersion.V1_6
# The official CycloneDX 1.6 JSON schema and the schemas it refers to, as cyclonedx-python-lib ships them.
_SCHEMA_PACKAGE = "cyclonedx.schema._res"
_SCHEMA_FILE = "bom-1.6.SNAPSHOT.schema.json"
_SCHEMA_REFS = ("spdx.SNAPSHOT.schema.json", "jsf-0.82.SNAPSHOT.schema.json", "cryptography-defs.SNAPSHOT.schema.json")
_SCHEMA_BASE = "http://cyclonedx.org/schema/"
OWN_LICENSE = "MIT"  # ort-bundler's own files (installer, self-check): pyproject.toml's licence
REBUILT_RE = re.compile(r"^ort-bundler from (?P<name>\S+)(?: sha256:(?P<sha256>[0-9a-f]{64}))?$")


# -- §3 the SBOM -----------------------------------------------------------------------------------------------

PATH_PROPERTY = "ort-bundler:bundle-path"
SOURCE_PROPERTY = "ort-bundler:source"
SPDX_PROPERTY = "ort-bundler:spdx"  # on a licence without an SPDX expression: why
HASH_PROPERTY = "ort-bundler:hash"  # on a file whose hash the SBOM cannot state: why
REBUILT_PROPERTY = "ort-bundler:rebuilt-from"
LICENSE_FILES_PROPERTY = "ort-bundler:license-files"
CONCLUDED_PROPERTY = "ort-bundler:concluded-from"  # on a licence concluded from its text: the files matched


@dataclass(frozen=True, kw_only=True)
class Group:
    """Bundle members that form one component: its identity, and the members listed inside it as files."""

    name: str
    type: ComponentType
    version: str | None
    license: LicenseFinding | None = None
    purl: PackageURL | None = None
    sha256: str | None = None
    sources: tuple[str, ...] = ()


def install_sbom(assembly: Assembly) -> None:
    """Plan the SBOM's install now: install-plan.json is written before the SBOM, which describes it."""
    assembly.plan_copy(SBOM, SBOM)


def add_sbom(assembly: Assembly, *, manifest: Manifest, pins: Iterable[LicensePin] = ()) -> None:
    """sbom.cdx.json: every member of the bundle but itself, as a component or a file inside one, validated
    against the CycloneDX 1.6 schema. Runs after bundle.json and install-plan.json so that they are in it;
    SHA256SUMS, written after it, is listed without a hash. Reproducible: the serial number follows from
    the bundle's name, manifest and members, the timestamp from source_date_epoch, and the library sorts
    components. `pins`: the lock's licence pins (bundler/sources/license_pins.py), so no text is matched twice."""
    text = JsonV1Dot6(sbom(assembly, manifest=manifest, pins=pins)).output_as_string(indent=2)
    errors = schema_errors(json.loads(text))
    if errors:
        msg = f"{SBOM}: the generated SBOM is not valid CycloneDX {_SCHEMA.to_version()}: {errors[0]}"
        raise BuildError(msg)
    assembly.add_bytes(SBOM, (text + "\n").encode("utf-8"))


def schema_errors(document: object) -> list[str]:
    """What the official CycloneDX 1.6 JSON schema finds wrong, formats included.

    Checked with jsonschema-rs, which loads in milliseconds: the pure-Python jsonschema the cyclonedx
    library uses costs seconds to import (its format checker compiles 38 grammars). The tests validate
    the same files again with jsonschema and its full format checker.
    """
    return [f"{error.message} (at /{'/'.join(map(str, error.instance_path))})"
            for error in _validator().iter_errors(document)]


@functools.cache
def _validator() -> Any:
    import jsonschema_rs

    registry = jsonschema_rs.Registry([(f"{_SCHEMA_BASE}{name}", _schema(name)) for name in _SCHEMA_REFS])
    return jsonschema_rs.Draft7Validator(_schema(_SCHEMA_FILE), registry=registry, validate_formats=True)


@functools.cache
def _schema(name: str) -> Any:
    return json.loads(resources.files(_SCHEMA_PACKAGE).joinpath(name).read_text(encoding="utf-8"))


@functools.cache
def _spdx_ids() -> frozenset[str]:
    """The licence ids a CycloneDX `license.id` may hold: the enum of the schema's own SPDX list.

    Read here rather than through `cyclonedx.spdx`, whose import builds a second SPDX licensing index
    (about 0.1 s of every build) for this one set.
    """
    return frozenset(_schema("spdx.SNAPSHOT.schema.json")["enum"])


def sbom(assembly: Assembly, *, manifest: Manifest, pins: Iterable[LicensePin] = ()) -> Bom:
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
    components = member_components(assembly, manifest=manifest, pins=pins)
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


def member_components(assembly: Assembly, *, manifest: Manifest, pins: Iterable[LicensePin] = ()) -> list[Component]:
    """One component per wheel, model and VC redistributable; the other members as files of a group."""
    gpu_files = gpu_origins(assembly)
    data = model_data_components(assembly, manifest)
    singles: list[Component] = []
    grouped: dict[str, list[Component]] = {}
    for path in sorted(assembly.members):
        if path == SBOM or any(path in files for files in data.values()):
            continue
        member = assembly.members[path]
        single = _single_component(path, member, manifest=manifest, data=data, pins=pins)
        if single is not None:
            singles.append(single)
            continue
        origin = gpu_files.get(path, {})
        key = f"gpu:{origin['source']}" if origin else _group_key(path)
        grouped.setdefault(key, []).append(_file_component(path, member, version=origin.get("version")))
    grouped.setdefault("records", []).extend(
        _later_component(name, f"not stated: {name} holds the hash of {SBOM} and is written after it")
        for name in (PROVENANCE_MEMBER, SUMS))
    for component in singles:
        if component.name in _without_license_files(assembly):
            component.properties.add(Property(name=LICENSE_FILES_PROPERTY, value=f"none: the package {NO_LICENSE_FILE}"))
    groups = _groups(manifest, _license_index(assembly)) | _runtime_group(assembly, manifest)
    return singles + [_group_component(key, groups[key], files) for key, files in sorted(grouped.items())]


def gpu_origins(assembly: Assembly) -> dict[str, dict[str, Any]]:
    """The GPU part's record of each DLL it placed (install path, source key, file version), by bundle path."""
    gpu = assembly.facts.gpu
    return gpu.origins if gpu else {}


def model_data_components(assembly: Assembly, manifest: Manifest) -> dict[str, dict[str, Component]]:
    """Each model's external data files as file components (by bundle path), which its component holds."""
    return {model.name: {path: _file_component(path, assembly.members[path], version=None)
                         for path in (f"payload/models/{data.location}" for data in model.data)}
            for model in manifest.models if model.data}


def _single_component(path: str, member: Member, *, manifest: Manifest,
                      data: Mapping[str, Mapping[str, Component]], pins: Iterable[LicensePin]) -> Component | None:
    top = path.rsplit("/", 1)[0] + "/"
    if top in (WHEELS, "payload/installer/") and path.endswith(".whl"):  # the environment's and the engine's
        return wheel_component(path, _member_file(member), member.digest, pins=pins)
    if path.startswith("payload/models/"):
        component = model_component(path, member.digest, manifest=manifest)
        component.components.update(data.get(component.name, {}).values())
        return component
    if path.startswith("payload/vc_redist/") and path.lower().endswith(".exe"):
        return vc_redist_component(path, _member_file(member), member.digest)
    return None


def wheel_component(path: str, wheel: Path, sha256: str, *, pins: Iterable[LicensePin] = ()) -> Component:
    """A wheel as published is named by its purl's file_name; one ort-bundler rebuilt (from a capi source)
    is not that file: its purl carries its own checksum instead, and its pedigree names the upstream file
    with that file's own hash and purl, as the wheel's METADATA records it (the Rebuilt-By field)."""
    name, version, _, _ = parse_wheel_filename(wheel.name)
    facts = wheel_facts(wheel, sha256, label=path)
    metadata = facts.parsed()
    pin = pinned(pins, wheel.name, sha256)
    finding = wheel_license(str(name), metadata, bundled_texts(str(name), facts), pin=pin)
    rebuilt = _rebuilt_from(facts.provenance, metadata)
    qualifiers = {"checksum": f"sha256:{sha256}"} if rebuilt else {"file_name": wheel.name}
    purl = PackageURL(type="pypi", name=str(name), version=str(version), qualifiers=qualifiers)
    properties = _path_property(path)
    pedigree = None
    if rebuilt:
        properties.append(Property(name=REBUILT_PROPERTY, value=rebuilt[0]))
        pedigree = Pedigree(ancestors=[_upstream_component(path, str(name), str(version), *rebuilt)],
                            notes=f"Rebuilt by ort-bundler from {rebuilt[0]}: the package tree and dist-info "
                                  f"as published, a new WHEEL and RECORD, and one added file, "
                                  f"{PROVENANCE_FILE}, naming the source.")
    return Component(type=ComponentType.LIBRARY, name=str(name), version=str(version), bom_ref=path, purl=purl,
                     hashes=[_sha256(sha256)], licenses=_licenses(finding), properties=properties, pedigree=pedigree)


def _rebuilt_from(provenance: str, metadata: Message) -> tuple[str, str | None] | None:
    """(upstream file name, its sha256 if known) from the provenance file of a wheel ort-bundler built, or from
    the METADATA field that wheels built before carried it in."""
    field = Parser().parsestr(provenance, headersonly=True).get(MARKER_FIELD) if provenance else None
    match = REBUILT_RE.match((field or metadata.get(MARKER_FIELD) or "").strip())
    return (match["name"], match["sha256"]) if match else None


def _upstream_component(path: str, name: str, version: str, filename: str, sha256: str | None) -> Component:
    """The published file a rebuilt wheel came from: a wheel by its PyPI purl, any other archive as generic."""
    qualifiers = {"file_name": filename} if filename.endswith(".whl") else {}
    if sha256 is not None and not filename.endswith(".whl"):
        qualifiers["checksum"] = f"sha256:{sha256}"
    purl = PackageURL(type="pypi" if filename.endswith(".whl") else "generic", name=name, version=version,
                      qualifiers=qualifiers)
    return Component(type=ComponentType.LIBRARY, name=name, version=version, bom_ref=f"upstream:{path}", purl=purl,
                     hashes=[_sha256(sha256)] if sha256 else [])


def model_component(path: str, sha256: str, *, manifest: Manifest | None = None) -> Component:
    """Licensed as `[[models]] license` says (SPDX, checked when the manifest is read), else explicitly unknown."""
    name = PurePosixPath(path).stem
    declared = next((m.license for m in manifest.models if m.name == name), None) if manifest else None
    finding = checked(declared, source="manifest") if declared else _unknown("the manifest gives no [[models]] license")
    purl = PackageURL(type="generic", name=name, version=sha256[:12], qualifiers={"checksum": f"sha256:{sha256}"})
    return Component(type=ComponentType.MACHINE_LEARNING_MODEL, name=name, version=sha256[:12], bom_ref=path,
                     purl=purl, hashes=[_sha256(sha256)], licenses=_licenses(finding), properties=_path_property(path))


def vc_redist_component(path: str, file: Path, sha256: str) -> Component:
    """The version is the one the installer's own version resource states."""
    name = PurePosixPath(path).name
    version = inspect_pe(file, label=path).file_version
    purl = PackageURL(type="generic", name=name, version=version, qualifiers={"checksum": f"sha256:{sha256}"})
    finding = _unknown("Microsoft's redistributable states its licence terms in no machine-readable form")
    return Component(type=ComponentType.APPLICATION, name=name, version=version, bom_ref=path, purl=purl,
                     hashes=[_sha256(sha256)], licenses=_licenses(finding), properties=_path_property(path))


def _file_component(path: str, member: Member, *, version: str | None) -> Component:
    return Component(type=ComponentType.FILE, name=path, version=version, bom_ref=path,
                     hashes=[_sha256(member.digest)], properties=_path_property(path))


def _later_component(name: str, why: str) -> Component:
    """A member written after the SBOM because it holds the SBOM's own hash (SHA256SUMS, the provenance statement):
    listed, its hash said to be not stated here."""
    return Component(type=ComponentType.FILE, name=name, bom_ref=name,
                     properties=[*_path_property(name), Property(name=HASH_PROPERTY, value=why)])


GROUP_PREFIXES = (
    ("payload/sdk/", "sdk"),
    ("payload/gpu/", "gpu"),
    ("payload/ort_bundle/selfcheck/", "selfcheck"),  # the shipped package's self-check; the rest is the installer's
    ("payload/app/", "app"),
    (RUNTIME_BUNDLE_DIR + "/", "python-runtime"),
    (LICENSES, "licenses"),
    *((record, "records") for record in RECORDS),
)


def _group_key(path: str) -> str:
    """Members that are not a component of their own: whatever is not upstream content is the installer.
    GPU DLLs the GPU part recorded are grouped by their source; others under payload/gpu/ stay together."""
    return next((key for prefix, key in GROUP_PREFIXES if path.startswith(prefix)), "installer")


def _gpu_version(gpu: Gpu | None) -> str | None:
    """The GPU stack's version: CUDA's and cuDNN's; DirectML's route has no CUDA (its DLL is in the ORT wheel)."""
    if gpu is None:
        return None
    return "directml" if gpu.directml else f"cuda-{gpu.cuda}+cudnn-{gpu.cudnn}"


def _groups(manifest: Manifest, licenses: dict[str, LicenseFinding]) -> dict[str, Group]:
    bundle, ort = manifest.bundle, manifest.ort
    archive = ort.archive
    gpu = manifest.gpu
    own = LicenseFinding(expression=OWN_LICENSE, declared=None, source="ort-bundler")
    by_source = {f"gpu:{s.source.key}": _gpu_source_group(s.source, licenses) for s in (gpu.sources if gpu else ())}
    return by_source | {
        "sdk": Group(name="onnxruntime-sdk", type=ComponentType.LIBRARY, version=ort.version,
                     license=LicenseFinding(expression=ORT_LICENSE, declared=None, source="ort-bundler"),
                     purl=_archive_purl("onnxruntime", ort.version, archive),
                     sha256=archive.sha256[0] if archive else None, sources=_source_names([archive] if archive else [])),
        "gpu": Group(name="gpu-runtime", type=ComponentType.LIBRARY,
                     version=_gpu_version(gpu),
                     license=_unknown("DLLs placed without a source the manifest names"),
                     sources=_source_names([s.source for s in gpu.sources] if gpu else [])),
        "selfcheck": Group(name="ort-bundler-selfcheck", type=ComponentType.APPLICATION, version=__version__,
                           license=own),
        "app": Group(name=f"{bundle.name}-app", type=ComponentType.APPLICATION, version=bundle.version,
                     license=_unknown("the manifest states no licence for the entry point")),
        "licenses": Group(name="licenses", type=ComponentType.DATA, version=None,
                          license=_unknown("the licence and notice texts of the other components")),
        "installer": Group(name="ort-bundler-installer", type=ComponentType.APPLICATION, version=__version__,
                           license=own),
        "records": Group(name="bundle-records", type=ComponentType.DATA, version=bundle.version, license=own),
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
                                    license=PSF_FINDING, purl=purl, sha256=runtime.sha256,
                                    sources=_source_names([source]))}


def _archive_purl(name: str, version: str, archive: Input | None) -> PackageURL:
    qualifiers = {"checksum": f"sha256:{archive.sha256[0]}"} if archive and len(archive.sha256) == 1 else {}
    return PackageURL(type="generic", name=name, version=version, qualifiers=qualifiers)


def _gpu_source_group(source: Input, licenses: dict[str, LicenseFinding]) -> Group:
    """A requirement pins one hash per candidate wheel: only a single hash identifies the file used."""
    identity = source_identity(source)
    single = source.sha256[0] if len(source.sha256) == 1 else None
    purl = identity.purl
    if single:
        purl = PackageURL(type=purl.type, name=purl.name, version=purl.version, qualifiers={"checksum": f"sha256:{single}"})
    found = licenses.get(identity.name) or _unknown("the source declares no licence")
    return Group(name=identity.name, type=ComponentType.LIBRARY, version=identity.version, purl=purl,
                 license=found, sha256=single, sources=_source_names([source]))


def _without_license_files(assembly: Assembly) -> set[str]:
    return {e["component"] for e in assembly.facts.licenses if NO_LICENSE_FILE in e.get("notes", [])}


def _license_index(assembly: Assembly) -> dict[str, LicenseFinding]:
    """The licence part's findings by component name (bundle.json's licence index)."""
    found = {}
    for entry in assembly.facts.licenses:
        expression, declared = entry.get("license"), entry.get("declared")
        reason = None if expression else "; ".join(entry.get("notes", [])) or "nothing declared"
        found[entry["component"]] = LicenseFinding(expression=expression, declared=declared, source="index",
                                                   reason=reason)
    return found


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


def _unknown(reason: str) -> LicenseFinding:
    return LicenseFinding(expression=None, declared=None, source="ort-bundler", reason=reason)


def _licenses(finding: LicenseFinding | None) -> list[License]:
    """An SPDX id or expression when certain; otherwise the declared text (or "unknown") marked as such."""
    finding = finding or _unknown("nothing declared")
    if finding.expression is not None and finding.concluded_from:  # from the text, not as the package declared
        files = Property(name=CONCLUDED_PROPERTY, value=", ".join(finding.concluded_from))
        if finding.expression in _spdx_ids():
            return [DisjunctiveLicense(id=finding.expression, acknowledgement=LicenseAcknowledgement.CONCLUDED,
                                       properties=[files])]
        return [LicenseExpression(finding.expression, acknowledgement=LicenseAcknowledgement.CONCLUDED)]
    if finding.expression is not None:
        if finding.expression in _spdx_ids():
            return [DisjunctiveLicense(id=finding.expression)]
        return [LicenseExpression(finding.expression)]
    why = Property(name=SPDX_PROPERTY, value=f"unknown: {finding.reason}")
    return [DisjunctiveLicense(name=finding.declared or "unknown", acknowledgement=LicenseAcknowledgement.DECLARED,
                               properties=[why])]


def _sha256(digest: str) -> HashType:
    return HashType(alg=HashAlgorithm.SHA_256, content=digest)


def _path_property(path: str) -> list[Property]:
    return [Property(name=PATH_PROPERTY, value=path)]
