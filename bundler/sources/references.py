"""A pinned model's reference outputs in the lock, in a form a reviewer can read (lock format 2, issue 26).

Format 1 stored the gate's whole record as one escaped JSON string: a model with a 1,000-value output put
1,000 floats on one line, and a re-lock showed only "this line changed". Format 2 keeps that record's
small part (signature, shapes, tolerances, the input digests) as the one-line `record`, and gives every
reference output a table of its own: its digest, dtype and shape, summary statistics (count, min, max,
mean, zeros, non-finite values) a reviewer compares at a glance, and the values themselves, eight to a line,
which the build needs for bundle.json and a diff shows line by line. Joined back, the record is the very
JSON line the gate wrote (`join` inverts `split`), so builds do not depend on the format a lock is in.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

MODEL_FORMAT = 2  # the [[model]] entries `lock` writes; entries without `format` are format 1
PER_LINE = 8
SUMMARY_KEYS = ("count", "min", "max", "mean", "zeros", "not_finite")
FIELDS = ("digest", "dtype", "shape")  # an output's facts besides its values (bundler/shipped/ort_bundle/synth.py)


def canonical(data: Mapping[str, Any]) -> str:
    """The gate's own spelling of a record (`ModelRecord.pinned_json`)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


def split(record: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """(the record without the reference values, a table per reference output)."""
    data = json.loads(record)
    outputs = data.get("reference", {}).get("outputs", {})
    tables = {}
    for name, output in sorted(outputs.items()):
        values = output.get("values", [])
        tables[name] = {key: output[key] for key in FIELDS if key in output}
        tables[name].update({**summary(values), "values": _lines(values)})
        outputs[name] = {}  # named in the record, described once: in its table
    return canonical(data), tables


def join(record: str, tables: Mapping[str, Mapping[str, Any]]) -> str:
    """The gate's record again: `record` with every output's values put back from its table."""
    data = json.loads(record)
    outputs = data.get("reference", {}).get("outputs", {})
    for name, table in tables.items():
        if name in outputs:
            outputs[name] = {**{key: table[key] for key in FIELDS if key in table},
                             "values": json.loads(f"[{table['values']}]")}
    return canonical(data)


def summary(values: list[Any]) -> dict[str, Any]:
    """What a reviewer compares without reading the values: NaN and infinities are counted, not averaged."""
    numbers = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    finite = [v for v in numbers if math.isfinite(v)]
    return {"count": len(values), "min": min(finite) if finite else 0.0, "max": max(finite) if finite else 0.0,
            "mean": float(f"{sum(finite) / len(finite):.6g}") if finite else 0.0,
            "zeros": sum(1 for v in finite if v == 0), "not_finite": len(values) - len(finite)}


def problem(record: str, tables: Any) -> str | None:
    """Why a format-2 entry cannot be joined (names the output), or None."""
    if not isinstance(tables, dict):
        return "reference must be a table of outputs"
    try:
        outputs = json.loads(record).get("reference", {}).get("outputs", {})
    except (ValueError, AttributeError):
        return "record is not a JSON object"
    if set(tables) != set(outputs):
        return f"reference names outputs {sorted(tables)}, the record {sorted(outputs)}"
    for name, table in tables.items():
        if not isinstance(table, dict) or not isinstance(table.get("values"), str):
            return f"reference.{name} has no values text"
        try:
            values = json.loads(f"[{table['values']}]")
        except ValueError:
            return f"reference.{name}.values is not a list of JSON values"
        # What a reviewer reads must be what the build uses: a summary that disagrees with the values is an edit.
        stated, actual = {k: table.get(k) for k in SUMMARY_KEYS}, summary(values)
        if stated != actual:
            wrong = next(k for k in SUMMARY_KEYS if stated[k] != actual[k])
            return f"reference.{name}.{wrong} is {stated[wrong]!r}, but its values give {actual[wrong]!r}"
    return None


def _lines(values: list[Any]) -> str:
    rows = [", ".join(json.dumps(v, allow_nan=False) for v in values[i:i + PER_LINE])
            for i in range(0, len(values), PER_LINE)]
    return ",\n".join(rows) + "\n" if rows else ""
