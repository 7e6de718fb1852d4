"""The launch part: the entry point, and the installer, uninstaller, launchers and start-up hook rendered for the target."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from bundler.assembly.assembly import Assembly
from bundler.assembly.render import (
    PLAN_HELPER,
    EntryPoint,
    ScriptContext,
    render_scripts,
)
from bundler.manifest import Manifest
from bundler.sources.cache import cached_sha256


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
    if not windows:
        helper = resources.files("bundler.target").joinpath("plan.py").read_bytes()
        assembly.add_bytes(PLAN_HELPER, helper)
