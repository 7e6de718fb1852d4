"""The support bundle (bundler/shipped/ort_bundle/support.py), run as the shipped `ort_bundle.support` in a real
subprocess with this interpreter's onnxruntime, over an install folder holding the real self-check,
a real tuning and a real profiling trace; decoys outside the installation must stay out of the zip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import onnxruntime
import pytest
from unit.shipped.test_tuning import PROBE_APP, bundle_info, make_model, shipped_package

from bundler.assembly.shipped_package import write_package
from bundler.shipped.ort_bundle.records import log_file_name
from bundler.shipped.ort_bundle.support import REMOVED, relevant_environment

INSTALL_ID = "tuned-1.0"
SECRET = "s3cr3t-Value-that-must-not-leak-0123456789abcdef"


def python(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture()
def installation(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """An install folder (bundle.json, receipt.json, the self-check, a model), its log, and decoys beside them."""
    site = shipped_package(tmp_path / "site")
    root = tmp_path / "root"
    model = make_model(root / "models" / "mlp.onnx")
    info = bundle_info(model).to_json()
    info["ort"] = {"version": onnxruntime.__version__}
    (root / "bundle.json").write_text(json.dumps(info), encoding="utf-8")
    logs = tmp_path / "state" / "ort-bundler"
    logs.mkdir(parents=True)
    own_log = logs / log_file_name(INSTALL_ID, str(root), "install")
    (root / "receipt.json").write_text(json.dumps({"format": 2, "install_id": INSTALL_ID, "files": [],
                                                   "install_log": str(own_log)}), encoding="utf-8")
    write_package(root / "installer")  # the engine's copy of the package, whose self-check the tool runs
    own_log.write_text("2026-01-01T00:00:00Z installed\n", encoding="utf-8")
    (logs / "other-2.0-install.log").write_text("another installation's log\n", encoding="utf-8")
    # Issue 26, defect 1: the same name and version installed into another folder, its log beside this one's.
    (logs / log_file_name(INSTALL_ID, str(tmp_path / "other-root"), "install")).write_text(
        f"the other install's log {SECRET}\n", encoding="utf-8")
    (tmp_path / "decoy.txt").write_text(f"outside the installation {SECRET}\n", encoding="utf-8")
    (root.parent / "probe.py").write_text(PROBE_APP, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(site), "ORT_BUNDLE_CACHE_DIR": str(tmp_path / "cache"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "ORT_API_KEY": SECRET,
           "PIP_INDEX_URL": f"https://user:{SECRET}@mirror.invalid/simple", "OMP_NUM_THREADS": "2"}
    for name in ("ORT_BUNDLE_APPLY_TUNING", "ORT_BUNDLE_PROFILE", "ORT_BUNDLE_PROFILE_DIR"):
        env.pop(name, None)
    return root, env


def test_secret_looking_values_are_removed() -> None:
    found = relevant_environment({"ORT_API_KEY": "x", "PIP_INDEX_URL": "https://u:p@host/simple", "HOME": "/root",
                                  "OMP_NUM_THREADS": "4", "CUDA_PATH": "/usr/local/cuda", "ORT_X": "Bearer abc",
                                  "PYTHONPATH": "/opt/app/lib", "ORT_TOKENISH": "fine",
                                  "ORT_BLOB": "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"})
    assert found == {"CUDA_PATH": "/usr/local/cuda", "OMP_NUM_THREADS": "4", "ORT_API_KEY": REMOVED,
                     "ORT_BLOB": REMOVED, "ORT_TOKENISH": REMOVED, "ORT_X": REMOVED,
                     "PIP_INDEX_URL": REMOVED, "PYTHONPATH": "/opt/app/lib"}


def test_the_support_bundle_holds_the_listed_items_and_nothing_from_outside(
        installation: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    root, env = installation
    assert python("-m", "ort_bundle.tuning", "--root", str(root), "--warmup", "1", "--runs", "3", env=env).returncode == 0
    # Beside the shipped package: the profiled child runs isolated (-I, issue 34 §3), so PYTHONPATH does not reach
    # it; a script's own folder is first on its sys.path, as in an install's app/.
    entry = Path(env["PYTHONPATH"]) / "entry.py"  # a stand-in for the start-up hook, then the application
    entry.write_text(f"import ort_bundle.sessions as s, pathlib; s.activate(pathlib.Path({str(root)!r}))\n" + PROBE_APP)
    profiled = python("-m", "ort_bundle.profile", "--entry-kind", "script", "--entry", str(entry), "--",
                      str(root / "models" / "mlp.onnx"), env=env)
    assert profiled.returncode == 0, profiled.stderr

    own_log = tmp_path / "state" / "ort-bundler" / log_file_name(INSTALL_ID, str(root), "install")
    elsewhere = tmp_path / "elsewhere" / own_log.name  # --log-path: same name, another folder
    elsewhere.parent.mkdir()
    elsewhere.write_text("a log written with --log-path\n", encoding="utf-8")
    proc = python("-m", "ort_bundle.support", "--root", str(root), "--install-log", str(own_log),
                  "--install-log", str(elsewhere), env=env)
    assert proc.returncode == 0, proc.stderr
    (written,) = (tmp_path / "cache" / "support").iterdir()
    assert f"support bundle written to {written}" in proc.stdout and written.name.startswith(f"{INSTALL_ID}-support-")
    with zipfile.ZipFile(written) as archive:
        assert archive.testzip() is None
        listed = archive.namelist()
        names = set(listed)
        data = {name: archive.read(name) for name in names}
    assert len(listed) == len(names)  # no member name twice
    assert data[f"logs/{own_log.name}"] == b"2026-01-01T00:00:00Z installed\n"  # the one the receipt records
    assert data[f"logs/1/{own_log.name}"] == b"a log written with --log-path\n"
    assert {name for name in names if name.startswith("logs/")} == {f"logs/{own_log.name}", f"logs/1/{own_log.name}"}
    trace = next(name for name in names if name.startswith("profiles/"))
    assert {"selfcheck.json", "receipt.json", "bundle.json", "tuning.json", f"logs/{own_log.name}",
            "modules.json", "environment.json", "system.json", "index.json", trace} <= names
    assert json.loads(data["selfcheck.json"])["checks"]  # the self-check's own report
    assert json.loads(data[trace])  # the latest trace, as ORT wrote it

    index = json.loads(data["index.json"])
    allowed = (root, tmp_path / "cache" / "profiles", tmp_path / "state" / "ort-bundler", elsewhere.parent)
    sources = [Path(m["source"]) for m in index["members"] if m["source"] is not None]
    assert sources and all(any(source.is_relative_to(folder) for folder in allowed) for source in sources)
    assert {m["name"] for m in index["members"]} | {"index.json"} == names
    assert all(SECRET.encode() not in payload for payload in data.values())  # neither the decoy nor the variables
    assert "other-2.0-install.log" not in " ".join(names)

    environment = json.loads(data["environment.json"])
    assert environment["ORT_API_KEY"] == environment["PIP_INDEX_URL"] == REMOVED
    assert environment["OMP_NUM_THREADS"] == "2"
    modules = json.loads(data["modules.json"])
    ort_module = next(m for m in modules["python_modules"] if m["name"] == "onnxruntime")
    assert ort_module["version"] == onnxruntime.__version__ and ort_module["path"] == onnxruntime.__file__
    assert any("onnxruntime_pybind11_state" in lib["path"] for lib in modules.get("libraries", [])), index["missing"]
    system = json.loads(data["system.json"])
    assert system["cpu"]["logical_cores"] >= 1 and system["onnxruntime"]["version"] == onnxruntime.__version__
    assert not [p for p in written.parent.iterdir() if p.name.endswith(".partial")]


def test_what_cannot_be_collected_is_listed_and_an_unwritable_cache_fails_cleanly(
        installation: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    root, env = installation
    (root / "installer" / "ort_bundle" / "__main__.py").unlink()
    proc = python("-m", "ort_bundle.support", "--root", str(root), env=env)
    assert proc.returncode == 0, proc.stderr
    (written,) = (tmp_path / "cache" / "support").iterdir()
    with zipfile.ZipFile(written) as archive:
        missing = {item["item"]: item["reason"] for item in json.loads(archive.read("index.json"))["missing"]}
    assert "selfcheck.json" in missing and "tuning.json" in missing and "profiles" in missing
    assert "run the launcher with --tune" in missing["tuning.json"]

    (root / "tuning.json").symlink_to(tmp_path / "decoy.txt")  # planted: a file of the machine under a bundle name
    for old in (tmp_path / "cache" / "support").iterdir():
        old.unlink()
    assert python("-m", "ort_bundle.support", "--root", str(root), env=env).returncode == 0
    (written,) = (tmp_path / "cache" / "support").iterdir()
    with zipfile.ZipFile(written) as archive:
        assert "tuning.json" not in archive.namelist()
        assert all(SECRET.encode() not in archive.read(name) for name in archive.namelist())
        missing = {item["item"]: item["reason"] for item in json.loads(archive.read("index.json"))["missing"]}
    assert "is a link or lies outside" in missing["tuning.json"]

    blocked = {**env, "ORT_BUNDLE_CACHE_DIR": str(tmp_path / "decoy.txt")}  # a file where the folder would be
    refused = python("-m", "ort_bundle.support", "--root", str(root), env=blocked)
    assert refused.returncode == 13 and "cannot write" in refused.stderr
    not_installed = python("-m", "ort_bundle.support", "--root", str(tmp_path / "site"), env=env)
    assert not_installed.returncode == 10 and "it is not an installation" in not_installed.stderr


def support_missing(root: Path, env: dict[str, str], tmp_path: Path) -> tuple[set[str], dict[str, str]]:
    """(the zip's log members, what index.json says is missing) of one `ort_bundle.support` run."""
    for old in (tmp_path / "cache" / "support").glob("*.zip"):
        old.unlink()
    proc = python("-m", "ort_bundle.support", "--root", str(root), env=env)
    assert proc.returncode == 0, proc.stderr
    (written,) = (tmp_path / "cache" / "support").iterdir()
    with zipfile.ZipFile(written) as archive:
        logs = {name for name in archive.namelist() if name.startswith("logs/")}
        missing = {item["item"]: item["reason"] for item in json.loads(archive.read("index.json"))["missing"]}
    return logs, missing


def test_only_the_log_the_receipt_records_is_taken_and_otherwise_it_says_why(
        installation: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """Issue 26, defect 1: no search of the log folders; the recorded log, if it is a regular file of the
    receipt's owner, else nothing and the reason."""
    root, env = installation
    receipt = json.loads((root / "receipt.json").read_text(encoding="utf-8"))
    own_log = Path(receipt["install_log"])
    logs, _ = support_missing(root, env, tmp_path)
    assert logs == {f"logs/{own_log.name}"}

    del receipt["install_log"]  # a receipt of an older installer: the key is optional
    (root / "receipt.json").write_text(json.dumps(receipt), encoding="utf-8")
    logs, missing = support_missing(root, env, tmp_path)
    assert logs == set() and "records no install log" in missing["install log"]
    assert "pass --install-log FILE" in missing["install log"]

    planted = tmp_path / "planted.log"  # a link under the recorded name must not carry another file in
    planted.write_text(f"not a log {SECRET}\n", encoding="utf-8")
    linked = own_log.with_name("linked.log")
    linked.symlink_to(planted)
    (root / "receipt.json").write_text(json.dumps({**receipt, "install_log": str(linked)}), encoding="utf-8")
    logs, missing = support_missing(root, env, tmp_path)
    assert logs == set() and "is not a regular file" in missing["install log"]

    (root / "receipt.json").write_text(json.dumps({**receipt, "install_log": str(own_log)}), encoding="utf-8")
    if os.geteuid() == 0:  # a log of another user under the recorded path is not taken either
        os.chown(own_log, 65534, 65534)
        logs, missing = support_missing(root, env, tmp_path)
        assert logs == set() and "belongs to user 65534" in missing["install log"]
        os.chown(own_log, 0, 0)
    own_log.unlink()
    logs, missing = support_missing(root, env, tmp_path)
    assert logs == set() and f"the install log {own_log} that" in missing["install log"]


# Issue 27, item 8: each value below reached environment.json verbatim; the second element is the part that
# must not appear anywhere in the support bundle.
LEAKS = {
    "PIP_EXTRA_INDEX_URL": ("https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@mirror.invalid/simple",
                            "ghp_16C7e42F292c6912E7710c838347Ae178B4a"),
    "ORT_MODEL_URL": ("https://models.invalid/m.onnx?jwt=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJib2IifQ.c2lnbmF0dXJl",
                      "eyJzdWIiOiJib2IifQ"),
    "PIP_INDEX_URL": ("http://bob-the-user@mirror.invalid/simple", "bob-the-user"),
    "CUDA_PASSPHRASE": ("pp-passphrase-value", "pp-passphrase-value"),
    "ORT_WEIGHTS_URL": ("https://store.invalid/w.bin?X-Amz-Credential=AKIAEXAMPLE&X-Amz-Signature=5ig",
                        "AKIAEXAMPLE"),
    "ORT_FEED": ("https://feed.invalid/simple?access_token=tok-feed-0042", "tok-feed-0042"),
    "ONNX_AUTH_HEADER": ("x", None),
    "ORT_CLOUD_CREDENTIALS": ("/home/u/creds.json", None),
}


def test_credentials_in_urls_jwts_and_secret_names_never_reach_the_support_bundle(
        installation: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    root, env = installation
    env = {**env, **{name: value for name, (value, _) in LEAKS.items()}}
    proc = python("-m", "ort_bundle.support", "--root", str(root), env=env)
    assert proc.returncode == 0, proc.stderr
    (written,) = (tmp_path / "cache" / "support").iterdir()
    with zipfile.ZipFile(written) as archive:
        payloads = [archive.read(name) for name in archive.namelist()]
        environment = json.loads(archive.read("environment.json"))
    assert {name: environment[name] for name in LEAKS} == dict.fromkeys(LEAKS, REMOVED)
    for _, secret in LEAKS.values():
        assert secret is None or all(secret.encode() not in payload for payload in payloads), secret
    assert environment["OMP_NUM_THREADS"] == "2"  # what is not a secret is still reported


def test_plain_urls_and_paths_are_kept() -> None:
    plain = {"PIP_INDEX_URL": "https://mirror.invalid/simple?page=2", "CUDA_PATH": "/usr/local/cuda-11.8",
             "ORT_LOGGING": "verbose", "PYTHONPATH": "/opt/a:/opt/b"}
    assert relevant_environment(plain) == plain
