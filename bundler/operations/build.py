"""`ort-bundler build`: from the manifest and the cache only, assemble the bundle and write the zip.

The data flows one way: manifest → cached inputs → inspected and derived parts (wheels, models, scripts)
→ an `Assembly` of zip members plus the records that become `bundle.json`, `install-plan.json` and
`SHA256SUMS` → the reproducible zip. Nothing here touches the network.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bundler.errors import BuildError, HashMismatchError
from bundler.hashing import file_sha256
from bundler.manifest import Manifest
from bundler.shipped.ort_bundle.synth import SYNTH_VERSION
from bundler.sources.cache import Cache, disk_errors
from bundler.sources.fetch import cached_inputs
from bundler.sources.gate import gate_inputs
from bundler.sources.inputs import load_lock, lock_inputs, require_local_pins
from bundler.sources.lock import Lock
from bundler.writer.members import Member, MemberCache
from bundler.writer.reuse import bundle_key
from bundler.writer.reuse import keep as keep_bundle
from bundler.writer.reuse import reuse as reuse_bundle
from bundler.writer.zipwriter import prepare_destination, write_zip

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    zip_path: Path
    sha256: str
    size: int
    reused: bool = False  # the zip a build from the same inputs made before (`writer/reuse.py`)


def build(manifest: Manifest, *, cache: Cache, out_dir: Path, jobs: int | None = None, quiet: bool = True,
          reuse: bool = True) -> BuildResult:
    """Assemble the bundle, or, with `reuse`, publish the one assembled before from exactly the same inputs;
    then the builder's provenance statement beside the zip (`bundler.assembly.provenance`).

    A local file the manifest pins that is there with other bytes stops the build (exit 5): the cache would
    otherwise ship the pinned bytes under a manifest whose file says otherwise."""
    from bundler.assembly.provenance import write_beside

    require_local_pins(manifest.inputs(), manifest.path.parent)
    started = dt.datetime.now(dt.UTC)
    result = _build(manifest, cache=cache, out_dir=out_dir, jobs=jobs, quiet=quiet, reuse=reuse)
    write_beside(result.zip_path, result.sha256, top=manifest.bundle.stem, started=started)
    return result


def _build(manifest: Manifest, *, cache: Cache, out_dir: Path, jobs: int | None, quiet: bool,
           reuse: bool) -> BuildResult:
    lock = load_lock(manifest)
    warn_old_references(lock)
    files = cached_inputs(manifest.inputs() + lock_inputs(lock) + gate_inputs(lock), cache)
    verify_transformed(manifest, files, jobs=jobs)
    stem = manifest.bundle.stem
    zip_path, sidecar = out_dir / f"{stem}.zip", out_dir / f"{stem}.zip.sha256"
    prepare_destination(zip_path)  # fail fast on a bad -o; clear what killed builds left there
    key = bundle_key(manifest, lock, files)
    if reuse and (sha256 := reuse_bundle(cache, key, zip_path, sidecar)) is not None:
        with zipfile.ZipFile(zip_path) as archive:
            record = json.loads(archive.read(f"{stem}/bundle.json"))
        say_licence_notes(record["licenses"])
        warn_vc_runtime(manifest, record)
        return BuildResult(zip_path=zip_path, sha256=sha256, size=zip_path.stat().st_size, reused=True)
    result = _assemble(manifest, lock=lock, files=files, cache=cache, zip_path=zip_path, sidecar=sidecar, jobs=jobs,
                       quiet=quiet)
    keep_bundle(cache, key, result.zip_path, result.sha256)
    with zipfile.ZipFile(result.zip_path) as archive:
        warn_vc_runtime(manifest, json.loads(archive.read(f"{stem}/bundle.json")))
    return result


def warn_vc_runtime(manifest: Manifest, record: Mapping[str, Any]) -> None:
    """A Windows bundle whose binaries need the VC++ runtime but that ships no [vc_redist] installs only where the
    runtime already is; elsewhere the install stops at its prerequisite check (the MSI at a launch condition).
    Said at build time, with the minimum the build found, so it is a decision, not a surprise (issue 38, 8h)."""
    minimum = record.get("vc_runtime_min")
    if manifest.vc_redist is not None or not minimum:
        return
    log.warning("warning: %s needs the Visual C++ 2015-2022 runtime (x64) %s or later on the target, and the manifest "
                "has no [vc_redist]: the install fails on a machine without it; add [vc_redist] (`ort-bundler init "
                "--from VC_redist.x64.exe` pins it) or make sure every target has that runtime",
                manifest.bundle.stem, minimum)


def warn_environment_epoch(manifest: Manifest, environ: Mapping[str, str]) -> None:
    """SOURCE_DATE_EPOCH in the environment is not used: the zip's timestamps come from the manifest's
    `source_date_epoch`, which bundle.json records, so `reproduce` (and anyone rebuilding from the manifest)
    gets the same bytes whatever their environment holds. A build that would have differed says so, and how
    to make the value count (issue 38, 8g)."""
    value = environ.get("SOURCE_DATE_EPOCH")
    if value is None or value.strip() == str(manifest.bundle.source_date_epoch):
        return
    log.warning("warning: SOURCE_DATE_EPOCH=%s in the environment is ignored: the bundle's timestamps come from "
                "[bundle] source_date_epoch (%s in %s), so every rebuild of the manifest gives the same bytes; write "
                "source_date_epoch = %s there to use it", value.strip()[:40], manifest.bundle.source_date_epoch,
                manifest.path.name, value.strip()[:40])


def warn_old_references(lock: Lock | None) -> None:
    """A lock pinned before synth 2 still builds (its references are checked on the inputs they were computed
    on), but those inputs were all negative for a model's first 125 values: a small ReLU model's reference may
    prove nothing. Say so, and how to get a reference that does (issue 38, item 9)."""
    for model in lock.models if lock else ():
        reference = json.loads(model.record).get("reference", {})
        if reference.get("synth", 1) != SYNTH_VERSION:
            log.warning("warning: the lock pins the reference of model '%s' on the old synthesised inputs (negative "
                        "for the first 125 values, which can hide a model change); run `ort-bundler lock` again to "
                        "pin one on inputs of both signs", model.name)


def _assemble(manifest: Manifest, *, lock: Lock | None, files: Mapping[str, Path], cache: Cache, zip_path: Path,
              sidecar: Path, jobs: int | None, quiet: bool) -> BuildResult:
    from bundler.assembly.assembly import Assembly, BuildInputs
    from bundler.assembly.parts import add_all
    from bundler.assembly.provenance import add_provenance
    from bundler.assembly.records import add_records, sha256sums
    from bundler.assembly.sbom import add_sbom, install_sbom
    from bundler.platforms.backends import backend_for

    stem = manifest.bundle.stem
    with cache.scratch(prefix="build-") as work, disk_errors(BuildError, "build"):
        assembly, inputs = Assembly(), BuildInputs(manifest=manifest, lock=lock, files=files, work=work, cache=cache)
        add_all(assembly, inputs, parts=backend_for(inputs.target).parts)
        say_licence_notes(assembly.facts.licenses)
        install_sbom(assembly)  # planned before install-plan.json is written; the SBOM itself comes after it
        add_records(assembly, inputs)
        add_sbom(assembly, manifest=manifest, pins=lock.licenses if lock else ())  # after the records: it describes every member but itself
        add_provenance(assembly, inputs)  # after the SBOM, before SHA256SUMS: it names every member but those two
        members = [_rooted(stem, m) for m in assembly.members.values()]
        members.append(Member(name=f"{stem}/SHA256SUMS", data=sha256sums(assembly.members).encode("utf-8")))
        with _zip_progress(sum(m.size for m in members), quiet=quiet) as progress:
            digest = write_zip(members, zip_path, epoch=manifest.bundle.source_date_epoch,
                               member_cache=MemberCache(cache.work_dir("members")), jobs=jobs, progress=progress,
                               sidecar=sidecar)  # the old sidecar is replaced after the zip, never removed first
    return BuildResult(zip_path=zip_path, sha256=digest, size=zip_path.stat().st_size)


@contextlib.contextmanager
def _zip_progress(total: int, *, quiet: bool) -> Iterator[Callable[[int], object] | None]:
    """The zip's progress on stderr (bundler/sources/progress.py: a bar on a terminal, `zip: N MiB of M MiB`
    lines in a log); a quiet build has none and never imports tqdm (30 ms)."""
    if quiet:
        yield None
        return
    from bundler.sources.progress import ByteProgress

    with ByteProgress("zip", total=total) as progress:
        yield progress.add


def verify_transformed(manifest: Manifest, files: Mapping[str, Path], *, jobs: int | None = None) -> None:
    """Hash again, from the cache, the inputs the build unpacks or rebuilds instead of copying.

    Inputs copied into the zip as they are (wheels, the entry point, VC_redist) are hashed in the pass that
    compresses them (a later build takes their deflated bytes from the member cache, which trusts the
    content-addressed cache), models by the model gate when it runs; archives (the ORT release archive, a
    capi source, GPU sources) are only ever extracted, so without this their bytes would never be checked.
    """
    transformed = [i for i in (manifest.ort.archive, manifest.ort.capi, manifest.python.runtime) if i is not None]
    transformed += [s.source for s in manifest.gpu.sources] if manifest.gpu else []
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        actual = dict(zip([i.key for i in transformed], pool.map(file_sha256, [files[i.key] for i in transformed])))
    for item in transformed:
        if actual[item.key] not in item.sha256:
            msg = (f"{files[item.key]}: sha256 is {actual[item.key]}, expected {' or '.join(item.sha256)} (for "
                   f"{item.key}); the cache is corrupt: delete that file and run `ort-bundler fetch` again")
            raise HashMismatchError(msg)


def say_licence_notes(index: Sequence[Mapping[str, Any]]) -> None:
    """What the licence index (bundle.json "licenses") could not make certain, said by every build: also by
    one that reuses a kept zip, whose bundle.json holds the same index."""
    for entry in index:
        for note in entry["notes"]:
            log.warning("licences: %s: %s", entry["component"], note)


def _rooted(stem: str, member: Member) -> Member:
    return replace(member, name=f"{stem}/{member.name}")

