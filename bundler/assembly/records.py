"""`bundle.json`, `install-plan.json` and `SHA256SUMS`: written after every part, because they describe everything else.

bundle.json is written through its one definition in the target package (`bundler.target.bundle_info`), from
the facts the parts set; reading a fact no part set fails there, naming the part.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bundler import __version__
from bundler.assembly.assembly import Assembly, BuildInputs, Copy
from bundler.target.bundle_info import BUNDLE_FILE, BundleInfo
from bundler.writer.zipwriter import Member

PLAN_FORMAT = 1


def bundle_info(assembly: Assembly, build: BuildInputs) -> BundleInfo:
    facts, bundle = assembly.facts, build.manifest.bundle
    python_env, gpu, sdk, windows, vc_redist = facts.python_env, facts.gpu, facts.sdk, facts.windows, facts.vc_redist
    return BundleInfo(
        name=bundle.name, version=bundle.version, platform=bundle.platform, python=bundle.python,
        python_tag=bundle.python_tag, built_with={"ort-bundler": __version__}, manifest=dict(build.manifest.raw),
        ort=python_env.ort.to_json() if python_env else None,
        wheels=[{"name": w.name, "version": w.version, "filename": w.filename, "sha256": w.sha256}
                for w in (python_env.wheels if python_env else ())],
        expected_providers=["CPUExecutionProvider", *(["CUDAExecutionProvider"] if gpu else [])],
        selfcheck=facts.selfcheck.to_json(), models=list(facts.models),
        entry_point={facts.entry_point.kind: facts.entry_point.value} if facts.entry_point else None,
        app_local_runtime=list(facts.app_local), gpu=gpu.record if gpu else None,
        ort_archive=sdk.ort_archive if sdk else None, sdk=sdk.sdk if sdk else None,
        dll_closure=windows.dll_closure if windows else None,
        vc_runtime_min=windows.vc_runtime_min if windows else None,
        vc_runtime_min_computed=windows.vc_runtime_min_computed if windows else None,
        vc_redist=vc_redist.to_json() if vc_redist else None,
        signatures=list(facts.signatures), licenses=list(facts.licenses),
        python_runtime=facts.runtime.record if facts.runtime else None,
    )


def add_records(assembly: Assembly, build: BuildInputs) -> None:
    """bundle.json and install-plan.json, written after every part because they describe everything else."""
    bundle = build.manifest.bundle
    assembly.add_bytes(BUNDLE_FILE, to_json(bundle_info(assembly, build).to_json()))
    assembly.install(BUNDLE_FILE, BUNDLE_FILE)
    python_env = assembly.facts.python_env
    plan = {
        "format": PLAN_FORMAT,
        "install_id": f"{bundle.name}-{bundle.version}",
        "venv": {"dir": "venv", "wheels": "payload/wheels", "requirements": "payload/wheels/requirements.txt",
                 "site_packages_files": [_copy_json(c) for c in assembly.site_packages_files]},
        "copy": [_copy_json(c) for c in sorted(assembly.copies, key=lambda c: c.target)],
        "dll_dirs": list(python_env.dll_dirs if python_env else ()),
    }
    assembly.add_bytes("install-plan.json", to_json(plan))
    assembly.install("install-plan.json", "install-plan.json")


def _copy_json(copy: Copy) -> dict[str, str]:
    return {"from": copy.source, "to": copy.target}


def to_json(data: Mapping[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def sha256sums(members: Mapping[str, Member]) -> str:
    """`sha256sum -c` format, sorted by path, covering every member."""
    return "".join(f"{members[name].digest}  {name}\n" for name in sorted(members))
