"""The `Assembly`: what the bundle will hold, keyed by bundle-relative path, and the facts its parts hand on."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundler.errors import BuildError
from bundler.writer.zipwriter import Member


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
