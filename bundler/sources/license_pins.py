"""The lock's [[license]] tables: a wheel's licence as `lock` concluded it from the text the wheel ships.

Matching a licence text to the SPDX list (bundler/license_match.py) is slow (0.2 s a section with
pyaskalono 0.2) and needs the matcher installed: `lock` does it once, for every locked wheel whose metadata
names no single licence, and pins the result here, so that `build` reads it instead of matching again.
A pin names the wheel by file name and sha256, and the build uses it only for a wheel of exactly those
bytes: a pin whose sha256 is not the wheel's is stale and ignored, and that wheel is matched again. A lock
written before these tables has none, and its build matches as it always did.

Each pin records what a reviewer needs to check it: the SPDX expression (or, when none was concluded,
why), how it was concluded, the licence files it was concluded from (their paths in the bundle) and the
matcher with its version.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bundler.license_match import MATCHER, Conclusion

METHOD = "licence text"  # how: the licence files the wheel ships, matched to the SPDX list
KEYS = {"filename", "sha256", "expression", "method", "files", "reason", "matcher", "matcher_version"}


@dataclass(frozen=True, kw_only=True)
class LicensePin:
    """What the matcher concluded for one wheel file, and with which matcher."""

    filename: str
    sha256: str
    conclusion: Conclusion
    matcher: str = MATCHER
    matcher_version: str


def pin_table(pin: LicensePin) -> dict[str, Any]:
    """One [[license]] table; TOML has no null, so an expression or a reason is left out when there is none."""
    table: dict[str, Any] = {"filename": pin.filename, "sha256": pin.sha256}
    if pin.conclusion.expression is not None:
        table["expression"] = pin.conclusion.expression
    table |= {"method": METHOD, "files": list(pin.conclusion.files)}
    if pin.conclusion.reason is not None:
        table["reason"] = pin.conclusion.reason
    return table | {"matcher": pin.matcher, "matcher_version": pin.matcher_version}


def pin_from_table(table: Mapping[str, Any]) -> LicensePin | str:
    """The pin a table holds, or what is wrong with it (the lock reader names the key)."""
    unknown = sorted(set(table) - KEYS)
    if unknown:
        return f"has the unknown key {unknown[0]!r}"
    texts = ("filename", "sha256", "method", "matcher", "matcher_version")
    if any(not isinstance(table.get(key), str) for key in texts):
        return f"needs the strings {', '.join(texts)}"
    if table["method"] != METHOD:
        return f"has method {table['method']!r}, which this ort-bundler does not know"
    files, expression, reason = table.get("files"), table.get("expression"), table.get("reason")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return "needs files, a list of the licence files' paths"
    if (expression is None) == (reason is None) or not isinstance(expression or reason, str):
        return "needs either an expression or the reason there is none"
    return LicensePin(filename=table["filename"], sha256=table["sha256"], matcher=table["matcher"],
                      matcher_version=table["matcher_version"],
                      conclusion=Conclusion(expression=expression, files=tuple(files), reason=reason))


def pinned(pins: Iterable[LicensePin], filename: str, sha256: str) -> Conclusion | None:
    """The pinned conclusion for the wheel `filename` with these bytes; None when there is none or it is stale."""
    return next((p.conclusion for p in pins if p.filename == filename and p.sha256 == sha256), None)
