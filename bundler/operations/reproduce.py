"""`ort-bundler reproduce`: rebuild a bundle from the manifest and lock it records, and compare the bytes.

The rebuilder holds only the bundle. It records its manifest in `bundle.json` and its lock as `lock.toml`;
every input the bundle ships unchanged (wheels, models, the entry point, VC_redist: a member whose sha256
is an input's pinned hash) is taken from the bundle itself; the rest (the ORT archive or capi source, GPU archives) is
found as `fetch` finds it: the cache, then `--mirror DIR`, then its source (pip for requirements), never
the network with `--offline`. The rebuild runs in a scratch folder; each member that differs is named
with the reason when it can be told.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

import tomli_w

from bundler import __version__
from bundler.assembly.provenance import PROVENANCE_MEMBER, provenance_difference
from bundler.assembly.records import LOCK_FILE
from bundler.assembly.render import LAUNCH_CONFIG
from bundler.errors import (
    BundleError,
    InputUnavailableError,
    ManifestError,
    UnsupportedError,
    VerificationError,
)
from bundler.hashing import CHUNK, file_sha256
from bundler.manifest import Input, Manifest, load
from bundler.manifest.records import NAME_RE
from bundler.names import file_name_problem
from bundler.operations.build import build
from bundler.readers.bundlezip import SIGNATURE_BLOCK, BundleZip, is_signature, open_bundle, script_text
from bundler.sources.cache import Cache
from bundler.sources.fetch import FetchOptions, fetch_inputs
from bundler.sources.gate import gate_inputs, pip_targets
from bundler.sources.inputs import local_source, lock_inputs, require_local_pins, target_of
from bundler.sources.lock import Lock, lock_text, read_lock

# What Authenticode signs among the generated scripts.
SIGNED_SCRIPTS = (".ps1", ".psm1", ".psd1")
# Members that describe the others: they differ whenever another member does.
RECORDS = ("SHA256SUMS", "bundle.json", "install-plan.json", "sbom.cdx.json", LOCK_FILE)


@dataclass(frozen=True, kw_only=True)
class Difference:
    """One member that the rebuild does not reproduce, and why, as far as it can be told."""

    member: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"member": self.member, "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class ReproduceReport:
    bundle: str
    sha256: str
    rebuilt_sha256: str
    built_with: str
    taken_from_bundle: dict[str, str]  # input key -> the member it was taken from
    looked_up: tuple[str, ...]  # input keys found in the cache, the mirror or through their source
    differences: tuple[Difference, ...] = field(default=())
    kept: str | None = None

    @property
    def identical(self) -> bool:
        return self.sha256 == self.rebuilt_sha256

    def to_json(self) -> dict[str, Any]:
        return {"bundle": self.bundle, "identical": self.identical, "sha256": self.sha256,
                "rebuilt_sha256": self.rebuilt_sha256, "built_with": self.built_with, "rebuilt_with": __version__,
                "taken_from_bundle": dict(sorted(self.taken_from_bundle.items())), "looked_up": list(self.looked_up),
                "differences": [d.to_json() for d in self.differences], "kept": self.kept}

    def summary(self) -> str:
        lines = []
        if self.built_with != __version__:
            lines.append(f"note: built by ort-bundler {self.built_with}, rebuilt by ort-bundler {__version__}; "
                         "compared anyway")
        if self.identical:
            lines.append(f"{self.bundle}: reproduced byte for byte (sha256 {self.sha256})")
        else:
            lines.append(f"{self.bundle}: NOT reproduced: the rebuild's sha256 is {self.rebuilt_sha256}, the bundle's "
                         f"{self.sha256}; {len(self.differences)} difference(s):")
            lines += [f"  {d.member}: {d.reason}" for d in self.differences]
        lines.append(f"  inputs taken from the bundle: {len(self.taken_from_bundle)}; looked up (cache, mirror or "
                     f"source): {', '.join(self.looked_up) or 'none'}")
        if self.kept:
            lines.append(f"  the rebuilt zip is kept at {self.kept}")
        return "\n".join(lines)


def reproduce(path: Path, *, cache: Cache, options: FetchOptions, keep: Path | None = None,
              jobs: int | None = None) -> ReproduceReport:
    """Rebuild the bundle at `path` in a scratch folder and compare the two zips member by member."""
    original = open_bundle(path)
    with cache.scratch(prefix="reproduce-") as tmp:  # removed by the next run if this one is killed
        manifest, lock = write_sources(original, Path(tmp) / "src")
        inputs = manifest.inputs() + lock_inputs(lock) + gate_inputs(lock)  # the gate's: of this machine
        require_local_pins(manifest.inputs(), manifest.path.parent)  # an allowed absolute path that is here
        taken, altered = seed_cache(original, inputs, cache)
        if not altered:
            require_sources(original, [i for i in inputs if i.key not in taken], cache=cache, options=options)
        try:
            fetch_inputs(inputs, cache=cache, target=target_of(manifest), options=options, targets=pip_targets(lock))
        except BundleError as exc:
            if altered:
                lines = [*altered, f"and the input could not be found elsewhere: {exc}"]
                raise VerificationError("\n".join(lines)) from None
            raise
        result = build(manifest, cache=cache, out_dir=Path(tmp) / "out", jobs=jobs, reuse=False)
        rebuilt = open_bundle(result.zip_path)
        differences = compare_bundles(original, rebuilt, pinned=pinned_hashes(inputs))
        kept = _keep(result.zip_path, keep) if keep else None
    return ReproduceReport(bundle=path.name, sha256=file_sha256(path), rebuilt_sha256=result.sha256,
                           built_with=original.built_with, taken_from_bundle=taken,
                           looked_up=tuple(sorted(i.key for i in inputs if i.key not in taken)),
                           differences=tuple(differences), kept=str(kept) if kept else None)


def require_sources(bundle: BundleZip, inputs: Sequence[Input], *, cache: Cache, options: FetchOptions) -> None:
    """Name every input the rebuild lacks and where it can come from, before anything is fetched.

    The rebuilder's real case is an empty cache: an input the bundle does not ship unchanged (an ORT archive,
    a capi wheel that was rebuilt, GPU archives) that the recorded manifest names as a local file was on the
    builder's machine only, and fetch's own message named the scratch folder reproduce writes the manifest
    to (issue 38, item 4). `--mirror DIR` is where such an input comes from; with `--offline`, every input
    that is not in the cache."""
    if options.mirror is not None:
        return  # the mirror is searched by name and sha256, and names what it lacks itself
    problems = []
    for item in inputs:
        if cache.find_any(item.sha256, item.filename) is not None:
            continue
        local = local_source(item) is not None
        if not local and not options.offline:
            continue  # downloaded (or fetched by pip) from the source the recorded manifest names
        why = ("names it as a file on the machine that built it" if local
               else f"names it as {item.kind} {item.as_written!r}, and --offline forbids the network")
        problems.append(f"{bundle.path.name}: input {item.key} ({item.filename or item.as_written}, sha256 "
                        f"{item.sha256[0]}) is neither in the bundle nor in the cache ({cache.root}); the recorded "
                        f"manifest {why}: give it with `--mirror DIR`, a folder holding that file (found by its name "
                        "or its sha256)")
    if problems:
        raise InputUnavailableError("\n".join(problems))


def write_sources(bundle: BundleZip, folder: Path) -> tuple[Manifest, Lock | None]:
    """The manifest and lock the bundle records, written back as files the build reads."""
    raw = bundle.record.get("manifest")
    if not isinstance(raw, dict):
        msg = f"{bundle.path.name}: bundle.json records no manifest; expected a bundle made by `ort-bundler build`"
        raise VerificationError(msg)
    folder.mkdir(parents=True)
    manifest_path = folder / f"{_bundle_name(bundle)}.toml"
    manifest_path.write_text(tomli_w.dumps(raw), encoding="utf-8")
    lock_name = raw.get("python", {}).get("lock") if isinstance(raw.get("python"), dict) else None
    lock = None
    if lock_name is not None:
        lock = _write_lock(bundle, folder, str(lock_name))
    try:
        manifest = load(manifest_path)
    except ManifestError as exc:
        msg = f"{bundle.path.name}: the manifest recorded in bundle.json is not valid: {exc}"
        raise VerificationError(msg) from None
    return manifest, lock


def _bundle_name(bundle: BundleZip) -> str:
    """bundle.json's `name`, checked as the manifest parser checks `[bundle] name` before it names a file:
    a hostile bundle's name (`/home/u/.cargo/config`, `../../x`) must not choose where reproduce writes."""
    name = bundle.record.get("name")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        msg = (f"{bundle.path.name}: bundle.json's name is {str(name)[:80]!r}, expected letters, digits, '.', '_' "
               "or '-' as `ort-bundler build` writes it (the bundle was altered)")
        raise VerificationError(msg)
    return name


