"""`bundle.json`, `install-plan.json` and `SHA256SUMS`: written after every part, because they describe everything else."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bundler import __version__
from bundler.assembly.assembly import Assembly
from bundler.errors import BuildError
from bundler.manifest import Manifest
from bundler.target.records import PLAN_FILE, InstallPlan, PlanEntry, RecordError, VenvPlan
from bundler.writer.zipwriter import Member

FORMAT = 1
WHEELS = "payload/wheels/"
#: Where the install engine and its pinned installer wheel live in the bundle.
ENGINE_DIR = "payload/installer/"


def _add_records(assembly: Assembly, manifest: Manifest) -> None:
    """bundle.json and install-plan.json, written last because they describe everything else."""
    bundle = manifest.bundle
    record = {
        "format": FORMAT,
        "name": bundle.name,
        "version": bundle.version,
        "platform": bundle.platform,
        "python": bundle.python,
        "python_tag": bundle.python_tag,
        "built_with": {"ort-bundler": __version__},
        **assembly.record,
        "manifest": manifest.raw,
    }
    assembly.add_bytes("bundle.json", to_json(record))
    assembly.install("bundle.json", "bundle.json")
    assembly.add_bytes(PLAN_FILE, to_json(install_plan(assembly, manifest).to_json()))
    assembly.install(PLAN_FILE, PLAN_FILE)


def _venv_layout(platform: str, python: str) -> dict[str, str]:
    """Where `python -m venv` puts things on the target, and the installer's launcher kind."""
    if platform == "win_amd64":
        return {"interpreter": "Scripts/python.exe", "scripts": "Scripts", "site_packages": "Lib/site-packages",
                "script_kind": "win-amd64", "dll_path_variable": "PATH"}
    return {"interpreter": "bin/python", "scripts": "bin", "site_packages": f"lib/python{python}/site-packages",
            "script_kind": "posix", "dll_path_variable": "LD_LIBRARY_PATH"}


def install_plan(assembly: Assembly, manifest: Manifest) -> InstallPlan:
    """install-plan.json from the members the parts added: the wheels, the engine's installer wheel,
    the files to copy; read back through the target's own definition, so build and engine agree."""
    bundle = manifest.bundle
    layout = _venv_layout(bundle.platform, bundle.python)
    wheels = sorted(name for name in assembly.members if name.startswith(WHEELS) and name.endswith(".whl")
                    and "/" not in name[len(WHEELS):])
    installer = [name for name in assembly.members if name.startswith(ENGINE_DIR) and name.endswith(".whl")]
    if len(installer) != 1:
        msg = (f"the bundle holds {len(installer)} installer wheels in {ENGINE_DIR}; expected exactly one (the lock's "
               f"[installer] table: run `ort-bundler lock {manifest.path.name}` again)")
        raise BuildError(msg)
    venv = VenvPlan(dir="venv", interpreter=layout["interpreter"], scripts=layout["scripts"],
                    site_packages=layout["site_packages"], script_kind=layout["script_kind"], wheels=tuple(wheels),
                    requirements=f"{WHEELS}requirements.txt",
                    site_packages_files=tuple(PlanEntry(source=e["from"], target=e["to"])
                                              for e in assembly.site_packages_files))
    plan = InstallPlan(install_id=f"{bundle.name}-{bundle.version}", name=bundle.name, version=bundle.version,
                       platform=bundle.platform, python=bundle.python, dll_path_variable=layout["dll_path_variable"],
                       installer_wheel=installer[0], venv=venv,
                       copy=tuple(PlanEntry(source=c["from"], target=c["to"])
                                  for c in sorted(assembly.copies, key=lambda c: c["to"])),
                       dll_dirs=tuple(assembly.record.get("dll_dirs", [])))
    try:
        return InstallPlan.from_json(json.loads(json.dumps(plan.to_json())), source=PLAN_FILE)
    except RecordError as exc:
        raise BuildError(f"the install plan would be refused on the target: {exc}") from None


def to_json(data: Mapping[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def sha256sums(members: Mapping[str, Member]) -> str:
    """`sha256sum -c` format, sorted by path, covering every member."""
    return "".join(f"{members[name].digest}  {name}\n" for name in sorted(members))
