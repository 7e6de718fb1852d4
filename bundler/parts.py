"""The parts of a bundle, each turning cached inputs into members of the `Assembly`.

One function per part, called in a fixed order by `add_all`. A part reads only what the manifest and
the cache give it and writes only into the assembly (and its private work folder), so the parts can be
read, tested and extended one at a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import Requirement
from packaging.utils import parse_wheel_filename

from .archives import SafeArchive
from .cache import Cache, cached_sha256
from .errors import ManifestError
from .hashing import file_sha256
from .lock import Lock, LockedWheel, requirements_txt
from .manifest import Manifest
from .modelgate import ModelInput, gate_models, identity_model_bytes, selfcheck_script_bytes
from .gpu import add_gpu
from .sdk import add_sdk
from .provenance import add_licenses, add_sbom, check_signatures, wheel_metadata
from .render import PLAN_HELPER, EntryPoint, ScriptContext, render_scripts
from .windows import add_vc_redist, check_windows
from .wheelbuild import build_wheel, read_capi, verify_official_wheel

if TYPE_CHECKING:
    from .build import Assembly


def add_all(assembly: Assembly, *, manifest: Manifest, lock: Lock | None, files: Mapping[str, Path], work: Path,
            cache: Cache) -> None:
    add_python(assembly, manifest=manifest, lock=lock, files=files, work=work)
    add_selfcheck(assembly)
    add_gpu(assembly, manifest=manifest, files=files, work=work)
    add_sdk(assembly, manifest=manifest, files=files, work=work)
    check_windows(assembly, manifest=manifest, work=work)
    add_vc_redist(assembly, manifest=manifest, files=files)
    add_models(assembly, manifest=manifest, files=files, cache=cache)
    entry_point = add_entry_point(assembly, manifest=manifest, files=files)
    add_scripts(assembly, manifest=manifest, entry_point=entry_point)
    check_signatures(assembly, manifest=manifest, work=work)
    add_licenses(assembly, manifest=manifest, files=files, work=work)
    add_sbom(assembly, manifest=manifest)  # last: it describes every member, licences included


# -- the Python environment ---------------------------------------------------------------------------


def site_packages(manifest: Manifest) -> str:
    """Where the venv keeps its packages on the target, install-relative."""
    if manifest.bundle.platform == "win_amd64":
        return "venv/Lib/site-packages"
    return f"venv/lib/python{manifest.bundle.python}/site-packages"


def ort_wheel(manifest: Manifest, files: Mapping[str, Path], work: Path) -> tuple[Path, tuple[str, ...]]:
    """The ORT wheel for the bundle and its Requires-Dist: an official wheel as is, or one built from capi."""
    ort, bundle = manifest.ort, manifest.bundle
    if ort.wheel is not None:
        path = files[ort.wheel.key]
        name = Requirement(ort.wheel.location).name if ort.wheel.kind == "requirement" else path.name.split("-")[0]
        verify_official_wheel(path, expected_name=name, expected_version=ort.version, target_platform=bundle.platform,
                              target_python=bundle.python, label="ort.wheel")
        return path, ort.dependencies if ort.dependencies is not None else wheel_requires(path)
    assert ort.capi is not None
    tree = read_capi(files[ort.capi.key], work_dir=work / "capi", platform=bundle.platform, label="ort.capi")
    built = build_wheel(tree, expected_version=ort.version, requires=ort.dependencies, out_dir=work / "wheel",
                        source_date_epoch=bundle.source_date_epoch)
    return built, wheel_requires(built)


def wheel_requires(path: Path) -> tuple[str, ...]:
    """Requires-Dist of a wheel, read from its METADATA without installing it."""
    with SafeArchive.open(path, label=path.name) as archive:
        _, metadata = wheel_metadata(archive, label=path.name)
    return tuple(metadata.get_all("Requires-Dist") or ())


def lock_requirements(manifest: Manifest, ort_requires: tuple[str, ...]) -> tuple[str, ...]:
    """What `lock` resolves: ORT's own dependencies plus the manifest's extra requirements."""
    return tuple(sorted({str(Requirement(r)) for r in (*ort_requires, *manifest.python.requirements)}))


def wheel_requirement(path: Path, sha256: str) -> LockedWheel:
    """The ORT wheel as a pinned requirement, beside the locked ones in requirements.txt."""
    name, version, _, _ = parse_wheel_filename(path.name)
    return LockedWheel(name=str(name), version=str(version), filename=path.name, sha256=sha256)


def add_python(assembly: Assembly, *, manifest: Manifest, lock: Lock | None, files: Mapping[str, Path],
               work: Path) -> None:
    if manifest.ort.python_source is None:
        return
    if lock is None:
        msg = (f"{manifest.path.name}: python.lock: missing; the ORT wheel's dependencies must be locked for the "
               f"target: run `ort-bundler lock {manifest.path.name}` and add `lock = \"<file>\"` under [python]")
        raise ManifestError(msg)
    wheel, requires = ort_wheel(manifest, files, work)
    expected = lock_requirements(manifest, requires)
    if tuple(sorted(lock.requirements)) != expected:
        msg = (f"{manifest.python.lock.name}: locked requirements {list(lock.requirements)} differ from what the "
               f"manifest needs now {list(expected)}; run `ort-bundler lock {manifest.path.name}` again")
        raise ManifestError(msg)
    ort_sha = cached_sha256(wheel) if manifest.ort.wheel else file_sha256(wheel)
    pinned = [wheel_requirement(wheel, ort_sha)]
    assembly.add_file(f"payload/wheels/{wheel.name}", wheel, ort_sha)
    for locked in lock.wheels:
        path = files[f"lock:{locked.name}"]
        assembly.add_file(f"payload/wheels/{locked.filename}", path, locked.sha256)
        pinned.append(locked)
    assembly.add_bytes("payload/wheels/requirements.txt", requirements_txt(pinned).encode("utf-8"))
    capi = f"{site_packages(manifest)}/onnxruntime/capi"
    assembly.record["ort"] = {
        "version": manifest.ort.version,
        "route": "wheel" if manifest.ort.wheel else "capi",
        "wheel": wheel.name,
        "sha256": ort_sha,
    }
    assembly.record["wheels"] = [{"name": w.name, "version": w.version, "filename": w.filename, "sha256": w.sha256}
                                 for w in sorted(pinned, key=lambda w: w.name)]
    assembly.record["site_packages"] = site_packages(manifest)
    assembly.record["dll_dirs"] = [capi]
    assembly.record["expected_providers"] = ["CPUExecutionProvider"]


# -- models ----------------------------------------------------------------------------------------------


def add_models(assembly: Assembly, *, manifest: Manifest, files: Mapping[str, Path], cache: Cache) -> None:
    """Every model passes the gate in the pinned ORT version; its signature and reference output are recorded."""
    inputs = [ModelInput(name=m.name, path=files[m.source.key], sha256=cached_sha256(files[m.source.key]),
                         shapes=m.shapes) for m in manifest.models]
    records = gate_models(inputs, ort_version=manifest.ort.version, work_dir=cache.work_dir("ort-envs"))
    for model in inputs:
        bundle_path = f"payload/models/{model.name}.onnx"
        assembly.add_file(bundle_path, model.path, model.sha256)
        assembly.install(bundle_path, f"models/{model.name}.onnx")
    assembly.record["models"] = [{**r.to_json(), "file": f"models/{r.name}.onnx"} for r in records]


def add_selfcheck(assembly: Assembly) -> None:
    """The self-check script and its identity model, installed under selfcheck/."""
    for name, data in (("selfcheck.py", selfcheck_script_bytes()), ("identity.onnx", identity_model_bytes())):
        assembly.add_bytes(f"payload/selfcheck/{name}", data)
        assembly.install(f"payload/selfcheck/{name}", f"selfcheck/{name}")
    assembly.record["selfcheck"] = {"identity_model": "selfcheck/identity.onnx", "script": "selfcheck/selfcheck.py"}


# -- entry point and scripts ---------------------------------------------------------------------------------


def add_entry_point(assembly: Assembly, *, manifest: Manifest, files: Mapping[str, Path]) -> EntryPoint | None:
    """The [launch] entry point: a module of the installed wheels, or a script or program shipped in app/."""
    launch = manifest.launch
    if launch.module:
        assembly.record["entry_point"] = {"module": launch.module}
        return EntryPoint(kind="module", value=launch.module)
    for kind, source in (("script", launch.script), ("program", launch.program)):
        if source is None:
            continue
        path = files[source.key]
        bundle_path = f"payload/app/{path.name}"
        assembly.add_file(bundle_path, path, cached_sha256(path), executable=kind == "program")
        assembly.install(bundle_path, f"app/{path.name}")
        assembly.record["entry_point"] = {kind: f"app/{path.name}"}
        return EntryPoint(kind=kind, value=f"app/{path.name}")
    return None


def add_scripts(assembly: Assembly, *, manifest: Manifest, entry_point: EntryPoint | None) -> None:
    """Installer, uninstaller, launchers and the venv start-up hook, rendered for the target."""
    bundle = manifest.bundle
    windows = bundle.platform == "win_amd64"
    context = ScriptContext(
        name=bundle.name, version=bundle.version, platform=bundle.platform, python=bundle.python,
        vc_runtime_min=assembly.record.get("vc_runtime_min"), vc_redist=assembly.record.get("vc_redist_file"),
        gpu_dll_dirs=tuple(assembly.record.get("gpu_dll_dirs", ())),
        gpu_preload=tuple(assembly.record.get("gpu_preload", ())),
        dll_dirs=tuple(assembly.record.get("dll_dirs", ())), entry_point=entry_point,
        cache_dir=manifest.launch.cache_dir, env=manifest.launch.env,
        default_install_dir=f"C:\\ort\\{bundle.name}" if windows else f"/opt/{bundle.name}",
    )
    for path, data in render_scripts(context).items():
        executable = path.endswith(".sh")
        assembly.add_bytes(path, data, executable=executable)
        name = path.rsplit("/", 1)[-1]
        if path.startswith("payload/launchers/run."):
            assembly.install(path, name)
        elif path.startswith("payload/launchers/ort_bundle_hook"):
            assembly.site_packages_files.append({"from": path, "to": name})
    if not windows:
        helper = resources.files("bundler.target").joinpath("plan.py").read_bytes()
        assembly.add_bytes(PLAN_HELPER, helper)
