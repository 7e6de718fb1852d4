"""The `[[models]]` entries: each model's file, its synthesised input shapes, its licence and its external data.

A model's external data files install beside it, under `models/<location>` (the location its tensors
name, relative to the model's folder), so every location must be unique across the bundle and may not be
another model's file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bundler.manifest.inputs import parse_input
from bundler.manifest.problems import Problems, string_at
from bundler.manifest.records import NAME_RE, Model, ModelData
from bundler.manifest.schema import KEYS
from bundler.names import location_problem

# What a model's self-check may synthesise: the sum over its inputs of the product of the [[models]] shapes
# dimensions. synth.py holds an int64 index array of that many elements (128 MiB at this cap).
MAX_SHAPE_ELEMENTS = 1 << 24
MODEL_KEYS = KEYS["models"]
DATA_KEYS = KEYS["models.data"]


def parse_models(data: Mapping[str, Any], base: Path, problems: Problems) -> list[Model]:
    entries = data.get("models", [])
    if not isinstance(entries, list):
        problems.found("models", entries, "an array of tables [[models]]")
        return []
    models: list[Model] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        where = f"models[{i}]"
        if not isinstance(entry, dict):
            problems.found(where, entry, "a table")
            continue
        problems.unknown_keys(where, entry, MODEL_KEYS)
        name = string_at(entry, "name", where, problems, pattern=NAME_RE,
                         expected="a model name of letters, digits, '.', '_' or '-'")
        if name is not None:
            if name.lower() in seen:
                problems.add(f"{where}.name", f"found '{name}' again (also models[{seen[name.lower()]}]), expected unique model names")
            seen.setdefault(name.lower(), i)
        source = parse_input(entry, where, base, problems, embedded=True)
        shapes = _shapes(entry.get("shapes", {}), f"{where}.shapes", problems)
        if shapes and (elements := sum(math.prod(dims) for dims in shapes.values())) > MAX_SHAPE_ELEMENTS:
            problems.add(f"{where}.shapes", f"model {name or '?'!r} asks for {elements} synthesised input elements "
                                            f"(the sum of the products of its shapes), expected at most "
                                            f"{MAX_SHAPE_ELEMENTS}")
            shapes = None
        license_ = _spdx_license(entry, where, problems)
        data_files = _data_files(entry.get("data", []), where, base, problems)
        if name and source and shapes is not None and data_files is not None:
            models.append(Model(name=name, source=source, shapes=shapes, license=license_, data=data_files))
    _check_installed_names(models, problems)
    return models


def _data_files(entries: Any, where: str, base: Path, problems: Problems) -> tuple[ModelData, ...] | None:
    """A model's `data` array: each file an input (url or path with its sha256) and the location its tensors name."""
    if not isinstance(entries, list):
        problems.found(f"{where}.data", entries, "an array of tables [[models.data]] with 'location' and a pinned file")
        return None
    files: list[ModelData] = []
    ok = True
    for j, entry in enumerate(entries):
        key = f"{where}.data[{j}]"
        if not isinstance(entry, dict):
            problems.found(key, entry, "a table with 'location' and 'path' or 'url' and 'sha256'")
            ok = False
            continue
        problems.unknown_keys(key, entry, DATA_KEYS)
        if "requirement" in entry:
            problems.add(f"{key}.requirement", "found a requirement, expected the data file as a 'path' or 'url'")
            ok = False
            continue
        source = parse_input(entry, key, base, problems, embedded=True)
        if source is None:  # parse_input said why
            ok = False
            continue
        location = entry.get("location", source.filename)
        if not isinstance(location, str):
            problems.found(f"{key}.location", location, "the location the model's tensors name, such as 'weights.bin'")
            ok = False
            continue
        if problem := location_problem(location):
            problems.found(f"{key}.location", location, f"a location inside the model's folder; it {problem}")
            ok = False
            continue
        if "path" in entry and isinstance(entry["path"], str) and (base / entry["path"]).is_symlink():
            problems.found(f"{key}.path", entry["path"], "the data file itself, not a symbolic link (a link can point "
                                                         "anywhere; pin the file it names)")
            ok = False
            continue
        files.append(ModelData(location=location, source=source))
    return tuple(files) if ok else None


def _check_installed_names(models: list[Model], problems: Problems) -> None:
    """Every model file and data file installs under models/: two that would share a name (without case) collide."""
    taken = {f"{model.name}.onnx".lower(): f"the file of model '{model.name}'" for model in models}
    for i, model in enumerate(models):
        for j, data in enumerate(model.data):
            key = data.location.lower()
            if key in taken:
                problems.found(f"models[{i}].data[{j}].location", data.location,
                               f"a name of its own under models/ (it is also {taken[key]})")
            else:
                taken[key] = f"a data file of model '{model.name}'"


def _spdx_license(entry: Mapping[str, Any], where: str, problems: Problems) -> str | None:
    """An optional SPDX licence expression, normalised ("mit" -> "MIT"); anything else is a manifest error."""
    # Imported here: loading the SPDX index costs tens of milliseconds, paid only by manifests using the key.
    from bundler.spdx import spdx_expression

    value = string_at(entry, "license", where, problems, required=False,
                      expected="an SPDX licence expression such as 'MIT' or 'Apache-2.0 OR MIT'")
    expression = spdx_expression(value) if value else None
    if value is not None and expression is None:
        problems.found(f"{where}.license", value, "an SPDX licence expression such as 'MIT' or 'Apache-2.0 OR MIT' "
                       "(LicenseRef-<name> for a licence SPDX does not list)")
    return expression


def _shapes(value: Any, where: str, problems: Problems) -> dict[str, tuple[int, ...]] | None:
    if not isinstance(value, dict):
        problems.found(where, value, "a table of input name = [dimensions]")
        return None
    shapes = {}
    for name, dims in value.items():
        if not isinstance(dims, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
            problems.found(f"{where}.{name}", dims, "a list of positive integers such as [1, 3, 224, 224]")
            continue
        shapes[name] = tuple(dims)
    return shapes
