"""ONNX Runtime on the build host, for the model gate: this interpreter's when it is the pinned version,
else a virtual environment holding exactly that version, made once per work folder.

The gate runs a model in the very ORT version the bundle ships (`modelgate.probe_models`). When this
interpreter has another one (or none), an isolated environment is made beside the cache: from the bundle's
own ORT and NumPy wheels when this host can install them (`host_wheels`), or from the lock's [gate] wheels
for this kind of machine (`bundler/sources/gate.py`, chosen by `models.gate_wheels`), each held to its hash;
else from the index through the user's pip configuration, wheels only and unpinned (with a warning).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from filelock import FileLock
from packaging.specifiers import SpecifierSet
from packaging.utils import parse_wheel_filename
from packaging.version import InvalidVersion, Version

from bundler.readers.capi import module_constants
from bundler.runner import Runner
from bundler.sources import cache_trust
from bundler.sources.cache import cached_sha256
from bundler.sources.gate import host_installable

READY_MARKER = ".ort-bundler-ready"
# The first onnxruntime release built against NumPy 2 (1.19.0 release notes).
NUMPY2_SINCE = Version("1.19")


def host_has_ort(ort_version: str) -> bool:
    """Whether this interpreter's onnxruntime states the pinned version (read without importing it, as
    `readers.capi` reads a capi tree); the worker's report then confirms the version it imported."""
    spec = importlib.util.find_spec("onnxruntime")
    return spec is not None and spec.origin is not None and \
        module_constants(Path(spec.origin)).get("__version__") == ort_version


def isolated_requirements(ort_version: str) -> list[str]:
    """What the isolated environment installs: the pinned ORT and a NumPy its binaries were built against.

    onnxruntime declares `numpy>=1.21.6` with no upper bound, but releases before 1.19 are built against
    NumPy 1.x and fail to import under NumPy 2 ("_ARRAY_API not found"); pip alone would pick NumPy 2.
    """
    try:
        before_numpy2 = Version(ort_version) < NUMPY2_SINCE
    except InvalidVersion:
        before_numpy2 = False
    return [f"onnxruntime=={ort_version}", "numpy<2" if before_numpy2 else "numpy"]


def gate_requirements(ort_version: str, numpy_version: str | None) -> list[str]:
    """What `lock` pins for the gate on a machine that cannot install the bundle's own wheels: the pinned ORT
    and the bundle's NumPy version (`numpy_version`, the lock's) when that ORT imports with it, else the
    NumPy `isolated_requirements` allows."""
    ort, numpy = isolated_requirements(ort_version)
    allowed = SpecifierSet(numpy.removeprefix("numpy"))
    if numpy_version is not None and allowed.contains(numpy_version, prereleases=True):
        return [ort, f"numpy=={numpy_version}"]
    return [ort, numpy]


def host_wheels(paths: Iterable[Path]) -> tuple[Path, ...]:
    """The bundle's own ORT and NumPy wheels (verified in the cache against their pins) when this host can
    install both, else none: the isolated environment is then made from exactly those files."""
    chosen: dict[str, Path] = {}
    for path in sorted(paths):
        name = str(parse_wheel_filename(path.name)[0]) if host_installable(path.name) else ""
        role = "numpy" if name == "numpy" else "onnxruntime" if name.startswith("onnxruntime") else None
        if role:
            chosen.setdefault(role, path)
    return (chosen["onnxruntime"], chosen["numpy"]) if len(chosen) == 2 else ()


def _requirements(ort_version: str, wheels: Sequence[Path]) -> list[str]:
    """What the ready marker lists: each wheel's name and hash, or the requirements pip resolves."""
    return [f"{path.name} {cached_sha256(path)}" for path in wheels] or isolated_requirements(ort_version)


def environment_dir(ort_version: str, *, work_dir: Path, wheels: Sequence[Path] = ()) -> Path:
    """The environment's folder: one per set of wheels, named by their names and hashes (not where the cache
    is), so builds of bundles with another NumPy keep their own environments instead of remaking one in turn.
    Anyone who reads the public lock can work the name out: what lies there is trusted for its owner alone."""
    ready = "\n".join(_requirements(ort_version, wheels)) + "\n"
    suffix = f"-{hashlib.sha256(ready.encode()).hexdigest()[:12]}" if wheels else ""
    return work_dir / f"ort-{ort_version}-py{sys.version_info.major}{sys.version_info.minor}{suffix}"


def isolated_python(ort_version: str, *, runner: Runner, work_dir: Path, wheels: Sequence[Path] = ()) -> Path:
    """A virtual environment on the build host with exactly the pinned ORT, made once per work_dir.

    With `wheels` (`host_wheels`: files in the cache, named by their sha256) it is made from those files
    alone, each held to its hash by pip (`--require-hashes --no-index --no-deps --only-binary :all:`), in a
    folder of its own for that set. Without them, pip brings `isolated_requirements` from the index through
    the user's configuration, wheels only (`--only-binary :all:`: no sdist's setup.py runs on the build host).
    It is made again when it is dead (the ready marker there, the interpreter gone, e.g. its base Python
    removed) or was made with other requirements. Its interpreter runs as the builder, so the environment
    is held whole to `cache_trust` (owned by this user or root, writable by no one else) before its marker
    is read and again before its interpreter is handed out: one another user planted is refused, not run.
    """
    pinned = [f"{path} --hash=sha256:{cached_sha256(path)}" for path in wheels]
    requirements = _requirements(ort_version, wheels)
    ready = "\n".join(requirements) + "\n"
    env_dir = environment_dir(ort_version, work_dir=work_dir, wheels=wheels)
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    marker = env_dir / READY_MARKER
    cache_trust.make_folder(work_dir)
    with FileLock(work_dir / f"{env_dir.name}.lock"):  # builds sharing a cache make the environment once
        cache_trust.check(env_dir, tree=True)
        # An environment made before the marker listed its requirements holds the ORT version only.
        accepted = {ready, ort_version} if requirements[-1] == "numpy" else {ready}
        if marker.is_file() and marker.read_text(encoding="utf-8") in accepted and python.exists():
            return python  # exists() follows the venv's link to its base interpreter
        shutil.rmtree(env_dir, ignore_errors=True)
        runner([sys.executable, "-m", "venv", str(env_dir)])
        install = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                   "--only-binary", ":all:"]
        if pinned:
            listed = work_dir / f"{env_dir.name}.requirements.txt"
            listed.write_text("\n".join(pinned) + "\n", encoding="utf-8")
            runner([*install, "--no-index", "--no-deps", "--require-hashes", "-r", str(listed)])
        else:
            runner([*install, *requirements])
        marker.write_text(ready, encoding="utf-8")
        cache_trust.seal(env_dir)  # pip wrote under the user's umask: writable by this user alone from now on
        cache_trust.check(env_dir, tree=True)
    return python
