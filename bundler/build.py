"""`ort-bundler build`: from the manifest and the cache only, assemble the bundle and write the zip.

The data flows one way: manifest → cached inputs → inspected and derived parts (wheels, models, scripts)
→ an `Assembly` of zip members plus the records that become `bundle.json`, `install-plan.json` and
`SHA256SUMS` → the reproducible zip. Nothing here touches the network.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from . import __version__
from .atomic import write_atomic
from .cache import Cache
from .errors import BuildError, HashMismatchError, ManifestError
from .fetch import cached_inputs
from .hashing import file_sha256
from .lock import Lock, Target, read_lock
from .manifest import Input, Manifest
from .parts import add_all
from .zipwriter import Member, MemberCache, write_zip

FORMAT = 1


@dataclass
class Assembly:
    """What the bundle will hold, keyed by bundle-relative path, plus the records about it."""

    members: dict[str, Member] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)
    copies: list[dict[str, str]] = field(default_factory=list)
    site_packages_files: list[dict[str, str]] = field(default_factory=list)
    binaries: dict[str, dict[str, Path]] = field(default_factory=dict)  # member → its PE files (windows.payload_binaries)

    def add_file(self, path: str, source: Path, sha256: str, *, executable: bool = False) -> None:
        self._check_new(path)
        self.members[path] = Member(name=path, source=source, sha256=sha256, executable=executable)

    def add_bytes(self, path: str, data: bytes, *, executable: bool = False) -> None:
        self._check_new(path)
        self.members[path] = Member(name=path, data=data, executable=executable)

    def install(self, bundle_path: str, install_path: str) -> None:
        """Record that the installer copies `bundle_path` to `install_path` (install-plan.json)."""
        self.copies.append({"from": bundle_path, "to": install_path})

    def _check_new(self, path: str) -> None:
        if path in self.members:
            msg = f"two parts of the bundle both want to write {path}; expected unique paths"
            raise BuildError(msg)


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    zip_path: Path
    sha256: str
    size: int


def target_of(manifest: Manifest) -> Target:
    return Target(platform=manifest.bundle.platform, python=manifest.bundle.python)


def load_lock(manifest: Manifest) -> Lock | None:
    """The lock the manifest references, checked against the manifest's target."""
    path = manifest.python.lock
    if path is None:
        return None
    if not path.is_file():
        msg = f"{manifest.path.name}: python.lock: {path.name} does not exist; run `ort-bundler lock {manifest.path.name}`"
        raise ManifestError(msg)
    lock = read_lock(path)
    target = target_of(manifest)
    if lock.target != target:
        msg = (f"{path.name}: locked for {lock.target.platform} / Python {lock.target.python}, but the manifest targets "
               f"{target.platform} / Python {target.python}; run `ort-bundler lock {manifest.path.name}` again")
        raise ManifestError(msg)
    return lock


def lock_inputs(lock: Lock | None) -> list[Input]:
    if lock is None:
        return []
    return [Input(key=f"lock:{w.name}", kind="requirement", location=f"{w.name}=={w.version}",
                  sha256=(w.sha256,), filename=w.filename) for w in lock.wheels]


def all_inputs(manifest: Manifest) -> list[Input]:
    return manifest.inputs() + lock_inputs(load_lock(manifest))


def build(manifest: Manifest, *, cache: Cache, out_dir: Path, jobs: int | None = None, quiet: bool = True) -> BuildResult:
    lock = load_lock(manifest)
    files = cached_inputs(manifest.inputs() + lock_inputs(lock), cache)
    verify_transformed(manifest, files, jobs=jobs)
    stem = manifest.bundle.stem
    with tempfile.TemporaryDirectory(dir=cache.work_dir("tmp"), prefix="build-") as tmp:
        work = Path(tmp)
        assembly = Assembly()
        add_all(assembly, manifest=manifest, lock=lock, files=files, work=work, cache=cache)
        _add_records(assembly, manifest)
        members = [_rooted(stem, m) for m in assembly.members.values()]
        members.append(Member(name=f"{stem}/SHA256SUMS", data=sha256sums(assembly.members).encode("utf-8")))
        zip_path = out_dir / f"{stem}.zip"
        sidecar = out_dir / f"{stem}.zip.sha256"
        sidecar.unlink(missing_ok=True)  # never leave an old digest beside a new zip
        with tqdm(total=sum(m.size for m in members), desc="zip", unit="B", unit_scale=True, unit_divisor=1024,
                  disable=quiet, leave=False) as bar:
            write_zip(members, zip_path, epoch=manifest.bundle.source_date_epoch,
                      member_cache=MemberCache(cache.work_dir("members")), jobs=jobs, progress=bar.update)
    digest = file_sha256(zip_path)
    write_atomic(sidecar, f"{digest}  {zip_path.name}\n".encode("ascii"))
    return BuildResult(zip_path=zip_path, sha256=digest, size=zip_path.stat().st_size)


def verify_transformed(manifest: Manifest, files: Mapping[str, Path], *, jobs: int | None = None) -> None:
    """Hash again, from the cache, the inputs the build unpacks or rebuilds instead of copying.

    Inputs copied into the zip as they are (wheels, the entry point, VC_redist) are hashed in the pass that
    compresses them, and models by the model gate; archives (the ORT release archive, a capi source, GPU
    sources) are only ever extracted, so without this their bytes would never be checked at build time.
    """
    transformed = [i for i in (manifest.ort.archive, manifest.ort.capi) if i is not None]
    transformed += [s.source for s in manifest.gpu.sources] if manifest.gpu else []
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        actual = dict(zip([i.key for i in transformed], pool.map(file_sha256, [files[i.key] for i in transformed])))
    for item in transformed:
        if actual[item.key] not in item.sha256:
            msg = (f"{files[item.key]}: sha256 is {actual[item.key]}, expected {' or '.join(item.sha256)} (for "
                   f"{item.key}); the cache is corrupt: delete that file and run `ort-bundler fetch` again")
            raise HashMismatchError(msg)


def _add_records(assembly: Assembly, manifest: Manifest) -> None:
    """bundle.json and install-plan.json, written last because they describe everything else."""
    bundle = manifest.bundle
    record = {
        "format": FORMAT,
        "name": bundle.name,
        "version": bundle.version,
        "platform": bundle.platform,
        "python": bundle.python,
        "python_tag": bundle.python_tag,
        "built_with": {"ort-bundler": __version__},
        **assembly.record,
        "manifest": manifest.raw,
    }
    assembly.add_bytes("bundle.json", to_json(record))
    assembly.install("bundle.json", "bundle.json")
    plan = {
        "format": FORMAT,
        "install_id": f"{bundle.name}-{bundle.version}",
        "venv": {"dir": "venv", "wheels": "payload/wheels", "requirements": "payload/wheels/requirements.txt",
                 "site_packages_files": assembly.site_packages_files},
        "copy": sorted(assembly.copies, key=lambda c: c["to"]),
        "dll_dirs": assembly.record.get("dll_dirs", []),
    }
    assembly.add_bytes("install-plan.json", to_json(plan))
    assembly.install("install-plan.json", "install-plan.json")


def to_json(data: Mapping[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def sha256sums(members: Mapping[str, Member]) -> str:
    """`sha256sum -c` format, sorted by path, covering every member."""
    return "".join(f"{members[name].digest}  {name}\n" for name in sorted(members))


def _rooted(stem: str, member: Member) -> Member:
    return Member(name=f"{stem}/{member.name}", source=member.source, data=member.data, sha256=member.sha256,
                  executable=member.executable)

