"""The newest ONNX IR version and opsets each ONNX Runtime release loads, and the sentence for a model above them.

onnx saves with its newest IR version and opset by default (IR 14, opset 28 as this is written), and ORT refuses a
model stamped newer than it implements, with C++ text, when `lock` finally loads it. Said at `init`, `inspect`
and before `lock` starts its gate, the user re-saves the model (or picks a newer ORT) at once (issue 38, item 5).

Sources: ONNX Runtime's compatibility table (onnxruntime.ai/docs/reference/compatibility.html, "ONNX opset
support") for the rows it lists; the rows marked "measured" were checked against the real wheels (an Identity
model stamped at each IR version and opset, loaded by `InferenceSession`): 1.17.1, 1.18.1, 1.22.1 and 1.23.1
(measured once; tests/unit/commands/test_first_hour_cli.py holds `init` and `lock` to these rows). `ml` is the ai.onnx.ml opset, None where not recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ModelLimits:
    """What one ORT minor release loads: the newest IR version, ai.onnx opset and ai.onnx.ml opset."""

    ir: int
    opset: int
    ml: int | None = None


# ORT major.minor -> limits. Earlier releases are older than any ORT ort-bundler bundles.
ORT_MODEL_LIMITS: dict[str, ModelLimits] = {
    "1.14": ModelLimits(ir=8, opset=18, ml=3),
    "1.15": ModelLimits(ir=9, opset=19, ml=3),
    "1.16": ModelLimits(ir=9, opset=19, ml=3),
    "1.17": ModelLimits(ir=9, opset=20, ml=4),  # measured (1.17.1)
    "1.18": ModelLimits(ir=10, opset=21, ml=5),  # measured (1.18.1)
    "1.19": ModelLimits(ir=10, opset=21),
    "1.20": ModelLimits(ir=10, opset=21),
    "1.21": ModelLimits(ir=10, opset=22),
    "1.22": ModelLimits(ir=10, opset=22, ml=5),  # measured (1.22.1)
    "1.23": ModelLimits(ir=11, opset=23, ml=5),  # measured (1.23.1)
}


def limits_for(ort_version: str) -> ModelLimits | None:
    """The limits of the ORT release `ort_version` (any patch of a minor release), or None when not recorded."""
    return ORT_MODEL_LIMITS.get(".".join(ort_version.split(".")[:2]))


def takes(ort_version: str) -> str:
    """What `ort_version` loads, in words, for a message; says so when the table has no row for it."""
    limits = limits_for(ort_version)
    if limits is None:
        return f"ort-bundler does not record which IR and opsets ONNX Runtime {ort_version} loads"
    ml = f", ai.onnx.ml opset {limits.ml}" if limits.ml is not None else ""
    return f"ONNX Runtime {ort_version} loads IR version {limits.ir} and ai.onnx opset {limits.opset}{ml} at most"


def too_new(ir_version: int, opsets: Mapping[str, int], ort_version: str) -> list[str]:
    """Each way the model is stamped newer than `ort_version` loads ("IR version 12 (at most 11)"); empty when it
    fits or when the table has no row for that release (the gate's load is then the only judge)."""
    limits = limits_for(ort_version)
    if limits is None:
        return []
    found = [f"IR version {ir_version} (at most {limits.ir})"] if ir_version > limits.ir else []
    for domain, limit in (("ai.onnx", limits.opset), ("ai.onnx.ml", limits.ml)):
        version = opsets.get(domain)
        if limit is not None and version is not None and version > limit:
            found.append(f"{domain} opset {version} (at most {limit})")
    return found


def too_new_sentence(label: str, ir_version: int, opsets: Mapping[str, int], ort_version: str) -> str | None:
    """The sentence for a model above what `ort_version` loads, with how to re-save it; None when it fits."""
    found = too_new(ir_version, opsets, ort_version)
    if not found:
        return None
    limits = limits_for(ort_version)
    assert limits is not None  # too_new found something, so the release has a row
    return (f"{label} is stamped {' and '.join(found)}, newer than ONNX Runtime {ort_version} loads; re-save it for "
            f"that release (`model = onnx.version_converter.convert_version(model, {limits.opset})`, then "
            f"`model.ir_version = {limits.ir}` before `onnx.save`, or the exporter's opset_version={limits.opset}) "
            "or pin a newer ONNX Runtime")


def minimum_release(ir_version: int, opsets: Mapping[str, int]) -> str | None:
    """The oldest recorded ORT minor release that loads the model, or None when none of them does."""
    for release in sorted(ORT_MODEL_LIMITS, key=lambda r: tuple(int(p) for p in r.split("."))):
        if not too_new(ir_version, opsets, release + ".0"):
            return release
    return None
