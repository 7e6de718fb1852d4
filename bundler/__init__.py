"""ort-bundler: one pinned manifest in, one verified, reproducible, offline ONNX Runtime bundle out."""

__version__ = "0.1.0"
