"""The launch part: the entry point, and the installer, uninstaller, launchers and start-up hook rendered for the target."""

from __future__ import annotations

from importlib import resources
from typing import Literal

from bundler.assembly.assembly import Assembly, BuildInputs, Copy
from bundler.assembly.render import (
    ENGINE_HELPER,
    ENGINE_PACKAGE,
    LAUNCH_CONFIG,
    SANDBOX_HELPER,
    EntryPoint,
    ScriptContext,
    render_scripts,
)
from bundler.errors import ManifestError
from bundler.manifest import Input
from bundler.sources.cache import cached_sha256
from bundler.sources.inputs import INSTALLER_KEY


def add_entry_point(assembly: Assembly, build: BuildInputs) -> None:
    """The [launch] entry point: a module of the installed wheels, or a script or program shipped in app/."""
    launch = build.manifest.launch
    if launch.module:
        assembly.facts.entry_point = EntryPoint(kind="module", value=launch.module)
        return
    kinds: tuple[tuple[Literal["script", "program"], Input | None], ...] = (("script", launch.script),
                                                                           ("program", launch.program))
    for kind, source in kinds:
        if source is None:
            continue
        path = build.files[source.key]
        bundle_path = f"payload/app/{path.name}"
        assembly.add_file(bundle_path, path, cached_sha256(path), executable=kind == "program")
        assembly.plan_copy(bundle_path, f"app/{path.name}")
        assembly.facts.entry_point = EntryPoint(kind=kind, value=f"app/{path.name}")
        return
    assembly.facts.entry_point = None


def add_scripts(assembly: Assembly, build: BuildInputs) -> None:
    """Installer, uninstaller, launchers and the venv start-up hook, rendered for the target."""
    manifest, facts, target = build.manifest, assembly.facts, build.target
    bundle = manifest.bundle
    closure, gpu, vc_redist, python_env = facts.closure, facts.gpu, facts.vc_redist, facts.python_env
    context = ScriptContext(
        name=bundle.name, version=bundle.version, platform=bundle.platform, python=bundle.python,
        vc_runtime_min=closure.vc_runtime_min if closure else None, vc_redist=vc_redist.file if vc_redist else None,
        gpu_dll_dirs=gpu.dll_dirs if gpu else (), gpu_preload=gpu.preload if gpu else (),
        dll_dirs=python_env.dll_dirs if python_env else (), entry_point=facts.entry_point,
        cache_dir=manifest.launch.cache_dir, env=manifest.launch.env, apply_tuning=manifest.launch.apply_tuning,
        default_install_dir=target.default_install_dir(bundle.name),
        runtime_python=facts.runtime.interpreter if facts.runtime else None,
        runtime_bundle_python=facts.runtime.bundle_interpreter if facts.runtime else None,
    )
    for path, data in render_scripts(context, compiled=build.cache.work_dir("templates")).items():
        executable = path.endswith(".sh")
        assembly.add_bytes(path, data, executable=executable)
        name = path.rsplit("/", 1)[-1]
        if path.startswith("payload/launchers/run.") or path in (LAUNCH_CONFIG, "uninstall.ps1", "uninstall.cmd",
                                                                  "uninstall.sh"):
            # The uninstaller too: Add/Remove Programs runs that copy on Windows; on Linux it needs no bundle.
            assembly.plan_copy(path, name)
        elif path.startswith("payload/launchers/ort_bundle_hook"):
            assembly.site_packages_files.append(Copy(source=path, target=name))


def bootstrap(module: str, what: str) -> bytes:
    """A start script for one module of the `ortengine` package shipped beside it, run as `python -I -B <script> ...`.

    It reads only the `.py` sources of its own `ortengine` folder and compiles them in memory (issue 27 §1): a
    planted `__pycache__/*.pyc` (an unchecked-hash one runs without its source being looked at) or extension
    module (`engine_fs.cpython-311-x86_64-linux-gnu.so`) beside them is never looked at, so nothing added to the
    folder runs before the engine has checked the bundle folder against SHA256SUMS.
    """
    return f'''"""ort-bundler {what}: see ortengine/{module}.py (stdlib only, Python 3.8+).

Only the .py sources of the ortengine folder beside this file are read, compiled in memory and run: no
bytecode is read or written, and no extension module or other file in that folder can be imported (the
folder is on no search path; a finder of our own knows `ortengine.<name>` only as `ortengine/<name>.py`).
Python before 3.11 puts this file's folder first on sys.path even with -I: it is taken off again, so a
module planted beside this file cannot shadow the standard library either.
"""
import os
import sys

sys.dont_write_bytecode = True
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]  # before any other import
_PACKAGE = os.path.join(_HERE, "ortengine")
import importlib.abc  # noqa: E402
import importlib.machinery  # noqa: E402


class _SourceOnly(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`ortengine` and `ortengine.<name>` from `ortengine/__init__.py` and `ortengine/<name>.py`, nothing else."""

    def find_spec(self, name, path=None, target=None):
        if name == "ortengine":
            leaf = "__init__"
        elif name.startswith("ortengine."):
            leaf = name[len("ortengine."):]
            if not leaf.isidentifier():
                return None
        else:
            return None
        origin = os.path.join(_PACKAGE, leaf + ".py")
        if not os.path.isfile(origin):
            return None
        spec = importlib.machinery.ModuleSpec(name, self, origin=origin, is_package=name == "ortengine")
        spec.has_location = True  # __file__ is the source's path; the package's search path stays empty
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        with open(module.__spec__.origin, "rb") as source:
            code = compile(source.read(), module.__spec__.origin, "exec", dont_inherit=True)
        exec(code, module.__dict__)


sys.meta_path.insert(0, _SourceOnly())
from ortengine.{module} import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
'''.encode("ascii")


