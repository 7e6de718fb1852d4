"""try-in-sandbox.cmd's tool: writes the Windows Sandbox .wsb beside the unpacked bundle
(`python -I -B payload/ort_bundle/__main__.py sandbox ...`)."""
