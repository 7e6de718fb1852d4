"""Messages a first real use met (issue 26, defects 6 and 9): no Python `None`, no counting slips, no scratch paths.

Each test drives the real command on a real bundle or input and reads what the user reads.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import shutil
import tomllib
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli
from fixtures.signing_pki import Pki
from fixtures.wheels import cache_root

from bundler.assembly.wheelbuild import capi_wheel
from bundler.errors import BuildError
from bundler.hashing import file_sha256
from bundler.manifest import load
from bundler.readers.capi import read_capi
from bundler.shipped.ort_bundle.selfcheck.check_context import Context
from bundler.signing.check import check_signatures
from bundler.target_platform import LINUX as LINUX_TARGET

LINUX = "quickstart-linux-1.0.0-linux_x86_64"
CACHE = cache_root() / "bundler-cache"


@pytest.fixture(scope="module")
def linux_zip(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("linux")
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(out), str(MANIFESTS / "quickstart-linux.toml"))
    return out / f"{LINUX}.zip"


def test_a_signature_whose_signer_is_unknown_does_not_say_none() -> None:
    """`SHA256SUMS.p7s (cms): FAILED, signed by None` was the line for a signature that cannot be read."""
    files = {"SHA256SUMS": b"0" * 64 + b"  bundle.json\n", "SHA256SUMS.p7s": b"not a CMS signature"}
    checks = check_signatures(sorted(files), files.__getitem__, anchors=None, now=dt.datetime.now(dt.UTC))
    summary = "\n".join(c.summary() for c in checks)
    assert "SHA256SUMS.p7s (cms): FAILED, signer unknown" in summary
    assert "None" not in summary


@pytest.mark.integration
def test_signing_a_linux_bundle_counts_its_three_signatures(linux_zip: Path, tmp_path: Path) -> None:
    """A Linux bundle has no scripts to Authenticode-sign: its signatures are SHA256SUMS.p7s and the DSSE
    envelopes of its two provenance statements, the one in the bundle and the one beside the zip (said as
    "3 signatures", never "1 signatures")."""
    pki = Pki.make(tmp_path / "pki", "good")
    proc = run_cli("sign", "--cache", str(CACHE), str(linux_zip), "-o", str(tmp_path / "signed"), "--cert",
                   str(pki.cert), "--key", str(pki.key), "--chain", str(pki.chain))
    assert ": 3 signatures\n" in proc.stdout, proc.stdout
    with zipfile.ZipFile(tmp_path / "signed" / linux_zip.name) as archive:
        assert {f"{LINUX}/SHA256SUMS.p7s", f"{LINUX}/provenance.intoto.dsse.json"} <= set(archive.namelist())
    assert (tmp_path / "signed" / f"{linux_zip.name}.intoto.jsonl").is_file()


@pytest.mark.parametrize(("platform", "expected"), [
    ("linux_x86_64", "Re-run the bundle's install.sh with --force to restore /opt/app."),
    ("win_amd64", "Re-run the bundle's install.cmd with -Force to restore /opt/app."),
])
def test_the_repair_hint_speaks_the_platforms_own_installer(platform: str, expected: str) -> None:
    """A Linux hint said "Re-run … with -Force (--force on Linux)": each platform gets its own command."""
    context = Context(root=Path("/opt/app"), bundle={"platform": platform}, allow_cpu_fallback=False)
    assert context.reinstall() == expected


def quickstart_copy(folder: Path, *, replace: dict[str, str] | None = None) -> Path:
    """The Linux quickstart (manifest, lock, model, entry point) in a folder of its own, edited as a user would."""
    shutil.copytree(MANIFESTS / "models", folder / "models")
    shutil.copytree(MANIFESTS / "app", folder / "app")
    shutil.copy(MANIFESTS / "quickstart-linux.lock.toml", folder)
    text = (MANIFESTS / "quickstart-linux.toml").read_text(encoding="utf-8")
    for old, new in (replace or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    manifest = folder / "quickstart-linux.toml"
    manifest.write_text(text, encoding="utf-8")
    return manifest


TINY_MLP_SHA256 = "db67a4b8fc5f6964f6329c9db9dde717e7c0f1892abde30b0c141e1fbd2ece3a"


@pytest.mark.integration
def test_build_names_the_mismatch_fetch_saw_not_a_missing_file(bundler_cache: Path, tmp_path: Path) -> None:
    """A wrong sha256 went to build as "not in the cache … run fetch first" after fetch had reported the mismatch."""
    wrong = "0" * 64
    manifest = quickstart_copy(tmp_path / "app", replace={TINY_MLP_SHA256: wrong})
    fetched = run_cli("fetch", "-q", "--cache", str(bundler_cache), str(manifest), check=False)
    assert fetched.returncode == 5 and "models[0]" in fetched.stderr
    built = run_cli("build", "--cache", str(bundler_cache), "-o", str(tmp_path / "out"), str(manifest), check=False)
    assert built.returncode == 5, built.stderr
    # The file itself is compared with its pin (issue 38, item 1): the mismatch is named, not a missing input.
    assert f"models/tiny-mlp.onnx has sha256 {TINY_MLP_SHA256}, but the manifest pins {wrong}" in built.stderr
    assert "run `ort-bundler fetch` first" not in built.stderr and "Traceback" not in built.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    # Corrected, fetch succeeds and the note no longer applies: the build goes through.
    manifest.write_text(manifest.read_text(encoding="utf-8").replace(wrong, TINY_MLP_SHA256), encoding="utf-8")
    run_cli("fetch", "-q", "--cache", str(bundler_cache), str(manifest))
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(tmp_path / "out"), str(manifest))


@pytest.mark.integration
def test_a_wrong_ort_version_names_the_manifest_key_not_a_scratch_folder(ort_linux_wheel: Path, tmp_path: Path) -> None:
    """A wrong [ort] version named `…/tmp/build-3337…/capi/…whl.capi/onnxruntime` (exit 7)."""
    with pytest.raises(BuildError) as caught:
        capi_wheel(ort_linux_wheel, source_sha256=file_sha256(ort_linux_wheel), target=LINUX_TARGET,
                   target_python="3.11", expected_version="1.22.0", requires=None, source_date_epoch=1767225600,
                   work=tmp_path / "scratch", cache=None)
    message = str(caught.value)
    assert message == "ort.capi: found ONNX Runtime version 1.23.1, expected 1.22.0 as pinned by [ort] version"
    assert str(tmp_path) not in message and caught.value.return_code == 7


@pytest.mark.integration
def test_a_wrong_model_path_is_refused_by_fetch_and_lock_and_named_by_build(bundler_cache: Path, tmp_path: Path) -> None:
    """Issue 26 defect 7: `path = "models/tiny-mpl.onnx"` (no such file) passed fetch, lock and build because the
    pinned bytes were cached; the next person's fetch fails."""
    manifest = quickstart_copy(tmp_path / "app", replace={'path = "models/tiny-mlp.onnx"': 'path = "models/tiny-mpl.onnx"'})
    missing = tmp_path / "app" / "models" / "tiny-mpl.onnx"
    for command in ("fetch", "lock"):
        proc = run_cli(command, "--cache", str(bundler_cache), str(manifest), check=False)
        assert proc.returncode == 4, (command, proc.stderr)
        assert f"error: models[0]: {missing} does not exist" in proc.stderr and "correct the path" in proc.stderr
    lock = tmp_path / "app" / "quickstart-linux.lock.toml"
    assert lock.read_bytes() == (MANIFESTS / "quickstart-linux.lock.toml").read_bytes()  # lock wrote nothing
    built = run_cli("build", "--cache", str(bundler_cache), "-o", str(tmp_path / "out"), str(manifest))
    assert f"warning: models[0]: {missing} does not exist" in built.stderr
    assert (tmp_path / "out" / f"{LINUX}.zip").is_file()


