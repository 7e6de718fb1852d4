"""The self-check: what the install proves on the target (`<python> -I -B installer/ort_bundle/__main__.py selfcheck`
or the shipped selfcheck.py), and what the model gate runs on the build host (`--reference`). Its identity model,
identity.onnx, is data of this package."""
