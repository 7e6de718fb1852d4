"""The runtime package part: `ort_bundle`, shipped into the environment's site-packages.

It is the launcher itself (`ort_bundle.launcher`, which run.sh, run.cmd and run.ps1 start with every
argument), what its `--tune`, `--profile` and `--support-bundle` run (`python -m ort_bundle.…`), the
default entry point `ort-bundler init` writes (`ort_bundle.infer`: one inference of the first model),
what the start-up hook calls to apply tuned and profiling session options, and the documented helper
applications import (`ort_bundle.session_options(name)`). Its modules live in `bundler/target` with
relative imports, so the build's tests import the very files the target runs; here they are copied
under their shipped names. Every bundle gets it, as every installation has an interpreter (the venv the
engine makes, or the bundled one) and its launchers start this package.
"""

from __future__ import annotations

from importlib import resources

from bundler.assembly.assembly import Assembly, BuildInputs, Copy

PACKAGE = "ort_bundle"
PAYLOAD = f"payload/{PACKAGE}"
#: bundler/target module -> its file name in the shipped package.
MODULES = {
    "ort_bundle_api.py": "__init__.py",
    "sessions.py": "sessions.py",
    "tuning.py": "tuning.py",
    "tuning_file.py": "tuning_file.py",
    "profile.py": "profile.py",
    "support.py": "support.py",
    "machine.py": "machine.py",
    "synth.py": "synth.py",
    "bundle_info.py": "bundle_info.py",
    "infer.py": "infer.py",
    "launcher.py": "launcher.py",
    "launch_config.py": "launch_config.py",
    "delta_apply.py": "delta_apply.py",  # `run.sh --apply`: a delta bundle applied by the release it updates
    "cache_folder.py": "cache_folder.py",
    "folder_trust.py": "folder_trust.py",
}


def package_files() -> dict[str, bytes]:
    """`ort_bundle/<name>` -> the bytes of that module, as the environment receives them."""
    source = resources.files("bundler.target")
    return {f"{PACKAGE}/{shipped}": source.joinpath(module).read_bytes() for module, shipped in MODULES.items()}


def add_runtime_package(assembly: Assembly, build: BuildInputs) -> None:
    """payload/ort_bundle/*, copied into site-packages/ort_bundle/ by the installer."""
    for relative, data in package_files().items():
        path = f"payload/{relative}"
        assembly.add_bytes(path, data)
        assembly.site_packages_files.append(Copy(source=path, target=relative))
