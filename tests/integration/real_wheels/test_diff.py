"""`ort-bundler diff` on real quickstart bundles: a variant that differs in a wheel, a model and an
environment variable, built for real (lock through pip, fetch, build), lists exactly those three."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from fixtures.cli import MANIFESTS, run_cli
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.integration

STEM = "quickstart-linux-1.0.0-linux_x86_64"
EXTRA_WHEEL = "six==1.17.0"


def other_model(path: Path) -> str:
    """The quickstart's tiny-mlp with other weights and opset: same name, another model."""
    weights = np.full((4, 3), 0.5, dtype=np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "tiny-mlp", [x], [y],
                              initializer=[numpy_helper.from_array(weights, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="ort-bundler-tests")
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return hashlib.sha256(path.read_bytes()).hexdigest()


def variant(folder: Path) -> Path:
    """The Linux quickstart plus one wheel (six), another model under the same name and one env variable."""
    shutil.copytree(MANIFESTS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = folder / "quickstart-linux.toml"
    sha = other_model(folder / "models" / "tiny-mlp.onnx")
    text = manifest.read_text(encoding="utf-8")
    text = re.sub(r'sha256 = "db67[0-9a-f]+"', f'sha256 = "{sha}"', text)
    text = text.replace('lock = "quickstart-linux.lock.toml"',
                        f'lock = "quickstart-linux.lock.toml"\nrequirements = ["{EXTRA_WHEEL}"]')
    text += 'env = { APP_MODE = "fast" }\n'
    manifest.write_text(text, encoding="utf-8")
    return manifest


@pytest.fixture(scope="module")
def two_versions(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("diff")
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(out / "old"), str(MANIFESTS / "quickstart-linux.toml"))
    manifest = variant(out / "variant")
    for command in ("lock", "fetch"):
        run_cli(command, "-q", "--cache", str(bundler_cache), str(manifest))
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(out / "new"), str(manifest))
    return out / "old" / f"{STEM}.zip", out / "new" / f"{STEM}.zip"


def test_diff_lists_exactly_the_wheel_the_model_and_the_environment_variable(two_versions, tmp_path):
    old, new = two_versions
    proc = run_cli("diff", str(old), str(new), cwd=tmp_path, check=False)
    assert proc.returncode == 1, proc.stderr  # they differ (issue 38, item 7)
    lines = [line.strip() for line in proc.stdout.splitlines()[1:] if not line.startswith("    ")]
    assert proc.stdout.splitlines()[0].endswith(": 3 change(s)"), proc.stdout
    assert lines[0] == "wheel: added six 1.17.0"
    assert lines[1].startswith("model: tiny-mlp: sha256 db67a4b8fc5f… -> ") and "opsets" in lines[1]
    assert lines[2] == "environment: launch environment added: APP_MODE=fast"
    assert list(tmp_path.iterdir()) == []  # nothing extracted where the user runs it

    report = json.loads(run_cli("diff", "--json", str(old), str(new), check=False).stdout)
    assert report["identical"] is False
    assert [(c["kind"], c["change"], c["subject"]) for c in report["changes"]] == [
        ("wheel", "added", "six"), ("model", "changed", "tiny-mlp"), ("environment", "added", "APP_MODE")]
    assert report["changes"][2]["new"] == "fast"
    assert report["changes"][1]["old"] == "db67a4b8fc5f6964f6329c9db9dde717e7c0f1892abde30b0c141e1fbd2ece3a"


def test_diff_of_a_bundle_with_itself_says_identical(two_versions):
    old, _ = two_versions
    proc = run_cli("diff", str(old), str(old))
    assert proc.stdout.strip() == f"{old.name} and {old.name} are identical"
    assert json.loads(run_cli("diff", "--json", str(old), str(old)).stdout)["changes"] == []


def rewrite(source: Path, dest: Path, edit) -> Path:
    """A copy of the bundle with members changed by `edit(name, data) -> data | None` (None drops it)."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            data = edit(info.filename, old.read(info))
            if data is not None:
                new.writestr(info, data)
    return dest


def test_signing_is_not_a_change_but_an_edited_script_is_with_its_unified_diff(two_versions, tmp_path):
    old, _ = two_versions
    # What Authenticode signing appends to a script (a stand-in block: its content is not parsed). The Linux
    # bundle has no .ps1, so its install.sh carries it here; the rule is the same for every script.
    block = "\r\n# SIG # Begin signature block\r\n# MIIFakeBase64==\r\n# SIG # End signature block\r\n"

    def signed(name: str, data: bytes) -> bytes:
        return data + block.encode() if name.endswith("/install.sh") else data

    signed_zip = rewrite(old, tmp_path / "signed.zip", signed)
    with zipfile.ZipFile(signed_zip, "a") as archive:
        archive.writestr(f"{STEM}/SHA256SUMS.p7s", b"detached signature")
    assert json.loads(run_cli("diff", "--json", str(old), str(signed_zip)).stdout)["identical"] is True

    edited = rewrite(old, tmp_path / "edited.zip",
                     lambda name, data: data.replace(b"set -eu", b"set -eux") if name.endswith("/install.sh") else data)
    plain = run_cli("diff", str(old), str(edited), check=False).stdout
    assert "script: install.sh changed (1 line(s) removed, 1 added; --scripts shows them)" in plain
    shown = run_cli("diff", "--scripts", str(old), str(edited), check=False).stdout
    assert "-set -eu" in shown and "+set -eux" in shown


def test_diff_of_a_file_that_is_not_a_bundle_fails_with_exit_8(two_versions, tmp_path):
    old, _ = two_versions
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"not a zip")
    proc = run_cli("diff", str(old), str(junk), check=False)
    assert proc.returncode in (6, 8), proc.stderr
    assert "junk.zip" in proc.stderr and "Traceback" not in proc.stderr


WIN_STEM = "quickstart-win-1.0.0-win_amd64"


def test_a_changed_dll_inside_a_wheel_is_named_with_file_and_linker_versions(bundler_cache, tmp_path):
    """Real PE files: the ORT wheel of the Windows quickstart with its onnxruntime.dll swapped for the
    providers_shared DLL of the same wheel (another FileVersion is not needed: the sizes and bytes differ)."""
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(tmp_path), str(MANIFESTS / "quickstart-win.toml"))
    old = tmp_path / f"{WIN_STEM}.zip"
    wheel_member = next(n for n in zipfile.ZipFile(old).namelist() if "/payload/wheels/onnxruntime-" in n)

    def swap_dll(wheel_bytes: bytes) -> bytes:
        source, out = tmp_path / "in.whl", tmp_path / "out.whl"
        source.write_bytes(wheel_bytes)
        with zipfile.ZipFile(source) as wheel, zipfile.ZipFile(out, "w") as new:
            shared = wheel.read("onnxruntime/capi/onnxruntime_providers_shared.dll")
            for info in wheel.infolist():
                new.writestr(info, shared if info.filename == "onnxruntime/capi/onnxruntime.dll" else wheel.read(info))
        return out.read_bytes()

    new = rewrite(old, tmp_path / "new.zip", lambda name, data: swap_dll(data) if name == wheel_member else data)
    report = json.loads(run_cli("diff", "--json", str(old), str(new), check=False).stdout)
    binaries = [c for c in report["changes"] if c["kind"] == "binary"]
    assert [c["subject"] for c in binaries] == [
        f"{wheel_member.split('/', 1)[1]}!onnxruntime/capi/onnxruntime.dll"]
    assert binaries[0]["old"]["file_version"].startswith("1.23.") and binaries[0]["old"]["linker"] == "14.40"
    assert "FileVersion 1.23." in binaries[0]["text"] and "linker 14.40 -> 14.40" in binaries[0]["text"]
    # bundle.json was not rebuilt, so the wheel's new bytes are explained by nothing else: listed as a file
    assert [c["subject"] for c in report["changes"] if c["kind"] == "file"] == [wheel_member.split("/", 1)[1]]


def test_a_new_bundle_version_is_one_change_not_every_script_that_names_it(two_versions, bundler_cache, tmp_path):
    old, _ = two_versions
    shutil.copytree(MANIFESTS, tmp_path / "m", ignore=shutil.ignore_patterns("__pycache__"))
    manifest = tmp_path / "m" / "quickstart-linux.toml"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace('version = "1.0.0"', 'version = "1.1.0"'),
                        encoding="utf-8")
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(tmp_path / "out"), str(manifest))
    new = tmp_path / "out" / "quickstart-linux-1.1.0-linux_x86_64.zip"

    report = json.loads(run_cli("diff", "--json", str(old), str(new), check=False).stdout)
    assert [(c["kind"], c["subject"], c["old"], c["new"]) for c in report["changes"]] == [
        ("bundle", "version", "1.0.0", "1.1.0")]


def test_linux_to_windows_names_both_ort_wheels_and_the_new_vc_runtime_without_none(bundler_cache, tmp_path):
    """Issue 26: `diff` linux→win said "the ORT wheel …win_amd64.whl has other bytes" (change "rebuilt", only
    the new file named) and "minimum Visual C++ runtime None -> 14.44.35208"."""
    for name in ("quickstart-linux.toml", "quickstart-win.toml"):
        run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(tmp_path), str(MANIFESTS / name))
    old, new = tmp_path / f"{STEM}.zip", tmp_path / f"{WIN_STEM}.zip"
    report = json.loads(run_cli("diff", "--json", str(old), str(new), check=False).stdout)
    text = run_cli("diff", str(old), str(new), check=False).stdout
    assert "None" not in text and "null" not in text
    ort = [c for c in report["changes"] if c["kind"] == "ort"]
    assert [(c["change"], c["subject"]) for c in ort] == [("changed", "wheel")]
    with zipfile.ZipFile(old) as a, zipfile.ZipFile(new) as b:
        wheels = [json.loads(z.read(f"{stem}/bundle.json"))["ort"]["wheel"] for z, stem in ((a, STEM), (b, WIN_STEM))]
    assert (ort[0]["old"], ort[0]["new"]) == tuple(wheels)
    assert ort[0]["text"].startswith(f"the ORT wheel {wheels[0]} -> {wheels[1]} for win_amd64 instead of linux_x86_64")
    vc = [c for c in report["changes"] if c["kind"] == "vc_runtime"]
    assert len(vc) == 1 and vc[0]["change"] == "added" and vc[0]["old"] is None
    assert vc[0]["text"] == f"the bundle now needs the Visual C++ runtime {vc[0]['new']} or later"
