"""The parts of a bundle, in the order they run.

Each part is a function `(Assembly, BuildInputs) -> None` that turns cached inputs into members of the
assembly and sets its own facts (`bundler.assembly.facts`); a later part reads the facts of earlier
ones. The order is the only place the parts meet, and `parts_for` holds it; a platform backend
(`bundler.platforms`) brings the parts only its target has and gets them placed in their slots:
`bundle_tools` after the engine (what runs from the unpacked bundle), `gpu` (the target's GPU routes, which read its
own binary format) after the self-check, and `native` after the SDK and before the models and scripts. Why a part must come after others is data (`After`): the rules below and the backend's own
for its native parts, checked by `parts_for` each time it places them.
The records (bundle.json, install-plan.json) and then the SBOM are written after all parts, by
`bundler.operations.build`, because they describe everything the parts added.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from bundler.assembly.assembly import Assembly, BuildInputs
from bundler.assembly.launch import add_engine, add_entry_point, add_scripts
from bundler.assembly.licenses import add_licenses
from bundler.assembly.models import add_models, add_selfcheck, gate
from bundler.assembly.python_env import add_python
from bundler.assembly.runtime import add_runtime
from bundler.assembly.sdk import add_sdk
from bundler.assembly.shipped_package import add_shipped_package
from bundler.assembly.signature_policy import check_signatures

Part = Callable[[Assembly, BuildInputs], None]


@dataclass(frozen=True, kw_only=True)
class After:
    """`part` runs after every part in `needs`, because `why`."""

    part: Part
    needs: tuple[Part, ...]
    why: str


@dataclass(frozen=True, kw_only=True)
class PlatformParts:
    """The parts only some targets have, which their backend brings (see the module docstring for the slots),
    and the order its native parts need among themselves."""

    bundle_tools: tuple[Part, ...]
    #: Sets `facts.gpu` (None without a `[gpu]` table) and ships the GPU libraries.
    gpu: Part
    native: tuple[Part, ...]
    order: tuple[After, ...] = ()


def _order(gpu: Part) -> tuple[After, ...]:
    """What every target's parts need of each other, its GPU part among them."""
    return (
        After(part=add_sdk, needs=(gpu,), why="the SDK's property sheet copies the GPU DLLs"),
        After(part=check_signatures, needs=(add_runtime, add_python, add_shipped_package, add_engine, add_entry_point,
                                            gpu, add_sdk, add_models),
              why="the signature policy reads every member that carries a binary"),
        After(part=add_licenses, needs=(add_python, add_runtime, gpu, add_sdk, add_models),
              why="the licences cover every member that carries one"),
    )


def _native_order(native: tuple[Part, ...], gpu: Part) -> tuple[After, ...]:
    """The slot's rules: what places a DLL beside a native program runs before the native parts (those DLLs join
    the closure they check), and the scripts after them (they enforce the VC++ minimum the closure finds)."""
    before = (add_python, gpu, add_entry_point, add_sdk)
    return (*(After(part=part, needs=before, why="the interpreter's, GPU, entry point's and SDK's DLLs join the "
                                                 "closure the native parts check") for part in native),
            After(part=add_scripts, needs=native, why="the scripts enforce the VC++ minimum the native parts find"))


def parts_for(platform: PlatformParts) -> tuple[Part, ...]:
    """Every part of a bundle for the target whose backend brings `platform`, in the order they run."""
    parts = (
        add_runtime,
        add_python,
        add_shipped_package,
        add_engine,
        *platform.bundle_tools,
        add_entry_point,
        add_selfcheck,
        platform.gpu,
        add_sdk,
        *platform.native,
        add_models,
        add_scripts,
        check_signatures,
        add_licenses,
    )
    for rule in (*_order(platform.gpu), *_native_order(platform.native, platform.gpu), *platform.order):
        _check(rule, parts)
    return parts


def _check(rule: After, parts: tuple[Part, ...]) -> None:
    if rule.part not in parts:
        return
    late = [need.__name__ for need in rule.needs if need in parts and parts.index(need) > parts.index(rule.part)]
    if late:
        msg = f"part {rule.part.__name__} is placed before {', '.join(late)}; expected it after them: {rule.why}"
        raise AssertionError(msg)


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
