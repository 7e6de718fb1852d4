"""From the bundle's records to what the page shows.

Every input is data another party wrote: `bundle.json`, `sbom.cdx.json` and the member list come from the
bundle, the verification and diff results from our own checks of it. Nothing here assumes a field exists or has
its type (`_field`, `_items`, `_text`): a hostile or older bundle gives a page with gaps, never an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from bundler.review.closure import ClosurePicture, Dependency, closure_picture

#: Characters of a value shown in a table cell before it is cut (a licence text, a long list).
MAX_CELL = 2000


@dataclass(frozen=True, kw_only=True)
class Row:
    label: str
    value: str


@dataclass(frozen=True, kw_only=True)
class TreeNode:
    name: str
    size: int | None  # None for a folder
    children: tuple[TreeNode, ...] = ()

    @property
    def total(self) -> int:
        return self.size if self.size is not None else sum(child.total for child in self.children)

    @property
    def files(self) -> int:
        return 1 if self.size is not None else sum(child.files for child in self.children)


@dataclass(frozen=True, kw_only=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    empty: str = "none"


@dataclass(frozen=True, kw_only=True)
class Verdict:
    ok: bool
    headline: str
    findings: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Review:
    title: str
    identity: tuple[Row, ...]
    verification: Verdict
    signatures: Table
    binary_signatures: Table
    tree: TreeNode
    closure: ClosurePicture
    closure_notes: tuple[str, ...]
    gpu: tuple[Row, ...]  # empty: a CPU bundle
    models: tuple[Table, ...]
    licences: Table
    components: Table
    provenance: tuple[Row, ...]
    provenance_note: str
    diff: Table | None = None
    diff_headline: str = ""
    notes: tuple[str, ...] = field(default=())


@dataclass(frozen=True, kw_only=True)
class Sources:
    """What the command read, as plain data."""

    zip_name: str
    zip_sha256: str
    zip_size: int
    members: Sequence[tuple[str, int]]  # (path below the top folder, size)
    bundle: Mapping[str, Any]
    sbom: Mapping[str, Any]
    verification: Mapping[str, Any]  # `verify --json`'s object
    provenance: Mapping[str, Any] | None
    diff: Mapping[str, Any] | None  # `diff --json`'s object, with --against


def review(sources: Sources) -> Review:
    bundle = sources.bundle
    name, version = _text(bundle.get("name")), _text(bundle.get("version"))
    closure = _field(bundle, "dll_closure", {})
    return Review(
        title=f"{name} {version}", identity=_identity(sources), verification=_verdict(sources.verification),
        signatures=_signature_table(sources.verification), binary_signatures=_binary_signatures(bundle),
        tree=tree(sources.members, root=sources.zip_name), closure=closure_picture(_dependencies(closure)),
        closure_notes=tuple(_text(p) for p in _items(_field(closure, "problems", []))),
        gpu=_gpu(bundle), models=tuple(_model(m) for m in _items(bundle.get("models"))),
        licences=_licences(bundle), components=_components(sources.sbom),
        provenance=_provenance(sources.provenance),
        provenance_note="" if sources.provenance else "this bundle carries no build provenance statement",
        diff=_diff_table(sources.diff) if sources.diff is not None else None,
        diff_headline=_diff_headline(sources.diff) if sources.diff is not None else "")


def tree(members: Iterable[tuple[str, int]], *, root: str) -> TreeNode:
    """The members as nested folders, folders first, each level sorted by name."""
    nested: dict[str, Any] = {}
    for path, size in members:
        parts = PurePosixPath(path).parts
        if not parts:
            continue
        level = nested
        for part in parts[:-1]:
            child = level.setdefault(part + "/", {})
            level = child if isinstance(child, dict) else level
        level[parts[-1]] = size
    return TreeNode(name=root, size=None, children=_nodes(nested))


def _nodes(level: Mapping[str, Any]) -> tuple[TreeNode, ...]:
    folders = sorted((k for k, v in level.items() if isinstance(v, dict)), key=str.lower)
    files = sorted((k for k, v in level.items() if not isinstance(v, dict)), key=str.lower)
    return (*(TreeNode(name=k, size=None, children=_nodes(level[k])) for k in folders),
            *(TreeNode(name=k, size=int(level[k])) for k in files))


def _identity(sources: Sources) -> tuple[Row, ...]:
    bundle = sources.bundle
    ort = _field(bundle, "ort", {})
    runtime = _field(bundle, "python_runtime", None)
    gpu = _field(bundle, "gpu", None)
    route = _text(ort.get("route")) + (" with GPU" if gpu else "")
    providers = ", ".join(_text(p) for p in _items(bundle.get("expected_providers"))) or "none recorded"
    python = _text(bundle.get("python")) + (f" (bundled {_text(runtime.get('version'))})" if isinstance(runtime, dict)
                                             else " (the target's own)")
    return (Row(label="name", value=_text(bundle.get("name"))), Row(label="version", value=_text(bundle.get("version"))),
            Row(label="platform", value=_text(bundle.get("platform"))),
            Row(label="ONNX Runtime", value=f"{_text(ort.get('version'))} ({route})"),
            Row(label="execution providers", value=providers), Row(label="Python", value=python),
            Row(label="VC++ runtime minimum", value=_text(bundle.get("vc_runtime_min")) or "none (not Windows)"),
            Row(label="file", value=sources.zip_name), Row(label="size", value=f"{sources.zip_size:,} bytes"),
            Row(label="sha256", value=sources.zip_sha256),
            Row(label="built with", value=f"ort-bundler {_text(_field(bundle, 'built_with', {}).get('ort-bundler'))}"))


def _verdict(report: Mapping[str, Any]) -> Verdict:
    ok = report.get("ok") is True
    findings = [f"missing: {_text(n)}" for n in _items(report.get("missing"))]
    findings += [f"not in SHA256SUMS: {_text(n)}" for n in _items(report.get("extra"))]
    findings += [f"altered: {_text(n)}" for n in _items(report.get("altered"))]
    findings += [_text(p) for p in _items(report.get("problems"))]
    anchor = report.get("trust_anchor")
    trust = f"signatures checked against {_text(anchor)}" if anchor else "signatures reported, not judged (no --trust)"
    headline = (f"{'OK' if ok else 'FAILED'}: {_text(report.get('files'))} files checked against SHA256SUMS; {trust}")
    return Verdict(ok=ok, headline=headline, findings=tuple(findings))


def _signature_table(report: Mapping[str, Any]) -> Table:
    rows = []
    for check in _items(report.get("signatures")):
        if not isinstance(check, dict):
            continue
        trusted = check.get("trusted")
        rows.append((_text(check.get("path")), _text(check.get("kind")), _text(check.get("signer")),
                     " → ".join(_text(c) for c in _items(check.get("chain"))),
                     "not judged" if trusted is None else ("trusted" if trusted else "NOT trusted"),
                     _text(check.get("timestamp") or check.get("signing_time")),
                     "; ".join(_text(p) for p in _items(check.get("problems"))) or "none"))
    return Table(title="Signatures over the bundle", columns=("file", "kind", "signer", "chain", "trust",
                                                              "time", "problems"),
                 rows=tuple(rows), empty="the bundle is not signed (sign it with `ort-bundler sign`)")


def _binary_signatures(bundle: Mapping[str, Any]) -> Table:
    rows = []
    for entry in _items(bundle.get("signatures")):
        if isinstance(entry, dict):
            verdict = "verified" if entry.get("verified") else ("signed, not verified" if entry.get("signed")
                                                                 else "unsigned")
            rows.append((_text(entry.get("path")), verdict, _text(entry.get("signer")), _text(entry.get("reason"))))
    return Table(title="Authenticode signatures of the binaries", columns=("binary", "signature", "signer", "note"),
                 rows=tuple(sorted(rows)), empty="no Windows binaries")


def _dependencies(closure: Mapping[str, Any]) -> list[Dependency]:
    deps = []
    for entry in _items(closure.get("dependencies")):
        if isinstance(entry, dict):
            importer = _text(entry.get("importer")).rsplit("!", 1)[-1].rsplit("/", 1)[-1]
            deps.append(Dependency(importer=importer, dll=_text(entry.get("dll")), kind=_text(entry.get("kind")),
                                   runtime=entry.get("how") == "runtime"))
    return deps


def _gpu(bundle: Mapping[str, Any]) -> tuple[Row, ...]:
    gpu = bundle.get("gpu")
    if not isinstance(gpu, dict):
        return ()
    return tuple(Row(label=_text(key), value=_text(value)) for key, value in sorted(gpu.items()))


def _model(model: Any) -> Table:
    model = model if isinstance(model, dict) else {}
    rows: list[tuple[str, ...]] = []
    for role in ("inputs", "outputs"):
        for tensor in _items(model.get(role)):
            if isinstance(tensor, dict):
                rows.append((role[:-1], _text(tensor.get("name")), _text(tensor.get("type")),
                             _text(tensor.get("shape"))))
    opsets = _field(model, "opsets", {})
    rows.append(("opsets", ", ".join(f"{_text(k)} {_text(v)}" for k, v in sorted(opsets.items())), "", ""))
    reference = _field(model, "reference", {})
    for output, facts in sorted(_field(reference, "outputs", {}).items()):
        facts = facts if isinstance(facts, dict) else {}
        rows.append(("reference output", _text(output), f"{_text(facts.get('dtype'))} {_text(facts.get('shape'))}",
                     f"{_text(facts.get('values'))} (sha256 {_text(facts.get('digest'))})"))
    return Table(title=f"Model {_text(model.get('name'))} ({_text(model.get('file'))}, sha256 "
                       f"{_text(model.get('sha256'))})", columns=("", "name", "type", "shape or value"),
                 rows=tuple(rows))


def _licences(bundle: Mapping[str, Any]) -> Table:
    rows = [(_text(e.get("component")), _text(e.get("license")), _text(e.get("declared")),
             ", ".join(_text(f) for f in _items(e.get("files"))))
            for e in _items(bundle.get("licenses")) if isinstance(e, dict)]
    return Table(title="Licences", columns=("component", "licence", "declared", "texts"), rows=tuple(sorted(rows)))


def _components(sbom: Mapping[str, Any]) -> Table:
    rows = []
    for component in _flatten(_items(sbom.get("components"))):
        if component.get("type") == "file":
            continue
        hashes = ", ".join(_text(h.get("content")) for h in _items(component.get("hashes")) if isinstance(h, dict))
        licences = ", ".join(_text(_field(_field(entry, "license", {}), "id", "") or entry.get("expression"))
                             for entry in _items(component.get("licenses")) if isinstance(entry, dict))
        rows.append((_text(component.get("name")), _text(component.get("version")), _text(component.get("type")),
                     licences, _text(component.get("purl")), hashes))
    return Table(title="SBOM components (sbom.cdx.json, CycloneDX)", columns=("name", "version", "type", "licences",
                                                                               "purl", "sha256"),
                 rows=tuple(sorted(rows)))


def _flatten(components: Iterable[Any]) -> Iterable[Mapping[str, Any]]:
    for component in components:
        if isinstance(component, dict):
            yield component
            yield from _flatten(_items(component.get("components")))


def _provenance(statement: Mapping[str, Any] | None) -> tuple[Row, ...]:
    """The statement as a reviewer reads it: what kind, how many subjects, the builder, and one row per input
    (its manifest key, sha256 and source); the manifest and lock themselves are in bundle.json and lock.toml."""
    if not statement:
        return ()
    predicate = _field(statement, "predicate", {})
    definition, run = _field(predicate, "buildDefinition", {}), _field(predicate, "runDetails", {})
    builder = _field(run, "builder", {})
    rows = [Row(label="statement type", value=_text(statement.get("_type"))),
            Row(label="predicate type", value=_text(statement.get("predicateType"))),
            Row(label="subjects", value=f"{len(_items(statement.get('subject')))} members, each with its sha256"),
            Row(label="build type", value=_text(definition.get("buildType"))),
            Row(label="internal parameters", value=_text(definition.get("internalParameters"))),
            Row(label="builder", value=" ".join(filter(None, [_text(builder.get("id")),
                                                               _text(builder.get("version"))])))]
    for dependency in _items(definition.get("resolvedDependencies")):
        if isinstance(dependency, dict):
            digest = _field(dependency, "digest", {})
            rows.append(Row(label=f"input {_text(dependency.get('name'))}",
                            value=" ".join(filter(None, [f"sha256 {_text(digest.get('sha256'))}",
                                                         _text(dependency.get("uri"))]))))
    return tuple(rows)


def _diff_table(diff: Mapping[str, Any]) -> Table:
    rows = [(_text(c.get("kind")), _text(c.get("change")), _text(c.get("subject")), _text(c.get("text")),
             _text(c.get("detail")))
            for c in _items(diff.get("changes")) if isinstance(c, dict)]
    return Table(title="What changed", columns=("kind", "change", "subject", "in words", "detail"), rows=tuple(rows),
                 empty="nothing: the bundles are identical")


def _diff_headline(diff: Mapping[str, Any]) -> str:
    changes = _items(diff.get("changes"))
    return f"{_text(diff.get('old'))} → {_text(diff.get('new'))}: {len(changes)} change(s)"


def _field(mapping: Any, key: str, default: Any) -> Any:
    """`mapping[key]` when `mapping` is a dict and the value has the default's type (any type for None)."""
    if not isinstance(mapping, dict):
        return default
    value = mapping.get(key, default)
    return value if default is None or isinstance(value, type(default)) else default


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _text(value: Any) -> str:
    """Any JSON value as text for a cell: strings as they are, the rest as compact JSON, cut at MAX_CELL."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= MAX_CELL else text[:MAX_CELL] + "…"
