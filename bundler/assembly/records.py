"""`bundle.json`, `install-plan.json` and `SHA256SUMS`: written after every part, because they describe everything else."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bundler import __version__
from bundler.assembly.assembly import Assembly
from bundler.manifest import Manifest
from bundler.writer.zipwriter import Member

FORMAT = 1


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
    plan = {
        "format": FORMAT,
        "install_id": f"{bundle.name}-{bundle.version}",
        "venv": {"dir": "venv", "wheels": "payload/wheels", "requirements": "payload/wheels/requirements.txt",
                 "site_packages_files": assembly.site_packages_files},
        "copy": sorted(assembly.copies, key=lambda c: c["to"]),
        "dll_dirs": assembly.record.get("dll_dirs", []),
    }
    assembly.add_bytes("install-plan.json", to_json(plan))
    assembly.install("install-plan.json", "install-plan.json")


def to_json(data: Mapping[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def sha256sums(members: Mapping[str, Member]) -> str:
    """`sha256sum -c` format, sorted by path, covering every member."""
    return "".join(f"{members[name].digest}  {name}\n" for name in sorted(members))