#: Starts the install engine: `python -I -B engine.py ...`.
ENGINE_BOOTSTRAP = bootstrap("engine", "install engine")
#: uninstall.cmd and uninstall.ps1 run it with the installed interpreter first: it makes the private folder the
#: interpreter's copy runs the uninstall from (issue 34 §8), and prints it.
UNINSTALL_COPY_HELPER = "payload/installer/uninstall_copy.py"
#: The target modules that make up the engine, shipped as the `ortengine` package.
ENGINE_MODULES = ("engine.py", "bundle_check.py", "target_folder.py", "engine_fs.py", "engine_env.py", "disk_space.py",
                  "image.py", "installed.py", "msi_action.py", "records.py", "trust.py", "bundle_info.py",
                  "folder_trust.py", "windows_host.py", "windows_setup.py", "windows_install_dir.py",
                  "windows_registration.py", "uninstall_copy.py")


def engine_files() -> dict[str, tuple[bytes, str]]:
    """Bundle path -> (bytes, install path) of the engine: its start scripts and the `ortengine` package."""
    package = resources.files("bundler.target")
    files = {ENGINE_HELPER: (ENGINE_BOOTSTRAP, "installer/engine.py"),
             UNINSTALL_COPY_HELPER: (bootstrap("uninstall_copy", "uninstall interpreter copy"),
                                     "installer/uninstall_copy.py")}
    for name in ("__init__.py", *ENGINE_MODULES):
        files[f"{ENGINE_PACKAGE}/{name}"] = (package.joinpath(name).read_bytes(), f"installer/ortengine/{name}")
    return files


#: try-in-sandbox.cmd's modules: the command, and the text of the files it writes.
SANDBOX_MODULES = ("sandbox.py", "sandbox_render.py")


def _sandbox_files() -> dict[str, bytes]:
    """try-in-sandbox.cmd's start script and modules (issue 28); the modules read bundle.json through its one
    definition, which the engine's package already carries (bundle_info.py)."""
    package = resources.files("bundler.target")
    files = {SANDBOX_HELPER: bootstrap("sandbox", "Windows Sandbox launcher")}
    for name in SANDBOX_MODULES:
        files[f"{ENGINE_PACKAGE}/{name}"] = package.joinpath(name).read_bytes()
    return files


def add_bundle_tools(assembly: Assembly, build: BuildInputs) -> None:
    """What runs from the unpacked bundle itself, not from the install: try-in-sandbox.cmd's module, shipped in the
    `ortengine` package but never installed (the Windows backend's part)."""
    for path, data in sorted(_sandbox_files().items()):
        assembly.add_bytes(path, data)


def add_engine(assembly: Assembly, build: BuildInputs) -> None:
    """The install engine (bundler/target) and the pinned pypa installer wheel it installs wheels with.

    The engine is copied into the install too (installer/), for `run --verify` and the uninstaller.
    The installer wheel is an input of its own: in the SBOM, never installed into the environment.
    """
    for path, (data, installed) in engine_files().items():
        assembly.add_bytes(path, data)
        assembly.plan_copy(path, installed)
    manifest = build.manifest
    if manifest.ort.python_source is None:
        return
    wheel = build.lock.installer if build.lock is not None else None
    if wheel is None:
        msg = (f"{manifest.path.name}: the lock file has no [installer] table (the wheel of pypa's installer that the "
               f"install engine uses); run `ort-bundler lock {manifest.path.name}` again")
        raise ManifestError(msg)
    assembly.add_file(f"payload/installer/{wheel.filename}", build.files[INSTALLER_KEY], wheel.sha256)
