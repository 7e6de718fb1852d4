"""The model gate's worker, run as a file by the interpreter that has the pinned ONNX Runtime:
`python -I gate_worker.py MEMORY SECONDS START_FILE selfcheck --reference REQUEST` (`gate_limits.limited`).

It runs the shipped self-check's `--reference` mode from the private copy of the package whose start file it is
given, loaded through that start file's own finder (only the copy's .py sources, as on the target), with a memory
limit (RLIMIT_DATA, where `resource` exists) and a wall-clock limit per model: `signal.alarm`, whose default action
ends the process even inside ORT's native code, or on Windows a watchdog thread that exits with WATCHDOG_EXIT.
Each model's probe re-arms the clock and first writes CHECKING and the model's path to stderr, so a worker stopped
at its deadline names the model it was on. Standard library only; nothing of ort-bundler is imported.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # a file run by -I: its own folder (bundler/assembly) must not shadow any module
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
import importlib
import importlib.util
import signal
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: The line written to stderr before each model (`gate_limits.worker_failure` reads it back).
CHECKING = "ort-bundler-gate: checking "
#: How the Windows watchdog ends a worker past its deadline (POSIX: SIGALRM's default action, -14).
WATCHDOG_EXIT = 124
#: The self-check's module under the package, whose probe_model the clock wraps.
SELFCHECK = "ort_bundle.selfcheck.selfcheck"


def limit_memory(memory: int) -> None:
    """At most `memory` bytes of data memory (never above the hard limit); nothing where `resource` is missing."""
    try:
        import resource
    except ImportError:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    memory = memory if hard == resource.RLIM_INFINITY else min(memory, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (memory, hard))


def alarm_clock() -> Callable[[int], Any]:
    """`arm(seconds)`: end this process `seconds` from now (0: never), replacing the previous deadline."""
    if hasattr(signal, "alarm"):
        return signal.alarm
    clock: list[threading.Timer] = []

    def arm(after: int) -> None:
        while clock:
            clock.pop().cancel()
        if after:
            timer = threading.Timer(after, os._exit, (WATCHDOG_EXIT,))
            timer.daemon = True
            clock.append(timer)
            timer.start()

    return arm


def load_start_file(path: str) -> ModuleType:
    """The package's start file as a module (not run): its SourceOnly finder and its main()."""
    spec = importlib.util.spec_from_file_location("ort_bundle_start", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(probe: Callable[..., Any], arm: Callable[[int], Any], seconds: int) -> Callable[..., Any]:
    """`probe` with the clock re-armed for each model, and the model named on stderr before it starts."""
    def timed_probe(onnxruntime: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        sys.stderr.write(CHECKING + path + "\n")
        sys.stderr.flush()
        arm(seconds)
        try:
            return probe(onnxruntime, path, *args, **kwargs)
        finally:
            arm(0)

    return timed_probe


def main(argv: list[str]) -> int:
    """MEMORY SECONDS START_FILE PROGRAM ARGS...: run PROGRAM through the start file within the limits."""
    memory, seconds, start_file, program = int(argv[0]), int(argv[1]), argv[2], argv[3:]
    limit_memory(memory)
    arm = alarm_clock()
    arm(seconds)
    sys.dont_write_bytecode = True
    start = load_start_file(start_file)
    sys.meta_path.insert(0, start.SourceOnly(os.path.dirname(os.path.abspath(start_file))))
    selfcheck = importlib.import_module(SELFCHECK)
    setattr(selfcheck, "probe_model", timed(selfcheck.probe_model, arm, seconds))  # noqa: B010 (mypy: a module)
    sys.argv = [start_file, *program]
    code: int = start.main(program)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
