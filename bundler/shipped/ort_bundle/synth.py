"""Deterministic model inputs and output fingerprints, shared by the build and the self-check.

The build records a reference output for every model; the self-check on the target recomputes it
and compares. Both must feed the model byte-identical inputs, so both use this one module: the build
imports it, and the shipped self-check (ort_bundle.selfcheck) imports the very same file.
It runs on the target, so it uses only the standard library and numpy, and imports numpy inside the
functions: a missing numpy must become a failed check in the self-check's report, not a traceback.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

# ONNX element types as ORT's NodeArg.type spells them, mapped to numpy dtype names.
ELEMENT_DTYPES = {
    "tensor(float)": "float32",
    "tensor(double)": "float64",
    "tensor(float16)": "float16",
    "tensor(int8)": "int8",
    "tensor(int16)": "int16",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(uint8)": "uint8",
    "tensor(uint16)": "uint16",
    "tensor(uint32)": "uint32",
    "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}

# Bytes per element of each type above: sizes are bounded before numpy or ORT allocates anything.
ELEMENT_BYTES = {"float32": 4, "float64": 8, "float16": 2, "int8": 1, "int16": 2, "int32": 4, "int64": 8,
                 "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1}
# What one probe may ask for: the synthesised inputs together as many elements as a manifest's `shapes` may
# ask for (manifest.MAX_SHAPE_ELEMENTS) and at most 128 MiB, and each output the model declares at most
# 1 GiB (its dynamic dimensions counted as 1, so only what is certainly too big is refused). A static
# [2**31, 4] input escapes the manifest's check, which sees only the shapes it is given.
MAX_INPUT_ELEMENTS = 1 << 24
MAX_INPUT_BYTES = 1 << 27
MAX_OUTPUT_BYTES = 1 << 30

# How many leading output values a reference keeps: all of a small output, a sample of a large one.
REFERENCE_VALUES = 1024
DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-5


def is_dynamic(dim: object) -> bool:
    """ORT reports a symbolic dimension as its name and an unknown one as None (or -1)."""
    return not isinstance(dim, int) or dim < 0


def resolve_shape(spec: Mapping[str, Any], shapes: Mapping[str, Sequence[int]] | None) -> list[int]:
    """The concrete shape for one input: a `[[models]]` shape where given, else dynamic dims become 1."""
    declared = list(spec["shape"] or [])
    given = (shapes or {}).get(spec["name"])
    if given is None:
        return [1 if is_dynamic(dim) else dim for dim in declared]
    given = [int(dim) for dim in given]
    if len(given) != len(declared):
        msg = f"input '{spec['name']}' has shape {declared} but the given shape {given} has rank {len(given)}"
        raise ValueError(msg)
    for declared_dim, given_dim in zip(declared, given):
        if given_dim < 1 or (not is_dynamic(declared_dim) and declared_dim != given_dim):
            msg = f"input '{spec['name']}' has shape {declared} but the given shape is {given}"
            raise ValueError(msg)
    return given


def size_problem(inputs: list[dict[str, Any]], outputs: list[dict[str, Any]],
                 shapes: Mapping[str, Sequence[int]] | None = None) -> str | None:
    """The sentence naming the first tensor a probe must not allocate, or None; decided from the signature
    alone, before an input is made or the model runs. Shapes that do not fit are left to
    `synthesize_inputs`, whose message says so."""
    elements = size = 0
    for spec in inputs:
        dtype = ELEMENT_DTYPES.get(spec["type"])
        try:
            shape = resolve_shape(spec, shapes)
        except ValueError:
            return None
        elements += math.prod(shape)
        size += math.prod(shape) * ELEMENT_BYTES.get(dtype or "", 1)
        if elements > MAX_INPUT_ELEMENTS or size > MAX_INPUT_BYTES:
            return (f"input '{spec['name']}' is {dtype or spec['type']}{shape}: the synthesised inputs would hold "
                    f"{elements} elements, {size} bytes, above the limit of {MAX_INPUT_ELEMENTS} elements and "
                    f"{MAX_INPUT_BYTES} bytes")
    for spec in outputs:
        dtype = ELEMENT_DTYPES.get(spec["type"])
        if dtype is None:
            continue
        shape = [1 if is_dynamic(dim) else dim for dim in spec["shape"] or []]
        if (declared := math.prod(shape) * ELEMENT_BYTES[dtype]) > MAX_OUTPUT_BYTES:
            return (f"output '{spec['name']}' is declared {dtype}{list(spec['shape'] or [])}: at least {declared} "
                    f"bytes, above the limit of {MAX_OUTPUT_BYTES} bytes for one output")
    return None


# The synthesised inputs' definition: a reference records it, so a lock pinned with another definition is pinned
# again (`assembly/models.py`) instead of failing every build. 1 was a ramp that began at -125 and stayed negative
# for the first 125 elements, so a small ReLU model's reference was all zeros whatever its weights (issue 38, 9).
SYNTH_VERSION = 2
# The seed of the element hash below: fixed, so every machine and every run feeds the same bytes.
SYNTH_SEED = 0x5EED0001
_MASK32 = 0xFFFFFFFF


def element_hash(index: Any) -> Any:
    """A 32-bit hash of each element index (murmur3's finaliser over index + seed): well mixed from the
    first element on, defined by integer arithmetic alone (no random generator whose stream may change
    between numpy versions), and the same in tests/native/ortprobe.c."""
    import numpy as np

    h = (np.asarray(index, dtype=np.uint64) + SYNTH_SEED) & _MASK32
    h = h ^ (h >> np.uint64(16))
    h = (h * np.uint64(0x85EBCA6B)) & _MASK32
    h = h ^ (h >> np.uint64(13))
    h = (h * np.uint64(0xC2B2AE35)) & _MASK32
    return h ^ (h >> np.uint64(16))


def synthesize_inputs(inputs: list[dict[str, Any]], shapes: Mapping[str, Sequence[int]] | None = None,
                      version: int = SYNTH_VERSION) -> dict[str, Any]:
    """Inputs that are the same bytes on every machine and exercise signs and fractions.

    With h(i) the seeded hash of element index i (restarting at 0 for every input), element i is:
    float: ((h(i) % 251) - 125) / 16.0, both signs from the first element (exact in every float type);
    signed ints: (h(i) % 251) - 125 clipped to the type; unsigned ints: h(i) % 251 clipped; bool: h(i) odd.
    `version` 1, what references pinned before synth 2 were computed on, is h(i) = i (the ramp
    ((i % 251) - 125) / 16, bool i % 2): a reference is always checked on the inputs it was computed on.
    """
    import numpy as np

    if version not in (1, SYNTH_VERSION):
        msg = f"the reference was computed on synthesised inputs of definition {version}, which this check does not know"
        raise ValueError(msg)
    unknown = sorted(set(shapes or {}) - {spec["name"] for spec in inputs})
    if unknown:
        msg = f"shapes are given for {unknown}, which are not inputs of the model"
        raise ValueError(msg)
    feeds = {}
    for spec in inputs:
        dtype_name = ELEMENT_DTYPES.get(spec["type"])
        if dtype_name is None:
            msg = f"input '{spec['name']}' has type {spec['type']}, for which no input can be synthesised"
            raise ValueError(msg)
        shape = resolve_shape(spec, shapes)
        index = np.arange(math.prod(shape), dtype=np.uint64)
        hashed = element_hash(index) if version == SYNTH_VERSION else index
        spread = (hashed % np.uint64(251)).astype(np.int64)
        dtype = np.dtype(dtype_name)
        if dtype.kind == "f":
            values = ((spread - 125) / 16.0).astype(dtype)
        elif dtype.kind == "b":
            values = (hashed & np.uint64(1)) == 1
        else:
            limits = np.iinfo(dtype)
            ramp = spread if dtype.kind == "u" and version == SYNTH_VERSION else spread - 125
            values = np.clip(ramp, limits.min, limits.max).astype(dtype)
        feeds[spec["name"]] = values.reshape(shape)
    return feeds


def output_digest(array: Any) -> str:
    """sha256 of the C-contiguous little-endian bytes, so the digest does not depend on the host's byte order."""
    import numpy as np

    array = np.asarray(array)
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return hashlib.sha256(np.ascontiguousarray(little).tobytes()).hexdigest()


def describe_io(args: Any) -> list[dict[str, Any]]:
    """The signature of ORT NodeArgs as bundle.json records it."""
    return [{"name": arg.name, "type": arg.type, "shape": list(arg.shape or [])} for arg in args]


def summarize_output(value: Any) -> dict[str, Any]:
    """What a reference keeps of one output; a non-tensor output (a map, a sequence) is recorded as such."""
    import numpy as np

    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        return {"kind": type(value).__name__, "digest": None}
    return {
        "shape": list(value.shape),
        "dtype": str(value.dtype),
        "digest": output_digest(value),
        "values": [_json_number(v) for v in value.ravel()[:REFERENCE_VALUES].tolist()],
    }


def _json_number(value: Any) -> Any:
    """JSON has no NaN or infinity (PowerShell's ConvertFrom-Json refuses them): those become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def reference_record(feeds: Mapping[str, Any], outputs: list[dict[str, Any]], results: Sequence[Any],
                     synth: int = SYNTH_VERSION) -> dict[str, Any]:
    """The reference the self-check compares with: input digests prove both sides fed the same bytes, and
    `synth` says which definition made them (absent: 1, as every record before it was written)."""
    record = {
        "inputs": {name: output_digest(array) for name, array in feeds.items()},
        "outputs": {spec["name"]: summarize_output(value) for spec, value in zip(outputs, results)},
        "rtol": DEFAULT_RTOL,
        "atol": DEFAULT_ATOL,
    }
    if synth != 1:
        record["synth"] = synth
    return record


def compare_output(name: str, value: Any, recorded: Mapping[str, Any], *, rtol: float, atol: float) -> str | None:
    """None when an output matches its reference, else one sentence saying how it differs.

    Equal digests are a bit-exact match. Otherwise the recorded values decide within the tolerance
    (another CPU may round differently); but when they hold the whole output and equal it bit for bit,
    a differing digest means the record itself was altered.
    """
    import numpy as np

    if recorded.get("digest") is None:
        return None
    if not isinstance(value, np.ndarray):
        return f"output '{name}' is a {type(value).__name__}, but the build recorded a tensor"
    if list(value.shape) != list(recorded["shape"]) or str(value.dtype) != recorded["dtype"]:
        return (f"output '{name}' is {value.dtype}{list(value.shape)}, "
                f"but the build recorded {recorded['dtype']}{list(recorded['shape'])}")
    if output_digest(value) == recorded["digest"]:
        return None
    expected = np.asarray([float(v) if isinstance(v, str) else v for v in recorded["values"]], dtype=value.dtype)
    actual = value.ravel()[: expected.size]
    close = np.isclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
    if not close.all():
        first = int(np.argmin(close))
        return (f"output '{name}' element {first} is {actual[first].item()!r}, the build recorded "
                f"{expected[first].item()!r} (rtol {rtol}, atol {atol})")
    if expected.size == value.size and np.array_equal(actual, expected, equal_nan=True):
        return (f"output '{name}' equals the recorded values bit for bit but not the recorded digest "
                f"{recorded['digest'][:12]}...: the reference in bundle.json was altered")
    return None


def probe_model(onnxruntime: Any, path: str, shapes: Mapping[str, Sequence[int]] | None = None,
                synth: int = SYNTH_VERSION) -> dict[str, Any]:
    """Load and run one model in the given onnxruntime module, turning ORT's failure into data.

    The build calls this through the shipped self-check's `--reference` mode in a child process with a
    memory limit (with this interpreter when it has the pinned ORT, else in an isolated environment); a
    tensor too large to allocate is refused by `size_problem` before anything is made. `synth`: the input
    definition, the pinned reference's own when a build checks one.
    """
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4  # ORT's reason arrives in the exception; its log would only repeat it.
    try:
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises a family of pybind classes; each carries its reason as text
        return {"ok": False, "stage": "load", "reason": " ".join(str(exc).split())}
    inputs = describe_io(session.get_inputs())
    outputs = describe_io(session.get_outputs())
    if too_big := size_problem(inputs, outputs, shapes):
        return {"ok": False, "stage": "size", "reason": too_big}
    try:
        feeds = synthesize_inputs(inputs, shapes, synth)
    except ValueError as exc:
        return {"ok": False, "stage": "inputs", "reason": str(exc)}
    try:
        results = session.run(None, feeds)
    except Exception as exc:
        return {"ok": False, "stage": "run", "reason": " ".join(str(exc).split())}
    return {"ok": True, "inputs": inputs, "outputs": outputs,
            "reference": reference_record(feeds, outputs, results, synth)}
