"""A target's identity is values, and every target has a backend: what the build reads for each one."""

from __future__ import annotations

import pytest

from bundler.assembly.records import _venv_layout
from bundler.platforms.backends import BACKENDS, backend_for
from bundler.shipped.ort_bundle.records import VenvPlan
from bundler.target_platform import LINUX, TARGETS, WINDOWS, named_by


def test_every_target_has_the_backend_of_its_own_tag() -> None:
    assert set(BACKENDS) == set(TARGETS)
    assert all(backend_for(target).identity is target for target in TARGETS.values())


def test_names_are_short_distinct_folder_names() -> None:
    assert [target.name for target in TARGETS.values()] == ["windows", "linux"]


@pytest.mark.parametrize(("target", "interpreter", "scripts", "site_packages", "kind"), [
    (WINDOWS, "Scripts/python.exe", "Scripts", "Lib/site-packages", "win-amd64"),
    (LINUX, "bin/python", "bin", "lib/python3.11/site-packages", "posix"),
])
def test_the_venv_layout_is_what_python_m_venv_makes_on_the_target(target, interpreter, scripts, site_packages,
                                                                   kind) -> None:
    assert _venv_layout(target, "3.11") == VenvPlan(
        dir="venv", interpreter=interpreter, scripts=scripts, site_packages=site_packages, script_kind=kind,
        wheels=(), requirements="payload/wheels/requirements.txt", site_packages_files=())
    assert target.venv_python == f"venv/{interpreter}"
    assert target.site_packages("3.11") == f"venv/{site_packages}"


def test_default_install_dirs() -> None:
    assert WINDOWS.default_install_dir("app") == "%ProgramFiles%\\app"
    assert LINUX.default_install_dir("app") == "/opt/app"


@pytest.mark.parametrize(("name", "target"), [
    ("onnxruntime-1.23.1-cp311-cp311-win_amd64.whl", WINDOWS),
    ("onnxruntime-1.23.1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", LINUX),
    ("onnxruntime-win-x64-1.23.1.zip", WINDOWS),
    ("onnxruntime-linux-x64-gpu-1.23.1.tgz", LINUX),
    ("python-3.11.9-embed-amd64.zip", WINDOWS),
    ("cpython-3.11.9+20240726-x86_64-unknown-linux-gnu-install_only.tar.gz", LINUX),
])
def test_an_upstream_file_name_says_which_target_it_is_for(name: str, target) -> None:
    assert named_by(name) is target


def test_only_windows_wraps_into_intune_packages() -> None:
    assert backend_for(WINDOWS).package_formats == {"msi", "intunewin"}
    assert backend_for(LINUX).package_formats == frozenset()
