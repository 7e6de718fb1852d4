"""Code that ships inside a bundle and runs on the target with only the standard library
(plus onnxruntime and numpy from the installed environment, where stated)."""
