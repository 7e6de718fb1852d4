"""The parts of a bundle, each turning cached inputs into members of the `Assembly`.

One function per part, called in a fixed order by `add_all`. A part reads only what the manifest and
the cache give it and writes only into the assembly (and its private work folder), so the parts can be
read, tested and extended one at a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from bundler.assembly.assembly import Assembly
from bundler.assembly.gpu import add_gpu
from bundler.assembly.launch import add_entry_point, add_scripts
from bundler.assembly.licenses import add_licenses
from bundler.assembly.models import add_models, add_selfcheck
from bundler.assembly.python_env import add_python
from bundler.assembly.sbom import add_sbom
from bundler.assembly.sdk import add_sdk
from bundler.assembly.signature_policy import check_signatures
from bundler.assembly.windows import add_vc_redist, check_windows
from bundler.manifest import Manifest
from bundler.sources.cache import Cache
from bundler.sources.lock import Lock


def add_all(assembly: Assembly, *, manifest: Manifest, lock: Lock | None, files: Mapping[str, Path], work: Path,
            cache: Cache) -> None:
    add_python(assembly, manifest=manifest, lock=lock, files=files, work=work)
    add_selfcheck(assembly)
    add_gpu(assembly, manifest=manifest, files=files, work=work)
    add_sdk(assembly, manifest=manifest, files=files, work=work)
    check_windows(assembly, manifest=manifest, work=work)
    add_vc_redist(assembly, manifest=manifest, files=files)
    add_models(assembly, manifest=manifest, lock=lock, files=files, cache=cache)
    entry_point = add_entry_point(assembly, manifest=manifest, files=files)
    add_scripts(assembly, manifest=manifest, entry_point=entry_point)
    check_signatures(assembly, manifest=manifest, work=work)
    add_licenses(assembly, manifest=manifest, files=files, work=work)
    add_sbom(assembly, manifest=manifest)  # last: it describes every member, licences included


# -- the Python environment ---------------------------------------------------------------------------














# -- models ----------------------------------------------------------------------------------------------






# -- entry point and scripts ---------------------------------------------------------------------------------




