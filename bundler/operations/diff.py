"""`ort-bundler diff`: what changed between two bundles, by kind, in plain words.

Release reviews ask "what changed between 1.0.0 and 1.1.0?". The answer comes from what each bundle
records (bundle.json, the SBOM) and from the members themselves, never from unzipping both by hand.
A change is reported once, under the kind that caused it: a wheel added brings its licence, SBOM
component and requirements.txt line with it; an environment variable shows up in the launchers it is
rendered into. Whatever no kind explains is still listed, as a changed file, so nothing is hidden.
Signed bundles compare like unsigned ones: `*.p7s` members and PowerShell signature blocks are ignored.
PE files are parsed from a private scratch folder, removed afterwards.
"""

from __future__ import annotations

import difflib
import json
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from bundler.assembly.render import LAUNCH_CONFIG
from bundler.errors import VerificationError
from bundler.operations.diff_models import record_changes, reference_moves
from bundler.readers.bundlezip import BundleZip, is_signature, open_bundle, script_text
from bundler.readers.pe import inspect_pe, is_pe

RECORDS = {"SHA256SUMS", "bundle.json", "install-plan.json", "sbom.cdx.json", "lock.toml", "provenance.intoto.json"}
SCRIPT_SUFFIXES = (".ps1", ".psm1", ".cmd", ".bat", ".sh", ".py", ".pth")
BINARY_SUFFIXES = (".dll", ".pyd")
BUNDLE_FIELDS = ("name", "version", "platform", "python")


@dataclass(frozen=True, kw_only=True)
class Change:
    """One change: its kind (wheel, model, environment…), what happened, to what, and the sentence for it."""

    kind: str
    change: str
    subject: str
    text: str
    old: Any = None
    new: Any = None
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = {"kind": self.kind, "change": self.change, "subject": self.subject, "text": self.text,
                "old": self.old, "new": self.new}
        return {**data, "detail": self.detail} if self.detail is not None else data


@dataclass(frozen=True, kw_only=True)
class DiffReport:
    old: str
    new: str
    changes: tuple[Change, ...] = field(default=())

    @property
    def identical(self) -> bool:
        return not self.changes

    def to_json(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new, "identical": self.identical,
                "changes": [change.to_json() for change in self.changes]}

    def summary(self) -> str:
        if self.identical:
            return f"{self.old} and {self.new} are identical"
        lines = [f"{self.old} -> {self.new}: {len(self.changes)} change(s)"]
        for change in self.changes:
            lines.append(f"  {change.kind}: {change.text}")
            if change.detail:
                lines += [f"    {line}" for line in change.detail.splitlines()]
        return "\n".join(lines)


def diff_bundles(old_path: Path, new_path: Path, *, scripts: bool = False) -> DiffReport:
    old, new = open_bundle(old_path), open_bundle(new_path)
    with tempfile.TemporaryDirectory(prefix="ort-bundler-diff-") as scratch:
        try:
            changes = _Differ(old, new, scratch=Path(scratch), scripts=scripts).changes()
        except (TypeError, AttributeError, KeyError) as exc:  # a record of another shape: an altered bundle.json
            msg = (f"{old_path.name} or {new_path.name}: bundle.json records a value of another shape than "
                   f"`ort-bundler build` writes ({type(exc).__name__}: {exc}); run `ort-bundler verify` on each")
            raise VerificationError(msg) from None
    return DiffReport(old=old_path.name, new=new_path.name, changes=tuple(changes))


