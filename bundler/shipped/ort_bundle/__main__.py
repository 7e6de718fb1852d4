"""The one start file of the ort_bundle package: `python -I -B <folder>/ort_bundle/__main__.py PROGRAM [ARGS...]`.

PROGRAM is one of PROGRAMS: `engine` (install, verify, uninstall, the MSI's image and custom action),
`uninstall-copy` (the interpreter copy a Windows uninstall runs from), `sandbox` (try-in-sandbox.cmd),
`selfcheck` (the installed self-check; the build's model gate runs its `--reference` mode from a copy),
`compile-worker` (the engine's bytecode workers, started by the engine itself), `apply` (a delta, applied by
apply-delta.sh/.cmd from an unpacked release). The
bundle starts it from payload/ort_bundle, the install from installer/ort_bundle; `python -m ort_bundle PROGRAM`
runs the same programs from site-packages. Standard library only, Python 3.8+.

Run as a file, it is what runs before the engine has checked the bundle folder against SHA256SUMS (issue 27 §1,
issue 34), so it reads nothing but the .py sources of its own folder: they are compiled in memory, no bytecode is
read or written, and no extension module (`engine_fs.cpython-311-x86_64-linux-gnu.so`) or other file planted in
the folder can be imported (the folder is on no search path; the finder below knows `ort_bundle.a.b` only as
`a/b.py` or `a/b/__init__.py` under this folder). Python before 3.11 puts this file's folder first on sys.path
even with -I: it is taken off again before any other import, so a module planted beside this file cannot shadow
the standard library either.
"""

import os
import sys

sys.dont_write_bytecode = True
_HERE = os.path.dirname(os.path.abspath(__file__))
_AS_FILE = not __package__  # `python .../__main__.py`, not `python -m ort_bundle`
if _AS_FILE:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]  # before any other import
import importlib  # noqa: E402
import importlib.abc  # noqa: E402
import importlib.machinery  # noqa: E402
from types import ModuleType  # noqa: E402
from typing import Dict, List, Optional, Sequence  # noqa: E402

PACKAGE = "ort_bundle"
#: The programs this file starts: name -> the module (under ort_bundle) whose main(argv) runs.
PROGRAMS: Dict[str, str] = {
    "engine": "engine.engine",
    "uninstall-copy": "engine.uninstall_copy",
    "sandbox": "sandbox.sandbox",
    "selfcheck": "selfcheck.selfcheck",
    "compile-worker": "engine.compile_worker",
    "apply": "delta_apply",
}
USAGE = f"usage: python -I -B ort_bundle/__main__.py {{{','.join(PROGRAMS)}}} [ARGS...]"


class SourceOnly(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`ort_bundle` and `ort_bundle.<a>.<b>` from the .py sources under `folder`, compiled in memory; nothing else."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def find_spec(self, name: str, path: Optional[Sequence[str]] = None,
                  target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        parts = name.split(".")
        if parts[0] != PACKAGE or not all(part.isidentifier() for part in parts[1:]):
            return None
        base = os.path.join(self.folder, *parts[1:])
        package, module = os.path.join(base, "__init__.py"), base + ".py"
        if os.path.isfile(package):
            origin, is_package = package, True
        elif len(parts) > 1 and os.path.isfile(module):
            origin, is_package = module, False
        else:
            return None
        spec = importlib.machinery.ModuleSpec(name, self, origin=origin, is_package=is_package)
        spec.has_location = True  # __file__ is the source's path; a package's search path stays empty
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return None

    def exec_module(self, module: ModuleType) -> None:
        origin = module.__spec__.origin if module.__spec__ is not None else None
        if origin is None:
            raise ImportError(f"{module.__name__} has no source file")
        with open(origin, "rb") as source:
            code = compile(source.read(), origin, "exec", dont_inherit=True)
        exec(code, module.__dict__)


def main(argv: Optional[List[str]] = None) -> int:
    """Run PROGRAM's main() with the arguments after it; 2 with the usage line for a name that is not one."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in PROGRAMS:
        found = f" (got {args[0]!r})" if args else ""
        print(f"{USAGE}{found}", file=sys.stderr)
        return 2
    if _AS_FILE and not any(isinstance(finder, SourceOnly) for finder in sys.meta_path):
        sys.meta_path.insert(0, SourceOnly(_HERE))
    program = importlib.import_module(f"{PACKAGE}.{PROGRAMS[args[0]]}")
    code: int = program.main(args[1:])
    return code


if __name__ == "__main__":
    sys.exit(main())