def _write_lock(bundle: BundleZip, folder: Path, lock_name: str) -> Lock:
    relative = PurePosixPath(lock_name)
    if relative.is_absolute() or ".." in relative.parts or "\\" in lock_name:
        msg = (f"{bundle.path.name}: the recorded manifest's python.lock is {lock_name[:80]!r}, outside the manifest's "
               "folder; reproduce can only write a lock beside the manifest")
        raise UnsupportedError(msg)
    if problem := next((file_name_problem(part) for part in relative.parts if file_name_problem(part)), None):
        msg = (f"{bundle.path.name}: the recorded manifest's python.lock is {lock_name[:80]!r}, which has {problem}; "
               "expected the file name `ort-bundler lock` writes (the bundle was altered)")
        raise VerificationError(msg)
    if LOCK_FILE not in bundle.infos:
        msg = (f"{bundle.path.name}: the bundle carries no {LOCK_FILE} (built by ort-bundler {bundle.built_with}, "
               "which did not record its lock); reproduce needs the lock the bundle was built from")
        raise UnsupportedError(msg)
    target = folder / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(bundle.read(LOCK_FILE))
    lock = read_lock(target)
    if lock_text(lock).encode("utf-8") != target.read_bytes():
        msg = (f"{bundle.path.name}: {LOCK_FILE} is not the lock file `ort-bundler lock` writes (it was edited); "
               "expected the build's copy")
        raise VerificationError(msg)
    return lock


