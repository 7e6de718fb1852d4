"""`ort-bundler init`: a commented starter manifest, with local files pinned for you.

Each `--from` file is recognised by its name (an ORT wheel or release archive, the VC++ redistributable,
an ONNX model) and pinned with its sha256 and a path relative to the manifest; anything else is refused,
so a typo does not silently become a model.
"""

from __future__ import annotations

import os
import re
import tomllib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import tomli_w

from bundler.atomic import write_atomic
from bundler.errors import InputUnavailableError, ManifestError, UsageError
from bundler.hashing import file_sha256
from bundler.manifest import parse
from bundler.names import location_problem, reserved_on_windows
from bundler.readers.externaldata import external_refs, reference_problems
from bundler.readers.onnx_limits import too_new_sentence
from bundler.target_platform import WINDOWS, named_by

ORT_WHEEL = re.compile(r"^onnxruntime(_gpu)?-(\d+\.\d+\.\d+)-.*\.whl$", re.IGNORECASE)
ORT_ARCHIVE = re.compile(r"^onnxruntime-(win|linux)-x64(-gpu)?-(\d+\.\d+\.\d+)\.(zip|tgz)$", re.IGNORECASE)
VC_REDIST = re.compile(r"^vc_redist\.x64.*\.exe$", re.IGNORECASE)
# The interpreters a bundle may carry ([python] runtime): python.org's Windows embeddable package and a
# python-build-standalone install_only archive. Their names give the platform and the target Python.
PY_EMBED = re.compile(r"^python-(3\.\d+)\.\d+-embed-amd64\.zip$", re.IGNORECASE)
PY_STANDALONE = re.compile(r"^cpython-(3\.\d+)\.\d+\+\d+-x86_64-unknown-linux-gnu-install_only(_stripped)?\.tar\.gz$",
                           re.IGNORECASE)
DEFAULT_ORT = "1.23.1"
# The one value templates/manifest.toml.j2 leaves for the user to fill in (when no wheel is given).
SHA256_PLACEHOLDER = "<sha256 of the wheel for your platform>"


def toml_value(value: Any) -> str:
    return tomli_w.dumps({"v": value})[len("v = "):].strip()


def toml_inline(table: dict[str, Any]) -> str:
    return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in table.items()) + " }"


def toml_table(table: dict[str, Any]) -> str:
    return "\n".join(f"{k} = {toml_value(v)}" for k, v in table.items())


@dataclass
class _Pins:
    platform: str = WINDOWS.tag
    ort_version: str = DEFAULT_ORT
    ort_python: dict[str, Any] | None = None
    ort_archive: dict[str, Any] | None = None
    vc_redist: dict[str, Any] | None = None
    models: list[dict[str, Any]] = field(default_factory=list)
    python: str = "3.11"
    python_runtime: dict[str, Any] | None = None
    implied: dict[str, str] = field(default_factory=dict)  # file name -> the platform it implies
    stamps: dict[str, tuple[int, dict[str, int]]] = field(default_factory=dict)  # model as given -> IR, opsets

    def warnings(self) -> list[str]:
        """A model stamped newer than the ORT the manifest pins, said now rather than by `lock` (issue 38, 5)."""
        return [sentence for given, (ir, opsets) in self.stamps.items()
                if (sentence := too_new_sentence(f"--from {given}", ir, opsets, self.ort_version))]


@dataclass(frozen=True, kw_only=True)
class Starter:
    """What `init` wrote, for its message and `--json`."""

    path: Path
    platform: str
    ort_version: str
    python: str
    models: tuple[str, ...]
    warnings: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"manifest": str(self.path), "platform": self.platform, "ort_version": self.ort_version,
                "python": self.python, "models": list(self.models), "warnings": list(self.warnings)}


def _pin(path: Path, base: Path) -> dict[str, Any]:
    """Path (relative to the manifest) and sha256; a file outside the manifest's folder is named on purpose
    by --from, so the pin says it may be read from there (`allow_outside`, which fetch and lock require)."""
    if not path.is_file():
        msg = f"--from {path}: file not found"
        raise InputUnavailableError(msg)
    relative = os.path.relpath(path.resolve(), base.resolve()).replace(os.sep, "/")
    outside = {"allow_outside": True} if relative.split("/")[0] == ".." else {}
    return {"path": relative, "sha256": file_sha256(path), **outside}


