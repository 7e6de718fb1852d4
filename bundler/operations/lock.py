"""`ort-bundler lock`: pin, for the target, what depends on more than the manifest's hashes.

Two things are resolved once, on the connected machine, and written into the lock file beside the
manifest: the ORT wheel's Python dependency closure for the target platform and Python, and each model's
gate record in the pinned ORT (signature and reference outputs), so that `build` ships the same bytes on
every machine however its CPU rounds. When this machine cannot install the bundle's own ORT and NumPy
wheels, a third: its own wheels of those versions for the model gate, in a [gate] table
(`bundler/sources/gate.py`). And the licence of every locked wheel whose metadata names none with certainty,
concluded from the licence text it ships, so that `build` does not match texts (bundler/sources/license_pins.py):
`lock` therefore fetches every wheel it locks.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from bundler.assembly.gpu_pairs import distribution_problems, pair_problems, read_ort_build
from bundler.assembly.licenses import license_pins
from bundler.assembly.models import pin_models
from bundler.assembly.ortenv import gate_requirements, host_wheels
from bundler.assembly.python_env import lock_requirements, ort_wheel
from bundler.errors import BuildError, ManifestError, UsageError
from bundler.manifest import Manifest
from bundler.readers.onnx_limits import too_new_sentence
from bundler.runner import Runner, run
from bundler.sources.cache import Cache
from bundler.sources.fetch import FetchOptions, fetch_inputs
from bundler.sources.gate import host_installable, host_target, pinned_inputs
from bundler.sources.inputs import INSTALLER_KEY, lock_inputs, require_local_files, require_local_pins, target_of
from bundler.sources.lock import GateWheels, Lock, PinnedModel, Target, read_lock, write_lock
from bundler.sources.resolve import resolve, resolve_gate, resolve_installer

log = logging.getLogger(__name__)


def default_lock_path(manifest: Manifest) -> Path:
    return manifest.python.lock or manifest.path.with_name(manifest.path.stem + ".lock.toml")


def lock_manifest(manifest: Manifest, *, cache: Cache, options: FetchOptions, runner: Runner = run) -> tuple[Lock, Path]:
    """Resolve ORT's dependencies (plus [python] requirements) for the target, pin the models, write the lock file."""
    source = manifest.ort.python_source
    if source is None and not manifest.models:
        msg = (f"{manifest.path.name}: [ort] has neither 'wheel' nor 'capi' and there are no [[models]], "
               "so there is nothing to lock")
        raise UsageError(msg)
    target = target_of(manifest)
    inputs = ([source] if source is not None else []) + [i for model in manifest.models for i in model.inputs()]
    require_local_files(inputs, manifest.path.parent)
    require_local_pins(manifest.inputs(), manifest.path.parent)
    files = fetch_inputs(inputs, cache=cache, target=target, options=options, runner=runner)
    require_loadable_models(manifest, files)
    with cache.scratch(prefix="lock-") as tmp:
        lock = Lock(target=target, requirements=(), wheels=())
        if source is not None:
            requires = ort_wheel(manifest, files, Path(tmp)).requires
            build = read_ort_build(files[source.key])
            _refuse(pair_problems(manifest, build))
            lock = resolve(lock_requirements(manifest, requires), target=target, runner=runner, work_dir=Path(tmp))
            _refuse(distribution_problems(manifest, build, ((w.name, w.version) for w in lock.wheels)))
        lock = replace(lock, installer=resolve_installer(target=target, runner=runner, work_dir=Path(tmp)))
        lock = _pin_licenses(lock, cache=cache, options=options, runner=runner)
        if manifest.models:
            lock, wheels = _gate_wheels(manifest, lock, files, cache=cache, options=options, runner=runner,
                                        work_dir=Path(tmp))
            files = {**files, **wheels}
    path = default_lock_path(manifest)
    lock = replace(lock, models=pin_models(manifest, files, cache, previous=_previous_pins(path), lock=lock))
    write_lock(lock, path)
    for warning in flat_references(manifest, lock.models):
        log.warning("warning: %s", warning)
    return lock, path


def _refuse(problems: list[str]) -> None:
    """A wrong GPU pair or a second ORT distribution (bundler/assembly/gpu_pairs.py), before the lock is written."""
    if problems:
        raise ManifestError(" ".join(problems))


