"""The models part: every model passes the gate in the pinned ORT; the self-check and its identity model ship beside them.

The models' records (signature, reference outputs) are pinned in the lock by `ort-bundler lock`
(`pin_models`); the build checks that the pinned ORT reproduces them and ships the pinned record, so the
zip never depends on how the build machine's CPU rounds.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from bundler.assembly.assembly import Assembly, BuildInputs
from bundler.assembly.facts import SelfCheckFact
from bundler.assembly.modelgate import DataFile, ModelInput, ModelRecord, gate_models, gate_pinned
from bundler.assembly.ortenv import host_has_ort, host_wheels, isolated_requirements
from bundler.assembly.shipped_package import INSTALL_DIR, INSTALLED_START_FILE
from bundler.errors import ManifestError
from bundler.manifest import Manifest
from bundler.shipped.ort_bundle.synth import SYNTH_VERSION
from bundler.sources.cache import Cache, cached_sha256
from bundler.sources.gate import GATE_KEY_PREFIX, gate_problem
from bundler.sources.lock import GATE_WHEELS, Lock, PinnedModel

log = logging.getLogger(__name__)


def model_inputs(manifest: Manifest, files: Mapping[str, Path]) -> list[ModelInput]:
    return [ModelInput(name=m.name, path=files[m.source.key], sha256=cached_sha256(files[m.source.key]),
                       shapes=m.shapes,
                       data=tuple(DataFile(location=d.location, path=files[d.source.key],
                                           sha256=cached_sha256(files[d.source.key])) for d in m.data))
            for m in manifest.models]


def gate_wheels(manifest: Manifest, files: Mapping[str, Path], lock: Lock | None) -> tuple[Path, ...]:
    """The verified wheels the gate's environment is made from on this machine (`ortenv.isolated_python`).

    The lock's [gate] wheels where they are inputs (`bundler/sources/gate.py`: `files` holds them); else the
    bundle's own ORT and NumPy when this machine can install them; else none, and pip brings ORT and NumPy
    from the index, wheels only but not held to any hash, which is said as a warning (unless this
    interpreter has the pinned ORT itself, when no environment is made).
    """
    pinned = {key.removeprefix(GATE_KEY_PREFIX): path for key, path in files.items() if key.startswith(GATE_KEY_PREFIX)}
    if sorted(pinned) == sorted(GATE_WHEELS):
        return pinned["onnxruntime"], pinned["numpy"]
    own = host_wheels(path for key, path in files.items() if not key.startswith(GATE_KEY_PREFIX))
    if not own and manifest.models and not host_has_ort(manifest.ort.version):
        relock = f"`ort-bundler lock {manifest.path.name}` on this kind of machine pins them in a [gate] table"
        log.warning("warning: the model gate's wheels are not hash-pinned: %s; pip installs %s from the index "
                    "(wheels only, no hashes); %s", gate_problem(lock) or "the lock pins none",
                    " ".join(isolated_requirements(manifest.ort.version)), relock)
    return own


def pin_models(manifest: Manifest, files: Mapping[str, Path], cache: Cache,
               *, previous: Sequence[PinnedModel] = (), lock: Lock | None = None) -> tuple[PinnedModel, ...]:
    """`lock`'s part: run the gate once in the pinned ORT and pin what it records, so builds need not.

    A model the previous lock pinned for the same sha256, ORT version and shapes keeps its record: the
    references are computed once, and re-locking on a machine that rounds differently changes nothing.
    `files` also holds the verified wheels the gate's environment may be made from (`gate_wheels`: the lock's
    NumPy, or its [gate] wheels).
    """
    inputs = model_inputs(manifest, files)
    kept = {p.name: p for p in previous if _still_pinned(p, manifest, inputs)}
    fresh = gate_models([m for m in inputs if m.name not in kept], ort_version=manifest.ort.version,
                        work_dir=cache.work_dir("ort-envs"), wheels=gate_wheels(manifest, files, lock))
    pinned = {r.name: PinnedModel(name=r.name, sha256=r.sha256, ort_version=manifest.ort.version,
                                  record=r.pinned_json()) for r in fresh}
    return tuple(kept.get(m.name) or pinned[m.name] for m in inputs)


def _still_pinned(pinned: PinnedModel, manifest: Manifest, inputs: Sequence[ModelInput]) -> bool:
    model = next((m for m in inputs if m.name == pinned.name), None)
    if model is None or model.sha256 != pinned.sha256 or pinned.ort_version != manifest.ort.version:
        return False
    try:
        record = ModelRecord.from_pinned(name=pinned.name, sha256=pinned.sha256, text=pinned.record)
    except (ManifestError, ValueError):
        return False
    shapes = {name: [int(dim) for dim in shape] for name, shape in sorted(model.shapes.items())}
    same_inputs = record.reference.get("synth", 1) == SYNTH_VERSION  # pinned on inputs synthesised as today
    return record.shapes == shapes and record.data == model.data_hashes and same_inputs


def gate(build: BuildInputs) -> list[ModelRecord]:
    """Every model passes the gate in the pinned ORT version: the records the lock pins, checked.

    It reads only the build's inputs and spends its time waiting on ORT in a process of its own, so
    `parts.add_all` runs it on a thread beside the parts before `add_models`.
    """
    manifest, cache = build.manifest, build.cache
    inputs = model_inputs(manifest, build.files)
    pinned = pinned_records(manifest, build.lock, inputs)
    return gate_pinned(inputs, pinned, ort_version=manifest.ort.version, work_dir=cache.work_dir("ort-envs"),
                       results_dir=cache.work_dir("gate-results"), wheels=gate_wheels(manifest, build.files, build.lock))


def add_models(assembly: Assembly, build: BuildInputs) -> None:
    """The models that passed the gate, and the signature and reference the lock pins for each."""
    records = build.model_gate.result() if build.model_gate is not None else gate(build)
    for model in model_inputs(build.manifest, build.files):  # external data beside its model, at the location its tensors name
        for name, path, sha256 in [(f"{model.name}.onnx", model.path, model.sha256),
                                   *((data.location, data.path, data.sha256) for data in model.data)]:
            assembly.add_file(f"payload/models/{name}", path, sha256)
            assembly.plan_copy(f"payload/models/{name}", f"models/{name}")
    assembly.facts.models = tuple({**r.to_json(), "file": f"models/{r.name}.onnx"} for r in records)


def pinned_records(manifest: Manifest, lock: Lock | None, inputs: Sequence[ModelInput]) -> dict[str, ModelRecord]:
    """The lock's record of every model, or one error naming each model the lock does not describe as it is now."""
    if not inputs:
        return {}
    relock = f"run `ort-bundler lock {manifest.path.name}`"
    if lock is None:
        msg = (f"{manifest.path.name}: the models' references are pinned in the lock file, but python.lock is "
               f"missing; {relock} and add `lock = \"<file>\"` under [python]")
        raise ManifestError(msg)
    by_name = {model.name: model for model in lock.models}
    lock_name = manifest.python.lock.name if manifest.python.lock else "the lock file"
    problems, records = [], {}
    for model in inputs:
        entry = by_name.get(model.name)
        if entry is None:
            problems.append(f"{lock_name}: {model.label} has no pinned reference; {relock} again")
        elif entry.sha256 != model.sha256:
            problems.append(f"{lock_name}: {model.label} changed (sha256 {model.sha256}, the lock pins {entry.sha256}); "
                            f"{relock} again")
        elif entry.ort_version != manifest.ort.version:
            problems.append(f"{lock_name}: {model.label} was pinned with ORT {entry.ort_version}, the manifest pins "
                            f"{manifest.ort.version}; {relock} again")
        else:
            record = ModelRecord.from_pinned(name=entry.name, sha256=entry.sha256, text=entry.record)
            shapes = {name: [int(dim) for dim in shape] for name, shape in sorted(model.shapes.items())}
            if record.shapes != shapes:
                problems.append(f"{lock_name}: {model.label} was pinned for shapes {record.shapes}, the manifest "
                                f"gives {shapes}; {relock} again")
            elif record.data != model.data_hashes:
                problems.append(f"{lock_name}: {model.label} was pinned with the external data {record.data or 'none'}, "
                                f"the manifest pins {model.data_hashes or 'none'}; {relock} again")
            records[model.name] = record
    if problems:
        raise ManifestError(problems)
    return records


def add_selfcheck(assembly: Assembly, build: BuildInputs) -> None:
    """Where the install's self-check and its identity model are: programs and data of the shipped package, which
    shipped_package adds and installs under installer/ort_bundle/ (`__main__.py selfcheck`)."""
    assembly.facts.selfcheck = SelfCheckFact(identity_model=f"{INSTALL_DIR}/selfcheck/identity.onnx",
                                             script=INSTALLED_START_FILE)
