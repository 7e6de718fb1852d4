"""The models part: every model passes the gate in the pinned ORT; the self-check and its identity model ship beside them."""

from __future__ import annotations

from bundler.assembly.assembly import Assembly, BuildInputs
from bundler.assembly.facts import SelfCheckFact
from bundler.readers.modelgate import (
    ModelInput,
    gate_models,
    identity_model_bytes,
    selfcheck_script_bytes,
)
from bundler.sources.cache import cached_sha256


def add_models(assembly: Assembly, build: BuildInputs) -> None:
    """Every model passes the gate in the pinned ORT version; its signature and reference output are recorded."""
    manifest, files, cache = build.manifest, build.files, build.cache
    inputs = [ModelInput(name=m.name, path=files[m.source.key], sha256=cached_sha256(files[m.source.key]),
                         shapes=m.shapes) for m in manifest.models]
    records = gate_models(inputs, ort_version=manifest.ort.version, work_dir=cache.work_dir("ort-envs"))
    for model in inputs:
        bundle_path = f"payload/models/{model.name}.onnx"
        assembly.add_file(bundle_path, model.path, model.sha256)
        assembly.install(bundle_path, f"models/{model.name}.onnx")
    assembly.facts.models = tuple({**r.to_json(), "file": f"models/{r.name}.onnx"} for r in records)


def add_selfcheck(assembly: Assembly, build: BuildInputs) -> None:
    """The self-check script and its identity model, installed under selfcheck/."""
    for name, data in (("selfcheck.py", selfcheck_script_bytes()), ("identity.onnx", identity_model_bytes())):
        assembly.add_bytes(f"payload/selfcheck/{name}", data)
        assembly.install(f"payload/selfcheck/{name}", f"selfcheck/{name}")
    assembly.facts.selfcheck = SelfCheckFact(identity_model="selfcheck/identity.onnx", script="selfcheck/selfcheck.py")
