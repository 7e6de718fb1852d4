"""`run --profile`: run the entry point once with ONNX Runtime profiling on, then say where the traces are.

    <install>/venv/bin/python -m ort_bundle.profile --entry-kind script --entry <install>/app/infer.py -- [ARGS...]

The entry point runs as a child process of the same interpreter, exactly as the launcher would start
it, with ORT_BUNDLE_PROFILE=1: its start-up hook turns profiling on for every session it creates
(`session_options.activate`) and ends them at exit, which is when ORT writes its JSON traces into the
cache folder's profiles/. This process names the run, so it lists exactly that run's traces. The
launcher (ort_bundle.launcher) starts it with the entry point and every argument after `--profile`.
Exit code: the entry point's; 10 for a usage error.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

from .launch_config import python_command
from .sessions import PROFILE_DIR_ENV, PROFILE_ENV, PROFILE_RUN_ENV, profile_dir

EXIT_USAGE = 10


def entry_command(kind: str, entry: Optional[str], args: Sequence[str]) -> List[str]:
    """The command the launcher runs for this entry point, with this interpreter: the same one (isolated)."""
    return python_command(sys.executable, kind if kind in ("script", "module") else None, entry, args)


def run_name() -> str:
    return f"profile-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{os.getpid()}"


def traces(folder: Path, run: str) -> List[Path]:
    return sorted(folder.glob(f"{run}-*.json"))


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="run --profile", description="Run the entry point with ORT profiling on.")
    parser.add_argument("--entry-kind", choices=("script", "module", "program", "none"), required=True)
    parser.add_argument("--entry", help="the script path or module name")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the entry point's arguments")
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    rest = list(args.args)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if args.entry_kind == "program":
        print(f"run --profile: this bundle's entry point is the program {args.entry}, which does not start "
              "Python, so the start-up hook cannot turn profiling on; enable it in the program's own session "
              "options (SessionOptions::EnableProfiling) instead", file=sys.stderr)
        return EXIT_USAGE
    folder, run = profile_dir(), run_name()
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, PROFILE_ENV: "1", PROFILE_RUN_ENV: run, PROFILE_DIR_ENV: str(folder)}
    code = subprocess.run(entry_command(args.entry_kind, args.entry, rest), env=env, check=False).returncode
    written = traces(folder, run)
    if written:
        print(f"run --profile: {len(written)} trace{'s' if len(written) != 1 else ''} written to {folder} "
              "(open them in Perfetto, https://ui.perfetto.dev, or chrome://tracing):", file=sys.stderr)
        for path in written:
            print(f"  {path}", file=sys.stderr)
    else:
        print(f"run --profile: no trace was written to {folder}: the entry point created no ONNX Runtime "
              "session in Python (or exited before it ended)", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