def _classify(files: Sequence[Path], base: Path) -> _Pins:
    pins = _Pins()
    for path in files:
        name = path.name
        if match := ORT_WHEEL.match(name):
            pins.ort_version = match.group(2)
            pins.platform = named_by(name).tag
            pins.ort_python = {"key": "capi", "value": _pin(path, base)}
        elif match := ORT_ARCHIVE.match(name):
            pins.ort_version = match.group(3)
            pins.platform = named_by(name).tag
            pins.ort_archive = _pin(path, base)
        elif VC_REDIST.match(name):
            pins.vc_redist = _pin(path, base)
        elif match := PY_EMBED.match(name) or PY_STANDALONE.match(name):
            pins.python = match.group(1)
            pins.platform = named_by(name).tag
            pins.python_runtime = _pin(path, base)
        elif name.lower().endswith(".onnx"):
            model_name = _model_name(path.stem, [m["pin"]["name"] for m in pins.models])
            data, pins.stamps[str(path)] = _data_pins(path, base)
            pins.models.append({"pin": {"name": model_name, **_pin(path, base)}, "data": data})
        else:
            msg = (f"--from {path}: cannot tell what this file is; expected an onnxruntime wheel, an "
                   "onnxruntime-<os>-x64-<version>.zip/.tgz, a VC_redist.x64.exe, an .onnx model, a "
                   "python-3.X.Y-embed-amd64.zip or a cpython-3.X.Y+DATE-x86_64-unknown-linux-gnu-install_only.tar.gz")
            raise UsageError(msg)
        if not name.lower().endswith((".onnx", ".exe")):
            pins.implied[name] = pins.platform
    _require_one_platform(pins.implied)
    return pins


def _data_pins(model: Path, base: Path) -> tuple[list[dict[str, Any]], tuple[int, dict[str, int]]]:
    """The model's external data files, found where its tensors say (below its folder) and pinned; a location
    that leaves the folder, a link or a missing file is refused now rather than by the build. With them, the
    IR version and opsets the model is stamped with."""
    import onnx
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    try:
        proto = onnx.load(str(model), load_external_data=False)
    except (DecodeError, OSError, ValueError) as exc:
        msg = f"--from {model}: not a readable ONNX model ({exc})"
        raise UsageError(msg) from None
    refs = external_refs(proto)
    stamp = (int(proto.ir_version), {entry.domain or "ai.onnx": int(entry.version) for entry in proto.opset_import})
    pins, sizes = [], {}
    for location in sorted({ref.location for ref in refs}):
        file = model.parent / location
        if location_problem(location) is None and file.is_symlink():
            msg = (f"--from {model}: its external data '{location}' is a symbolic link ({file}); expected the data "
                   "file itself beside the model")
            raise UsageError(msg)
        if location_problem(location) is None and file.is_file():
            pins.append({"location": location, **_pin(file, base)})
            sizes[location] = file.stat().st_size
    if problems := reference_problems(f"--from {model}", refs, sizes, missing="no such file is beside the model"):
        raise UsageError(problems[0])
    return pins, stamp


def _require_one_platform(implied: dict[str, str]) -> None:
    """A Windows interpreter beside a Linux wheel would only fail later, at build time: say so now."""
    if len(set(implied.values())) > 1:
        found = ", ".join(f"{name} ({platform})" for name, platform in sorted(implied.items()))
        msg = f"--from: the files are for different platforms: {found}; expected all for one target"
        raise UsageError(msg)


def _model_name(stem: str, taken: Sequence[str]) -> str:
    """A valid, unique [[models]] name from a file stem: two `model.onnx` from two folders become model, model-2."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", stem).lstrip("._-")[:56] or "model"
    if reserved_on_windows(name):
        name = f"{name}-model"
    unique, n = name, 1
    while unique.lower() in {t.lower() for t in taken}:
        n += 1
        unique = f"{name}-{n}"
    return unique


def _bundle_name(stem: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "-", stem).lstrip("._-")[:64] or "bundle"
    return f"{name}-bundle"[:64] if reserved_on_windows(name) else name


def _check_starter(text: str, output: Path) -> None:
    """`init` never writes a manifest that its own validation would refuse, once its one placeholder is filled."""
    try:
        parse(tomllib.loads(text.replace(SHA256_PLACEHOLDER, "0" * 64)), path=output.resolve())
    except ManifestError as exc:
        msg = f"{output}: the starter manifest for these --from files would not be valid: {exc}"
        raise UsageError(msg) from None


def render_starter(output: Path, files: Sequence[Path]) -> str:
    """The starter manifest; its `upgrade_code` is a fresh random GUID, so this product's MSI GUIDs are its own
    and no other product of the same name shares them."""
    return _render(output, _classify(files, output.parent))


def _render(output: Path, pins: _Pins) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters.update(toml=toml_value, toml_inline=toml_inline, toml_table=toml_table)
    source = resources.files("bundler.templates").joinpath("manifest.toml.j2").read_text(encoding="utf-8")
    return env.from_string(source).render(
        filename=output.name, name=_bundle_name(output.stem),
        lock=output.stem + ".lock.toml", platform=pins.platform, ort_version=pins.ort_version,
        ort_python=pins.ort_python, ort_archive=pins.ort_archive, vc_redist=pins.vc_redist, models=pins.models,
        python=pins.python, python_runtime=pins.python_runtime, upgrade_code=str(uuid.uuid4()).upper())


def write_starter(output: Path, files: Sequence[Path], *, force: bool = False) -> Starter:
    if output.exists() and not force:
        msg = f"{output}: already exists; pass --force to overwrite it"
        raise UsageError(msg)
    pins = _classify(files, output.parent)
    text = _render(output, pins)
    _check_starter(text, output)
    write_atomic(output, text.encode("utf-8"))
    return Starter(path=output, platform=pins.platform, ort_version=pins.ort_version, python=pins.python,
                   models=tuple(m["pin"]["name"] for m in pins.models), warnings=tuple(pins.warnings()))
