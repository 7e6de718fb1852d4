"""Runs the benchmarks' commands from a small process and reports what os.wait4 says of each.

A process's peak RSS (ru_maxrss) includes the memory of the process it was forked from: exec records the
high-water mark of the address space it replaces, and after Python's vfork that is the parent's. A benchmark
that holds a payload's pools or touches 1 GiB before a command (bench/build_quickstart.py) would lend that to
every command it starts. Started once and kept small (no site, no imports beyond these), this process lends
about 10 MiB instead, less than any Python command measured.

Protocol, one JSON object a line: on stdin {command, cwd, env, stdout, stderr} (the last two are files that
take the command's output); on stdout {returncode, seconds, maxrss_kib, oublock} or {error}.
"""

import json
import os
import subprocess
import sys
import time


def run(request: dict) -> dict:
    try:
        with open(request["stdout"], "wb") as out, open(request["stderr"], "wb") as err:
            start = time.perf_counter()
            proc = subprocess.Popen(request["command"], cwd=request["cwd"], env=request["env"], stdout=out, stderr=err)
            _, status, usage = os.wait4(proc.pid, 0)
            seconds = time.perf_counter() - start
            proc.returncode = os.waitstatus_to_exitcode(status)
    except OSError as exc:
        return {"error": f"{request['command'][0]}: {exc}"}
    return {"returncode": proc.returncode, "seconds": seconds, "maxrss_kib": usage.ru_maxrss,
            "oublock": usage.ru_oublock}


def main() -> None:
    for line in sys.stdin:
        sys.stdout.write(json.dumps(run(json.loads(line))) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
