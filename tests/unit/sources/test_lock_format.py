"""The lock's model references in a form a reviewer reads (lock format 2, issue 26), and what was written before.

Format 1 stored a model's reference output as one escaped JSON string (1,000 floats on one line for a
classifier). Format 2 gives each output a table: digest, dtype, shape, summary statistics and the values
eight to a line. Locks and bundles made before the change still read: a format-1 entry is written back
as it was read (a bundle's lock.toml must read back byte for byte for `reproduce`), `lock` upgrades it.
The last test builds a bundle with the code of the commit before this change, taken from git, and runs
today's `reproduce` and `diff` on it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
from fixtures.cli import REPO, run_cli

from bundler.errors import ManifestError
from bundler.sources.lock import Lock, PinnedModel, Target, lock_text, read_lock, write_lock

BEFORE = "a16f419"  # main before lock format 2: its lock and its build are what users have today
STEM = "quickstart-linux-1.0.0-linux_x86_64"
VALUES = [round(0.001 * i - 0.3, 3) for i in range(1000)] + ["nan"]
RECORD = json.dumps({"inputs": [{"name": "x", "shape": [1, 3], "type": "tensor(float)"}], "opsets": {"ai.onnx": 17},
                     "outputs": [{"name": "logits", "shape": [1, 1001], "type": "tensor(float)"}],
                     "reference": {"atol": 1e-05, "rtol": 0.0001, "inputs": {"x": "a" * 64},
                                   "outputs": {"logits": {"digest": "b" * 64, "dtype": "float32", "shape": [1, 1001],
                                                          "values": VALUES}}},
                     "shapes": {}}, sort_keys=True, separators=(",", ":"))


def lock_with(model: PinnedModel) -> Lock:
    return Lock(target=Target(platform="linux_x86_64", python="3.11"), requirements=(), wheels=(), models=(model,))


def test_lock_writes_a_models_reference_as_digest_summary_and_values_a_diff_can_show(tmp_path: Path) -> None:
    path = tmp_path / "app.lock.toml"
    write_lock(lock_with(PinnedModel(name="classifier", sha256="c" * 64, ort_version="1.23.1", record=RECORD)), path)
    text = path.read_text(encoding="utf-8")
    assert max(len(line) for line in text.splitlines()) < 400  # no line holds the 1,001 values
    table = tomllib.loads(text)["model"][0]
    assert table["format"] == 2 and "values" not in table["record"]
    reference = table["reference"]["logits"]
    assert {k: reference[k] for k in ("digest", "dtype", "shape", "count", "min", "max", "zeros", "not_finite")} == {
        "digest": "b" * 64, "dtype": "float32", "shape": [1, 1001], "count": 1001, "min": -0.3, "max": 0.699,
        "zeros": 1, "not_finite": 1}
    assert reference["mean"] == pytest.approx(0.1995, abs=1e-6)
    assert reference["values"].splitlines()[0] == "-0.3, -0.299, -0.298, -0.297, -0.296, -0.295, -0.294, -0.293,"
    assert read_lock(path).models[0].record == RECORD  # the gate's record, value for value


def test_a_format_1_lock_reads_back_byte_for_byte_and_lock_upgrades_it(tmp_path: Path) -> None:
    old = lock_with(PinnedModel(name="classifier", sha256="c" * 64, ort_version="1.23.1", record=RECORD, format=1))
    path = tmp_path / "old.lock.toml"
    path.write_text(lock_text(old), encoding="utf-8")
    assert 'record = "{\\"inputs\\"' in path.read_text(encoding="utf-8") and "format" not in path.read_text()
    read = read_lock(path)
    assert lock_text(read) == path.read_text(encoding="utf-8")  # what reproduce checks of a bundle's lock.toml
    write_lock(read, path)
    assert tomllib.loads(path.read_text(encoding="utf-8"))["model"][0]["format"] == 2
    assert read_lock(path).models[0].record == RECORD


@pytest.mark.parametrize(("edit", "message"), [
    (("count = 1001", "count = 1000"), "reference.logits.count is 1000, but its values give 1001"),
    (("min = -0.3", "min = -0.2"), "reference.logits.min is -0.2, but its values give -0.3"),
    (("format = 2", "format = 3"), "key 'model[0].format' is 3, expected 1 or 2"),
    (('values = """\n-0.3,', 'values = """\n-0.3,,'), "reference.logits.values is not a list of JSON values"),
])
def test_a_reference_whose_summary_or_values_were_edited_is_refused_naming_the_key(tmp_path: Path, edit, message) -> None:
    """What a reviewer reads (the summary) must be what the build uses (the values)."""
    path = tmp_path / "app.lock.toml"
    write_lock(lock_with(PinnedModel(name="classifier", sha256="c" * 64, ort_version="1.23.1", record=RECORD)), path)
    text = path.read_text(encoding="utf-8")
    assert edit[0] in text
    path.write_text(text.replace(edit[0], edit[1], 1), encoding="utf-8")
    with pytest.raises(ManifestError) as caught:
        read_lock(path)
    assert message in str(caught.value)


def code_before(folder: Path) -> Path:
    """The repository at BEFORE (package, templates, manifests), laid out so `python -m bundler` runs it."""
    folder.mkdir(parents=True)
    archive = folder / "before.tar"
    with archive.open("wb") as out:
        done = subprocess.run(["git", "-C", str(REPO), "archive", BEFORE, "bundler", "templates", "manifests"],
                              stdout=out, stderr=subprocess.PIPE, check=False)
    if done.returncode != 0:
        pytest.skip(f"this clone lacks commit {BEFORE} (a shallow clone?): {done.stderr.decode().strip()}")
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "src", filter="data")
    shutil.move(folder / "src" / "templates", folder / "src" / "bundler" / "templates")  # the package-dir mapping
    return folder / "src"


@pytest.mark.integration
def test_reproduce_and_diff_read_a_bundle_built_before_the_format_change(bundler_cache: Path, tmp_path: Path) -> None:
    before = code_before(tmp_path / "before")
    assert "format" not in (before / "manifests" / "quickstart-linux.lock.toml").read_text(encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(before)}
    built = subprocess.run([sys.executable, "-m", "bundler", "build", "-q", "--cache", str(bundler_cache), "-o",
                            str(tmp_path / "old"), str(before / "manifests" / "quickstart-linux.toml")],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    assert built.returncode == 0, built.stderr
    old = tmp_path / "old" / f"{STEM}.zip"
    probe = subprocess.run([sys.executable, "-c", "import bundler, sys; print(bundler.__file__)"], env=env,
                           capture_output=True, text=True, cwd=tmp_path, check=True)
    assert probe.stdout.startswith(str(before))  # the build above ran the code before the change

    proc = run_cli("reproduce", "--json", "--offline", "--cache", str(bundler_cache), str(old), check=False)
    assert proc.returncode in (0, 8), proc.stderr  # read and rebuilt; today's code may lay out other bytes
    report = json.loads(proc.stdout)
    assert "lock.toml" not in {d["member"] for d in report["differences"]}  # the format-1 lock reads back as it was
    assert "was edited" not in proc.stderr

    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(tmp_path / "new"),
            str(REPO / "manifests" / "quickstart-linux.toml"))
    diff = json.loads(run_cli("diff", "--json", str(old), str(tmp_path / "new" / f"{STEM}.zip"), check=False).stdout)
    # The same model, either format; its reference moved only because the synthesised inputs changed since that
    # code (synth 2, issue 38 item 9), which diff says instead of comparing values computed on other inputs.
    models = [c for c in diff["changes"] if c["kind"] == "model"]
    assert all(c["old"] == c["new"] and "computed on other synthesised inputs" in c["detail"] for c in models), models
