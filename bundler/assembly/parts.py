"""The parts of a bundle, in the order they run.

Each part is a function `(Assembly, BuildInputs) -> None` that turns cached inputs into members of the
assembly and sets its own facts (`bundler.assembly.facts`); a later part reads the facts of earlier
ones. The order is the only place the parts meet: the bundled interpreter before the Windows checks (which
resolve python3XY.dll and its VC++ DLLs from its folder); the GPU part before the SDK (its property sheet copies
the GPU DLLs) and the Windows checks (the GPU DLLs join the closure); the entry point, the SDK and the GPU
part before the app-local runtime (which places their DLLs beside a native program), and that before the
Windows checks (which resolve the program's imports from its folder); the Windows checks before VC_redist
(its version must meet their minimum) and the scripts (which enforce it on the target); signatures and licences after every member that carries a binary or a licence.
The records (bundle.json, install-plan.json) and then the SBOM are written after all parts, by
`bundler.commands.build`, because they describe everything the parts added.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from bundler.assembly.applocal import add_app_local_runtime
from bundler.assembly.assembly import Assembly, BuildInputs
from bundler.assembly.gpu import add_gpu
from bundler.assembly.launch import add_bundle_tools, add_engine, add_entry_point, add_scripts
from bundler.assembly.licenses import add_licenses
from bundler.assembly.models import add_models, add_selfcheck, gate
from bundler.assembly.python_env import add_python
from bundler.assembly.runtime import add_runtime
from bundler.assembly.runtime_package import add_runtime_package
from bundler.assembly.sdk import add_sdk
from bundler.assembly.signature_policy import check_signatures
from bundler.assembly.windows import add_vc_redist, check_windows

Part = Callable[[Assembly, BuildInputs], None]

PARTS: tuple[Part, ...] = (
    add_runtime,
    add_python,
    add_runtime_package,
    add_engine,
    add_bundle_tools,
    add_entry_point,
    add_selfcheck,
    add_gpu,
    add_sdk,
    add_app_local_runtime,
    check_windows,
    add_vc_redist,
    add_models,
    add_scripts,
    check_signatures,
    add_licenses,
)


def add_all(assembly: Assembly, build: BuildInputs, *, parts: tuple[Part, ...] = PARTS) -> None:
    """Run the parts in order, the model gate (`models.gate`) beside them from the start.

    A first build spends about half a second in the gate's ORT process; on its own thread it overlaps the
    parts before `add_models`, which takes its records (or its error) at its place in the order. Should an
    earlier part fail, its error is the build's, after the gate's process has ended.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="model-gate") as pool:
        if add_models in parts:
            build = replace(build, model_gate=pool.submit(gate, build))
        for part in parts:
            part(assembly, build)
