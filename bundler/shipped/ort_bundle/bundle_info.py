"""The one definition of `bundle.json`: what a bundle says about itself, for users, tools and the self-check.

The build writes it through `BundleInfo.to_json` and the target code reads it through `BundleInfo.from_json`,
so both sides agree on every key; `KEYS` is what the tests hold the PowerShell and sh readers to. The file
holds what a person or a tool needs to know about the bundle (versions, wheels, models and their references,
the DLL closure, signatures, licences), not the build's internal plumbing. Standard library only, and
Python 3.8 syntax: this module ships in every bundle and runs on the target's interpreter.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Dict, List, Optional

BUNDLE_FILE = "bundle.json"
#: 2: the build's plumbing (DLL folders, GPU preload order, VC_redist path) left bundle.json; every key is
#: always present, `null` or empty where it does not apply. 3: `python_runtime`, the interpreter a bundle carries.
BUNDLE_FORMAT = 3

Json = Dict[str, Any]


class BundleInfoError(ValueError):
    """A bundle.json that this code cannot read: the message names the key."""


@dataclass(frozen=True)
class BundleInfo:
    name: str
    version: str
    platform: str  # win_amd64 or linux_x86_64
    python: str  # "3.11"
    python_tag: str  # "cp311"
    built_with: Dict[str, str]  # {"ort-bundler": version}
    manifest: Json  # the manifest as the build read it
    ort: Optional[Json]  # version, route (wheel or capi), wheel file name, sha256
    wheels: List[Json]  # every wheel of the environment: name, version, filename, sha256
    expected_providers: List[str]
    selfcheck: Json  # script and identity model, install-relative
    models: List[Json]  # name, file, sha256, inputs, outputs, reference digests; "data": location -> sha256
    entry_point: Optional[Json]  # {"module": …} | {"script": …} | {"program": …}
    app_local_runtime: List[str]  # install paths of the ORT (and GPU) DLLs placed beside a native program
    gpu: Optional[Json]  # CUDA/cuDNN versions, DLLs and their origins, minimum driver
    ort_archive: Optional[Json]  # the C/C++ release archive, when [ort] archive is pinned
    sdk: Optional[Json]
    dll_closure: Optional[Json]  # Windows: what every DLL/PYD imports and where each import is found
    vc_runtime_min: Optional[str]  # Windows: the VC++ runtime the target must have
    vc_runtime_min_computed: Optional[str]  # what the binaries' linker versions require, before the manifest raised it
    vc_redist: Optional[Json]  # Windows: the shipped VC_redist.x64.exe
    signatures: List[Json]  # Authenticode evidence of every PE file
    licenses: List[Json]  # component, licence, files under licenses/
    python_runtime: Optional[Json]  # the bundled interpreter: kind, version, file, sha256, install-relative path

    def to_json(self) -> Json:
        return {"format": BUNDLE_FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: object, *, source: str = BUNDLE_FILE) -> BundleInfo:
        if not isinstance(data, dict):
            msg = f"{source}: found {type(data).__name__}, expected a JSON object"
            raise BundleInfoError(msg)
        if data.get("format") != BUNDLE_FORMAT:
            found = f"format is {data['format']!r}" if "format" in data else 'has no "format" key'
            msg = f"{source}: {found}, expected {BUNDLE_FORMAT}; this self-check reads format {BUNDLE_FORMAT}"
            raise BundleInfoError(msg)
        missing = sorted(set(KEYS) - set(data))
        unknown = sorted(set(data) - set(KEYS))
        if missing or unknown:
            msg = f"{source}: missing keys {missing}, unknown keys {unknown}; expected exactly {sorted(KEYS)}"
            raise BundleInfoError(msg)
        return cls(**{f.name: data[f.name] for f in fields(cls)})

    @classmethod
    def read(cls, path: Path) -> BundleInfo:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            msg = f"{path}: cannot be read as JSON: {exc}"
            raise BundleInfoError(msg) from None
        return cls.from_json(data, source=str(path))


KEYS = ("format", *(f.name for f in fields(BundleInfo)))
