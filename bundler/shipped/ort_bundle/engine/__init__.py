"""The install engine: install, verify, uninstall and the MSI's image, started as
`python -I -B <folder>/ort_bundle/__main__.py engine ...` (payload/ort_bundle in the bundle, installer/ort_bundle in
the install). Standard library only, Python 3.8+."""
