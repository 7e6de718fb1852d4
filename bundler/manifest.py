"""The manifest: one TOML file that pins every input of a bundle.

It is parsed once into frozen dataclasses; everything downstream reads those, never the TOML. Validation
collects every problem before raising, so a user fixes a manifest in one round instead of ten, and each
problem names the file, the key path, what was found and what was expected.
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal
from urllib.parse import unquote, urlparse
from urllib.request import url2pathname

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from bundler.errors import ManifestError
from bundler.platforms import TARGETS
from bundler.readers.names import file_name_problem, reserved_on_windows

PLATFORMS = tuple(TARGETS)
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
VERSION_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$")
PYTHON_RE = re.compile(r"^3\.(\d{1,2})$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Environment variables the launchers (templates/run.*.j2) and the runtime beneath them own: a manifest that
# set one could point the launcher, the dynamic loader or Python at a folder that nothing verifies. Compared
# without case, as Windows does. The launchers' own state (`root`, `python`, ORT_BUNDLE_*) is listed too.
RESERVED_ENV = frozenset({
    "PATH", "PATHEXT", "COMSPEC", "SYSTEMROOT", "WINDIR", "PSMODULEPATH", "CDPATH", "IFS", "ENV", "BASH_ENV",
    "LD_LIBRARY_PATH", "LD_PRELOAD", "LD_AUDIT",
    "PYTHONHOME", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONNOUSERSITE", "PYTHONPYCACHEPREFIX",
    "PYTHONEXECUTABLE", "PYTHONPLATLIBDIR", "PYTHONSAFEPATH", "TEMP", "TMP", "TMPDIR", "CUDA_CACHE_PATH", "ORT_TENSORRT_CACHE_PATH", "PIP_NO_INDEX",
    "ROOT", "PYTHON", "PROGRAM", "CACHE", "CACHEFILE", "LIBRARY_PATH", "NEED", "FOLDER",
})
RESERVED_ENV_PREFIXES = ("ORT_BUNDLE_", "DYLD_", "LD_")
# What a model's self-check may synthesise: the sum over its inputs of the product of the [[models]] shapes
# dimensions. synth.py holds an int64 index array of that many elements (128 MiB at this cap).
MAX_SHAPE_ELEMENTS = 1 << 24
# Paths and URLs longer than this are refused up front: file systems cap a path at 4096 bytes (PATH_MAX)
# and Windows much lower, and an unreadable path otherwise surfaces as an OS error mid-build.
MAX_LOCATION_LENGTH = 2048
# 1980-01-01, the earliest time a zip entry can carry.
ZIP_EPOCH = 315532800
DEFAULT_SOURCE_DATE_EPOCH = ZIP_EPOCH

InputKind = Literal["url", "path", "requirement"]


@dataclass(frozen=True, kw_only=True)
class Input:
    """One external input: where it comes from and the hash(es) it must have."""

    key: str  # key path in the manifest, e.g. "ort.capi" or "models[1]"
    kind: InputKind
    location: str  # the URL, the absolute path, or the requirement "name==version"
    sha256: tuple[str, ...]  # one for url/path; one or more (one per candidate wheel) for requirement
    filename: str | None  # the file name, when the source names it (a requirement's wheel name is found by pip)
    size: int | None = None  # bytes, when the manifest declares them: then the bound of a download

    @property
    def display(self) -> str:
        return f"{self.key} ({self.location})"


@dataclass(frozen=True, kw_only=True)
class Bundle:
    name: str
    version: str
    platform: str
    python: str
    source_date_epoch: int

    @property
    def python_tag(self) -> str:
        return "cp" + self.python.replace(".", "")

    @property
    def stem(self) -> str:
        return f"{self.name}-{self.version}-{self.platform}"


@dataclass(frozen=True, kw_only=True)
class Ort:
    version: str
    archive: Input | None
    wheel: Input | None
    capi: Input | None
    dependencies: tuple[str, ...] | None
    allow_unsigned: bool  # the ORT binaries are a custom build without a vendor signature

    @property
    def python_source(self) -> Input | None:
        return self.wheel or self.capi


@dataclass(frozen=True, kw_only=True)
class Python:
    lock: Path | None
    requirements: tuple[str, ...]
    runtime: Input | None = None  # the interpreter the bundle carries (embeddable package / python-build-standalone)


@dataclass(frozen=True, kw_only=True)
class VcRedist:
    source: Input
    min_version: str | None
    allow_unsigned: bool  # a redistributable repackaged by the user's organisation, without Microsoft's signature


@dataclass(frozen=True, kw_only=True)
class GpuSource:
    source: Input
    include: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Gpu:
    cuda: str
    cudnn: str
    sources: tuple[GpuSource, ...]


@dataclass(frozen=True, kw_only=True)
class Model:
    name: str
    source: Input
    shapes: Mapping[str, tuple[int, ...]]
    license: str | None = None  # SPDX expression, checked on load; the SBOM says "unknown" without one


@dataclass(frozen=True, kw_only=True)
class Launch:
    module: str | None
    script: Input | None
    program: Input | None  # a native executable (C/C++ applications built against the SDK)
    cache_dir: str | None
    env: Mapping[str, str]
    apply_tuning: bool = False  # the start-up hook gives the entry point's sessions run --tune's options


@dataclass(frozen=True, kw_only=True)
class Manifest:
    path: Path
    bundle: Bundle
    ort: Ort
    python: Python
    vc_redist: VcRedist | None
    gpu: Gpu | None
    models: tuple[Model, ...]
    launch: Launch
    raw: Mapping[str, Any] = field(repr=False)  # the parsed TOML, recorded in bundle.json

    def inputs(self) -> list[Input]:
        """Every file input, in manifest order (the lock's wheels come from `lock.py`)."""
        found = [self.ort.archive, self.ort.wheel, self.ort.capi, self.python.runtime]
        if self.vc_redist:
            found.append(self.vc_redist.source)
        if self.gpu:
            found.extend(s.source for s in self.gpu.sources)
        found.extend(m.source for m in self.models)
        found.extend([self.launch.script, self.launch.program])
        return [i for i in found if i is not None]


# -- the schema ------------------------------------------------------------------------------------

SECTIONS = {"bundle", "ort", "python", "vc_redist", "gpu", "models", "launch"}
INPUT_KEYS = {"url", "path", "requirement", "sha256", "size"}
KEYS = {
    "bundle": {"name", "version", "platform", "python", "source_date_epoch"},
    "ort": {"version", "archive", "wheel", "capi", "dependencies", "allow_unsigned"},
    "python": {"lock", "requirements", "runtime"},
    "vc_redist": INPUT_KEYS | {"min_version", "allow_unsigned"},
    "gpu": {"cuda", "cudnn", "sources"},
    "gpu.sources": INPUT_KEYS | {"include"},
    "models": INPUT_KEYS | {"name", "shapes", "license"},
    "launch": {"module", "script", "program", "cache_dir", "env", "apply_tuning"},
}


class _Problems:
    """Collects every problem in one manifest, each phrased the same way."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: list[str] = []

    def add(self, key: str, message: str) -> None:
        self.items.append(f"{self.path.name}: {key}: {message}")

    def found(self, key: str, value: object, expected: str) -> None:
        self.add(key, f"found {_show(value)}, expected {expected}")

    def unknown_keys(self, key: str, table: Mapping[str, Any], allowed: set[str]) -> None:
        for name in table:
            if name in allowed:
                continue
            close = difflib.get_close_matches(name, sorted(allowed), n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(sorted(allowed))}"
            where = f"{key}.{name}" if key else name
            self.add(where, f"unknown key{hint}")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def load(path: Path) -> Manifest:
    """Read and validate a manifest; raise ManifestError listing every problem."""
    try:
        path = path.resolve()
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        msg = f"{path}: manifest not found"
        raise ManifestError(msg) from None
    except OSError as exc:  # a directory, no permission
        msg = f"{path}: cannot be read ({exc.strerror}); expected a manifest file"
        raise ManifestError(msg) from None
    except UnicodeDecodeError as exc:
        msg = f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); a manifest is a UTF-8 TOML file"
        raise ManifestError(msg) from None
    except tomllib.TOMLDecodeError as exc:
        msg = f"{path}: not valid TOML: {exc}"
        raise ManifestError(msg) from None
    except RecursionError:  # tomllib recurses once per nested array or table
        msg = f"{path}: nests arrays or tables too deeply to parse; expected a manifest of a few levels"
        raise ManifestError(msg) from None
    except ValueError as exc:  # a NUL in the path given on the command line
        msg = f"{path!r}: not a usable path ({exc}); expected a manifest file"
        raise ManifestError(msg) from None
    return parse(data, path=path)


def parse(data: Mapping[str, Any], *, path: Path) -> Manifest:
    problems = _Problems(path)
    problems.unknown_keys("", data, SECTIONS)
    base = path.parent
    bundle = _bundle(_table(data, "bundle", problems, required=True), problems)
    ort = _ort(_table(data, "ort", problems, required=True), base, problems)
    python = _python(_table(data, "python", problems), base, problems)
    vc_redist = _vc_redist(data, base, problems)
    gpu = _gpu(data, base, problems)
    models = _models(data, base, problems)
    launch = _launch(_table(data, "launch", problems), base, problems)
    if bundle and vc_redist and not TARGETS[bundle.platform].windows:
        problems.add("vc_redist", f"found a VC++ redistributable for platform '{bundle.platform}', expected it only for win_amd64")
    if bundle and gpu and not TARGETS[bundle.platform].windows:
        problems.add("gpu", f"found a [gpu] component for platform '{bundle.platform}'; the GPU component is supported for win_amd64 only")
    if bundle and ort:
        _check_wheel_serves(ort, bundle, problems)
    if bundle and TARGETS[bundle.platform].windows:
        _check_windows_names(bundle, models, problems)
    if problems.items:
        raise ManifestError(problems.items)
    assert bundle and ort  # no problems means both parsed
    return Manifest(path=path, bundle=bundle, ort=ort, python=python, vc_redist=vc_redist, gpu=gpu,
                    models=tuple(models), launch=launch, raw=data)


def _check_windows_names(bundle: Bundle, models: list[Model], problems: _Problems) -> None:
    """Bundle and model names become folder and file names on the target, where `nul` or `CON` is a device."""
    named = [("bundle.name", bundle.name)] + [(f"models[{i}].name", m.name) for i, m in enumerate(models)]
    for where, name in named:
        if reserved_on_windows(name):
            problems.found(where, name, "a name that is not a device name Windows reserves (CON, NUL, COM1, ...)")


def _table(data: Mapping[str, Any], key: str, problems: _Problems, *, required: bool = False) -> Mapping[str, Any] | None:
    value = data.get(key)
    if value is None:
        if required:
            problems.add(key, f"missing section [{key}]")
        return {} if not required else None
    if not isinstance(value, dict):
        problems.found(key, value, "a table")
        return None
    problems.unknown_keys(key, value, KEYS[key])
    return value


def _string(table: Mapping[str, Any], key: str, where: str, problems: _Problems, *,
            pattern: re.Pattern[str] | None = None, expected: str = "a string",
            required: bool = True) -> str | None:
    if key not in table:
        if required:
            problems.add(f"{where}.{key}", f"missing, expected {expected}")
        return None
    value = table[key]
    if not isinstance(value, str) or (pattern and not pattern.fullmatch(value)):
        problems.found(f"{where}.{key}", value, expected)
        return None
    return value


def _bundle(table: Mapping[str, Any] | None, problems: _Problems) -> Bundle | None:
    if table is None:
        return None
    name = _string(table, "name", "bundle", problems, pattern=NAME_RE,
                   expected="a name of letters, digits, '.', '_' or '-' (at most 64)")
    version = _string(table, "version", "bundle", problems, pattern=VERSION_RE, expected="a version such as '1.0.0'")
    platform = table.get("platform")
    if platform not in PLATFORMS:
        problems.found("bundle.platform", platform, f"one of {', '.join(PLATFORMS)}")
        platform = None
    python = _string(table, "python", "bundle", problems, pattern=PYTHON_RE, expected="a Python version such as '3.11'")
    minor = PYTHON_RE.match(python) if python else None
    if python and (minor is None or not 8 <= int(minor.group(1)) <= 14):
        problems.found("bundle.python", python, "a Python from 3.8 to 3.14")
        python = None
    epoch = table.get("source_date_epoch", DEFAULT_SOURCE_DATE_EPOCH)
    if not isinstance(epoch, int) or isinstance(epoch, bool) or not ZIP_EPOCH <= epoch <= 4102444800:
        problems.found("bundle.source_date_epoch", epoch, "whole seconds since 1970 between 1980 and 2100")
        epoch = None
    if name is None or version is None or platform is None or python is None or epoch is None:
        return None
    return Bundle(name=name, version=version, platform=platform, python=python, source_date_epoch=epoch)


def _ort(table: Mapping[str, Any] | None, base: Path, problems: _Problems) -> Ort | None:
    if table is None:
        return None
    version = _string(table, "version", "ort", problems, pattern=re.compile(r"^\d+\.\d+\.\d+$"),
                      expected="an ONNX Runtime version such as '1.23.1'")
    archive = _input(table.get("archive"), "ort.archive", base, problems, required=False)
    wheel = _input(table.get("wheel"), "ort.wheel", base, problems, required=False)
    capi = _input(table.get("capi"), "ort.capi", base, problems, required=False)
    if "wheel" in table and "capi" in table:
        problems.add("ort", "found both 'wheel' and 'capi', expected one Python binding source")
    if not {"archive", "wheel", "capi"} & table.keys():
        problems.add("ort", "missing 'wheel', 'capi' or 'archive', expected at least one ONNX Runtime source")
    dependencies = table.get("dependencies")
    if dependencies is not None:
        dependencies = _requirements(dependencies, "ort.dependencies", problems)
    for key, source in (("wheel", wheel), ("capi", capi)):
        if version and source and source.kind == "requirement":
            req = Requirement(source.location)
            if not req.name.lower().replace("_", "-").startswith("onnxruntime"):
                problems.found(f"ort.{key}.requirement", source.location, "an onnxruntime distribution")
            elif str(req.specifier) != f"=={version}":
                problems.found(f"ort.{key}.requirement", source.location, f"'{req.name}=={version}' to match ort.version")
    allow_unsigned = table.get("allow_unsigned", False)
    if not isinstance(allow_unsigned, bool):
        problems.found("ort.allow_unsigned", allow_unsigned, "true or false")
    if version is None:
        return None
    return Ort(version=version, archive=archive, wheel=wheel, capi=capi, dependencies=dependencies,
               allow_unsigned=allow_unsigned is True)


def _check_wheel_serves(ort: Ort, bundle: Bundle, problems: _Problems) -> None:
    """A wheel named in the manifest must fit the target platform and Python, or nothing else matters."""
    for key, source in (("wheel", ort.wheel), ("capi", ort.capi)):
        if source is None or source.filename is None or not source.filename.endswith(".whl"):
            continue
        try:
            _, _, _, tags = parse_wheel_filename(source.filename)
        except InvalidWheelFilename:
            problems.found(f"ort.{key}", source.filename, "a wheel file name such as onnxruntime-1.23.1-cp311-cp311-win_amd64.whl")
            continue
        minor = int(bundle.python.split(".")[1])
        if not any(TARGETS[bundle.platform].serves(tag, minor=minor) for tag in tags):
            problems.found(f"ort.{key}", source.filename,
                           f"a wheel for {bundle.platform} and Python {bundle.python} (tag {bundle.python_tag}) "
                           f"to match [bundle] platform and python")


def _python(table: Mapping[str, Any] | None, base: Path, problems: _Problems) -> Python:
    table = table or {}
    lock = _string(table, "lock", "python", problems, required=False, expected="a path to the lock file")
    requirements = _requirements(table.get("requirements", []), "python.requirements", problems) or ()
    runtime = _input(table.get("runtime"), "python.runtime", base, problems, required=False)
    if runtime is not None and runtime.kind == "requirement":
        problems.found("python.runtime.requirement", runtime.location, "a 'url' or 'path': an interpreter is not on "
                       "the package index (pin the downloaded archive with `ort-bundler init --from`)")
        runtime = None
    return Python(lock=(base / lock).resolve() if lock else None, requirements=requirements, runtime=runtime)


def _requirements(value: Any, where: str, problems: _Problems) -> tuple[str, ...] | None:
    if not isinstance(value, list):
        problems.found(where, value, "a list of requirement strings")
        return None
    good = []
    for i, item in enumerate(value):
        try:
            good.append(str(Requirement(item)))
        except (InvalidRequirement, TypeError):
            problems.found(f"{where}[{i}]", item, "a requirement such as 'numpy>=1.21'")
    return tuple(good)


def _vc_redist(data: Mapping[str, Any], base: Path, problems: _Problems) -> VcRedist | None:
    if "vc_redist" not in data:
        return None
    table = _table(data, "vc_redist", problems)
    if table is None:
        return None
    source = _input(table, "vc_redist", base, problems, embedded=True)
    min_version = _string(table, "min_version", "vc_redist", problems, required=False,
                          pattern=re.compile(r"^14\.\d+\.\d+(\.\d+)?$"), expected="a version such as '14.40.33810'")
    allow_unsigned = table.get("allow_unsigned", False)
    if not isinstance(allow_unsigned, bool):
        problems.found("vc_redist.allow_unsigned", allow_unsigned, "true or false")
    return VcRedist(source=source, min_version=min_version, allow_unsigned=allow_unsigned is True) if source else None


def _gpu(data: Mapping[str, Any], base: Path, problems: _Problems) -> Gpu | None:
    if "gpu" not in data:
        return None
    table = _table(data, "gpu", problems)
    if table is None:
        return None
    cuda = _string(table, "cuda", "gpu", problems, pattern=re.compile(r"^\d+\.\d+$"), expected="a CUDA version such as '11.8'")
    cudnn = _string(table, "cudnn", "gpu", problems, pattern=re.compile(r"^\d+(\.\d+)*$"), expected="a cuDNN version such as '8.6'")
    entries = table.get("sources", [])
    if not isinstance(entries, list) or not entries:
        problems.found("gpu.sources", entries, "a non-empty array of tables [[gpu.sources]]")
        entries = []
    sources = []
    for i, entry in enumerate(entries):
        where = f"gpu.sources[{i}]"
        if not isinstance(entry, dict):
            problems.found(where, entry, "a table")
            continue
        problems.unknown_keys(where, entry, KEYS["gpu.sources"])
        source = _input(entry, where, base, problems, embedded=True)
        include = entry.get("include", [])
        if not isinstance(include, list) or not all(isinstance(p, str) and p for p in include):
            problems.found(f"{where}.include", include, "a list of glob patterns such as '*/bin/*.dll'")
            include = []
        if source:
            sources.append(GpuSource(source=source, include=tuple(include)))
    if cuda is None or cudnn is None:
        return None
    return Gpu(cuda=cuda, cudnn=cudnn, sources=tuple(sources))


def _models(data: Mapping[str, Any], base: Path, problems: _Problems) -> list[Model]:
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
        problems.unknown_keys(where, entry, KEYS["models"])
        name = _string(entry, "name", where, problems, pattern=NAME_RE,
                       expected="a model name of letters, digits, '.', '_' or '-'")
        if name is not None:
            if name.lower() in seen:
                problems.add(f"{where}.name", f"found '{name}' again (also models[{seen[name.lower()]}]), expected unique model names")
            seen.setdefault(name.lower(), i)
        source = _input(entry, where, base, problems, embedded=True)
        shapes = _shapes(entry.get("shapes", {}), f"{where}.shapes", problems)
        if shapes and (elements := sum(math.prod(dims) for dims in shapes.values())) > MAX_SHAPE_ELEMENTS:
            problems.add(f"{where}.shapes", f"model {name or '?'!r} asks for {elements} synthesised input elements "
                                            f"(the sum of the products of its shapes), expected at most "
                                            f"{MAX_SHAPE_ELEMENTS}")
            shapes = None
        license_ = _spdx_license(entry, where, problems)
        if name and source and shapes is not None:
            models.append(Model(name=name, source=source, shapes=shapes, license=license_))
    return models


def _spdx_license(entry: Mapping[str, Any], where: str, problems: _Problems) -> str | None:
    """An optional SPDX licence expression, normalised ("mit" -> "MIT"); anything else is a manifest error."""
    # Imported here: loading the SPDX index costs tens of milliseconds, paid only by manifests using the key.
    from bundler.spdx import spdx_expression

    value = _string(entry, "license", where, problems, required=False,
                    expected="an SPDX licence expression such as 'MIT' or 'Apache-2.0 OR MIT'")
    expression = spdx_expression(value) if value else None
    if value is not None and expression is None:
        problems.found(f"{where}.license", value, "an SPDX licence expression such as 'MIT' or 'Apache-2.0 OR MIT' "
                       "(LicenseRef-<name> for a licence SPDX does not list)")
    return expression


def _shapes(value: Any, where: str, problems: _Problems) -> dict[str, tuple[int, ...]] | None:
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


def _launch(table: Mapping[str, Any] | None, base: Path, problems: _Problems) -> Launch:
    table = table or {}
    module = _string(table, "module", "launch", problems, required=False,
                     pattern=re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"),
                     expected="a dotted Python module name such as 'myapp.main'")
    script = _input(table.get("script"), "launch.script", base, problems, required=False)
    program = _input(table.get("program"), "launch.program", base, problems, required=False)
    entries = [k for k in ("module", "script", "program") if k in table]
    if len(entries) > 1:
        problems.add("launch", f"found {' and '.join(repr(e) for e in entries)}, expected one entry point")
    cache_dir = _string(table, "cache_dir", "launch", problems, required=False, expected="a directory path")
    env = table.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        problems.found("launch.env", env, "a table of NAME = \"value\" strings")
        env = {}
    for name, value in env.items():
        _env_entry(name, value, problems)
    apply_tuning = table.get("apply_tuning", False)
    if not isinstance(apply_tuning, bool):
        problems.found("launch.apply_tuning", apply_tuning, "true or false")
    return Launch(module=module, script=script, program=program, cache_dir=cache_dir, env=dict(env),
                  apply_tuning=apply_tuning is True)


def _env_entry(name: str, value: str, problems: _Problems) -> None:
    """A name the launcher or the runtime owns, or a value no launcher can quote on one line, is refused."""
    where = f"launch.env.{name}"
    if not ENV_NAME_RE.fullmatch(name):
        problems.found(where, name, "an environment variable name of letters, digits and '_'")
    elif name.upper() in RESERVED_ENV or name.upper().startswith(RESERVED_ENV_PREFIXES):
        problems.add(where, f"found '{name}', a variable the launcher or the runtime sets itself (PATH, "
                            "LD_*, PYTHONHOME, PYTHONPATH, TEMP, ORT_BUNDLE_*, ...); expected a name of your "
                            "application's own")
    if control := next((c for c in value if ord(c) < 0x20 and c != "\t" or ord(c) == 0x7F), None):
        problems.found(where, value, f"a one-line value without control characters (found U+{ord(control):04X})")


def _input(table: Any, where: str, base: Path, problems: _Problems, *, required: bool = True,
           embedded: bool = False) -> Input | None:
    """An input table: exactly one of url / path / requirement, and its sha256.

    `embedded` tables (a [[models]] entry, [vc_redist]) carry keys of their own, checked by their section.
    """
    if table is None:
        if required:
            problems.add(where, "missing, expected a table with 'url', 'path' or 'requirement' and 'sha256'")
        return None
    if not isinstance(table, dict):
        problems.found(where, table, "a table with 'url', 'path' or 'requirement' and 'sha256'")
        return None
    if not embedded:
        problems.unknown_keys(where, table, INPUT_KEYS)
    sources = [k for k in ("url", "path", "requirement") if k in table]
    if len(sources) != 1:
        found = " and ".join(f"'{s}'" for s in sources) or "none"
        problems.add(where, f"found {found}, expected exactly one of 'url', 'path' or 'requirement'")
        return None
    kind: InputKind = sources[0]  # type: ignore[assignment]
    hashes = _hashes(table.get("sha256"), f"{where}.sha256", problems, many=kind == "requirement")
    location, filename = _location(kind, table[kind], f"{where}.{kind}", base, problems)
    size = table.get("size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size <= 0):
        problems.found(f"{where}.size", size, "the file's size in bytes, a positive integer")
        return None
    if hashes is None or location is None:
        return None
    return Input(key=where, kind=kind, location=location, sha256=hashes, filename=filename, size=size)


def _hashes(value: Any, where: str, problems: _Problems, *, many: bool) -> tuple[str, ...] | None:
    if value is None:
        problems.add(where, "missing; every input must be pinned by its sha256 (run `sha256sum FILE`)")
        return None
    values = value if many and isinstance(value, list) else [value]
    if not values or not all(isinstance(v, str) and SHA256_RE.match(v) for v in values):
        expected = "64 lowercase hex digits" + (" (or a list of them)" if many else "")
        problems.found(where, value, expected)
        return None
    return tuple(values)


def _location(kind: InputKind, value: Any, where: str, base: Path, problems: _Problems) -> tuple[str | None, str | None]:
    if not isinstance(value, str) or not value:
        problems.found(where, value, "a non-empty string")
        return None, None
    if len(value) > MAX_LOCATION_LENGTH:
        problems.found(where, value, f"at most {MAX_LOCATION_LENGTH} characters (found {len(value)})")
        return None, None
    if control := next((c for c in value if ord(c) < 0x20 or ord(c) == 0x7F), None):
        problems.found(where, value, f"a location without control characters (found U+{ord(control):04X})")
        return None, None
    checks: dict[str, Callable[[str, str, Path, _Problems], tuple[str | None, str | None]]] = {
        "url": _url_location, "path": _path_location, "requirement": _requirement_location,
    }
    return checks[kind](value, where, base, problems)


def _url_location(value: str, where: str, base: Path, problems: _Problems) -> tuple[str | None, str | None]:
    parsed = urlparse(value)
    if parsed.scheme not in ("https", "http", "file") or (parsed.scheme != "file" and not parsed.netloc):
        problems.found(where, value, "an https, http or file URL")
        return None, None
    path = unquote(parsed.path)
    if control := next((c for c in path if ord(c) < 0x20 or ord(c) == 0x7F), None):
        problems.found(where, value, f"a URL whose path decodes without control characters (found U+{ord(control):04X})")
        return None, None
    if parsed.scheme != "file" and ".." in path.split("/"):
        problems.found(where, value, "a URL without '..' segments (also when written %2e%2e)")
        return None, None
    name = PurePosixPath(path).name
    if not name:
        problems.found(where, value, "a URL that ends in a file name")
        return None, None
    if problem := file_name_problem(name):
        problems.found(where, value, f"a URL whose file name is usable on every file system, not {problem}")
        return None, None
    if parsed.scheme == "file":
        return _file_url(parsed.netloc, path, value, where, base, problems), name
    return value, name


def _file_url(host: str, path: str, value: str, where: str, base: Path, problems: _Problems) -> str | None:
    """A `file:` URL names a local file; a relative one (file:models/a.onnx) is below the manifest's folder."""
    if host not in ("", "localhost"):
        problems.found(where, value, "a file URL on this machine (file:///path), not on the host " + repr(host))
        return None
    local = Path(url2pathname(path))
    return value if local.is_absolute() else (base / local).resolve().as_uri()


def _path_location(value: str, where: str, base: Path, problems: _Problems) -> tuple[str | None, str | None]:
    if too_long := next((part for part in re.split(r"[/\\]", value) if len(part.encode("utf-8")) > 255), None):
        problems.found(where, value, f"path components of at most 255 bytes (found one of {len(too_long)} characters)")
        return None, None
    path = (base / value).resolve()
    return str(path), path.name


def _requirement_location(value: str, where: str, base: Path, problems: _Problems) -> tuple[str | None, str | None]:
    try:
        req = Requirement(value)
    except InvalidRequirement:
        req = None
    specs = list(req.specifier) if req else []
    if req is None or len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version or req.url or req.marker:
        problems.found(where, value, "an exact pin 'name==version'")
        return None, None
    return f"{req.name}=={specs[0].version}", None
