"""How a model changed between two bundles, from what each bundle.json records about it: its pins and
signature, and how its reference outputs moved (issue 38, item 7), for `ort-bundler diff`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def record_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The recorded facts that differ ("sha256 db67a4b8fc5f… -> 1a2b…", "opsets …"), one phrase each."""
    return [f"{key} {_signature(before[key])} -> {_signature(after[key])}"
            for key in ("sha256", "opsets", "inputs", "outputs", "shapes") if before.get(key) != after.get(key)]


def reference_moves(before: Any, after: Any) -> list[str]:
    """How each reference output moved between two records, one line per output: what a reviewer needs to
    judge a model change, beyond its sha256. Outputs computed on other inputs (other shapes, another input
    definition) are not comparable value by value, and are said to be so."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return []
    old, new = before.get("outputs") or {}, after.get("outputs") or {}
    if not isinstance(old, dict) or not isinstance(new, dict):
        return []
    same_inputs = before.get("inputs") == after.get("inputs") and before.get("synth") == after.get("synth")
    lines = []
    for output in sorted(set(old) | set(new)):
        a, b = old.get(output), new.get(output)
        if a == b:
            continue
        if not isinstance(a, dict) or not isinstance(b, dict):
            lines.append(f"reference output '{output}' {'added' if a is None else 'removed' if b is None else 'changed'}")
        elif not same_inputs:
            lines.append(f"reference output '{output}': computed on other synthesised inputs, not comparable value by "
                         f"value (digest {str(a.get('digest'))[:12]}… -> {str(b.get('digest'))[:12]}…)")
        else:
            lines.append(f"reference output '{output}': {_moved(a, b, rtol=after.get('rtol'), atol=after.get('atol'))}")
    return lines


def _moved(a: Mapping[str, Any], b: Mapping[str, Any], *, rtol: Any, atol: Any) -> str:
    """One phrase: how many recorded values moved beyond the tolerance, the largest move and where."""
    if (a.get("shape"), a.get("dtype")) != (b.get("shape"), b.get("dtype")):
        return f"{a.get('dtype')}{a.get('shape')} -> {b.get('dtype')}{b.get('shape')}"
    pairs = [(x, y) for x, y in zip(a.get("values") or [], b.get("values") or [])
             if isinstance(x, int | float) and isinstance(y, int | float)]
    if not pairs:
        return f"digest {str(a.get('digest'))[:12]}… -> {str(b.get('digest'))[:12]}…"
    rel = rtol if isinstance(rtol, int | float) else 0.0
    abs_ = atol if isinstance(atol, int | float) else 0.0
    beyond = sum(1 for x, y in pairs if abs(x - y) > abs_ + rel * abs(x))
    index = max(range(len(pairs)), key=lambda i: abs(pairs[i][0] - pairs[i][1]))
    x, y = pairs[index]
    means = [sum(side) / len(side) for side in zip(*pairs)]
    return (f"{beyond} of {len(pairs)} recorded values moved beyond rtol {rel}, atol {abs_}; the largest by "
            f"{abs(x - y):.6g} (element {index}: {x:.6g} -> {y:.6g}); mean {means[0]:.6g} -> {means[1]:.6g}")


def _signature(value: Any) -> str:
    if isinstance(value, str):
        return value[:12] + "…"
    if isinstance(value, list):
        return ", ".join(f"{io['name']} {io['type']}{io['shape']}" for io in value) or "none"
    return json.dumps(value, sort_keys=True)
