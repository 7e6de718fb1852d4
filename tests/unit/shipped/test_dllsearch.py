"""The native route's DLL search, as the self-check asks it: the program's folder first, System32 second."""

from __future__ import annotations

import shutil
from pathlib import Path

import pefile
import pytest
from fixtures.native import DECOY_ORT_VERSION, ort_win_capi  # noqa: F401  (fixture)

from bundler.shipped.ort_bundle.selfcheck.dllsearch import choose, file_version, search_folders

pytestmark = pytest.mark.integration


def layout(tmp_path: Path, capi: Path, *, app_local: bool) -> tuple[Path, Path]:
    """A Windows tree: System32 with the decoy, an app folder with or without the bundle's copy."""
    windows, app = tmp_path / "Windows", tmp_path / "app"
    (windows / "System32").mkdir(parents=True)
    app.mkdir()
    shutil.copyfile(capi / "onnxruntime.dll", windows / "System32" / "onnxruntime.dll")
    if app_local:
        shutil.copyfile(capi / "onnxruntime.dll", app / "onnxruntime.dll")
    return windows, app


def test_the_programs_folder_wins_over_system32_and_path(tmp_path: Path, ort_win_capi) -> None:
    windows, app = layout(tmp_path, ort_win_capi(DECOY_ORT_VERSION), app_local=True)
    on_path = tmp_path / "on-path"
    on_path.mkdir()
    shutil.copyfile(ort_win_capi(DECOY_ORT_VERSION) / "onnxruntime.dll", on_path / "onnxruntime.dll")
    folders = search_folders(app, system_root=windows, cwd=tmp_path, path=f"{on_path};C:\\nowhere")
    choice = choose("onnxruntime.dll", folders)
    assert choice.loaded == app / "onnxruntime.dll"
    assert choice.candidates == [app / "onnxruntime.dll", windows / "System32" / "onnxruntime.dll",
                                 on_path / "onnxruntime.dll"]


def test_without_the_app_local_copy_system32_wins(tmp_path: Path, ort_win_capi) -> None:
    windows, app = layout(tmp_path, ort_win_capi(DECOY_ORT_VERSION), app_local=False)
    choice = choose("onnxruntime.dll", search_folders(app, system_root=windows, cwd=tmp_path, path=""))
    assert choice.loaded == windows / "System32" / "onnxruntime.dll"


def test_the_file_version_agrees_with_pefile(ort_win_capi) -> None:
    """Our stdlib reader against an outside one, on the real 1.20.1 and 1.23.1 DLLs."""
    for version in (DECOY_ORT_VERSION, "1.23.1"):
        dll = ort_win_capi(version) / "onnxruntime.dll"
        pe = pefile.PE(str(dll), fast_load=False)
        fixed = pe.VS_FIXEDFILEINFO[0]
        expected = (f"{fixed.FileVersionMS >> 16}.{fixed.FileVersionMS & 0xFFFF}."
                    f"{fixed.FileVersionLS >> 16}.{fixed.FileVersionLS & 0xFFFF}")
        assert file_version(dll) == expected
        assert expected.startswith(".".join(version.split(".")[:2]) + ".")


def test_a_file_without_a_version_resource_has_none(tmp_path: Path) -> None:
    (tmp_path / "plain.dll").write_bytes(b"MZ" + bytes(200))
    assert file_version(tmp_path / "plain.dll") is None
    assert file_version(tmp_path / "missing.dll") is None


def native_context(tmp_path: Path, capi: Path, *, app_local: bool):
    from bundler.shipped.ort_bundle.selfcheck.selfcheck import Context

    windows, app = layout(tmp_path, capi, app_local=app_local)
    bundle = {"platform": "win_amd64", "entry_point": {"program": "app/ortprobe.exe"}}
    return Context(root=tmp_path, bundle=bundle, allow_cpu_fallback=False), windows


def test_the_self_check_warns_about_system32_even_when_the_bundles_copy_wins(
        tmp_path: Path, ort_win_capi, monkeypatch: pytest.MonkeyPatch) -> None:
    from bundler.shipped.ort_bundle.selfcheck.selfcheck import check_native_runtime

    ctx, windows = native_context(tmp_path, ort_win_capi(DECOY_ORT_VERSION), app_local=True)
    monkeypatch.setenv("SystemRoot", str(windows))  # where this stand-in Windows tree keeps System32
    check = check_native_runtime(ctx)
    assert check.status == "warn", check
    assert "System32 also holds onnxruntime.dll 1.20." in check.message
    assert check.details["loads"] == str(tmp_path / "app" / "onnxruntime.dll")


def test_the_self_check_fails_when_the_program_would_load_system32s_copy(
        tmp_path: Path, ort_win_capi, monkeypatch: pytest.MonkeyPatch) -> None:
    from bundler.shipped.ort_bundle.selfcheck.selfcheck import check_native_runtime

    ctx, windows = native_context(tmp_path, ort_win_capi(DECOY_ORT_VERSION), app_local=False)
    monkeypatch.setenv("SystemRoot", str(windows))
    check = check_native_runtime(ctx)
    assert check.status == "fail"
    assert check.message.startswith(f"app/ortprobe.exe would load {windows / 'System32' / 'onnxruntime.dll'} (version 1.20.")


def test_the_native_check_skips_python_entry_points(tmp_path: Path) -> None:
    from bundler.shipped.ort_bundle.selfcheck.selfcheck import Context, check_native_runtime

    ctx = Context(root=tmp_path, bundle={"platform": "win_amd64", "entry_point": {"script": "app/main.py"}},
                  allow_cpu_fallback=False)
    assert check_native_runtime(ctx).status == "skip"

