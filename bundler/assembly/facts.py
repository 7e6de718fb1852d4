"""What one part of the assembly computes and a later part, or the records, need.

Each fact is a typed slot that exactly one part sets, once. Reading a fact before its part has run is a
bug in the order of `bundler.assembly.parts.parts_for`, and it fails loudly, naming that part, instead of
handing the reader a silent `None` (which once let the scripts skip the VC++ check). A part whose
section is absent from the manifest still sets its facts, to `None` or an empty tuple, so "not
applicable" and "not computed yet" can never be confused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, overload

from bundler.assembly.render import EntryPoint
from bundler.errors import BuildError
from bundler.sources.lock import LockedWheel
from bundler.writer.members import Member

T = TypeVar("T")

#: A JSON object that a part publishes in bundle.json as it is (built by a typed reader's `to_json`).
Published = dict[str, Any]


class FactOrderError(BuildError):
    """A fact read before, or set after, the part that owns it: a bug in the part order, not in the input."""


class Fact(Generic[T]):
    """A slot on `Facts`, owned by the part named `part`."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> Fact[T]: ...
    @overload
    def __get__(self, obj: Facts, objtype: type | None = None) -> T: ...

    def __get__(self, obj: Facts | None, objtype: type | None = None) -> Fact[T] | T:
        if obj is None:
            return self
        try:
            value: T = obj.__dict__[self.name]
        except KeyError:
            msg = (f"internal: the fact '{self.name}' was read before the part '{self.part}' set it; "
                   "the parts run in the wrong order (bundler/assembly/parts.py)")
            raise FactOrderError(msg) from None
        return value

    def __set__(self, obj: Facts, value: T) -> None:
        if self.name in obj.__dict__:
            msg = f"internal: the fact '{self.name}' was set twice; only the part '{self.part}' sets it, once"
            raise FactOrderError(msg)
        obj.__dict__[self.name] = value

    def is_set(self, obj: Facts) -> bool:
        return self.name in obj.__dict__


@dataclass(frozen=True, kw_only=True)
class OrtFact:
    version: str
    route: Literal["wheel", "capi"]
    wheel: str
    sha256: str

    def to_json(self) -> Published:
        return {"version": self.version, "route": self.route, "wheel": self.wheel, "sha256": self.sha256}


@dataclass(frozen=True, kw_only=True)
class PythonEnvFact:
    """The venv the installer creates: the ORT wheel and every wheel pinned beside it."""

    ort: OrtFact
    wheels: tuple[LockedWheel, ...]  # sorted by name, the ORT wheel included
    dll_dirs: tuple[str, ...]  # install-relative folders the launchers put first on the DLL search path


@dataclass(frozen=True, kw_only=True)
class SelfCheckFact:
    script: str
    identity_model: str

    def to_json(self) -> Published:
        return {"identity_model": self.identity_model, "script": self.script}


@dataclass(frozen=True, kw_only=True)
class GpuFact:
    record: Published  # what bundle.json says about the CUDA stack
    dlls: tuple[str, ...]  # install paths of the shipped DLLs
    origins: dict[str, Published]  # bundle path -> {file, sha256, source, version}, for the SBOM
    dll_dirs: tuple[str, ...]
    preload: tuple[str, ...]  # dependencies before their importers


@dataclass(frozen=True, kw_only=True)
class SdkFact:
    ort_archive: Published
    sdk: Published


@dataclass(frozen=True, kw_only=True)
class ClosureFact:
    """What the DLL closure check found (the Windows backend's part): bundle.json's closure and VC++ minimum."""

    dll_closure: Published
    vc_runtime_min: str | None  # what the scripts require: the computed minimum, possibly raised by the manifest
    vc_runtime_min_computed: str | None


@dataclass(frozen=True, kw_only=True)
class VcRedistFact:
    file: str  # bundle path
    version: str
    sha256: str

    def to_json(self) -> Published:
        return {"file": self.file, "version": self.version, "sha256": self.sha256}


@dataclass(frozen=True, kw_only=True)
class RuntimeFact:
    """The interpreter the bundle carries (`[python] runtime`): where it lands and what it brings."""

    record: Published  # bundle.json's python_runtime
    version: str  # "3.11.7"
    interpreter: str  # install-relative: python/bin/python3.11 or python/python.exe
    bundle_interpreter: str  # bundle-relative: the same file in payload/python/, which runs the install engine
    site_packages: str  # install-relative: the interpreter's own site-packages, where the wheels go
    dlls: tuple[str, ...]  # Windows: the DLLs beside python.exe (python311.dll, vcruntime140.dll, ...)
    licenses: dict[str, Member]  # licenses/<component>/... -> the text
    sha256: str  # of the pinned archive


class Facts:
    """Every fact, with the part that sets it. See the module docstring for the rules."""

    python_env: Fact[PythonEnvFact | None] = Fact("python_env")
    runtime: Fact[RuntimeFact | None] = Fact("runtime")
    selfcheck: Fact[SelfCheckFact] = Fact("selfcheck")
    gpu: Fact[GpuFact | None] = Fact("gpu")
    sdk: Fact[SdkFact | None] = Fact("sdk")
    closure: Fact[ClosureFact | None] = Fact("closure")
    vc_redist: Fact[VcRedistFact | None] = Fact("vc_redist")
    models: Fact[tuple[Published, ...]] = Fact("models")
    entry_point: Fact[EntryPoint | None] = Fact("entry_point")
    app_local: Fact[tuple[str, ...]] = Fact("app_local")  # install paths of the runtime beside a native program
    signatures: Fact[tuple[Published, ...]] = Fact("signatures")
    licenses: Fact[tuple[Published, ...]] = Fact("licenses")
