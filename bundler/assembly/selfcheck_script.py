"""The self-check as shipped (payload/selfcheck/): one script with the target modules it imports inlined,
and its identity model.

The model gate runs the same script's `--reference` mode on the build host (`modelgate`), so what the
build pins and what the target checks come from one source.
"""

from __future__ import annotations

from importlib import resources

from bundler.errors import BuildError

# Dependencies first: the inlined modules run top to bottom in one namespace.
INLINED = ("records", "synth", "selfcheck/dllsearch", "selfcheck/check_context", "selfcheck/interpreter",
           "selfcheck/cuda_check", "selfcheck/model_check", "selfcheck/libraries", "cache_folder")
#: The relative imports of the package's own modules, which the inlined code satisfies.
TARGET_IMPORT = "from ."
SCRIPT = "selfcheck/selfcheck.py"
SOURCE = "bundler/shipped/ort_bundle"
FUTURE_IMPORT = "from __future__ import annotations\n"


def identity_model_bytes() -> bytes:
    """The self-check's identity model (payload/selfcheck/identity.onnx), the same bytes on every build.

    Shipped as a file of the package: making it with onnx's helpers would import onnx (and NumPy and
    ml_dtypes, over a second) in every build; tests/unit/assembly/test_modelgate.py makes it with them and compares.
    """
    return resources.files("bundler.shipped.ort_bundle").joinpath("selfcheck", "identity.onnx").read_bytes()


def selfcheck_script_bytes() -> bytes:
    """The self-check as shipped (payload/selfcheck/selfcheck.py): one file, its target modules inlined.

    The target has no ort-bundler package, so the script cannot import them; inlining keeps a single source
    for what the build and the target share (synthesised inputs, the report's definition, the DLL search).
    The modules go in INLINED's order, dependencies first, where the script's first target import stood; every
    `from .` line, in the script and in the modules, is then satisfied by the inlined code.
    """
    package = resources.files("bundler.shipped.ort_bundle")
    script = package.joinpath(*SCRIPT.split("/")).read_text(encoding="utf-8").splitlines(keepends=True)
    ours = [index for index, line in enumerate(script) if line.startswith(TARGET_IMPORT)]
    if not ours:
        msg = f"{SOURCE}/{SCRIPT} imports no module of its package: nothing to inline"
        raise BuildError(msg)
    inlined: list[str] = []
    for module in INLINED:
        source = package.joinpath(*f"{module}.py".split("/")).read_text(encoding="utf-8")
        if FUTURE_IMPORT not in source:
            msg = f"{SOURCE}/{module}.py must start with postponed annotations to be inlined"
            raise BuildError(msg)
        inlined += [f"# --- inlined from {SOURCE}/{module}.py by ort-bundler ---\n",
                    *_without_target_imports(source.replace(FUTURE_IMPORT, "", 1), module),
                    f"# --- end of {module}.py ---\n"]
    head = script[: ours[0]]
    tail = _without_target_imports("".join(script[ours[0]:]), "selfcheck")
    return "".join([*head, *inlined, *tail]).encode("utf-8")


def _without_target_imports(source: str, module: str) -> list[str]:
    """The lines of `source` less its one-line imports of other target modules (a wrapped one cannot be cut)."""
    lines = source.splitlines(keepends=True)
    wrapped = [line for line in lines if line.startswith(TARGET_IMPORT) and line.rstrip().endswith("(")]
    if wrapped:
        msg = f"{SOURCE}/{module}.py must import each target module on one line, found {wrapped[0].strip()!r}"
        raise BuildError(msg)
    return [line for line in lines if not line.startswith(TARGET_IMPORT)]
