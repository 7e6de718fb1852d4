"""Models with external data, for real: a model whose two initializers live in two data files (made with
onnx's own `convert_model_to_external_data`, a few MB), pinned with `[[models.data]]`, locked, built,
installed with install.sh, self-checked and run by the entry point; `init --from` pins the files itself;
every hostile variant is refused with its own sentence and leaves nothing behind."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from fixtures.cli import MANIFESTS, run_cli
from unit.assembly.test_provenance import all_components

from bundler.hashing import file_sha256
from bundler.names import location_problem
from bundler.readers.externaldata import external_refs, reference_problems
from bundler.writer.members import Member, MemberCache
from bundler.writer.zipwriter import write_zip

STEM = "quickstart-linux-1.0.0-linux_x86_64"
ELEMENTS = 400_000  # 1.6 MB of float32 per data file
LOCATIONS = ("weights_a", "weights_b")
ENTRY = '''"""Runs the bundled model with external data once and prints one output value."""
from pathlib import Path
import numpy as np
import onnxruntime as ort
root = Path(__file__).resolve().parents[1]
session = ort.InferenceSession(str(root / "models" / "big.onnx"), providers=["CPUExecutionProvider"])
(y,) = session.run(None, {"x": np.ones(400000, np.float32)})
print("y[-1]", float(y[-1]), "y[0]", float(y[0]))
'''


def weights() -> tuple[np.ndarray, np.ndarray]:
    """a and b: values that do not compress (a constant tensor deflates past the bundle reader's bomb ratio)."""
    return (np.arange(ELEMENTS, dtype=np.float32) / ELEMENTS, np.linspace(0.5, 1.0, ELEMENTS, dtype=np.float32))


def external_model(folder: Path, name: str = "big") -> Path:
    """y = (x + a) * b, with a and b (ELEMENTS floats each) saved by onnx in one data file per tensor."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.external_data_helper import convert_model_to_external_data

    folder.mkdir(parents=True, exist_ok=True)
    a, b = (numpy_helper.from_array(values, location) for values, location in zip(weights(), LOCATIONS))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [ELEMENTS])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [ELEMENTS])
    nodes = [helper.make_node("Add", ["x", LOCATIONS[0]], ["t"]), helper.make_node("Mul", ["t", LOCATIONS[1]], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "external", [x], [y], [a, b]),
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    convert_model_to_external_data(model, all_tensors_to_one_file=False, size_threshold=0)
    onnx.save(model, str(folder / f"{name}.onnx"))
    assert sorted(p.name for p in folder.iterdir()) == sorted([f"{name}.onnx", *LOCATIONS])
    return folder / f"{name}.onnx"


def relocate(model: Path, tensor: str, location: str) -> None:
    """Point one tensor of a saved model at another location (as a hostile model would)."""
    import onnx

    proto = onnx.load(str(model), load_external_data=False)
    [entry] = [e for t in proto.graph.initializer if t.name == tensor for e in t.external_data if e.key == "location"]
    entry.value = location
    model.write_bytes(proto.SerializeToString())


def data_table(location: str, path: str, folder: Path) -> str:
    return (f'[[models.data]]\nlocation = "{location}"\npath = "{path}"\n'
            f'sha256 = "{file_sha256(folder / path)}"\n')


def write_manifest(folder: Path, data: list[tuple[str, str]] | None = None) -> Path:
    """The quickstart manifest (its lock copied beside it) with the external-data model and its entry point."""
    model = folder / "models" / "big.onnx"
    shutil.copy(MANIFESTS / "quickstart-linux.lock.toml", folder / "big.lock.toml")
    (folder / "app").mkdir(exist_ok=True)
    (folder / "app" / "run_big.py").write_text(ENTRY, encoding="utf-8")
    text = (MANIFESTS / "quickstart-linux.toml").read_text(encoding="utf-8")
    text = text[:text.index("[[models]]")].replace("quickstart-linux.lock.toml", "big.lock.toml")
    text += f'[[models]]\nname = "big"\npath = "models/big.onnx"\nsha256 = "{file_sha256(model)}"\n\n'
    for location, path in data if data is not None else [(loc, f"models/{loc}") for loc in LOCATIONS]:
        text += data_table(location, path, folder) + "\n"
    text += (f'[launch]\nscript = {{ path = "app/run_big.py", '
             f'sha256 = "{file_sha256(folder / "app" / "run_big.py")}" }}\n')
    (folder / "big.toml").write_text(text, encoding="utf-8")
    return folder / "big.toml"


@pytest.fixture(scope="module")
def built(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(source folder, bundle zip): locked, fetched and built for real."""
    folder = tmp_path_factory.mktemp("external")
    external_model(folder / "models")
    manifest = write_manifest(folder)
    for command in ("lock", "fetch"):
        run_cli(command, "-q", "--cache", str(bundler_cache), str(manifest))
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(folder / "dist"), str(manifest))
    return folder, folder / "dist" / f"{STEM}.zip"


