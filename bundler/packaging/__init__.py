"""The package formats the Windows backend offers on top of the bundle zip, for fleets managed by Intune or
ConfigMgr: the `.intunewin` a Win32 app is uploaded as (`intunewin`), and the Win32 app settings that go with
it (`win32app`). `ort-bundler package` (bundler/commands/package.py) runs them on a verified bundle."""