def seed_cache(bundle: BundleZip, inputs: Sequence[Input], cache: Cache) -> tuple[dict[str, str], list[str]]:
    """Put every input the bundle ships unchanged into the cache; what was taken, and what no longer matches.

    A member is an input when SHA256SUMS lists it under one of the input's pinned hashes; its bytes are
    hashed again on the way into the cache, so an altered member is never used.
    """
    by_hash: dict[str, str] = {}
    for name, digest in sorted(bundle.sums.items()):
        if name in bundle.infos:
            by_hash.setdefault(digest, name)
    taken: dict[str, str] = {}
    altered: list[str] = []
    for item in inputs:
        for digest in item.sha256:
            member = by_hash.get(digest)
            if member is None:
                continue
            if cache.find(digest, item.filename) is None:
                actual = _adopt_member(bundle, member, cache, digest=digest,
                                       filename=item.filename or PurePosixPath(member).name)
                if actual != digest:
                    altered.append(f"{member}: its bytes hash to {actual}, but the recorded manifest pins {digest} "
                                   f"for {item.key}: the member was altered after the build")
                    continue
            taken[item.key] = member
            break
    return taken, altered


def _adopt_member(bundle: BundleZip, member: str, cache: Cache, *, digest: str, filename: str) -> str:
    actual = hashlib.sha256()
    with cache.temporary() as tmp:
        with bundle.open(member) as source, tmp.open("wb") as dest:
            while chunk := source.read(CHUNK):
                actual.update(chunk)
                dest.write(chunk)
        if actual.hexdigest() == digest:
            cache.adopt(tmp, sha256=digest, filename=filename)
    return actual.hexdigest()


def pinned_hashes(inputs: Sequence[Input]) -> Mapping[str, str]:
    """sha256 -> input key, for every hash the recorded manifest and lock pin."""
    return {digest: item.key for item in inputs for digest in item.sha256}


