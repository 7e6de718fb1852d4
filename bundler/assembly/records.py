"""`bundle.json`, `install-plan.json` and `SHA256SUMS`: written after every part, because they describe everything else.

bundle.json is written through its one definition in the target package (`bundler.shipped.ort_bundle.bundle_info`), from
the facts the parts set; reading a fact no part set fails there, naming the part.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from bundler import __version__
from bundler.assembly.assembly import Assembly, BuildInputs, Copy
from bundler.assembly.runtime import RUNTIME_INSTALL_DIR
from bundler.errors import BuildError
from bundler.shipped.ort_bundle.bundle_info import BUNDLE_FILE, BundleInfo
from bundler.shipped.ort_bundle.records import PLAN_FILE, InstallPlan, PlanEntry, RecordError, VenvPlan
from bundler.sources.lock import lock_text
from bundler.target_platform import TargetPlatform
from bundler.writer.members import Member

WHEELS = "payload/wheels/"
#: Where the install engine and its pinned installer wheel live in the bundle.
ENGINE_DIR = "payload/installer/"
LOCK_FILE = "lock.toml"  # the lock the bundle was built from (not installed)


def bundle_info(assembly: Assembly, build: BuildInputs) -> BundleInfo:
    facts, bundle = assembly.facts, build.manifest.bundle
    python_env, gpu, sdk, closure, vc_redist = facts.python_env, facts.gpu, facts.sdk, facts.closure, facts.vc_redist
    return BundleInfo(
        name=bundle.name, version=bundle.version, platform=bundle.platform, python=bundle.python,
        python_tag=bundle.python_tag, built_with={"ort-bundler": __version__}, manifest=dict(build.manifest.raw),
        ort=python_env.ort.to_json() if python_env else None,
        wheels=[{"name": w.name, "version": w.version, "filename": w.filename, "sha256": w.sha256}
                for w in (python_env.wheels if python_env else ())],
        expected_providers=["CPUExecutionProvider", *(build.manifest.gpu.providers if gpu and build.manifest.gpu else ())],
        selfcheck=facts.selfcheck.to_json(), models=list(facts.models),
        entry_point={facts.entry_point.kind: facts.entry_point.value} if facts.entry_point else None,
        app_local_runtime=list(facts.app_local), gpu=gpu.record if gpu else None,
        ort_archive=sdk.ort_archive if sdk else None, sdk=sdk.sdk if sdk else None,
        dll_closure=closure.dll_closure if closure else None,
        vc_runtime_min=closure.vc_runtime_min if closure else None,
        vc_runtime_min_computed=closure.vc_runtime_min_computed if closure else None,
        vc_redist=vc_redist.to_json() if vc_redist else None,
        signatures=list(facts.signatures), licenses=list(facts.licenses),
        python_runtime=facts.runtime.record if facts.runtime else None,
    )


def add_records(assembly: Assembly, build: BuildInputs) -> None:
    """bundle.json and install-plan.json, written after every part because they describe everything else."""
    assembly.add_bytes(BUNDLE_FILE, to_json(bundle_info(assembly, build).to_json()))
    assembly.plan_copy(BUNDLE_FILE, BUNDLE_FILE)
    if build.lock is not None:  # with the manifest in bundle.json, what `reproduce` rebuilds from
        assembly.add_bytes(LOCK_FILE, lock_text(build.lock).encode("utf-8"))
    assembly.add_bytes(PLAN_FILE, to_json(install_plan(assembly, build).to_json()))
    assembly.plan_copy(PLAN_FILE, PLAN_FILE)


def _venv_layout(target: TargetPlatform, python: str) -> VenvPlan:
    """Where `python -m venv` puts things on the target (below venv/), and the installer's launcher kind."""
    return VenvPlan(dir="venv", interpreter=f"{target.venv_scripts}/{target.interpreter}", scripts=target.venv_scripts,
                    site_packages=target.venv_site_packages(python), script_kind=target.script_kind, wheels=(),
                    requirements=f"{WHEELS}requirements.txt", site_packages_files=())


def _runtime_layout(assembly: Assembly, build: BuildInputs, venv: VenvPlan) -> tuple[VenvPlan, list[Copy]]:
    """With [python] runtime the environment is the bundled interpreter itself (bundler.assembly.runtime): its
    files are copied instead of making a venv, and the wheels go into its own site-packages. Returns the
    layout and the copies that remain for the plan's `copy` list."""
    runtime = assembly.facts.runtime
    if runtime is None:
        return venv, list(assembly.copies)
    home = f"{RUNTIME_INSTALL_DIR}/"
    files = tuple(_entry(c) for c in sorted(assembly.copies, key=lambda c: c.target) if c.target.startswith(home))
    layout = replace(venv, dir=RUNTIME_INSTALL_DIR, interpreter=runtime.interpreter.removeprefix(home),
                     scripts=build.target.venv_scripts, site_packages=runtime.site_packages.removeprefix(home), runtime=files)
    return layout, [c for c in assembly.copies if not c.target.startswith(home)]


def _entry(copy: Copy) -> PlanEntry:
    return PlanEntry(source=copy.source, target=copy.target)


def plan_dll_dirs(assembly: Assembly) -> tuple[str, ...]:
    """The folders the installer's self-check puts first on PATH / LD_LIBRARY_PATH, as the launcher does: the GPU
    libraries' folder first, so on Linux the loader finds the bundle's CUDA rather than a system one (and the
    folder is guarded: a file added to it would be loaded)."""
    gpu, python_env = assembly.facts.gpu, assembly.facts.python_env
    return (*(gpu.dll_dirs if gpu else ()), *(python_env.dll_dirs if python_env else ()))


def install_plan(assembly: Assembly, build: BuildInputs) -> InstallPlan:
    """install-plan.json from the members the parts added: the wheels, the engine's installer wheel,
    the files to copy; read back through the target's own definition, so build and engine agree."""
    bundle = build.manifest.bundle
    wheels = sorted(name for name in assembly.members if name.startswith(WHEELS) and name.endswith(".whl")
                    and "/" not in name[len(WHEELS):])
    installer = [name for name in assembly.members if name.startswith(ENGINE_DIR) and name.endswith(".whl")]
    if len(installer) != 1:
        msg = (f"the bundle holds {len(installer)} installer wheels in {ENGINE_DIR}; expected exactly one (the lock's "
               f"[installer] table: run `ort-bundler lock {build.manifest.path.name}` again)")
        raise BuildError(msg)
    venv = replace(_venv_layout(build.target, bundle.python), wheels=tuple(wheels),
                   site_packages_files=tuple(_entry(c) for c in assembly.site_packages_files))
    venv, copies = _runtime_layout(assembly, build, venv)
    plan = InstallPlan(install_id=f"{bundle.name}-{bundle.version}", name=bundle.name, version=bundle.version,
                       platform=bundle.platform, python=bundle.python, dll_path_variable=build.target.dll_path_variable,
                       installer_wheel=installer[0], venv=venv,
                       copy=tuple(_entry(c) for c in sorted(copies, key=lambda c: c.target)),
                       dll_dirs=plan_dll_dirs(assembly))
    try:
        return InstallPlan.from_json(json.loads(json.dumps(plan.to_json())), source=PLAN_FILE)
    except RecordError as exc:
        msg = f"the install plan would be refused on the target: {exc}"
        raise BuildError(msg) from None


def to_json(data: Mapping[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def sha256sums(members: Mapping[str, Member]) -> str:
    """`sha256sum -c` format, sorted by path, covering every member."""
    return "".join(f"{members[name].digest}  {name}\n" for name in sorted(members))
