"""Windows: its parts of a bundle and the package formats it offers on top of the bundle zip.

`backend.py` is the backend (`bundler.platforms.backends`): the DLL closure and VC++ runtime check and the pinned
redistributable (`closure.py`), ORT's DLLs placed beside a native program (`applocal.py`). The package formats,
which `ort-bundler package` runs on a verified bundle: the MSI (`msi.py`, its source `msi_source.py`, cabinets
`msi_cabinets.py`, summary information `msi_summary.py`, and its check `msi_verify.py`), the `.intunewin` a
Win32 app is uploaded as (`intunewin.py`) with the Win32 app settings that go with it (`win32app.py`); the App
Control and AppLocker policies of `ort-bundler policy` (`app_control.py`, over the files `install_files.py`
lists). This file imports nothing, so one of them can be loaded without the others.
"""
