"""ort_bundle: what an installed bundle offers the application that runs in it (shipped as the
`ort_bundle` package in the environment's site-packages).

    import onnxruntime as ort
    import ort_bundle

    options = ort_bundle.session_options("tiny-mlp")    # the [[models]] name
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

`session_options(name)` returns SessionOptions with the values `run --tune` measured best for that
model on this machine (ORT's defaults until it has been run, or when the model or the machine changed
since), and profiling on under `run --profile`. `tuned_settings(name)` returns just those values.
The command-line parts: `python -m ort_bundle.tuning` (run --tune), `python -m ort_bundle.profile`
(run --profile), `python -m ort_bundle.support` (run --support-bundle), `python -m ort_bundle.infer` (one
inference of the first model: the entry point `ort-bundler init` writes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .sessions import session_options, tuned_settings

__all__ = ["session_options", "tuned_settings"]


def __getattr__(name: str) -> Any:
    """The API from ort_bundle.sessions, imported on first use: `python -m ort_bundle.launcher`, which every run.*
    starts, imports this package too and needs none of it."""
    if name in __all__:
        from . import sessions

        return getattr(sessions, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