@pytest.mark.integration
def test_the_data_files_ship_beside_the_model_listed_in_the_sums_the_bundle_record_and_the_sbom(
        built: tuple[Path, Path], tmp_path: Path) -> None:
    folder, zip_path = built
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(tmp_path)
    bundle = tmp_path / STEM
    for location in LOCATIONS:
        assert file_sha256(bundle / "payload" / "models" / location) == file_sha256(folder / "models" / location)
    sums = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=bundle, capture_output=True, text=True)
    assert sums.returncode == 0, sums.stdout + sums.stderr
    assert all(f"payload/models/{location}: OK" in sums.stdout for location in LOCATIONS)
    [record] = json.loads((bundle / "bundle.json").read_text(encoding="utf-8"))["models"]
    assert record["file"] == "models/big.onnx"
    assert record["data"] == {loc: file_sha256(folder / "models" / loc) for loc in LOCATIONS}
    plan = json.loads((bundle / "install-plan.json").read_text(encoding="utf-8"))
    assert {"from": "payload/models/weights_a", "to": "models/weights_a"} in plan["copy"]
    sbom = json.loads((bundle / "sbom.cdx.json").read_text(encoding="utf-8"))
    [model] = [c for c in sbom["components"] if c["type"] == "machine-learning-model"]
    held = {c["name"]: c["hashes"][0]["content"] for c in model["components"]}
    assert held == {f"payload/models/{loc}": file_sha256(folder / "models" / loc) for loc in LOCATIONS}
    assert sum(c["name"] == "payload/models/weights_a" for c in all_components(sbom["components"])) == 1


