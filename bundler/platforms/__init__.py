"""What each target does differently, one package per target: `windows/` and `linux/`.

The identity of a target (`bundler.target_platform.TargetPlatform`) is data at the base, which every layer reads;
the behaviour that differs lives here, each target's in its own package, and the two never import each other.
`backends.py` puts them behind one Protocol (`backend_for(target)`); this file imports nothing, so a command
that needs one Windows module (the MSI check of `verify`) does not load every backend's parts.
"""
