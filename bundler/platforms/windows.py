"""The Windows backend: PE binaries and the DLLs they import, the VC++ runtime, MSI and .intunewin packages.

Its parts (bundler/assembly/closure.py, applocal.py, launch.add_bundle_tools) check the DLL closure of every PE file the bundle ships
and the minimum VC++ runtime that follows from it, ship the pinned VC_redist.x64.exe, place ORT's DLLs beside a
native program (Windows searches a program's own folder before System32's older onnxruntime.dll), and add the
Windows Sandbox tool that runs from the unpacked bundle.
"""

from __future__ import annotations

from bundler.assembly.applocal import add_app_local_runtime
from bundler.assembly.closure import add_vc_redist, check_windows
from bundler.assembly.launch import add_bundle_tools
from bundler.assembly.parts import PlatformParts, parts_for
from bundler.target_platform import WINDOWS

identity = WINDOWS
parts = parts_for(PlatformParts(bundle_tools=(add_bundle_tools,),
                                native=(add_app_local_runtime, check_windows, add_vc_redist)))
package_formats = frozenset({"msi", "intunewin"})
