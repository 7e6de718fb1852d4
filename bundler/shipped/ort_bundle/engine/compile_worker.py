"""The install engine's bytecode worker: `python -s -B <folder>/ort_bundle/__main__.py compile-worker`, started by
`engine_env.Compiler` once per chunk of modules. Standard library only, Python 3.8+.

It reads [source, name shown in tracebacks] pairs as JSON on stdin, compiles each to an unchecked-hash pyc (no
timestamp) and prints [pyc, sha256] of each; a file that does not compile stays source-only, as pip leaves it.
It cannot run with -I, which ignores the PYTHONHASHSEED that makes its output reproducible (set constants are
marshalled in hash order); started through the start file, the caller's current folder is never on sys.path
(a file is run, not `-c`) and the start file's own folder is taken off before any import, so a `json.py`
planted in either is never imported (issue 34 §3).
"""

from __future__ import annotations

import hashlib
import json
import py_compile
import sys
from typing import List, Optional


def compile_pairs(pairs: List[List[str]]) -> List[List[str]]:
    """[pyc, sha256] of every (source, display name) pair that compiles, in order."""
    done: List[List[str]] = []
    for source, display in pairs:
        try:
            pyc = py_compile.compile(source, dfile=display, doraise=True,
                                     invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        except (py_compile.PyCompileError, SyntaxError, ValueError):
            continue
        if pyc is None:  # only with quiet=2, which this never passes
            continue
        with open(pyc, "rb") as stream:
            done.append([pyc, hashlib.sha256(stream.read()).hexdigest()])
    return done


def main(argv: Optional[List[str]] = None) -> int:
    """Compile the pairs on stdin, print the results on stdout; 2 for any argument (it takes none)."""
    if argv:
        print(f"compile-worker takes no arguments (got {argv[0]!r}); it reads its pairs on stdin", file=sys.stderr)
        return 2
    json.dump(compile_pairs(json.load(sys.stdin)), sys.stdout)
    return 0