class _Differ:
    """Collects the changes kind by kind; `explained` holds the members each kind accounts for."""

    def __init__(self, old: BundleZip, new: BundleZip, *, scratch: Path, scripts: bool) -> None:
        self.old, self.new, self.scratch, self.show_scripts = old, new, scratch, scripts
        self.explained: set[str] = set(RECORDS)
        self.components: set[str] = set()  # canonical names whose licence/SBOM entries a change already explains
        self.tokens: list[str] = []  # words whose appearance in a script is explained by an environment change
        self.digests: dict[tuple[int, str], str] = {}
        self.templates = {Path(t.name).stem for t in resources.files("bundler.templates").iterdir()
                          if t.name.endswith(".j2")}  # the generated text files (README-INSTALL.txt, run.sh, …)
        self._changed: list[str] | None = None

    def changes(self) -> list[Change]:
        found: list[Change] = []
        for part in (self.bundle, self.ort, self.wheels, self.binaries, self.vc_runtime, self.gpu, self.models,
                     self.entry_point, self.environment, self.licences, self.sbom, self.scripts, self.files):
            found += part()
        if not found:
            found += self.records()
        return found

    def records(self) -> list[Change]:
        """The last resort: records that differ although no kind above found a change (e.g. another ort-bundler)."""
        changes = []
        for name in sorted(RECORDS & set(self._changed_members())):
            keys: list[str] = []
            if name == "bundle.json":
                keys = sorted(k for k in set(self.old.record) | set(self.new.record)
                              if self.old.record.get(k) != self.new.record.get(k))
            changes.append(Change(kind="record", change="changed", subject=name, old=None, new=keys or None,
                                  text=f"{name} changed" + (f" (recorded facts: {', '.join(keys)})" if keys else "")))
        return changes

    # -- what bundle.json records ----------------------------------------------------------------------------

    def bundle(self) -> list[Change]:
        changed = [key for key in BUNDLE_FIELDS if self.old.record.get(key) != self.new.record.get(key)]
        self.tokens += [str(b.record.get(key)) for key in changed for b in (self.old, self.new)]
        return [Change(kind="bundle", change="changed", subject=key, old=self.old.record.get(key),
                       new=self.new.record.get(key),
                       text=f"{key} {_shown(self.old.record.get(key))} -> {_shown(self.new.record.get(key))}")
                for key in changed]

    def ort(self) -> list[Change]:
        old, new = self.old.record.get("ort") or {}, self.new.record.get("ort") or {}
        changes = [Change(kind="ort", change="changed", subject=key, old=old.get(key), new=new.get(key),
                          text=f"ONNX Runtime {key} {_shown(old.get(key))} -> {_shown(new.get(key))}")
                   for key in ("version", "route") if old.get(key) != new.get(key)]
        if old.get("sha256") != new.get("sha256") and not changes and old and new:
            changes.append(self._ort_wheel(old, new))
        if old != new:
            self.tokens += [str(v) for v in (old.get("version"), new.get("version")) if v]
            self.components.add("onnxruntime")
            self.explained |= {f"payload/wheels/{w}" for w in (old.get("wheel"), new.get("wheel")) if w}
        return changes

    def _ort_wheel(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> Change:
        """The same ORT version by the same route in another wheel: another file (another platform or Python,
        named both ways), or the same file name with other bytes (rebuilt from another source)."""
        digests = f"sha256 {str(old.get('sha256'))[:12]}… -> {str(new.get('sha256'))[:12]}…"
        if old.get("wheel") == new.get("wheel"):
            return Change(kind="ort", change="rebuilt", subject="wheel", old=old.get("sha256"), new=new.get("sha256"),
                          text=f"the ORT wheel {new.get('wheel')} has other bytes ({digests})")
        platforms = [b.record.get("platform") for b in (self.old, self.new)]
        why = f" for {platforms[1]} instead of {platforms[0]}" if platforms[0] != platforms[1] else ""
        return Change(kind="ort", change="changed", subject="wheel", old=old.get("wheel"), new=new.get("wheel"),
                      text=f"the ORT wheel {old.get('wheel')} -> {new.get('wheel')}{why} ({digests})")

    def wheels(self) -> list[Change]:
        ort_wheels = {(self.old.record.get("ort") or {}).get("wheel"), (self.new.record.get("ort") or {}).get("wheel")}
        old, new = (_by_name(b.record.get("wheels") or [], skip=ort_wheels) for b in (self.old, self.new))
        changes = []
        for name in sorted(set(old) | set(new)):
            before, after = old.get(name), new.get(name)
            if before == after:
                continue
            changes.append(_wheel_change(name, before, after))
            self.components.add(name)
            self.explained |= {f"payload/wheels/{w['filename']}" for w in (before, after) if w}
        if changes or self.components:
            self.explained.add("payload/wheels/requirements.txt")
        return changes

    def vc_runtime(self) -> list[Change]:
        old, new = self.old.record.get("vc_runtime_min"), self.new.record.get("vc_runtime_min")
        if old == new:
            return []
        if old is None:  # a Linux bundle records none: it needs none
            text = f"the bundle now needs the Visual C++ runtime {new} or later"
        elif new is None:
            text = f"the bundle no longer needs a Visual C++ runtime (it needed {old} or later)"
        else:
            text = f"the minimum Visual C++ runtime {old} -> {new}"
        return [Change(kind="vc_runtime", change=_verb(old, new), subject="minimum", old=old, new=new, text=text)]

    def gpu(self) -> list[Change]:
        old, new = self.old.record.get("gpu") or {}, self.new.record.get("gpu") or {}
        changes = [Change(kind="gpu", change=_verb(old.get(key), new.get(key)), subject=key, old=old.get(key),
                          new=new.get(key), text=f"GPU {key}: {_short(old.get(key))} -> {_short(new.get(key))}")
                   for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]
        if changes:
            self.explained |= {n for n in self._changed_members() if n.startswith("payload/gpu/")}
        return changes

    def models(self) -> list[Change]:
        old, new = (_by_name(b.record.get("models") or []) for b in (self.old, self.new))
        changes = []
        for name in sorted(set(old) | set(new)):
            before, after = old.get(name), new.get(name)
            if before == after:
                continue
            self.components.add(name)
            self.explained |= {f"payload/{m['file']}" for m in (before, after) if m and m.get("file")}
            changes.append(_model_change(name, before, after))
        return changes

    def entry_point(self) -> list[Change]:
        old, new = (_launch(b) for b in (self.old, self.new))
        changes = []
        for key in ("module", "script", "program", "cache_dir"):
            if old.get(key) != new.get(key):
                changes.append(Change(kind="entry_point", change=_verb(old.get(key), new.get(key)), subject=key,
                                      old=old.get(key), new=new.get(key),
                                      text=f"launch {key}: {_short(old.get(key))} -> {_short(new.get(key))}"))
                self.tokens += [str(v.get("path") if isinstance(v, dict) else v) for v in (old.get(key), new.get(key))
                                if v]
        if any(c.subject in ("script", "program") for c in changes):
            self.explained |= {n for n in self._changed_members() if n.startswith("payload/app/")}
        if changes:
            self.explained.add(LAUNCH_CONFIG)  # the launcher's data holds the entry point and cache_dir
        return changes

    def environment(self) -> list[Change]:
        old, new = (_launch(b).get("env") or {} for b in (self.old, self.new))
        changes = []
        for name in sorted(set(old) | set(new)):
            if old.get(name) != new.get(name):
                verb = _verb(old.get(name), new.get(name))
                text = (f"{name}={new[name]}" if verb == "added" else f"{name} (was {old[name]})" if verb == "removed"
                        else f"{name}: {old[name]} -> {new[name]}")
                changes.append(Change(kind="environment", change=verb, subject=name, old=old.get(name),
                                      new=new.get(name), text=f"launch environment {verb}: {text}"))
                self.tokens.append(name)
        if changes:
            self.explained.add(LAUNCH_CONFIG)  # the launcher's data holds [launch] env
        return changes

    def licences(self) -> list[Change]:
        old, new = (_by_key(b.record.get("licenses") or [], "component") for b in (self.old, self.new))
        changes = []
        for name in sorted(set(old) | set(new)):
            explained = canonicalize_name(name) in {canonicalize_name(c) for c in self.components}
            if explained:
                self.explained |= {f for entry in (old.get(name), new.get(name)) if entry for f in entry.get("files", [])}
            elif old.get(name) != new.get(name):
                before, after = (_licence(e) for e in (old.get(name), new.get(name)))
                changes.append(Change(kind="licence", change=_verb(old.get(name), new.get(name)), subject=name,
                                      old=old.get(name), new=new.get(name),
                                      text=f"{name}: licence {before} -> {after}"))
                self.explained |= {f for e in (old.get(name), new.get(name)) if e for f in e.get("files", [])}
        return changes

    def sbom(self) -> list[Change]:
        old, new = (_sbom_components(b) for b in (self.old, self.new))
        known = {canonicalize_name(c) for c in self.components}
        return [Change(kind="sbom", change=_verb(old.get(ref), new.get(ref)), subject=ref, old=old.get(ref),
                       new=new.get(ref), text=f"SBOM component {ref}: {_short(old.get(ref))} -> {_short(new.get(ref))}")
                for ref in sorted(set(old) | set(new))
                if old.get(ref) != new.get(ref) and canonicalize_name(ref) not in known]

    # -- members -------------------------------------------------------------------------------------------

    def binaries(self) -> list[Change]:
        """DLLs and PYDs whose bytes changed: loose members, and inside wheels present in both bundles."""
        changes = []
        for name in self._changed_members():
            if name.endswith(BINARY_SUFFIXES) and name in self.old.infos and name in self.new.infos:
                changes.append(self._binary_change(name, self._extract(self.old, name), self._extract(self.new, name)))
                self.explained.add(name)
        for name in self._changed_members():
            if name.endswith(".whl") and name in self.old.infos and name in self.new.infos:
                changes += self._wheel_binaries(name)
        return changes

    def scripts(self) -> list[Change]:
        changes = []
        for name in self._changed_members():
            rendered = name.endswith(SCRIPT_SUFFIXES) or PurePosixPath(name).name in self.templates
            if not rendered or name in self.explained or name not in self.old.infos or name not in self.new.infos:
                continue
            before, after = (script_text(b.read(name)) for b in (self.old, self.new))
            self.explained.add(name)
            if before == after:
                continue  # only a signature block differs
            lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), f"old/{name}", f"new/{name}",
                                              lineterm=""))
            changed = [line[1:] for line in lines[2:] if line[:1] in "+-"]
            if self.tokens and all(any(token in line for token in self.tokens) for line in changed):
                continue  # rendered from a change reported above (an environment variable, the entry point)
            removed, added = (sum(1 for line in lines[2:] if line[:1] == mark) for mark in "-+")
            hint = "" if self.show_scripts else "; --scripts shows them"
            changes.append(Change(kind="script", change="changed", subject=name,
                                  text=f"{name} changed ({removed} line(s) removed, {added} added{hint})",
                                  detail="\n".join(lines) if self.show_scripts else None))
        return changes

    def files(self) -> list[Change]:
        changes = []
        for name in self._changed_members():
            if name in self.explained or is_signature(name):
                continue
            verb = "added" if name not in self.old.infos else "removed" if name not in self.new.infos else "changed"
            changes.append(Change(kind="file", change=verb, subject=name, text=f"{name} {verb}"))
        return changes

    def _changed_members(self) -> list[str]:
        if self._changed is None:
            names = set(self.old.infos) | set(self.new.infos)
            self._changed = sorted(n for n in names
                                   if not is_signature(n) and self._digest(self.old, n) != self._digest(self.new, n))
        return self._changed

    def _digest(self, bundle: BundleZip, name: str) -> str | None:
        """The member's own hash, not SHA256SUMS's claim: an edited member is a change even if the sums were not."""
        if name not in bundle.infos:
            return None
        key = (id(bundle), name)
        if key not in self.digests:
            self.digests[key] = bundle.sha256(name)
        return self.digests[key]

    def _extract(self, bundle: BundleZip, name: str) -> Path:
        target = self.scratch / ("old" if bundle is self.old else "new") / PurePosixPath(name).name
        target.parent.mkdir(parents=True, exist_ok=True)
        with bundle.open(name) as source, target.open("wb") as dest:
            while chunk := source.read(1 << 20):
                dest.write(chunk)
        return target

    def _wheel_binaries(self, wheel: str) -> list[Change]:
        old_path, new_path = self._extract(self.old, wheel), self._extract(self.new, wheel)
        with zipfile.ZipFile(old_path) as old, zipfile.ZipFile(new_path) as new:
            old_infos, new_infos = ({i.filename: i for i in z.infolist() if i.filename.endswith(BINARY_SUFFIXES)}
                                    for z in (old, new))
            changes = []
            for inner in sorted(set(old_infos) & set(new_infos)):
                a, b = old_infos[inner], new_infos[inner]
                if (a.CRC, a.file_size) == (b.CRC, b.file_size):
                    continue
                paths = []
                for side, archive in (("old", old), ("new", new)):
                    target = self.scratch / side / "inner" / PurePosixPath(inner).name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(archive.read(inner))
                    paths.append(target)
                changes.append(self._binary_change(f"{wheel}!{inner}", paths[0], paths[1]))
        for path in (old_path, new_path):
            path.unlink()
        return changes

    def _binary_change(self, name: str, old: Path, new: Path) -> Change:
        facts = [_pe_facts(path) for path in (old, new)]
        text = f"{name}: bytes changed"
        if facts[0] or facts[1]:
            text += f"; FileVersion {_shown(facts[0].get('file_version'))} -> {_shown(facts[1].get('file_version'))}, " \
                    f"linker {_shown(facts[0].get('linker'))} -> {_shown(facts[1].get('linker'))}"
        return Change(kind="binary", change="changed", subject=name, old=facts[0] or None, new=facts[1] or None,
                      text=text)


