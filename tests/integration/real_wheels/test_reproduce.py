"""`ort-bundler reproduce` and the pinned model references, on the real quickstart bundles.

The bundles are built for real in the test; `reproduce` runs as a user runs it, from another folder,
with an empty cache that only the bundle itself and the package index (through pip) may fill.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from fixtures.cli import MANIFESTS, run_cli

from bundler.assembly import modelgate
from bundler.manifest import load
from bundler.operations.build import build
from bundler.shipped.ort_bundle.synth import output_digest
from bundler.sources.cache import Cache
from bundler.sources.gate import host_target
from bundler.sources.lock import read_lock, write_lock

pytestmark = pytest.mark.integration

LINUX_STEM = "quickstart-linux-1.0.0-linux_x86_64"
WIN_STEM = "quickstart-win-1.0.0-win_amd64"
#: The machine the Windows quickstart's lock pins the model gate's wheels for.
GATE_HOST = read_lock(MANIFESTS / "quickstart-win.lock.toml").gate.target


@pytest.fixture(scope="module")
def bundles(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    for name in ("quickstart-linux.toml", "quickstart-win.toml"):
        run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(out), str(MANIFESTS / name))
    return {"linux": out / f"{LINUX_STEM}.zip", "win": out / f"{WIN_STEM}.zip"}


def reproduce(bundle: Path, cache: Path, *extra: str, cwd: Path | None = None):
    return run_cli("reproduce", "--json", "--cache", str(cache), *extra, str(bundle), cwd=cwd, check=False)


def rewrite(source: Path, dest: Path, edit) -> Path:
    """A copy of the bundle with members changed by `edit(relative name, data) -> data`."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(dest, "w") as new:
        for info in old.infolist():
            relative = info.filename.split("/", 1)[1]
            new.writestr(info, edit(relative, old.read(info)) if relative else old.read(info))
    return dest


def test_both_quickstarts_reproduce_from_another_folder_with_an_empty_cache(bundles, tmp_path):
    cache, elsewhere = tmp_path / "empty-cache", tmp_path / "some" / "other folder"
    elsewhere.mkdir(parents=True)
    for platform, bundle in bundles.items():
        proc = reproduce(bundle, cache, cwd=elsewhere)
        assert proc.returncode == 0, proc.stderr + proc.stdout
        report = json.loads(proc.stdout)
        assert report["identical"] and report["differences"] == []
        # Every input the bundle ships unchanged came from it; only the capi source (an official wheel that
        # the bundle carries rebuilt) was looked up, through pip, and for the Windows bundle on this Linux host
        # the model gate's own ORT and NumPy, which its lock pins in [gate] and the bundle does not ship.
        gate = ["gate:numpy", "gate:onnxruntime"] if platform == "win" and host_target() == GATE_HOST else []
        assert report["looked_up"] == [*gate, "ort.capi"], platform
        assert {"models[0]", "launch.script", "lock:numpy"} <= set(report["taken_from_bundle"])
        assert report["taken_from_bundle"]["models[0]"] == "payload/models/tiny-mlp.onnx"
    assert list(elsewhere.iterdir()) == []
    assert not list((cache / "tmp").glob("reproduce-*"))  # the scratch folder is gone


def test_offline_without_the_capi_source_says_which_input_is_missing(bundles, tmp_path):
    proc = reproduce(bundles["linux"], tmp_path / "empty", "--offline")
    assert proc.returncode == 4, proc.stderr
    assert "ort.capi" in proc.stderr and "--offline" in proc.stderr


def test_an_altered_member_is_named_with_exit_8(bundles, bundler_cache, tmp_path):
    altered = rewrite(bundles["linux"], tmp_path / f"{LINUX_STEM}.zip",
                      lambda name, data: data.replace(b"set -eu", b"set -u") if name == "install.sh" else data)
    proc = reproduce(altered, bundler_cache)
    assert proc.returncode == 8, proc.stderr
    differences = {d["member"]: d["reason"] for d in json.loads(proc.stdout)["differences"]}
    assert list(differences) == ["install.sh"]
    assert differences["install.sh"].startswith("altered after the build: its bytes no longer match")

    text = run_cli("reproduce", "-q", "--cache", str(bundler_cache), str(altered), check=False)
    assert text.returncode == 8 and "  install.sh: altered after the build" in text.stderr


