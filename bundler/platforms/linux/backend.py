"""The Linux backend: its GPU route (`gpu.py`) and no package format besides the bundle zip.

A Linux bundle has no DLL closure or VC++ runtime to check, no redistributable to ship and no app-local
runtime to place (a native program finds libonnxruntime.so through LD_LIBRARY_PATH, which the launcher
sets); its one native part says so in the facts the records read, so "not applicable" stays distinct from
"not computed yet" (bundler/assembly/facts.py).
"""

from __future__ import annotations

from bundler.assembly.assembly import Assembly, BuildInputs
from bundler.assembly.parts import PlatformParts, parts_for
from bundler.platforms.linux.gpu import add_gpu
from bundler.target_platform import LINUX


def no_native_checks(assembly: Assembly, build: BuildInputs) -> None:
    """The facts of the Windows-only native parts, none of which applies to a Linux bundle."""
    assembly.facts.app_local = ()
    assembly.facts.closure = None
    assembly.facts.vc_redist = None


identity = LINUX
parts = parts_for(PlatformParts(bundle_tools=(), gpu=add_gpu, native=(no_native_checks,)))
package_formats: frozenset[str] = frozenset()
