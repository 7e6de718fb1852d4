"""The `Assembly`: what the bundle will hold, keyed by bundle-relative path, and the facts its parts hand on.

Every part writes into an `Assembly` and reads what it needs from a `BuildInputs`; neither imports a
part, so the parts can be tested one at a time and the order lives in one place (`parts.parts_for`).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bundler.assembly.facts import Facts
from bundler.errors import BuildError
from bundler.manifest import Manifest
from bundler.readers.member_scan import ArchiveFile
from bundler.readers.pe_source import PeSource
from bundler.sources.cache import Cache
from bundler.sources.lock import Lock
from bundler.target_platform import TargetPlatform
from bundler.writer.members import Member, Prepared

if TYPE_CHECKING:
    from bundler.assembly.modelgate import ModelRecord


@dataclass(frozen=True, kw_only=True)
class Copy:
    """The installer copies `source` (bundle-relative) to `target` (install-relative)."""

    source: str
    target: str


@dataclass
class Assembly:
    """What the bundle will hold, keyed by bundle-relative path, plus the facts about it."""

    members: dict[str, Member] = field(default_factory=dict)
    facts: Facts = field(default_factory=Facts)
    copies: list[Copy] = field(default_factory=list)
    site_packages_files: list[Copy] = field(default_factory=list)
    binaries: dict[str, dict[str, PeSource]] = field(default_factory=dict)  # member → its PE files (payload_binaries)

    def add_file(self, path: str, source: Path, sha256: str, *, executable: bool = False) -> None:
        self._check_new(path)
        self.members[path] = Member(name=path, source=source, sha256=sha256, executable=executable)

    def add_archive_file(self, path: str, file: ArchiveFile) -> None:
        """A file of an input archive: a zip's member copied into the bundle as it is compressed there (with the
        file it was written to, if any, for the parts that read it), a tar's from where it was extracted."""
        packed = file.packed
        if packed is None:
            assert file.extracted is not None
            self.add_file(path, file.extracted, file.sha256)
            return
        self._check_new(path)
        self.members[path] = Member(name=path, sha256=file.sha256, source=file.extracted, packed=Prepared(
            method=packed.method, crc=packed.crc, usize=packed.usize, csize=packed.csize, path=packed.archive,
            offset=packed.offset, within=packed.name, packed_sha256=packed.packed_sha256))

    def add_bytes(self, path: str, data: bytes, *, executable: bool = False) -> None:
        self._check_new(path)
        self.members[path] = Member(name=path, data=data, executable=executable)

    def plan_copy(self, bundle_path: str, install_path: str) -> None:
        """Record that the installer copies `bundle_path` to `install_path` (install-plan.json)."""
        self.copies.append(Copy(source=bundle_path, target=install_path))

    def _check_new(self, path: str) -> None:
        if path in self.members:
            msg = f"two parts of the bundle both want to write {path}; expected unique paths"
            raise BuildError(msg)


@dataclass(frozen=True, kw_only=True)
class BuildInputs:
    """What every part may read: the manifest, its lock, the cached input files, a private work folder."""

    manifest: Manifest
    lock: Lock | None
    files: Mapping[str, Path]
    work: Path
    cache: Cache
    # The model gate's records, computed beside the parts that run before `add_models` (`parts.add_all`).
    model_gate: Future[list[ModelRecord]] | None = None

    @property
    def target(self) -> TargetPlatform:
        return self.manifest.bundle.target
