"""Which interpreter runs the installed code, and whether it is the one the bundle carries.

A bundle with `[python] runtime` installs its own interpreter under `python/`; the launchers start it with
`-I`, and its `._pth` file keeps PYTHONPATH and PYTHONHOME out. If something else still runs the installed
code (a system Python given the app's folder, a PATH that put another python first, a user site that
injected packages), the self-check must say so and fail, because the bundle's promises (the pinned Python,
the DLL closure built against its python3XY.dll) no longer hold. Without a runtime the target's own Python
is expected, and its origin is reported so that support can see which one it was.

Standard library only, Python 3.8 syntax: this module ships in every bundle and runs on the target.
"""

from __future__ import annotations

import os
import site
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

BUNDLED = "bundled"  # the interpreter the bundle carries, under <install>/python
TARGET = "target"  # the target machine's own Python (a bundle without a runtime)
OTHER = "other"  # anything else: a failure when the bundle carries a runtime


@dataclass(frozen=True)
class InterpreterReport:
    """What the self-check says about the running interpreter; `problems` empty means it passed."""

    origin: str  # BUNDLED, TARGET or OTHER
    executable: str
    base_prefix: str
    version: str  # "3.11.7"
    expected: Optional[str]  # the bundled interpreter's home folder, when the bundle carries one
    isolated: bool  # sys.flags.isolated: PYTHONPATH, PYTHONHOME and the user site ignored
    user_site: bool  # whether a user site-packages folder is on sys.path
    problems: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> Dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def _resolved(text: str) -> Path:
    return Path(os.path.realpath(text))


def _outside_entries(entries: Sequence[str], root: Path) -> List[str]:
    """sys.path entries that exist and lie outside the install: what PYTHONPATH or a user site would add."""
    return [entry for entry in entries if entry and os.path.exists(entry) and not _inside(_resolved(entry), root)]


def check_interpreter(root: Path, runtime: Optional[Dict[str, Any]], *, path: Optional[Sequence[str]] = None
                      ) -> InterpreterReport:
    """The running interpreter against bundle.json's `python_runtime` (None: the target's own Python)."""
    entries = list(sys.path if path is None else path)
    user_dir = site.getusersitepackages() if hasattr(site, "getusersitepackages") else ""
    user_site = bool(user_dir) and any(_resolved(e) == _resolved(user_dir) for e in entries if e)
    base = _resolved(sys.base_prefix)
    version = "%d.%d.%d" % sys.version_info[:3]
    home = None if runtime is None else _runtime_home(root, str(runtime["interpreter"]))
    problems = [] if runtime is None or home is None else _problems(root, runtime, home, base, version, entries)
    origin = TARGET if home is None else BUNDLED if base == home else OTHER
    return InterpreterReport(origin=origin, executable=sys.executable, base_prefix=str(base), version=version,
                             expected=None if home is None else str(home), isolated=bool(sys.flags.isolated),
                             user_site=user_site, problems=problems)


def _runtime_home(root: Path, interpreter: str) -> Path:
    """The bundled interpreter's home (its sys.base_prefix): python/ for python/python.exe and python/bin/python3.X."""
    folder = _resolved(str(root.joinpath(*interpreter.split("/")).parent))
    return folder.parent if folder.name == "bin" else folder


def _problems(root: Path, runtime: Dict[str, Any], home: Path, base: Path, version: str,
              entries: Sequence[str]) -> List[str]:
    problems = []
    if base != home:
        problems.append(f"the installed code runs on {sys.executable} (base prefix {base}), not on the bundled "
                        f"interpreter in {home}: start it with the launchers (run.*), which use the bundled one")
    if str(runtime.get("version") or version) != version:
        problems.append(f"the interpreter is Python {version}, but the bundle carries {runtime['version']}")
    outside = _outside_entries(entries, _resolved(str(root)))
    if outside:
        problems.append(f"sys.path holds {', '.join(outside)} from outside the install (PYTHONPATH or a user site): "
                        "start the bundled interpreter with -I, as the launchers do")
    return problems
