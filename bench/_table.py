"""The scale command's summary: one row per figure, judged against issue 37's target.

Apart from bench/scale.py so that the judgement can be tested without running a benchmark: a figure is met when
its value is at most the target's limit, never when it was skipped or failed; a missed target is a finding, a
failed run is an error (the command's exit status says only the latter).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MET, NOT_MET, SKIPPED, ERROR = "met", "not met", "skipped", "error"
HEADER = ("figure", "ours", "baseline", "ratio", "target", "met")


@dataclass(frozen=True, kw_only=True)
class Target:
    """At most `limit`, a ratio (`unit` "x") or mebibytes (`unit` "MiB"); `note` says what else it means."""

    limit: float
    unit: str = "x"
    note: str = ""

    def __str__(self) -> str:
        limit = f"{self.limit:g}x" if self.unit == "x" else f"{self.limit:g} {self.unit}"
        return f"<= {limit}" + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True, kw_only=True)
class Row:
    """One line of the summary. `value` is what the target judges (the ratio, or the MiB for a memory figure);
    `skipped` or `error` says why there is none."""

    figure: str
    ours: str = "-"
    baseline: str = "-"
    value: float | None = None
    target: Target | None = None
    skipped: str = ""
    error: str = ""


def verdict(row: Row) -> str:
    if row.error:
        return ERROR
    if row.skipped or row.value is None:
        return SKIPPED
    if row.target is None:
        return "-"
    return MET if row.value <= row.target.limit else NOT_MET


def _ratio(row: Row) -> str:
    if row.error:
        return f"error: {row.error}"
    if row.skipped:
        return f"skipped: {row.skipped}"
    if row.value is None or row.target is None or row.target.unit != "x":
        return "-"
    return f"{row.value:.2f}x"


def cells(row: Row) -> tuple[str, ...]:
    return (row.figure, row.ours, row.baseline, _ratio(row), str(row.target) if row.target else "-", verdict(row))


def table(rows: Sequence[Row]) -> str:
    """A Markdown table, so that a run's output goes into bench/README.md as printed."""
    lines = [HEADER, ("---",) * len(HEADER), *(cells(row) for row in rows)]
    return "\n".join("| " + " | ".join(cell.replace("|", "\\|").replace("\n", " ") for cell in line) + " |"
                     for line in lines)


def errored(rows: Sequence[Row]) -> bool:
    return any(verdict(row) == ERROR for row in rows)