def require_loadable_models(manifest: Manifest, files: Mapping[str, Path]) -> None:
    """Refuse, before the dependency resolution and the gate's environment (tens of seconds), a model stamped with
    an IR version or opset newer than the pinned ORT loads, with how to re-save it: ORT's own refusal came at the
    end, as C++ text (issue 38, item 5). Every such model named, by the path the manifest wrote."""
    if not manifest.models:
        return
    import onnx

    problems = []
    for i, model in enumerate(manifest.models):
        try:
            proto = onnx.load(str(files[model.source.key]), load_external_data=False)
        except Exception:  # protobuf's errors vary; the gate names an unreadable model itself
            continue
        opsets = {entry.domain or "ai.onnx": int(entry.version) for entry in proto.opset_import}
        label = f"models[{i}] ({model.source.as_written})"
        if sentence := too_new_sentence(label, int(proto.ir_version), opsets, manifest.ort.version):
            problems.append(sentence)
    if problems:
        raise BuildError("\n".join(problems))


def flat_references(manifest: Manifest, models: Sequence[PinnedModel]) -> list[str]:
    """One sentence per reference output that is all zeros or one constant on the synthesised inputs.

    Such a reference proves nothing: the install's self-check would accept any other model with the same
    signature (a ReLU model fed only negative numbers pinned zeros whatever its weights, issue 38 item 9).
    A warning, not an error: a model may really be constant on these inputs; the user decides.
    """
    written = {m.name: f"models[{i}] ({m.source.as_written})" for i, m in enumerate(manifest.models)}
    found = []
    for pinned in models:
        outputs = json.loads(pinned.record).get("reference", {}).get("outputs", {})
        for name, output in sorted(outputs.items()):
            values = output.get("values") if isinstance(output, dict) else None
            if not values or any(v != values[0] for v in values):
                continue
            if values[0] == 0:
                what = "all zeros"
            elif len(values) > 1:
                what = f"the constant {values[0]!r} in every element"
            else:
                continue
            found.append(f"{written.get(pinned.name, pinned.name)}: the reference output '{name}' is {what} on the "
                         "synthesised inputs, so the install's self-check cannot tell this model from another with "
                         "the same signature; check the model, or give [[models]] shapes that exercise it")
    return found


def _pin_licenses(lock: Lock, *, cache: Cache, options: FetchOptions, runner: Runner) -> Lock:
    """Every locked wheel fetched (held to its hash, as the build will be) and its licence concluded."""
    wheels = fetch_inputs(lock_inputs(lock), cache=cache, target=lock.target, options=options, runner=runner)
    locked = {INSTALLER_KEY: lock.installer} | {f"lock:{wheel.name}": wheel for wheel in lock.wheels}
    return replace(lock, licenses=license_pins((wheel, wheels[key]) for key, wheel in locked.items() if wheel))


def _gate_wheels(manifest: Manifest, lock: Lock, files: Mapping[str, Path], *, cache: Cache, options: FetchOptions,
                 runner: Runner, work_dir: Path) -> tuple[Lock, dict[str, Path]]:
    """The verified wheels the model gate's environment is made from here, and the lock with its [gate] table
    when they are this machine's own rather than the bundle's (a win_amd64 bundle locked on Linux)."""
    numpy = [i for i in lock_inputs(lock) if i.key == "lock:numpy" and host_installable(i.filename or "")]
    own = fetch_inputs(numpy, cache=cache, target=target_of(manifest), options=options, runner=runner) if numpy else {}
    if host_wheels([*files.values(), *own.values()]):
        return lock, own  # the bundle's own ORT and NumPy install here: nothing more to pin
    host = host_target()
    if host is None:
        return lock, {}  # a machine no [gate] table can describe: the gate says it is unpinned
    gate = _resolve_gate(manifest, lock, host=host, runner=runner, work_dir=work_dir)
    inputs = pinned_inputs(gate)
    wheels = fetch_inputs(inputs, cache=cache, target=host, options=options, runner=runner)
    return replace(lock, gate=gate), wheels


def _resolve_gate(manifest: Manifest, lock: Lock, *, host: Target, runner: Runner, work_dir: Path) -> GateWheels:
    """This machine's ORT of the pinned version and NumPy of the bundle's version; another NumPy the ORT
    imports with when that version has no wheel here (the bundle's Python is older than this one)."""
    numpy = next((wheel.version for wheel in lock.wheels if wheel.name == "numpy"), None)
    preferred = gate_requirements(manifest.ort.version, numpy)
    try:
        return resolve_gate(preferred, host=host, runner=runner, work_dir=work_dir / "gate")
    except BuildError as exc:
        fallback = gate_requirements(manifest.ort.version, None)
        if fallback == preferred:
            raise
        log.warning("warning: %s has no wheel for this machine (%s / Python %s), so the model gate pins %s: %s",
                    preferred[1], host.platform, host.python, fallback[1], str(exc).splitlines()[0])
        return resolve_gate(fallback, host=host, runner=runner, work_dir=work_dir / "gate")


def _previous_pins(path: Path) -> tuple[PinnedModel, ...]:
    """The models the existing lock pins, or none when there is no readable lock to keep them from."""
    if not path.is_file():
        return ()
    try:
        return read_lock(path).models
    except ManifestError:
        return ()
