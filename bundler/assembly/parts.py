"""The parts of a bundle, in the order they run.

Each part is a function `(Assembly, BuildInputs) -> None` that turns cached inputs into members of the
assembly and sets its own facts (`bundler.assembly.facts`); a later part reads the facts of earlier
ones. The order is the only place the parts meet, and `parts_for` holds it; a platform backend
(`bundler.platforms`) brings the parts only its target has and gets them placed in their slots:
`bundle_tools` after the engine (what runs from the unpacked bundle), and `native` after the SDK and before the
models and scripts. The native slot's order constraints: the bundled interpreter, the GPU part (its DLLs), the
entry point and the SDK run before it (their DLLs are placed beside a native program and join the closure), and
the scripts after it (they enforce the VC++ minimum it finds); within it the app-local runtime comes before the
closure check (which resolves the program's imports from its folder), and that before VC_redist (whose version
must meet the minimum). The GPU part runs before the SDK (its property sheet copies the GPU DLLs); signatures
and licences after every member that carries a binary or a licence.
The records (bundle.json, install-plan.json) and then the SBOM are written after all parts, by
`bundler.commands.build`, because they describe everything the parts added.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from bundler.assembly.assembly import Assembly, BuildInputs
from bundler.assembly.gpu import add_gpu
from bundler.assembly.launch import add_engine, add_entry_point, add_scripts
from bundler.assembly.licenses import add_licenses
from bundler.assembly.models import add_models, add_selfcheck, gate
from bundler.assembly.python_env import add_python
from bundler.assembly.runtime import add_runtime
from bundler.assembly.runtime_package import add_runtime_package
from bundler.assembly.sdk import add_sdk
from bundler.assembly.signature_policy import check_signatures

Part = Callable[[Assembly, BuildInputs], None]


@dataclass(frozen=True, kw_only=True)
class PlatformParts:
    """The parts only some targets have, which their backend brings (see the module docstring for the slots)."""

    bundle_tools: tuple[Part, ...]
    native: tuple[Part, ...]


def parts_for(platform: PlatformParts) -> tuple[Part, ...]:
    """Every part of a bundle for the target whose backend brings `platform`, in the order they run."""
    return (
        add_runtime,
        add_python,
        add_runtime_package,
        add_engine,
        *platform.bundle_tools,
        add_entry_point,
        add_selfcheck,
        add_gpu,
        add_sdk,
        *platform.native,
        add_models,
        add_scripts,
        check_signatures,
        add_licenses,
    )


def add_all(assembly: Assembly, build: BuildInputs, *, parts: tuple[Part, ...]) -> None:
    """Run the parts (`parts_for`, from the target's backend) in order, the model gate (`models.gate`) beside them.

    A first build spends about half a second in the gate's ORT process; on its own thread it overlaps the
    parts before `add_models`, which takes its records (or its error) at its place in the order. Should an
    earlier part fail, its error is the build's, after the gate's process has ended.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="model-gate") as pool:
        if add_models in parts:
            build = replace(build, model_gate=pool.submit(gate, build))
        for part in parts:
            part(assembly, build)
