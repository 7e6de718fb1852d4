"""The model gate's worker limits: memory, and wall-clock time per model, and what a stopped worker is called.

A model is untrusted input (`modelgate`): one that asks for gigabytes while it runs fails in the child on its
memory limit, and one that runs for ever (a Loop of 10^12 trips is a few hundred bytes) is stopped at its
deadline, GATE_SECONDS per model unless ORT_BUNDLER_GATE_TIMEOUT says otherwise, and named.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from bundler.assembly import gate_worker
from bundler.errors import UsageError

# How long one model may take to load and run in the worker (seconds), and the setting that changes it.
GATE_SECONDS = 600
GATE_SECONDS_ENV = "ORT_BUNDLER_GATE_TIMEOUT"
# The line the worker writes to stderr before each model, so a worker stopped at its deadline names the model.
_CHECKING = gate_worker.CHECKING
# How a worker stopped at its deadline ends: SIGALRM's default action (POSIX), or the watchdog's exit (Windows).
_DEADLINE_EXITS = (-14, gate_worker.WATCHDOG_EXIT)


def limited(memory: int, seconds: int) -> list[str]:
    """`gate_worker.py MEMORY SECONDS` arguments that run the start file and program after them (`gate_worker`)
    with at most `memory` bytes of data memory (RLIMIT_DATA: heap and private writable mappings, not the mapped model or libraries; a host
    without `resource`, Windows, has none), so an allocation beyond it fails in the child instead of taking the
    build host's memory, and stop it when one model takes more than `seconds` to load and run."""
    return [str(Path(gate_worker.__file__).resolve()), str(memory), str(seconds)]


def gate_seconds() -> int:
    """The wall-clock limit for one model in the gate: GATE_SECONDS, or the whole number of seconds the
    ORT_BUNDLER_GATE_TIMEOUT environment variable sets (tests lower it to seconds)."""
    text = os.environ.get(GATE_SECONDS_ENV, "").strip()
    if not text:
        return GATE_SECONDS
    if not text.isdigit() or int(text) < 1:
        msg = f"the environment variable {GATE_SECONDS_ENV} is {text!r}; expected a whole number of seconds above 0"
        raise UsageError(msg)
    return int(text)


def worker_failure(output: str, labels: Mapping[str, str], *, ort_version: str, memory: int, seconds: int) -> str:
    """The sentence for a reference worker that ended without a report: stopped at its deadline (naming the
    model it was on, from the line it writes before each), or killed, or aborted by an allocation. `labels`:
    each model's label by the path the worker was given, in the request's order."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()] or ["(no output)"]
    if re.search(rf"exited with code ({'|'.join(str(code) for code in _DEADLINE_EXITS)})\b", output):
        checking = [line.removeprefix(_CHECKING) for line in lines if line.startswith(_CHECKING)]
        named = [labels[checking[-1]]] if checking and checking[-1] in labels else list(labels.values())
        return (f"{', '.join(named)}: the model check in ONNX Runtime {ort_version} did not "
                f"finish within {seconds} seconds and was stopped; a model that takes that long to load and run "
                f"on synthesised inputs is not supported (set {GATE_SECONDS_ENV} to allow more seconds)")
    last = next((line for line in reversed(lines) if not line.startswith(_CHECKING)), "(no output)")
    return (f"{', '.join(labels.values())}: the model check in ONNX Runtime {ort_version}, limited to {memory} bytes of memory, "
            f"ended without a report ({last}); a model that needs more memory to run is not supported")