def test_an_altered_model_is_never_used_and_is_named(bundles, tmp_path):
    altered = rewrite(bundles["linux"], tmp_path / f"{LINUX_STEM}.zip",
                      lambda name, data: data[:-1] + bytes([data[-1] ^ 1]) if name.endswith(".onnx") and "models/" in name
                      else data)
    proc = reproduce(altered, tmp_path / "empty-cache")
    assert proc.returncode == 8, proc.stderr
    assert "payload/models/tiny-mlp.onnx: its bytes hash to" in proc.stderr
    assert "for models[0]: the member was altered after the build" in proc.stderr


def test_the_same_content_compressed_differently_is_put_down_to_zlib(bundles, bundler_cache, tmp_path):
    """What another zlib does: the same bytes inside, other deflate output (here: another level)."""
    recompressed = tmp_path / f"{LINUX_STEM}.zip"
    with zipfile.ZipFile(bundles["linux"]) as old, zipfile.ZipFile(recompressed, "w") as new:
        for info in old.infolist():
            level = 1 if info.filename.endswith("/install.sh") else None
            new.writestr(info, old.read(info), compresslevel=level)
    proc = reproduce(recompressed, bundler_cache)
    assert proc.returncode == 8, proc.stderr
    (difference,) = json.loads(proc.stdout)["differences"]
    assert difference["member"] == "install.sh"
    assert difference["reason"].startswith("the same content, compressed differently")
    assert "a different zlib (this machine has zlib " in difference["reason"]


def test_a_signed_bundle_differs_only_by_its_signatures_and_says_so(bundles, bundler_cache, tmp_path):
    """A stand-in for `ort-bundler sign` (another command): an Authenticode block on every .ps1 and a
    detached signature member; reproduce must put every difference down to signing."""
    block = b"\r\n# SIG # Begin signature block\r\n# MIIFakeBase64==\r\n# SIG # End signature block\r\n"
    signed = rewrite(bundles["win"], tmp_path / f"{WIN_STEM}.zip",
                     lambda name, data: data + block if name.endswith(".ps1") else data)
    with zipfile.ZipFile(signed, "a") as archive:
        archive.writestr(f"{WIN_STEM}/SHA256SUMS.p7s", b"detached signature")
    proc = reproduce(signed, bundler_cache)
    assert proc.returncode == 8, proc.stderr
    reasons = {d["member"]: d["reason"] for d in json.loads(proc.stdout)["differences"]}
    assert reasons.pop("SHA256SUMS.p7s").startswith("a signature added after the build")
    assert reasons and all(name.endswith(".ps1") for name in reasons)
    assert set(reasons.values()) == {"signed after the build: equal to the rebuild once its signature block is removed"}


