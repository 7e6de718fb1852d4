"""The launch part: the entry point, and the installer, uninstaller, launchers and start-up hook rendered for the target."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from bundler.assembly.assembly import Assembly
from bundler.assembly.render import (
    ENGINE_HELPER,
    ENGINE_PACKAGE,
    EntryPoint,
    ScriptContext,
    render_scripts,
)
from bundler.errors import ManifestError
from bundler.manifest import Manifest
from bundler.sources.cache import cached_sha256
from bundler.sources.inputs import INSTALLER_KEY
from bundler.sources.lock import Lock


def add_entry_point(assembly: Assembly, *, manifest: Manifest, files: Mapping[str, Path]) -> EntryPoint | None:
    """The [launch] entry point: a module of the installed wheels, or a script or program shipped in app/."""
    launch = manifest.launch
    if launch.module:
        assembly.record["entry_point"] = {"module": launch.module}
        return EntryPoint(kind="module", value=launch.module)
    for kind, source in (("script", launch.script), ("program", launch.program)):
        if source is None:
            continue
        path = files[source.key]
        bundle_path = f"payload/app/{path.name}"
        assembly.add_file(bundle_path, path, cached_sha256(path), executable=kind == "program")
        assembly.install(bundle_path, f"app/{path.name}")
        assembly.record["entry_point"] = {kind: f"app/{path.name}"}
        return EntryPoint(kind=kind, value=f"app/{path.name}")
    return None


def add_scripts(assembly: Assembly, *, manifest: Manifest, entry_point: EntryPoint | None) -> None:
    """Installer, uninstaller, launchers and the venv start-up hook, rendered for the target."""
    bundle = manifest.bundle
    windows = bundle.platform == "win_amd64"
    context = ScriptContext(
        name=bundle.name, version=bundle.version, platform=bundle.platform, python=bundle.python,
        vc_runtime_min=assembly.record.get("vc_runtime_min"), vc_redist=assembly.record.get("vc_redist_file"),
        gpu_dll_dirs=tuple(assembly.record.get("gpu_dll_dirs", ())),
        gpu_preload=tuple(assembly.record.get("gpu_preload", ())),
        dll_dirs=tuple(assembly.record.get("dll_dirs", ())), entry_point=entry_point,
        cache_dir=manifest.launch.cache_dir, env=manifest.launch.env,
        default_install_dir=f"C:\\ort\\{bundle.name}" if windows else f"/opt/{bundle.name}",
    )
    for path, data in render_scripts(context).items():
        executable = path.endswith(".sh")
        assembly.add_bytes(path, data, executable=executable)
        name = path.rsplit("/", 1)[-1]
        if path.startswith("payload/launchers/run."):
            assembly.install(path, name)
        elif path.startswith("payload/launchers/ort_bundle_hook"):
            assembly.site_packages_files.append({"from": path, "to": name})


#: Starts the engine package shipped beside it; `python -I -B engine.py ...` (isolated, no bytecode written).
ENGINE_BOOTSTRAP = b'''"""ort-bundler install engine: see ortengine/engine.py (stdlib only, Python 3.8+)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ortengine.engine import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
'''
#: The target modules that make up the engine, shipped as the `ortengine` package.
ENGINE_MODULES = ("engine.py", "records.py")


def engine_files() -> dict[str, tuple[bytes, str]]:
    """Bundle path -> (bytes, install path) of the engine: its start script and the `ortengine` package."""
    package = resources.files("bundler.target")
    files = {ENGINE_HELPER: (ENGINE_BOOTSTRAP, "installer/engine.py")}
    for name in ("__init__.py", *ENGINE_MODULES):
        files[f"{ENGINE_PACKAGE}/{name}"] = (package.joinpath(name).read_bytes(), f"installer/ortengine/{name}")
    return files


def add_engine(assembly: Assembly, *, manifest: Manifest, lock: Lock | None, files: Mapping[str, Path]) -> None:
    """The install engine (bundler/target) and the pinned pypa installer wheel it installs wheels with.

    The engine is copied into the install too (installer/), for `run --verify` and the uninstaller.
    The installer wheel is an input of its own: in the SBOM, never installed into the environment.
    """
    for path, (data, installed) in engine_files().items():
        assembly.add_bytes(path, data)
        assembly.install(path, installed)
    if manifest.ort.python_source is None:
        return
    wheel = lock.installer if lock is not None else None
    if wheel is None:
        msg = (f"{manifest.path.name}: the lock file has no [installer] table (the wheel of pypa's installer that the "
               f"install engine uses); run `ort-bundler lock {manifest.path.name}` again")
        raise ManifestError(msg)
    assembly.add_file(f"payload/installer/{wheel.filename}", files[INSTALLER_KEY], wheel.sha256)