@pytest.mark.integration
def test_offline_fetch_reads_a_local_file_from_disk(bundler_cache: Path, tmp_path: Path) -> None:
    """`--offline` said "--offline forbids the network" for a local `path`, which needs no network."""
    import onnx

    model = onnx.load(str(MANIFESTS / "models" / "tiny-mlp.onnx"))
    model.producer_name = f"first-use-{tmp_path.name}"  # other bytes: a hash no cache holds yet
    data = model.SerializeToString()
    manifest = quickstart_copy(tmp_path / "app", replace={TINY_MLP_SHA256: hashlib.sha256(data).hexdigest()})
    (tmp_path / "app" / "models" / "tiny-mlp.onnx").write_bytes(data)
    proc = run_cli("fetch", "--offline", "--cache", str(bundler_cache), str(manifest), check=False)
    assert proc.returncode == 0, proc.stderr
    assert "forbids the network" not in proc.stderr


@pytest.mark.integration
def test_a_path_outside_the_manifests_folder_needs_allow_outside_and_is_never_read_without(bundler_cache: Path,
                                                                                           tmp_path: Path) -> None:
    """Issue 27: `path = "/etc/shadow"` was read and its sha256 printed in the mismatch message."""
    secret = tmp_path / "elsewhere" / "shadow"
    secret.parent.mkdir()
    secret.write_bytes(b"root:$6$not-for-the-log:19000:0:99999:7:::\n")
    digest = hashlib.sha256(secret.read_bytes()).hexdigest()
    manifest = quickstart_copy(tmp_path / "app", replace={'path = "models/tiny-mlp.onnx"': f'path = "{secret}"'})
    for command in ("fetch", "lock"):
        proc = run_cli(command, "--cache", str(bundler_cache), str(manifest), check=False)
        assert proc.returncode == 3, (command, proc.stderr)
        assert (f"models[0]: {secret} is outside the manifest's folder {tmp_path / 'app'}; expected a file below it, "
                "or `allow_outside = true` in models[0] to read it from there") in proc.stderr
        assert digest not in proc.stderr + proc.stdout  # refused before the file is read
    built = run_cli("build", "--cache", str(bundler_cache), "-o", str(tmp_path / "out"), str(manifest), check=False)
    assert digest not in built.stderr + built.stdout
    assert f"warning: models[0]: {secret} is outside the manifest's folder" in built.stderr
    # Allowed on purpose, the file is read like any other: its wrong pin is then a plain mismatch (exit 5).
    text = manifest.read_text(encoding="utf-8").replace(f'path = "{secret}"', f'path = "{secret}"\nallow_outside = true')
    manifest.write_text(text.replace(TINY_MLP_SHA256, "1" * 64), encoding="utf-8")  # a pin no cache holds
    allowed = run_cli("fetch", "--cache", str(bundler_cache), str(manifest), check=False)
    assert allowed.returncode == 5 and f"models[0]: {secret} has sha256 " in allowed.stderr


