"""Put where a launcher's program goes (an entry point, the package's start file or a program module it runs,
selfcheck.py, `-m` module): it reports how it was started.

Run by python.org's CPython under Wine in the Windows tier (tests/windows_python.py), standard library only, so it
runs in the embeddable layout too. It writes one JSON object into the file REPORTER_OUT names, then exits with
REPORTER_EXIT (0 when unset); REPORTER_DELETE names a file it removes first (as the uninstall engine removes the
uninstall.cmd that started it). Recorded:

- `orig_argv`: the interpreter's own command line (`sys.orig_argv`: the switches and `-m`/script the launcher
  wrote, and every argument as the C runtime split it), `argv`: `sys.argv`;
- `executable`: `sys.executable` (a venv's `Scripts\\python.exe`, not the base interpreter it hands over to);
- `dll`: the file of the python3xx.dll this process loaded (GetModuleFileNameW on `sys.dllhandle`);
- `isolated`, `dont_write_bytecode`: `sys.flags`, as `-I` and `-B` set them;
- `path`: `sys.path`; `environ`: the whole environment the program sees.
"""

import ctypes
import json
import os
import sys


def loaded_dll():
    buffer = ctypes.create_unicode_buffer(32768)
    size = ctypes.windll.kernel32.GetModuleFileNameW(ctypes.c_void_p(sys.dllhandle), buffer, len(buffer))
    return buffer.value if size else None


def main(argv=None):
    """`argv`: what ort_bundle/__main__.py hands a program module it runs (the report reads sys.argv itself)."""
    doomed = os.environ.get("REPORTER_DELETE")
    if doomed:
        os.remove(doomed)
    report = {
        "orig_argv": sys.orig_argv,
        "argv": sys.argv,
        "executable": sys.executable,
        "dll": loaded_dll(),
        "isolated": sys.flags.isolated,
        "dont_write_bytecode": sys.flags.dont_write_bytecode,
        "path": sys.path,
        "environ": dict(os.environ),
    }
    with open(os.environ["REPORTER_OUT"], "w", encoding="utf-8") as out:
        json.dump(report, out, indent=1)
    return int(os.environ.get("REPORTER_EXIT", "0"))


if __name__ == "__main__":
    sys.exit(main())