def edit_bundle_json(source: Path, dest: Path, change) -> Path:
    def edit(name: str, data: bytes) -> bytes:
        if name != "bundle.json":
            return data
        record = json.loads(data)
        change(record)
        return (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
    return rewrite(source, dest, edit)


def test_an_edited_recorded_manifest_fails_with_the_cause(bundles, bundler_cache, tmp_path):
    edited = edit_bundle_json(bundles["linux"], tmp_path / f"{LINUX_STEM}.zip",
                              lambda record: record["manifest"]["launch"].update(env={"APP_MODE": "edited"}))
    proc = reproduce(edited, bundler_cache)
    assert proc.returncode == 8, proc.stderr
    differences = {d["member"]: d["reason"] for d in json.loads(proc.stdout)["differences"]}
    assert differences["bundle.json"].startswith("altered after the build")
    assert "the manifest and lock it records, which reproduce rebuilds from, were edited" in differences["bundle.json"]
    assert "payload/launchers/run.sh" not in differences  # the launcher script carries no [launch] value
    assert differences["payload/launchers/launch.json"].startswith("the launcher's data, written from the recorded "
                                                                    "manifest's [launch] table")


def test_a_bundle_from_another_ort_bundler_version_says_which_and_is_still_compared(bundles, bundler_cache, tmp_path):
    other = edit_bundle_json(bundles["linux"], tmp_path / f"{LINUX_STEM}.zip",
                             lambda record: record["built_with"].update({"ort-bundler": "0.0.9"}))
    proc = run_cli("reproduce", "-q", "--cache", str(bundler_cache), str(other), check=False)
    assert proc.returncode == 8
    assert proc.stderr.startswith("note: built by ort-bundler 0.0.9, rebuilt by ort-bundler ")
    assert "bundle.json: altered after the build" in proc.stderr
    report = json.loads(reproduce(other, bundler_cache).stdout)
    assert report["built_with"] == "0.0.9" and {d["member"] for d in report["differences"]} == {"bundle.json"}


def without(source: Path, dest: Path, member: str) -> Path:
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(dest, "w") as new:
        for info in old.infolist():
            if not info.filename.endswith("/" + member):
                new.writestr(info, old.read(info))
    return dest


def test_a_bundle_that_carries_no_lock_is_not_supported(bundles, bundler_cache, tmp_path):
    old = without(bundles["linux"], tmp_path / f"{LINUX_STEM}.zip", "lock.toml")
    proc = reproduce(old, bundler_cache)
    assert proc.returncode == 9, proc.stderr
    assert "carries no lock.toml" in proc.stderr


def test_an_edited_lock_is_named(bundles, bundler_cache, tmp_path):
    edited = rewrite(bundles["linux"], tmp_path / f"{LINUX_STEM}.zip",
                     lambda name, data: data.replace(b"[[wheel]]", b"[[wheel]]  # edited", 1) if name == "lock.toml"
                     else data)
    proc = reproduce(edited, bundler_cache)
    assert proc.returncode == 8, proc.stderr
    assert "lock.toml is not the lock file `ort-bundler lock` writes" in proc.stderr


def test_kept_rebuild_is_the_same_zip(bundles, bundler_cache, tmp_path):
    proc = reproduce(bundles["linux"], bundler_cache, "-o", str(tmp_path / "kept"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "kept" / f"{LINUX_STEM}.zip").read_bytes() == bundles["linux"].read_bytes()


# -- pinned references -------------------------------------------------------------------------------------


def shared_inputs_cache(bundler_cache: Path, root: Path) -> Cache:
    """A cache with the shared inputs and isolated ORT environments, but its own gate results and members:
    the model gate really runs in every build made with it."""
    root.mkdir()
    for name in ("sha256", "ort-envs"):
        (root / name).symlink_to(bundler_cache / name)
    return Cache(root)


def test_two_gate_runs_that_differ_in_the_last_bit_give_byte_identical_zips(bundles, bundler_cache, tmp_path,
                                                                            monkeypatch):
    """Another CPU kernel (AVX-512 vs AVX2) may round the last bit differently: simulated by adding one ulp
    to every output of the real ORT run in the second build."""
    manifest = load(MANIFESTS / "quickstart-linux.toml")
    real = modelgate.probe_models
    runs: list[dict] = []

    def other_cpu(models, **kwargs):
        probes = json.loads(json.dumps(real(models, **kwargs)))
        for probe in probes.values():
            for output in probe["reference"]["outputs"].values():
                moved = np.nextafter(np.asarray(output["values"], dtype=output["dtype"]), np.float32(np.inf))
                output["values"], output["digest"] = moved.tolist(), output_digest(moved.reshape(output["shape"]))
        runs.append(probes)
        return probes

    first = build(manifest, cache=shared_inputs_cache(bundler_cache, tmp_path / "a"), out_dir=tmp_path / "one")
    monkeypatch.setattr(modelgate, "probe_models", other_cpu)
    second = build(manifest, cache=shared_inputs_cache(bundler_cache, tmp_path / "b"), out_dir=tmp_path / "two")

    pinned = json.loads(read_lock(MANIFESTS / "quickstart-linux.lock.toml").models[0].record)
    assert runs and runs[0]["tiny-mlp"]["reference"]["outputs"]["y"]["values"] \
        != pinned["reference"]["outputs"]["y"]["values"]  # the second gate really saw other bits
    assert first.zip_path.read_bytes() == second.zip_path.read_bytes() == bundles["linux"].read_bytes()


def quickstart_copy(folder: Path) -> Path:
    shutil.copytree(MANIFESTS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    return folder / "quickstart-linux.toml"


def test_a_reference_the_pinned_ort_cannot_reproduce_fails_the_build_naming_the_model(bundler_cache, tmp_path):
    manifest = quickstart_copy(tmp_path / "m")
    lock = manifest.with_name("quickstart-linux.lock.toml")
    pinned = read_lock(lock)  # as a lock made where the CPU rounds otherwise: values and summary agree
    (model,) = pinned.models
    assert ",0.390625," in model.record  # element 3 of the reference on the synthesised inputs (synth 2)
    write_lock(dataclasses.replace(pinned, models=(dataclasses.replace(
        model, record=model.record.replace(",0.390625,", ",0.890625,")),)), lock)

    proc = run_cli("build", "--cache", str(bundler_cache), "-o", str(tmp_path / "out"), str(manifest), check=False)
    assert proc.returncode == 7, proc.stderr
    assert ("model 'tiny-mlp' (models/tiny-mlp.onnx): ORT 1.23.1 on this machine does not reproduce the pinned "
            "reference within rtol 0.0001, atol 1e-05: the largest difference is 0.5 in output 'y' element 3") in proc.stderr
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_a_changed_model_without_a_new_lock_names_the_model_and_the_command(bundler_cache, tmp_path):
    manifest = quickstart_copy(tmp_path / "m")
    model = manifest.parent / "models" / "tiny-mlp.onnx"
    model.write_bytes(model.read_bytes().replace(b"ort-bundler", b"ort-bundlex"))
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    manifest.write_text(re.sub(r'sha256 = "db67[0-9a-f]+"', f'sha256 = "{sha}"', manifest.read_text()), encoding="utf-8")
    run_cli("fetch", "-q", "--cache", str(bundler_cache), str(manifest))

    proc = run_cli("build", "--cache", str(bundler_cache), "-o", str(tmp_path / "out"), str(manifest), check=False)
    assert proc.returncode == 3, proc.stderr
    assert (f"quickstart-linux.lock.toml: model 'tiny-mlp' (models/tiny-mlp.onnx) changed (sha256 {sha}, the lock "
            "pins db67a4b8fc5f6964f6329c9db9dde717e7c0f1892abde30b0c141e1fbd2ece3a); run `ort-bundler lock "
            "quickstart-linux.toml` again") in proc.stderr


def test_help_shows_examples_for_reproduce_and_diff():
    for command in ("reproduce", "diff"):
        proc = run_cli(command, "--help")
        assert "examples:" in proc.stdout and f"ort-bundler {command} " in proc.stdout


def test_bad_arguments_are_clear_errors(tmp_path):
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"PK\x03\x04 not really")
    proc = run_cli("reproduce", "--cache", str(tmp_path / "c"), str(junk), check=False)
    assert proc.returncode in (6, 8) and "junk.zip" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("reproduce", "--mirror", str(tmp_path / "nowhere"), str(junk), check=False)
    assert proc.returncode == 2 and "--mirror" in proc.stderr
    proc = run_cli("reproduce", "--offline", "--mirror", str(tmp_path), str(junk), check=False)
    assert proc.returncode == 2
    missing = run_cli("reproduce", str(tmp_path / "absent.zip"), check=False)
    assert missing.returncode == 4 and "absent.zip: not found" in missing.stderr  # exit 4, "not found" (38, 8i)


def test_lock_computes_a_reference_once_and_again_only_for_a_changed_model(bundler_cache, tmp_path):
    manifest = quickstart_copy(tmp_path / "m")
    lock = manifest.with_name("quickstart-linux.lock.toml")
    other_machine = str(float(np.nextafter(np.float32(2.81640625), np.float32(np.inf))))
    lock.write_text(lock.read_text(encoding="utf-8").replace("2.81640625", other_machine), encoding="utf-8")

    run_cli("lock", "-q", "--cache", str(bundler_cache), str(manifest))
    assert other_machine in lock.read_text(encoding="utf-8")  # kept: the model, ORT and shapes did not change

    manifest.write_text(manifest.read_text(encoding="utf-8").replace("x = [2, 4]", "x = [3, 4]"), encoding="utf-8")
    run_cli("lock", "-q", "--cache", str(bundler_cache), str(manifest))
    record = json.loads(read_lock(lock).models[0].record)
    assert record["shapes"] == {"x": [3, 4]} and record["reference"]["outputs"]["y"]["shape"] == [3, 3]
    assert other_machine not in lock.read_text(encoding="utf-8")