def test_init_allows_a_from_file_outside_the_manifests_folder_by_name(tmp_path: Path) -> None:
    """`--from` names the file on purpose: its pin says it may be read from outside (fetch and lock require it)."""
    import onnx

    (tmp_path / "inputs").mkdir()
    model = tmp_path / "inputs" / "net.onnx"
    shutil.copy(MANIFESTS / "models" / "tiny-mlp.onnx", model)
    onnx.checker.check_model(str(model))
    (tmp_path / "app").mkdir()
    inside = tmp_path / "app" / "near.onnx"
    shutil.copy(model, inside)
    out = tmp_path / "app" / "app.toml"
    run_cli("init", "--from", str(model), str(inside), "-o", str(out))
    parsed = tomllib.loads(out.read_text(encoding="utf-8"))
    by_name = {m["name"]: m for m in parsed["models"]}
    assert by_name["net"]["path"] == "../inputs/net.onnx" and by_name["net"]["allow_outside"] is True
    assert by_name["near"]["path"] == "near.onnx" and "allow_outside" not in by_name["near"]
    out.write_text(out.read_text(encoding="utf-8").replace("<sha256 of the wheel for your platform>", "0" * 64),
                   encoding="utf-8")  # the one placeholder init leaves without a wheel
    assert {m.name: m.source.allow_outside for m in load(out).models} == {"net": True, "near": False}


@pytest.mark.parametrize(("members", "expected"), [
    ({"onnxruntime/__init__.py": '__version__ = "1.23.1"\n', "onnxruntime/capi/__init__.py": ""},
     "ort.capi: its onnxruntime package: found no Python extension module for linux_x86_64"),
    ({"a/onnxruntime/capi/x.py": "", "b/onnxruntime/capi/x.py": ""},
     "ort.capi: found 2 onnxruntime/capi/ folders (a/onnxruntime/capi, b/onnxruntime/capi), expected exactly one"),
    ({"onnxruntime/capi/x.py": ""}, "ort.capi: found no __version__ in onnxruntime/__init__.py"),
])
def test_a_capi_zip_is_named_by_its_key_and_its_own_paths_not_the_scratch_folder(tmp_path: Path, members, expected) -> None:
    """Issue 26 defect 9: messages named `…/tmp/build-…/capi/…whl.capi/onnxruntime`, a folder the user never made."""
    source = tmp_path / "custom-build.zip"
    with zipfile.ZipFile(source, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    work = tmp_path / "scratch-build-3337"
    with pytest.raises(BuildError) as caught:
        read_capi(source, work_dir=work, target=LINUX_TARGET, label="ort.capi")
    assert str(caught.value).startswith(expected), str(caught.value)
    assert str(work) not in str(caught.value)