def _pe_facts(path: Path) -> dict[str, str | None]:
    if not is_pe(path):
        return {}
    info = inspect_pe(path)
    return {"file_version": info.file_version, "linker": ".".join(map(str, info.linker_version))}


def _wheel_change(name: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> Change:
    if before is None or after is None:
        verb, entry = ("added", after) if before is None else ("removed", before)
        assert entry is not None
        return Change(kind="wheel", change=verb, subject=name, old=before and before["version"],
                      new=after and after["version"], text=f"{verb} {name} {entry['version']}")
    try:
        newer = Version(after["version"]) > Version(before["version"])
        older = Version(after["version"]) < Version(before["version"])
    except InvalidVersion:
        newer = older = False
    verb = "upgraded" if newer else "downgraded" if older else "changed"
    text = (f"{verb} {name} {before['version']} -> {after['version']}" if verb != "changed"
            else f"{name} {after['version']}: another file ({before['filename']} -> {after['filename']})")
    return Change(kind="wheel", change=verb, subject=name, old=before["version"], new=after["version"], text=text)


def _model_change(name: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> Change:
    if before is None or after is None:
        verb = "added" if before is None else "removed"
        entry = after or before
        assert entry is not None
        return Change(kind="model", change=verb, subject=name, old=before and before["sha256"],
                      new=after and after["sha256"], text=f"{verb} {name} (sha256 {entry['sha256'][:12]}…)")
    parts = record_changes(before, after)
    moves = reference_moves(before.get("reference"), after.get("reference"))
    return Change(kind="model", change="changed", subject=name, old=before["sha256"], new=after["sha256"],
                  text=f"{name}: " + "; ".join(parts or ["its reference changed"]),
                  detail="\n".join(moves) if moves else None)


def _launch(bundle: BundleZip) -> dict[str, Any]:
    manifest = bundle.record.get("manifest") or {}
    launch = manifest.get("launch") if isinstance(manifest, dict) else None
    return launch if isinstance(launch, dict) else {}


def _by_name(entries: Iterable[Mapping[str, Any]], *, skip: Iterable[str | None] = ()) -> dict[str, Mapping[str, Any]]:
    skipped = set(skip)
    return {str(e["name"]): e for e in entries if isinstance(e, dict) and "name" in e
            and e.get("filename") not in skipped}


def _by_key(entries: Iterable[Mapping[str, Any]], key: str) -> dict[str, Mapping[str, Any]]:
    return {str(e[key]): e for e in entries if isinstance(e, dict) and key in e}


def _sbom_components(bundle: BundleZip) -> dict[str, dict[str, Any]]:
    """Top-level SBOM components (libraries, models) by name: version and purl; file groups are members."""
    if "sbom.cdx.json" not in bundle.infos:
        return {}
    try:
        components = json.loads(bundle.read("sbom.cdx.json")).get("components", [])
    except (ValueError, AttributeError, RecursionError):
        return {}
    return {str(c.get("name")): {"version": c.get("version"), "purl": c.get("purl")}
            for c in components if isinstance(c, dict) and "components" not in c}


def _licence(entry: Mapping[str, Any] | None) -> str:
    if entry is None:
        return "none (not in the bundle)"
    return str(entry.get("license") or f"unknown ({entry.get('declared') or 'nothing'} declared)")


def _shown(value: Any) -> str:
    """A recorded value as a reader says it: a value a bundle does not record is "none", never Python's None."""
    return "none" if value is None else str(value)


def _verb(old: Any, new: Any) -> str:
    return "added" if old is None else "removed" if new is None else "changed"


def _short(value: Any) -> str:
    if value is None:
        return "none"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."