@pytest.mark.integration
def test_installed_self_checked_and_run_by_the_entry_point(built: tuple[Path, Path], tmp_path: Path) -> None:
    folder, zip_path = built
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(tmp_path)
    root = tmp_path / "opt" / "big"
    proc = subprocess.run(["sh", str(tmp_path / STEM / "install.sh"), "--install-dir", str(root)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    receipt = json.loads((root / "receipt.json").read_text(encoding="utf-8"))
    recorded = {f["path"]: f["sha256"] for f in receipt["files"]}
    assert all(recorded[f"models/{loc}"] == file_sha256(folder / "models" / loc) for loc in LOCATIONS)
    check = subprocess.run([str(root / "run.sh"), "--self-check", "--json"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    [model] = [c for c in json.loads(check.stdout)["checks"] if c["id"] == "model:big"]
    assert model["status"] == "pass" and "matches the reference" in model["message"]
    run = subprocess.run([str(root / "run.sh")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    a, b = weights()
    expected = (np.ones(ELEMENTS, np.float32) + a) * b  # what the data files make of the entry point's input
    words = run.stdout.split()
    assert words[0::2] == ["y[-1]", "y[0]"]
    assert np.allclose([float(words[1]), float(words[3])], [expected[-1], expected[0]], rtol=1e-6, atol=0)

    (root / "models" / "weights_b").write_bytes(b"\0" * (ELEMENTS * 4))  # same size, other bytes
    broken = subprocess.run([str(root / "run.sh"), "--self-check", "--json"], capture_output=True, text=True)
    [model] = [c for c in json.loads(broken.stdout)["checks"] if c["id"] == "model:big"]
    assert broken.returncode != 0 and model["status"] == "fail"
    assert model["message"].startswith("model 'big' file models/weights_b has sha256 ")


@pytest.mark.integration
def test_the_bundle_is_rebuilt_byte_for_byte_from_itself(built: tuple[Path, Path], bundler_cache: Path) -> None:
    """`reproduce` takes the model and its data files from the bundle by their pinned hashes."""
    _, zip_path = built
    proc = run_cli("reproduce", "--json", "--cache", str(bundler_cache), str(zip_path), check=False)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["identical"] and report["differences"] == [], proc.stderr
    assert {key: report["taken_from_bundle"][key] for key in ("models[0].data[0]", "models[0].data[1]")} == {
        f"models[0].data[{i}]": f"payload/models/{loc}" for i, loc in enumerate(LOCATIONS)}


def test_init_from_a_model_pins_its_data_files(tmp_path: Path) -> None:
    model = external_model(tmp_path / "models")
    proc = run_cli("init", "--from", str(model), "-o", str(tmp_path / "starter.toml"))
    assert "wrote" in proc.stdout
    import tomllib

    [entry] = tomllib.loads((tmp_path / "starter.toml").read_text(encoding="utf-8"))["models"]
    assert entry["data"] == [{"location": loc, "path": f"models/{loc}", "sha256": file_sha256(tmp_path / "models" / loc)}
                             for loc in LOCATIONS]


@pytest.mark.parametrize(("variant", "expected"), [
    ("parent", "tensor 'weights_b' keeps its data at location '../weights_b', which climbs out of the model's folder"),
    ("symlink", "its external data 'weights_b' is a symbolic link"),
    ("missing", "tensor 'weights_b' keeps its data at location 'weights_b', but no such file is beside the model"),
])
def test_init_refuses_a_model_whose_data_it_cannot_pin(tmp_path: Path, variant: str, expected: str) -> None:
    models = tmp_path / "models"
    external_model(models)
    if variant == "parent":
        shutil.move(models / "weights_b", tmp_path / "weights_b")
        relocate(models / "big.onnx", "weights_b", "../weights_b")
    else:
        (models / "weights_b").unlink()
    if variant == "symlink":
        (models / "weights_b").symlink_to(models / "weights_a")
    proc = run_cli("init", "--from", str(models / "big.onnx"), "-o", str(tmp_path / "s.toml"), check=False)
    assert proc.returncode == 2 and expected in proc.stderr, proc.stderr
    assert not (tmp_path / "s.toml").exists()


def hostile(folder: Path, variant: str) -> Path:
    """A manifest for one hostile variant of the external-data model."""
    models = folder / "models"
    external_model(models)
    data = [(loc, f"models/{loc}") for loc in LOCATIONS]
    if variant == "absolute":
        relocate(models / "big.onnx", "weights_a", str(models / "weights_a"))
    elif variant == "parent":
        shutil.move(models / "weights_b", folder / "weights_b")
        relocate(models / "big.onnx", "weights_b", "../weights_b")
        data[1] = ("weights_b", "weights_b")
    elif variant == "symlink":
        (models / "elsewhere").mkdir()
        shutil.move(models / "weights_b", models / "elsewhere" / "weights_b")
        (models / "weights_b").symlink_to(models / "elsewhere" / "weights_b")
    elif variant == "linked-folder":
        shutil.move(models, folder / "elsewhere")
        models.symlink_to(folder / "elsewhere", target_is_directory=True)
    elif variant == "unreferenced":
        (models / "extra.bin").write_bytes(b"not referenced")
        data.append(("extra.bin", "models/extra.bin"))
    elif variant == "unpinned":
        data = data[:1]
    elif variant in ("missing", "changed"):  # bytes of its own: the shared cache holds the usual ones by their hash
        (models / "weights_b").write_bytes(os.urandom(ELEMENTS * 4))
    manifest = write_manifest(folder, data)
    if variant == "changed":
        (models / "weights_b").write_bytes(b"\1" * (ELEMENTS * 4))  # after the manifest pinned the bytes
    if variant == "missing":
        (models / "weights_b").unlink()
    return manifest


@pytest.mark.parametrize(("variant", "code", "expected"), [
    ("absolute", 7, "tensor 'weights_a' keeps its data at location '/"),
    ("parent", 7, "tensor 'weights_b' keeps its data at location '../weights_b', which climbs out of the "
                  "model's folder with '..'"),
    ("symlink", 3, "models[0].data[1].path: found 'models/weights_b', expected the file itself, not a path "
                   "through a symbolic link (models/weights_b is one"),
    # issue 27: a linked folder let in what a linked file could not; one rule now, the first link named
    ("linked-folder", 3, "models[0].path: found 'models/big.onnx', expected the file itself, not a path through "
                         "a symbolic link (models is one"),
    ("unreferenced", 7, "data file 'extra.bin' is pinned, but no tensor of the model references it"),
    ("unpinned", 7, "tensor 'weights_b' keeps its data at location 'weights_b', but the manifest pins no such "
                    "data file"),
    ("missing", 4, "models[0].data[1]"),
    ("changed", 5, "models[0].data[1]"),
])
def test_a_hostile_model_is_refused_with_its_own_sentence_and_nothing_is_written(
        bundler_cache: Path, tmp_path: Path, variant: str, code: int, expected: str) -> None:
    """Through `lock`, which runs the gate first: the lock file stays as it was, no temporary file is left."""
    manifest = hostile(tmp_path / "src", variant)
    lock = manifest.with_name("big.lock.toml")
    before = lock.read_bytes()
    listing = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    proc = run_cli("lock", "-q", "--cache", str(bundler_cache), str(manifest), check=False)
    assert proc.returncode == code, proc.stderr
    assert expected in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert lock.read_bytes() == before
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == listing


@pytest.mark.parametrize(("location", "phrase"), [
    ("/etc/passwd", "is absolute"), ("C:weights", "is absolute"), ("\\\\server\\share\\w", "is absolute"),
    ("../w.bin", "climbs out"), ("a/../../w.bin", "climbs out"), ("a\\w.bin", "uses '\\'"), ("a//w.bin", "empty"),
    ("./w.bin", "'.' path component"), ("", "is empty"), ("CON", "Windows reserves"), ("w.bin\n", "control"),
])
def test_every_location_that_leaves_the_model_folder_is_refused_as_text(location: str, phrase: str) -> None:
    problem = location_problem(location)
    assert problem is not None and phrase in problem


def test_the_manifest_refuses_a_data_location_that_would_collide_under_models(tmp_path: Path) -> None:
    from bundler.errors import ManifestError
    from bundler.manifest import load

    external_model(tmp_path / "models")
    manifest = write_manifest(tmp_path, [("weights_a", "models/weights_a"), ("WEIGHTS_A", "models/weights_b"),
                                         ("big.onnx", "models/weights_b")])
    with pytest.raises(ManifestError) as caught:
        load(manifest)
    text = str(caught.value)
    write_manifest(tmp_path, [("weights_a", "models/weights_a"), ("weights_b", "models/weights_b"),
                              ("weights_b", "models/weights_b"), ("../x", "models/weights_b")])
    with pytest.raises(ManifestError) as caught:
        load(manifest)
    text += str(caught.value)
    assert "models[0].data[1].location: found 'WEIGHTS_A', expected a name of its own under models/ (it is also " \
           "a data file of model 'big')" in text
    assert "models[0].data[2].location: found 'big.onnx', expected a name of its own under models/ (it is also the " \
           "file of model 'big')" in text
    assert "models[0].data[3].location: found '../x', expected a location inside the model's folder; it climbs" in text


def test_references_are_checked_against_the_pinned_sizes() -> None:
    from bundler.readers.externaldata import ExternalRef

    refs = [ExternalRef(tensor="w", location="w.bin", offset=8, length=16, initializer=True)]
    assert reference_problems("m", refs, {"w.bin": 24}) == []
    [problem] = reference_problems("m", refs, {"w.bin": 20})
    assert problem == "m: tensor 'w' keeps its data at location 'w.bin', bytes 8 to 24, but that file has only 20 bytes"
    attribute = [ExternalRef(tensor="c", location="c.bin", offset=0, length=None, initializer=False)]
    assert "is not an initializer" in reference_problems("m", attribute, {"c.bin": 4})[0]


def test_external_refs_reads_the_locations_onnx_wrote(tmp_path: Path) -> None:
    import onnx

    proto = onnx.load(str(external_model(tmp_path)), load_external_data=False)
    refs = external_refs(proto)
    assert [(r.tensor, r.location, r.offset, r.length, r.initializer) for r in refs] == [
        (loc, loc, 0, ELEMENTS * 4, True) for loc in LOCATIONS]


def test_hashing_and_zipping_a_large_data_file_keeps_memory_bounded(tmp_path: Path) -> None:
    """A 64 MiB data file is hashed and zipped in chunks: Python's allocations peak far below its size."""
    data = tmp_path / "weights.bin"
    with data.open("wb") as out:
        for _ in range(64):
            out.write(os.urandom(1 << 20))
    tracemalloc.start()
    try:
        sha256 = file_sha256(data)
        write_zip([Member(name="top/payload/models/weights.bin", source=data, sha256=sha256)], tmp_path / "b.zip",
                  epoch=1767225600, member_cache=MemberCache(tmp_path / "mc"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"peak {peak} bytes for a file of {64 << 20}"
    assert sha256 == hashlib.sha256(data.read_bytes()).hexdigest()
    with zipfile.ZipFile(tmp_path / "b.zip") as archive:
        assert archive.getinfo("top/payload/models/weights.bin").file_size == 64 << 20


def zeros_bundle(path: Path, *, zeros: int, record: bytes = b"{}") -> Path:
    """A bundle-shaped zip whose model data is `zeros` bytes of zeros: deflate packs it about 1000:1."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("top/bundle.json", record)
        digest = hashlib.sha256(b"\0" * zeros).hexdigest()
        archive.writestr("top/SHA256SUMS", f"{digest}  payload/models/zeros.bin\n")
        with archive.open("top/payload/models/zeros.bin", "w") as member:
            for _ in range(zeros >> 20):
                member.write(bytes(1 << 20))
    return path


def test_a_bundle_whose_data_is_zeros_is_read_and_hashed_not_refused_as_a_bomb(tmp_path: Path) -> None:
    """A tensor of zeros is sound data; the bundle reader streams it (the archive extractor's 200:1 rule would not)."""
    from bundler.errors import UnsafeArchiveError
    from bundler.readers.archives import SafeArchive
    from bundler.readers.bundlezip import open_bundle

    path = zeros_bundle(tmp_path / "b.zip", zeros=32 << 20)
    with pytest.raises(UnsafeArchiveError, match="zip bomb"):
        SafeArchive.open(path, label="b.zip")  # what an archive to extract gets
    bundle = open_bundle(path)
    assert bundle.sha256("payload/models/zeros.bin") == bundle.sums["payload/models/zeros.bin"]


def test_a_bundle_member_read_whole_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bundler.errors import VerificationError
    from bundler.readers import bundlezip

    monkeypatch.setattr(bundlezip, "MAX_READ_BYTES", 1024)
    path = zeros_bundle(tmp_path / "b.zip", zeros=1 << 20, record=b"{" + b" " * 2048 + b"}")
    with pytest.raises(VerificationError, match=r"top/bundle.json declares 2050 bytes, expected at most 1024"):
        bundlezip.open_bundle(path)
