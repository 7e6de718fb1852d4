"""The launch part: the entry point, and the installer, uninstaller, launchers and start-up hook rendered for the target."""

from __future__ import annotations

from importlib import resources
from typing import Literal

from bundler.assembly.assembly import Assembly, BuildInputs, Copy
from bundler.assembly.render import (
    PLAN_HELPER,
    EntryPoint,
    ScriptContext,
    render_scripts,
)
from bundler.manifest import Input
from bundler.sources.cache import cached_sha256


def add_entry_point(assembly: Assembly, build: BuildInputs) -> None:
    """The [launch] entry point: a module of the installed wheels, or a script or program shipped in app/."""
    launch = build.manifest.launch
    if launch.module:
        assembly.facts.entry_point = EntryPoint(kind="module", value=launch.module)
        return
    kinds: tuple[tuple[Literal["script", "program"], Input | None], ...] = (("script", launch.script),
                                                                           ("program", launch.program))
    for kind, source in kinds:
        if source is None:
            continue
        path = build.files[source.key]
        bundle_path = f"payload/app/{path.name}"
        assembly.add_file(bundle_path, path, cached_sha256(path), executable=kind == "program")
        assembly.install(bundle_path, f"app/{path.name}")
        assembly.facts.entry_point = EntryPoint(kind=kind, value=f"app/{path.name}")
        return
    assembly.facts.entry_point = None


def add_scripts(assembly: Assembly, build: BuildInputs) -> None:
    """Installer, uninstaller, launchers and the venv start-up hook, rendered for the target."""
    manifest, facts, target = build.manifest, assembly.facts, build.target
    bundle = manifest.bundle
    windows, gpu, vc_redist, python_env = facts.windows, facts.gpu, facts.vc_redist, facts.python_env
    context = ScriptContext(
        name=bundle.name, version=bundle.version, platform=bundle.platform, python=bundle.python,
        vc_runtime_min=windows.vc_runtime_min if windows else None, vc_redist=vc_redist.file if vc_redist else None,
        gpu_dll_dirs=gpu.dll_dirs if gpu else (), gpu_preload=gpu.preload if gpu else (),
        dll_dirs=python_env.dll_dirs if python_env else (), entry_point=facts.entry_point,
        cache_dir=manifest.launch.cache_dir, env=manifest.launch.env,
        default_install_dir=target.default_install_dir(bundle.name),
    )
    for path, data in render_scripts(context).items():
        executable = path.endswith(".sh")
        assembly.add_bytes(path, data, executable=executable)
        name = path.rsplit("/", 1)[-1]
        if path.startswith("payload/launchers/run."):
            assembly.install(path, name)
        elif path.startswith("payload/launchers/ort_bundle_hook"):
            assembly.site_packages_files.append(Copy(source=path, target=name))
    if not target.windows:
        helper = resources.files("bundler.target").joinpath("plan.py").read_bytes()
        assembly.add_bytes(PLAN_HELPER, helper)
