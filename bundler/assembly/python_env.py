"""The Python environment part: the ORT wheel (official, or built from capi) and every locked wheel, pinned in requirements.txt."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import parse_wheel_filename

from bundler.assembly.assembly import Assembly, BuildInputs
from bundler.assembly.facts import OrtFact, PythonEnvFact
from bundler.assembly.runtime import runtime_site_packages
from bundler.assembly.wheelbuild import capi_wheel
from bundler.derived import DerivedCache
from bundler.errors import ManifestError
from bundler.manifest import Manifest
from bundler.readers.archives import SafeArchive
from bundler.readers.wheels import verify_official_wheel, wheel_metadata
from bundler.sources.cache import Cache, cached_sha256
from bundler.sources.lock import LockedWheel, requirements_txt


def site_packages(manifest: Manifest) -> str:
    """Where the environment keeps its packages on the target, install-relative: the venv's, or with
    [python] runtime the bundled interpreter's own (bundler.assembly.runtime)."""
    target = manifest.bundle.target
    if manifest.python.runtime is not None:
        return runtime_site_packages(target, manifest.bundle.python)
    return target.site_packages(manifest.bundle.python)


@dataclass(frozen=True, kw_only=True)
class OrtWheel:
    path: Path
    sha256: str  # the official wheel's pin, or the built wheel's hash, taken as it was stored
    requires: tuple[str, ...]  # its Requires-Dist, or the manifest's [ort] dependencies


def ort_wheel(manifest: Manifest, files: Mapping[str, Path], work: Path, cache: Cache | None = None) -> OrtWheel:
    """The ORT wheel for the bundle: an official wheel as is, or one built from capi."""
    ort, bundle = manifest.ort, manifest.bundle
    if ort.wheel is not None:
        path = files[ort.wheel.key]
        name = Requirement(ort.wheel.location).name if ort.wheel.kind == "requirement" else path.name.split("-")[0]
        verify_official_wheel(path, expected_name=name, expected_version=ort.version, target=bundle.target,
                              target_python=bundle.python, label="ort.wheel")
        requires = ort.dependencies if ort.dependencies is not None else wheel_requires(path)
        return OrtWheel(path=path, sha256=cached_sha256(path), requires=requires)
    assert ort.capi is not None
    source = files[ort.capi.key]  # hashed against its pin when the build began (`verify_transformed`)
    built = capi_wheel(source, source_sha256=cached_sha256(source), target=bundle.target,
                       target_python=bundle.python, expected_version=ort.version, requires=ort.dependencies,
                       source_date_epoch=bundle.source_date_epoch, work=work,
                       cache=DerivedCache(cache.work_dir("derived")) if cache is not None else None)
    return OrtWheel(path=built.path, sha256=built.sha256, requires=wheel_requires(built.path))


def wheel_requires(path: Path) -> tuple[str, ...]:
    """Requires-Dist of a wheel, read from its METADATA without installing it."""
    with SafeArchive.open(path, label=path.name) as archive:
        _, metadata = wheel_metadata(archive, label=path.name)
    return tuple(metadata.get_all("Requires-Dist") or ())


def lock_requirements(manifest: Manifest, ort_requires: tuple[str, ...]) -> tuple[str, ...]:
    """What `lock` resolves: ORT's own dependencies plus the manifest's extra requirements."""
    return tuple(sorted({str(Requirement(r)) for r in (*ort_requires, *manifest.python.requirements)}))


def wheel_requirement(path: Path, sha256: str) -> LockedWheel:
    """The ORT wheel as a pinned requirement, beside the locked ones in requirements.txt."""
    name, version, _, _ = parse_wheel_filename(path.name)
    return LockedWheel(name=str(name), version=str(version), filename=path.name, sha256=sha256)


def lock_name(manifest: Manifest) -> str:
    return manifest.python.lock.name if manifest.python.lock else f"{manifest.path.stem}.lock.toml"


def add_python(assembly: Assembly, build: BuildInputs) -> None:
    manifest, lock, files = build.manifest, build.lock, build.files
    if manifest.ort.python_source is None:
        assembly.facts.python_env = None
        return
    if lock is None:
        msg = (f"{manifest.path.name}: python.lock: missing; the ORT wheel's dependencies must be locked for the "
               f"target: run `ort-bundler lock {manifest.path.name}` and add `lock = \"<file>\"` under [python]")
        raise ManifestError(msg)
    ort_built = ort_wheel(manifest, files, build.work, build.cache)
    wheel, ort_sha = ort_built.path, ort_built.sha256
    expected = lock_requirements(manifest, ort_built.requires)
    if tuple(sorted(lock.requirements)) != expected:
        msg = (f"{lock_name(manifest)}: locked requirements {list(lock.requirements)} differ from what the "
               f"manifest needs now {list(expected)}; run `ort-bundler lock {manifest.path.name}` again")
        raise ManifestError(msg)
    pinned = [wheel_requirement(wheel, ort_sha)]
    assembly.add_file(f"payload/wheels/{wheel.name}", wheel, ort_sha)
    for locked in lock.wheels:
        path = files[f"lock:{locked.name}"]
        assembly.add_file(f"payload/wheels/{locked.filename}", path, locked.sha256)
        pinned.append(locked)
    assembly.add_bytes("payload/wheels/requirements.txt", requirements_txt(pinned).encode("utf-8"))
    ort = OrtFact(version=manifest.ort.version, route="wheel" if manifest.ort.wheel else "capi", wheel=wheel.name,
                  sha256=ort_sha)
    assembly.facts.python_env = PythonEnvFact(ort=ort, wheels=tuple(sorted(pinned, key=lambda w: w.name)),
                                              dll_dirs=(f"{site_packages(manifest)}/onnxruntime/capi",))
