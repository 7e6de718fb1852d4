"""bench/scale.py's judgement of a figure: met only at or under its target, and a failed figure, unlike a missed
target, is what makes the command exit non-zero. bench/ is not a package, so its module is loaded from its file."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from fixtures.cli import REPO


def _table() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_table", REPO / "bench" / "_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


table = _table()


def test_a_figure_is_met_at_its_limit_and_not_above() -> None:
    ratio = table.Target(limit=1.2)
    assert table.verdict(table.Row(figure="f", value=1.2, target=ratio)) == "met"
    assert table.verdict(table.Row(figure="f", value=1.21, target=ratio)) == "not met"
    assert table.verdict(table.Row(figure="f", value=301.0, target=table.Target(limit=300, unit="MiB"))) == "not met"


def test_a_skipped_or_failed_figure_is_never_met_and_only_a_failure_is_an_error() -> None:
    skipped = table.Row(figure="GPU fetch", skipped="pass --gpu-manifest")
    failed = table.Row(figure="install", error="build failed", value=0.5, target=table.Target(limit=1.0))
    missed = table.Row(figure="msi", value=2.0, target=table.Target(limit=1.3))
    assert [table.verdict(r) for r in (skipped, failed, missed)] == ["skipped", "error", "not met"]
    assert not table.errored([skipped, missed])
    assert table.errored([skipped, failed, missed])


def test_the_printed_row_says_ratio_target_and_why_a_figure_has_none() -> None:
    printed = table.table([
        table.Row(figure="build", ours="1.00 s", baseline="zip 2.00 s", value=0.5, target=table.Target(limit=1.2)),
        table.Row(figure="peak RSS", ours="31 MiB", value=31.0, target=table.Target(limit=300, unit="MiB")),
        table.Row(figure="GPU fetch", skipped="pass --gpu-manifest"),
    ]).splitlines()
    assert printed[0] == "| figure | ours | baseline | ratio | target | met |"
    assert printed[2] == "| build | 1.00 s | zip 2.00 s | 0.50x | <= 1.2x | met |"
    assert printed[3] == "| peak RSS | 31 MiB | - | - | <= 300 MiB | met |"
    assert printed[4] == "| GPU fetch | - | - | skipped: pass --gpu-manifest | - | skipped |"
