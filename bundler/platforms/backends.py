"""Platform backends: what each target does differently, one backend module per target behind one Protocol.

The identity of a target (`bundler.target_platform.TargetPlatform`) is data at the base, which every layer
reads; behaviour that differs lives here instead: the parts only one target has (Windows' app-local runtime,
DLL closure and VC++ runtime checks, VC_redist and the Windows Sandbox tool), and the package formats it can be
wrapped in (MSI, .intunewin). The backends sit above the assembly whose functions they hand out, and the
commands ask `backend_for(target)`; outside this package no code asks which platform it builds for
(tests/repo/test_architecture.py holds that). cibuildwheel's `platforms/__init__.py` `PlatformModule` is the model:
a new target is one new package here (`platforms/<target>/backend.py` and its own modules) plus its identity, not
edits to every module that branches.
"""

from __future__ import annotations

from typing import Protocol

from bundler.assembly.parts import Part
from bundler.platforms.linux import backend as linux
from bundler.platforms.windows import backend as windows
from bundler.target_platform import TargetPlatform


class PlatformBackend(Protocol):
    """A target's behaviour; each backend module (`windows/backend.py`, `linux/backend.py`) implements it with
    module attributes."""

    @property
    def identity(self) -> TargetPlatform:
        """The target this backend builds for."""

    @property
    def parts(self) -> tuple[Part, ...]:
        """Every part of a bundle for this target, in order (`bundler.assembly.parts.parts_for`)."""

    @property
    def package_formats(self) -> frozenset[str]:
        """The `ort-bundler package` formats a bundle for this target can be wrapped in."""


BACKENDS: dict[str, PlatformBackend] = {backend.identity.tag: backend for backend in (windows, linux)}


def backend_for(target: TargetPlatform) -> PlatformBackend:
    """The backend of a target (every `TargetPlatform` has one)."""
    return BACKENDS[target.tag]
