"""The self-check: what the install proves on the target (`<python> -I -B installer/ort_bundle/__main__.py selfcheck`,
which run.* --self-check and the engine start), and what the model gate runs on the build host (`--reference`, from a
private copy of the package). Its identity model, identity.onnx, is data of this package."""
