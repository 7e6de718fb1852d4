"""The Windows backend: PE binaries and the DLLs they import, the VC++ runtime, MSI and .intunewin packages.

Its parts (bundler/platforms/windows/closure.py, applocal.py) check the DLL closure of every PE file the bundle ships
and the minimum VC++ runtime that follows from it, ship the pinned VC_redist.x64.exe, place ORT's DLLs beside a
native program (Windows searches a program's own folder before System32's older onnxruntime.dll). The Windows
Sandbox tool that runs from the unpacked bundle is a program of the shipped package (ort_bundle/sandbox), which
every bundle carries whole.
"""

from __future__ import annotations

from bundler.assembly.parts import After, PlatformParts, parts_for
from bundler.platforms.windows.applocal import add_app_local_runtime
from bundler.platforms.windows.closure import add_vc_redist, check_windows
from bundler.platforms.windows.gpu import add_gpu
from bundler.target_platform import WINDOWS

identity = WINDOWS
parts = parts_for(PlatformParts(
    bundle_tools=(),
    gpu=add_gpu,
    native=(add_app_local_runtime, check_windows, add_vc_redist),
    order=(After(part=check_windows, needs=(add_app_local_runtime,),
                 why="the closure check resolves a native program's imports from its own folder"),
           After(part=add_vc_redist, needs=(check_windows,),
                 why="the shipped VC_redist must meet the minimum the closure check finds")),
))
package_formats = frozenset({"msi", "intunewin"})
