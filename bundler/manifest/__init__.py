"""The manifest: one TOML file that pins everything a bundle is built from.

`load` reads and validates it once, reporting every problem together (`problems.py`); the result is a tree of
frozen records (`records.py`) that the rest of the build reads and never changes. Inputs (a url, path or
requirement with its sha256) are checked in `inputs.py`.
"""

from bundler.manifest.models import MAX_SHAPE_ELEMENTS
from bundler.manifest.parse import load, parse
from bundler.manifest.records import (
    DEFAULT_SOURCE_DATE_EPOCH,
    PLATFORMS,
    ZIP_EPOCH,
    AllowedTestSignature,
    Bundle,
    Gpu,
    GpuSource,
    Input,
    InputKind,
    Launch,
    Manifest,
    Model,
    ModelData,
    Ort,
    Python,
    VcRedist,
)

__all__ = ["DEFAULT_SOURCE_DATE_EPOCH", "MAX_SHAPE_ELEMENTS", "PLATFORMS", "ZIP_EPOCH", "AllowedTestSignature",
           "Bundle", "Gpu", "GpuSource", "Input", "InputKind", "Launch", "Manifest", "Model", "ModelData", "Ort", "Python", "VcRedist", "load", "parse"]
