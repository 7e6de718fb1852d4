"""The manifest: one TOML file that pins every input of a bundle.

It is parsed once into frozen dataclasses; everything downstream reads those, never the TOML. Validation
collects every problem before raising, so a user fixes a manifest in one round instead of ten, and each
problem names the file, the key path, what was found and what was expected.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from bundler.errors import ManifestError
from bundler.manifest.inputs import parse_input
from bundler.manifest.models import parse_models
from bundler.manifest.problems import Problems, string_at
from bundler.manifest.records import (
    DEFAULT_SOURCE_DATE_EPOCH,
    NAME_RE,
    PLATFORMS,
    PYTHON_RE,
    VERSION_RE,
    ZIP_EPOCH,
    AllowedTestSignature,
    Bundle,
    Gpu,
    GpuSource,
    Launch,
    Manifest,
    Model,
    Ort,
    Python,
    VcRedist,
)
from bundler.manifest.schema import KEYS, SECTIONS
from bundler.target_platform import TARGETS

#: The publisher Add/Remove Programs and the MSI show: no control characters or line breaks.
PUBLISHER_RE = re.compile(r"[^\x00-\x1f\x7f]{1,128}")

#: `[bundle] upgrade_code`: a GUID, with or without braces (the MSI's UpgradeCode and its GUID namespace).
GUID_RE = re.compile(r"\{?[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\}?")

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Environment variables the launchers (templates/run.*.j2) and the runtime beneath them own: a manifest that
# set one could point the launcher, the dynamic loader or Python at a folder that nothing verifies. Compared
# without case, as Windows does. The launchers' own state (`root`, `python`, ORT_BUNDLE_*) is listed too.
RESERVED_ENV = frozenset({
    "PATH", "PATHEXT", "COMSPEC", "SYSTEMROOT", "WINDIR", "PSMODULEPATH", "CDPATH", "IFS", "ENV", "BASH_ENV",
    "LD_LIBRARY_PATH", "LD_PRELOAD", "LD_AUDIT",
    "PYTHONHOME", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONNOUSERSITE", "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE",
    "PYTHONEXECUTABLE", "PYTHONPLATLIBDIR", "PYTHONSAFEPATH", "TEMP", "TMP", "TMPDIR", "CUDA_CACHE_PATH", "ORT_TENSORRT_CACHE_PATH", "PIP_NO_INDEX",
    "ROOT", "PYTHON", "PROGRAM", "CACHE", "CACHEFILE", "LIBRARY_PATH", "NEED", "FOLDER",
})
RESERVED_ENV_PREFIXES = ("ORT_BUNDLE_", "DYLD_", "LD_")


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
    problems = Problems(path)
    problems.unknown_keys("", data, SECTIONS)
    base = path.parent
    bundle = _bundle(table_at(data, "bundle", problems, required=True), problems)
    ort = _ort(table_at(data, "ort", problems, required=True), base, problems)
    python = _python(table_at(data, "python", problems), base, problems)
    vc_redist = _vc_redist(data, base, problems)
    gpu = _gpu(data, base, problems)
    models = parse_models(data, base, problems)
    launch = _launch(table_at(data, "launch", problems), base, problems)
    if bundle:
        _check_sections(bundle, problems, vc_redist=vc_redist is not None, gpu=gpu is not None)
        if gpu is not None and gpu.directml and DML not in bundle.target.gpu_providers:
            problems.add("gpu.providers", f"found '{DML}' for platform '{bundle.platform}', expected it only for "
                         "Windows: DirectML is a DirectX 12 library")
        _check_reserved_names(bundle, models, problems)
    if bundle and ort:
        _check_wheel_serves(ort, bundle, problems)
    if ort and gpu is not None and gpu.directml and ort.python_source is None:
        problems.add("gpu.providers", f"found '{DML}' with no [ort] wheel or capi, expected the onnxruntime-directml "
                     "wheel there: DirectML is loaded by ORT's Python binding, which the C/C++ archive lacks")
    if problems.items:
        raise ManifestError(problems.items)
    assert bundle and ort  # no problems means both parsed
    return Manifest(path=path, bundle=bundle, ort=ort, python=python, vc_redist=vc_redist, gpu=gpu,
                    models=tuple(models), launch=launch, raw=data)


def _check_sections(bundle: Bundle, problems: Problems, *, vc_redist: bool, gpu: bool) -> None:
    """The sections only some targets support (`TargetPlatform.sections`), named where the target lacks them."""
    supports = bundle.target.sections
    if vc_redist and "vc_redist" not in supports:
        problems.add("vc_redist", f"found a VC++ redistributable for platform '{bundle.platform}', expected it only "
                     f"for {_supported_by('vc_redist')}")
    if gpu and "gpu" not in supports:
        problems.add("gpu", f"found a [gpu] component for platform '{bundle.platform}'; the GPU component is "
                     f"supported for {_supported_by('gpu')} only")


def _supported_by(section: str) -> str:
    return " and ".join(target.tag for target in TARGETS.values() if section in target.sections)


def _check_reserved_names(bundle: Bundle, models: list[Model], problems: Problems) -> None:
    """Bundle and model names become folder and file names on the target, where (on Windows) `nul` or `CON` is
    a device (`TargetPlatform.reserved_name`)."""
    named = [("bundle.name", bundle.name)] + [(f"models[{i}].name", m.name) for i, m in enumerate(models)]
    reserved = bundle.target.reserved_name
    for where, name in named:
        if reserved(name):
            problems.found(where, name, "a name that is not a device name Windows reserves (CON, NUL, COM1, ...)")


def table_at(data: Mapping[str, Any], key: str, problems: Problems, *, required: bool = False) -> Mapping[str, Any] | None:
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


def _bundle(table: Mapping[str, Any] | None, problems: Problems) -> Bundle | None:
    if table is None:
        return None
    name = string_at(table, "name", "bundle", problems, pattern=NAME_RE,
                   expected="a name of letters, digits, '.', '_' or '-' (at most 64)")
    version = string_at(table, "version", "bundle", problems, pattern=VERSION_RE, expected="a version such as '1.0.0'")
    platform = table.get("platform")
    if platform not in PLATFORMS:
        problems.found("bundle.platform", platform, f"one of {', '.join(PLATFORMS)}")
        platform = None
    python = string_at(table, "python", "bundle", problems, pattern=PYTHON_RE, expected="a Python version such as '3.11'")
    minor = PYTHON_RE.match(python) if python else None
    if python and (minor is None or not 8 <= int(minor.group(1)) <= 14):
        problems.found("bundle.python", python, "a Python from 3.8 to 3.14")
        python = None
    epoch = table.get("source_date_epoch", DEFAULT_SOURCE_DATE_EPOCH)
    if not isinstance(epoch, int) or isinstance(epoch, bool) or not ZIP_EPOCH <= epoch <= 4102444800:
        problems.found("bundle.source_date_epoch", epoch, "whole seconds since 1970 between 1980 and 2100")
        epoch = None
    publisher = string_at(table, "publisher", "bundle", problems, pattern=PUBLISHER_RE, required=False,
                          expected="1 to 128 characters without control characters, as Add/Remove Programs shows them")
    upgrade_code = string_at(table, "upgrade_code", "bundle", problems, pattern=GUID_RE, required=False,
                             expected="a GUID such as '8c0f6f3e-2b1a-4d5e-9f00-1a2b3c4d5e6f' (the MSI's UpgradeCode)")
    if name is None or version is None or platform is None or python is None or epoch is None:
        return None
    return Bundle(name=name, version=version, target=TARGETS[platform], python=python, source_date_epoch=epoch,
                  publisher=publisher, upgrade_code=upgrade_code)


def _ort(table: Mapping[str, Any] | None, base: Path, problems: Problems) -> Ort | None:
    if table is None:
        return None
    version = string_at(table, "version", "ort", problems, pattern=re.compile(r"^\d+\.\d+\.\d+$"),
                      expected="an ONNX Runtime version such as '1.23.1'")
    archive = parse_input(table.get("archive"), "ort.archive", base, problems, required=False)
    wheel = parse_input(table.get("wheel"), "ort.wheel", base, problems, required=False)
    capi = parse_input(table.get("capi"), "ort.capi", base, problems, required=False)
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
    test_signed = _test_signed(table.get("allow_test_signed", []), problems)
    if version is None:
        return None
    return Ort(version=version, archive=archive, wheel=wheel, capi=capi, dependencies=dependencies,
               allow_unsigned=allow_unsigned is True, allow_test_signed=test_signed)


def _test_signed(entries: Any, problems: Problems) -> tuple[AllowedTestSignature, ...]:
    """`[ort] allow_test_signed`: the ORT files, each by name and sha256, that may carry Microsoft's test
    signature (bundler/assembly/signature_policy.py); narrower than allow_unsigned, which trusts any bytes."""
    expected = "an array of { file = \"<name>.dll\", sha256 = \"<64 hex digits>\" } tables"
    if not isinstance(entries, list):
        problems.found("ort.allow_test_signed", entries, expected)
        return ()
    found = []
    for i, entry in enumerate(entries):
        where = f"ort.allow_test_signed[{i}]"
        if not isinstance(entry, dict):
            problems.found(where, entry, expected)
            continue
        problems.unknown_keys(where, entry, {"file", "sha256"})
        name = string_at(entry, "file", where, problems, pattern=re.compile(r"^[\w.-]+\.(dll|pyd)$", re.IGNORECASE),
                         expected="an ONNX Runtime file name such as 'onnxruntime_providers_cuda.dll'")
        sha = string_at(entry, "sha256", where, problems, pattern=re.compile(r"^[0-9a-f]{64}$"),
                        expected="the file's sha256 as 64 lowercase hex digits")
        if name and sha:
            found.append(AllowedTestSignature(file=name, sha256=sha))
    return tuple(found)


def _check_wheel_serves(ort: Ort, bundle: Bundle, problems: Problems) -> None:
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
        if not any(bundle.target.serves(tag, minor=minor) for tag in tags):
            problems.found(f"ort.{key}", source.filename,
                           f"a wheel for {bundle.platform} and Python {bundle.python} (tag {bundle.python_tag}) "
                           f"to match [bundle] platform and python")


def _python(table: Mapping[str, Any] | None, base: Path, problems: Problems) -> Python:
    table = table or {}
    lock = string_at(table, "lock", "python", problems, required=False, expected="a path to the lock file")
    requirements = _requirements(table.get("requirements", []), "python.requirements", problems) or ()
    runtime = parse_input(table.get("runtime"), "python.runtime", base, problems, required=False)
    if runtime is not None and runtime.kind == "requirement":
        problems.found("python.runtime.requirement", runtime.location, "a 'url' or 'path': an interpreter is not on "
                       "the package index (pin the downloaded archive with `ort-bundler init --from`)")
        runtime = None
    return Python(lock=(base / lock).resolve() if lock else None, requirements=requirements, runtime=runtime)


def _requirements(value: Any, where: str, problems: Problems) -> tuple[str, ...] | None:
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


def _vc_redist(data: Mapping[str, Any], base: Path, problems: Problems) -> VcRedist | None:
    if "vc_redist" not in data:
        return None
    table = table_at(data, "vc_redist", problems)
    if table is None:
        return None
    source = parse_input(table, "vc_redist", base, problems, embedded=True)
    min_version = string_at(table, "min_version", "vc_redist", problems, required=False,
                          pattern=re.compile(r"^14\.\d+\.\d+(\.\d+)?$"), expected="a version such as '14.40.33810'")
    allow_unsigned = table.get("allow_unsigned", False)
    if not isinstance(allow_unsigned, bool):
        problems.found("vc_redist.allow_unsigned", allow_unsigned, "true or false")
    return VcRedist(source=source, min_version=min_version, allow_unsigned=allow_unsigned is True) if source else None


def _gpu(data: Mapping[str, Any], base: Path, problems: Problems) -> Gpu | None:
    if "gpu" not in data:
        return None
    table = table_at(data, "gpu", problems)
    if table is None:
        return None
    providers = _gpu_providers(table.get("providers", list(GPU_PROVIDERS[:1])), problems)
    if DML in providers:
        return _directml(table, providers, problems)
    cuda = string_at(table, "cuda", "gpu", problems, pattern=re.compile(r"^\d+\.\d+$"), expected="a CUDA version such as '11.8'")
    cudnn = string_at(table, "cudnn", "gpu", problems, pattern=re.compile(r"^\d+(\.\d+)*$"), expected="a cuDNN version such as '8.6'")
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
        source = parse_input(entry, where, base, problems, embedded=True)
        include = entry.get("include", [])
        if not isinstance(include, list) or not all(isinstance(p, str) and p for p in include):
            problems.found(f"{where}.include", include, "a list of glob patterns such as '*/bin/*.dll'")
            include = []
        if source:
            sources.append(GpuSource(source=source, include=tuple(include)))
    if cuda is None or cudnn is None:
        return None
    return Gpu(cuda=cuda, cudnn=cudnn, sources=tuple(sources), providers=providers)


def _directml(table: Mapping[str, Any], providers: tuple[str, ...], problems: Problems) -> Gpu | None:
    """The DirectML route names no CUDA stack and no sources: its DirectML.dll is a file of the ORT wheel."""
    if providers != (DML,):
        problems.found("gpu.providers", list(providers), f"['{DML}'] alone: onnxruntime-directml carries no other "
                       "GPU provider, and one bundle holds one ONNX Runtime distribution")
        return None
    extra = sorted(key for key in ("cuda", "cudnn", "sources") if key in table)
    if extra:
        problems.found(f"gpu.{extra[0]}", table[extra[0]], f"no {', '.join(extra)} with providers = ['{DML}']: "
                       "DirectML needs no CUDA, and its DirectML.dll comes inside the onnxruntime-directml wheel")
        return None
    return Gpu(cuda="", cudnn="", sources=(), providers=providers)


# The execution providers a [gpu] component can be proved for; the others ONNX Runtime ships are named with what
# blocks them, so that asking for one says why rather than "unknown" (checked 2026-12-06, docs/facts.md §10).
DML = "DmlExecutionProvider"
GPU_PROVIDERS = ("CUDAExecutionProvider", DML)
NOT_YET = {
    "TensorrtExecutionProvider": (
        "the TensorrtExecutionProvider route is not implemented: ONNX Runtime's TensorRT provider imports "
        "nvinfer_10.dll and nvonnxparser_10.dll (libnvinfer.so.10 and libnvonnxparser.so.10 on Linux), and the "
        "package index serves NVIDIA's tensorrt-cu12-libs only as a wheel-stub sdist that downloads the libraries "
        "from NVIDIA's own index while it is built, so there is no pinned TensorRT file to fetch and check "
        "(tensorrt-lean-cu12-libs holds only the lean runtime, which cannot parse ONNX models)"),
}


def _gpu_providers(value: Any, problems: Problems) -> tuple[str, ...]:
    """`[gpu] providers`: the providers the bundle's self-check must find running (default: CUDA)."""
    expected = f"a list of execution providers from {', '.join(repr(p) for p in GPU_PROVIDERS)}"
    if not isinstance(value, list) or not value or not all(isinstance(p, str) for p in value):
        problems.found("gpu.providers", value, expected)
        return GPU_PROVIDERS[:1]
    for name in value:
        if name in NOT_YET:
            problems.found("gpu.providers", name, f"{expected}; {NOT_YET[name]}")
        elif name not in GPU_PROVIDERS:
            problems.found("gpu.providers", name, expected)
    return tuple(dict.fromkeys(p for p in value if p in GPU_PROVIDERS)) or GPU_PROVIDERS[:1]


def _launch(table: Mapping[str, Any] | None, base: Path, problems: Problems) -> Launch:
    table = table or {}
    module = string_at(table, "module", "launch", problems, required=False,
                     pattern=re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"),
                     expected="a dotted Python module name such as 'myapp.main'")
    script = parse_input(table.get("script"), "launch.script", base, problems, required=False)
    program = parse_input(table.get("program"), "launch.program", base, problems, required=False)
    entries = [k for k in ("module", "script", "program") if k in table]
    if len(entries) > 1:
        problems.add("launch", f"found {' and '.join(repr(e) for e in entries)}, expected one entry point")
    cache_dir = string_at(table, "cache_dir", "launch", problems, required=False, expected="a directory path")
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


def _env_entry(name: str, value: str, problems: Problems) -> None:
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


