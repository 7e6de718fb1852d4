"""The launch part: the entry point, and the installer, uninstaller, launchers and start-up hook rendered for the target."""

from __future__ import annotations

from typing import Literal

from bundler.assembly.assembly import Assembly, BuildInputs, Copy
from bundler.assembly.render import LAUNCH_CONFIG, EntryPoint, ScriptContext, render_scripts
from bundler.errors import ManifestError
from bundler.manifest import Input
from bundler.sources.cache import cached_sha256
from bundler.sources.inputs import INSTALLER_KEY


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
        assembly.plan_copy(bundle_path, f"app/{path.name}")
        assembly.facts.entry_point = EntryPoint(kind=kind, value=f"app/{path.name}")
        return
    assembly.facts.entry_point = None


def add_scripts(assembly: Assembly, build: BuildInputs) -> None:
    """Installer, uninstaller, launchers and the venv start-up hook, rendered for the target."""
    manifest, facts, target = build.manifest, assembly.facts, build.target
    bundle = manifest.bundle
    closure, gpu, vc_redist, python_env = facts.closure, facts.gpu, facts.vc_redist, facts.python_env
    context = ScriptContext(
        name=bundle.name, version=bundle.version, target=target, python=bundle.python,
        vc_runtime_min=closure.vc_runtime_min if closure else None, vc_redist=vc_redist.file if vc_redist else None,
        gpu_dll_dirs=gpu.dll_dirs if gpu else (), gpu_preload=gpu.preload if gpu else (),
        dll_dirs=python_env.dll_dirs if python_env else (), entry_point=facts.entry_point,
        cache_dir=manifest.launch.cache_dir, env=manifest.launch.env, apply_tuning=manifest.launch.apply_tuning,
        default_install_dir=target.default_install_dir(bundle.name),
        runtime_python=facts.runtime.interpreter if facts.runtime else None,
        runtime_bundle_python=facts.runtime.bundle_interpreter if facts.runtime else None,
    )
    for path, data in render_scripts(context, compiled=build.cache.work_dir("templates")).items():
        executable = path.endswith(".sh")
        assembly.add_bytes(path, data, executable=executable)
        name = path.rsplit("/", 1)[-1]
        if path.startswith("payload/launchers/run.") or path in (LAUNCH_CONFIG, "uninstall.ps1", "uninstall.cmd",
                                                                  "uninstall.sh"):
            # The uninstaller too: Add/Remove Programs runs that copy on Windows; on Linux it needs no bundle.
            assembly.plan_copy(path, name)
        elif path.startswith("payload/launchers/ort_bundle_hook"):
            assembly.site_packages_files.append(Copy(source=path, target=name))


def add_engine(assembly: Assembly, build: BuildInputs) -> None:
    """The pinned pypa installer wheel the install engine installs wheels with: an input of its own, in the SBOM,
    never installed into the environment. The engine itself is the shipped package's (shipped_package)."""
    manifest = build.manifest
    if manifest.ort.python_source is None:
        return
    wheel = build.lock.installer if build.lock is not None else None
    if wheel is None:
        msg = (f"{manifest.path.name}: the lock file has no [installer] table (the wheel of pypa's installer that the "
               f"install engine uses); run `ort-bundler lock {manifest.path.name}` again")
        raise ManifestError(msg)
    assembly.add_file(f"payload/installer/{wheel.filename}", build.files[INSTALLER_KEY], wheel.sha256)
