"""The engine's Windows steps: install.cmd's and uninstall.cmd's checks and registration, the host's facts, the
MSI's custom action (`engine msi-finish`). Imported only on Windows, or where a test names them."""