def _keep(zip_path: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / zip_path.name
    partial = folder / f".{zip_path.name}.partial"
    shutil.copyfile(zip_path, partial)
    partial.replace(final)
    return final


# -- comparing the two zips ---------------------------------------------------------------------------------


def compare_bundles(original: BundleZip, rebuilt: BundleZip, *, pinned: Mapping[str, str]) -> list[Difference]:
    """Every member that differs, with its reason; the zip's own structure last, when only it differs."""
    explain = _Explainer(original, rebuilt, pinned)
    differences = []
    for name in sorted(set(original.infos) | set(rebuilt.infos)):
        reason = explain.member(name)
        if reason:
            differences.append(Difference(member=name, reason=reason))
    if explain.unequal and not differences:
        differences.append(Difference(member="(the zip itself)", reason="every member is identical, but the zip's "
                                      "structure (entry order, directory entries or the central directory) differs"))
    return differences


class _Explainer:
    """Reasons, from the most specific: altered after the build, a different input, another ort-bundler,
    a different zlib, a template, zip entry metadata."""

    def __init__(self, original: BundleZip, rebuilt: BundleZip, pinned: Mapping[str, str]) -> None:
        self.original, self.rebuilt, self.pinned = original, rebuilt, pinned
        self.unequal = file_sha256(original.path) != file_sha256(rebuilt.path)
        self.other_version = original.built_with != __version__
        self.templates = {Path(t.name).stem for t in resources.files("bundler.templates").iterdir()
                          if t.name.endswith(".j2")}

    def member(self, name: str) -> str | None:
        if name not in self.rebuilt.infos:
            if is_signature(name):
                return "a signature added after the build (`ort-bundler sign`); a rebuild is unsigned"
            return "the bundle has it, the rebuild does not" + self._version_note()
        if name not in self.original.infos:
            return "the rebuild has it, the bundle does not" + self._version_note()
        ours, theirs = self.original.sha256(name), self.rebuilt.sha256(name)
        if ours != theirs and self._signed_only(name):
            return "signed after the build: equal to the rebuild once its signature block is removed"
        if name in self.original.sums and self.original.sums[name] != ours:
            hint = ("; the manifest and lock it records, which reproduce rebuilds from, were edited"
                    if name == "bundle.json" else "")
            follows = "; the rebuild, made from what it records, has the same bytes" if ours == theirs else ""
            return f"altered after the build: its bytes no longer match the bundle's SHA256SUMS{hint}{follows}"
        if ours == theirs:
            return self._same_content(name)
        for digest in (ours, theirs):
            if digest in self.pinned:
                return (f"a different input: the bundle has sha256 {ours}, the rebuild {theirs}; the recorded "
                        f"manifest or lock pins {digest} for {self.pinned[digest]}")
        return self._generated(name)

    def _signed_only(self, name: str) -> bool:
        """A script that differs only by the Authenticode block `ort-bundler sign` appends."""
        if not name.endswith(SIGNED_SCRIPTS):
            return False
        signed, rebuilt = self.original.read(name), self.rebuilt.read(name)
        text = signed.decode("utf-8", "replace").replace("\r\n", "\n")
        return bool(SIGNATURE_BLOCK.search(text)) and script_text(signed) == script_text(rebuilt)

    def _same_content(self, name: str) -> str | None:
        ours, theirs = self.original.infos[name], self.rebuilt.infos[name]
        if self.original.raw_sha256(name) != self.rebuilt.raw_sha256(name) or ours.compress_type != theirs.compress_type:
            return (f"the same content, compressed differently (method {ours.compress_type}, {ours.compress_size} "
                    f"bytes; rebuilt {theirs.compress_type}, {theirs.compress_size} bytes): a different zlib "
                    f"(this machine has zlib {zlib.ZLIB_RUNTIME_VERSION}; the bundle does not record its own)"
                    + self._version_note())
        fields = ("date_time", "external_attr", "create_system", "flag_bits", "extra", "comment")
        changed = [f for f in fields if getattr(ours, f) != getattr(theirs, f)]
        if changed:
            return f"the same bytes, different zip entry metadata: {', '.join(changed)}" + self._version_note()
        return None

    def _generated(self, name: str) -> str:
        if name == "SHA256SUMS":
            return "lists the hashes of the members that differ"
        if name == "bundle.json":
            return self._bundle_json()
        if name == PROVENANCE_MEMBER:
            return provenance_difference(self.original.read(name), self.rebuilt.read(name)) + self._version_note()
        if name in RECORDS:
            return "describes the members that differ" + self._version_note()
        if self.other_version:
            return f"generated by ort-bundler {self.original.built_with}, rebuilt by {__version__}: its output changed"
        if name == LAUNCH_CONFIG:
            return ("the launcher's data, written from the recorded manifest's [launch] table: its values differ from "
                    "those the bundle was built with")
        if PurePosixPath(name).name in self.templates:
            return (f"rendered from the template {PurePosixPath(name).name}.j2: the template changed since the bundle "
                    "was built, or the recorded manifest's values differ from those it was rendered with")
        return ("generated from the same inputs by the same ort-bundler version, yet different: a reproducibility bug "
                "(run with --verbose and report it)")

    def _bundle_json(self) -> str:
        try:
            ours, theirs = json.loads(self.original.read("bundle.json")), json.loads(self.rebuilt.read("bundle.json"))
        except ValueError:
            return "not valid JSON in one of the two bundles"
        keys = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
        return f"records different facts: {', '.join(keys) or 'the same facts, written differently'}" + self._version_note()

    def _version_note(self) -> str:
        return f" (built by ort-bundler {self.original.built_with}, rebuilt by {__version__})" if self.other_version else ""
