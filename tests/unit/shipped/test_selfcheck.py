"""The self-check, run as shipped: the inlined script in a real install root whose venv holds the real
onnxruntime 1.23.1 Linux wheel, with models gated by the real model gate. Plus the pure pieces it
is made of (input synthesis, output comparison, library rules, failure diagnosis) on real arrays.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from fixtures.wheels import ORT_VERSION, cache_root
from onnx import TensorProto, helper

from bundler.assembly.modelgate import ModelInput, gate_models
from bundler.assembly.shipped_package import identity_model_bytes, write_package
from bundler.shipped.ort_bundle.selfcheck import cuda_check, libraries, selfcheck
from bundler.shipped.ort_bundle.synth import (
    compare_output,
    element_hash,
    output_digest,
    summarize_output,
    synthesize_inputs,
)

ALL_CHECKS = {"path", "python", "interpreter", "onnxruntime", "providers", "identity", "model:mm", "libraries", "cpu",
              "cache", "files", "native_runtime", "tuning"}


# ---------------------------------------------------------------- synthesis and comparison


def test_synthesised_inputs_follow_the_documented_ramp_per_type():
    inputs = [
        {"name": "f", "type": "tensor(float)", "shape": [1, 300]},
        {"name": "i8", "type": "tensor(int8)", "shape": [300]},
        {"name": "u8", "type": "tensor(uint8)", "shape": [300]},
        {"name": "b", "type": "tensor(bool)", "shape": [4]},
        {"name": "d", "type": "tensor(double)", "shape": ["batch", None, 2]},
    ]

    feeds = synthesize_inputs(inputs, {"d": [3, 2, 2]})

    hashed = element_hash(np.arange(300, dtype=np.uint64))
    spread = (hashed % np.uint64(251)).astype(np.int64)
    assert feeds["f"].dtype == np.float32 and np.array_equal(feeds["f"].ravel(), (spread - 125) / 16.0)
    assert np.array_equal(feeds["i8"], np.clip(spread - 125, -128, 127))
    assert np.array_equal(feeds["u8"], spread)
    assert feeds["b"].tolist() == [bool(h & np.uint64(1)) for h in hashed[:4]]
    assert feeds["d"].shape == (3, 2, 2) and feeds["d"].dtype == np.float64


@pytest.mark.parametrize(("shapes", "problem"), [
    ({"x": [2]}, "has rank 1"),
    ({"x": [2, 5]}, r"given shape is \[2, 5\]"),
    ({"x": [0, 4]}, r"given shape is \[0, 4\]"),
    ({"z": [1, 4]}, r"\['z'\], which are not inputs"),
])
def test_shapes_that_contradict_the_signature_are_refused(shapes, problem):
    with pytest.raises(ValueError, match=problem):
        synthesize_inputs([{"name": "x", "type": "tensor(float)", "shape": ["n", 4]}], shapes)


def test_string_inputs_cannot_be_synthesised():
    with pytest.raises(ValueError, match=r"input 's' has type tensor\(string\)"):
        synthesize_inputs([{"name": "s", "type": "tensor(string)", "shape": [1]}])


def test_digest_does_not_depend_on_byte_order_or_memory_layout():
    array = np.arange(12, dtype="<f4").reshape(3, 4)

    assert output_digest(array.astype(">f4")) == output_digest(array)
    assert output_digest(np.asfortranarray(array)) == output_digest(array)
    assert output_digest(array) != output_digest(array.astype("<f8"))


def test_comparison_accepts_rounding_within_tolerance_and_names_a_real_difference():
    value = np.linspace(-1, 1, 2000, dtype=np.float32).reshape(2, 1000)
    recorded = summarize_output(value)
    nudged = value + np.float32(1e-7)
    wrong = value.copy()
    wrong[0, 3] += 0.5

    assert compare_output("y", value, recorded, rtol=1e-4, atol=1e-5) is None
    assert compare_output("y", nudged, recorded, rtol=1e-4, atol=1e-5) is None
    assert "element 3 is" in compare_output("y", wrong, recorded, rtol=1e-4, atol=1e-5)
    assert "is float32[1000, 2]" in compare_output("y", value.reshape(1000, 2), recorded, rtol=1e-4, atol=1e-5)


def test_comparison_catches_an_altered_digest_when_the_values_cover_the_output():
    value = np.arange(6, dtype=np.int64)
    recorded = {**summarize_output(value), "digest": "0" * 64}

    assert "reference in bundle.json was altered" in compare_output("y", value, recorded, rtol=0, atol=0)


# ---------------------------------------------------------------- rules and diagnosis


def context(root: Path, **bundle) -> selfcheck.Context:
    return selfcheck.Context(root=root, bundle={"ort": {"version": ORT_VERSION}, **bundle}, allow_cpu_fallback=False)


def test_old_msvcp140_and_stray_runtime_libraries_are_problems(tmp_path):
    ctx = context(tmp_path, vc_runtime_min="14.40.33810", gpu={"dlls": ["gpu/cudart64_110.dll"]})
    old = {"family": "msvcp140", "path": "C:/Tools/msvcp140.dll", "version": "14.29.30139.0"}
    new = {"family": "msvcp140", "path": "C:/Windows/System32/msvcp140.dll", "version": "14.40.33810.0"}
    stray_ort = {"family": "onnxruntime", "path": "/opt/other/libonnxruntime.so.1.23.1", "version": "1.23.1"}
    own_ort = {"family": "onnxruntime", "path": str(tmp_path / "venv/capi/libonnxruntime.so.1.23.1"), "version": None}
    stray_cuda = {"family": "cuda", "path": "/usr/local/cuda/lib64/libcudart.so.11.0", "version": "11.0"}
    driver = {"family": "driver", "path": "/usr/lib/libcuda.so.1", "version": "1"}

    assert "C:/Tools/msvcp140.dll is version 14.29.30139.0, older than the VC++ runtime 14.40.33810" in \
        libraries.library_problem(ctx, old)
    assert libraries.library_problem(ctx, new) is None
    assert "/opt/other/libonnxruntime.so.1.23.1 was loaded from outside" in libraries.library_problem(ctx, stray_ort)
    assert libraries.library_problem(ctx, own_ort) is None
    assert "libcudart.so.11.0 was loaded from outside" in libraries.library_problem(ctx, stray_cuda)
    assert libraries.library_problem(ctx, driver) is None
    assert libraries.library_problem(context(tmp_path), stray_cuda) is None  # no bundled GPU libraries


@pytest.mark.parametrize(("path", "family"), [
    ("C:/Windows/System32/MSVCP140.dll", "msvcp140"),
    ("C:/x/VCRUNTIME140_1.dll", "vcruntime140"),
    ("/v/capi/onnxruntime_pybind11_state.cpython-311-x86_64-linux-gnu.so", "onnxruntime"),
    ("C:/x/onnxruntime_providers_cuda.dll", "onnxruntime"),
    ("C:/x/cudnn_ops_infer64_8.dll", "cudnn"),
    ("/usr/lib/libcublasLt.so.11", "cuda"),
    ("C:/Windows/System32/nvcuda.dll", "driver"),
    ("/usr/lib/libc.so.6", None),
])
def test_library_families(path, family):
    assert libraries.library_family(path) == family


@pytest.mark.parametrize(("evidence", "missing"), [
    ('Error loading "C:\\ort\\onnxruntime_providers_cuda.dll" which depends on "cudnn64_8.dll" which is missing. '
     "(Error 126: \"The specified module could not be found.\")", "cudnn64_8.dll"),
    ("Failed to load library libonnxruntime_providers_cuda.so with error: libcublasLt.so.12: cannot open shared "
     "object file: No such file or directory", "libcublasLt.so.12"),
    ("CUDA failure 35: CUDA driver version is insufficient for CUDA runtime version", None),
])
def test_missing_library_is_read_from_orts_words(evidence, missing):
    assert cuda_check.missing_library(evidence) == missing


def test_native_stderr_is_captured_where_ort_logs_a_providers_missing_library():
    captured: list[str] = []

    with cuda_check.native_stderr(captured):
        os.write(2, b"libcudnn.so.8: cannot open shared object file\n")

    assert captured == ["libcudnn.so.8: cannot open shared object file\n"]
    assert cuda_check.missing_library(captured[0]) == "libcudnn.so.8"


def test_cache_space_is_measured_on_the_nearest_existing_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("ORT_BUNDLE_CACHE_DIR", str(tmp_path / "not" / "yet"))

    check = selfcheck.check_cache_space(context(tmp_path))

    assert check.details["cache_dir"] == str(tmp_path / "not" / "yet")
    assert abs(check.details["free_bytes"] - shutil.disk_usage(tmp_path).free) < 1 << 28
    assert check.status == ("pass" if check.details["free_bytes"] >= 1 << 30 else "warn")


def test_the_cache_check_looks_where_the_launchers_put_the_cache(tmp_path, monkeypatch):
    """Issue 26, defect 3: ORT_BUNDLE_CACHE_DIR, else cache_dir.txt (or the MSI's CACHEDIR before it is written),
    else the bundle's [launch] cache_dir, a relative one below the install; never the temp folder silently."""
    monkeypatch.delenv("ORT_BUNDLE_CACHE_DIR", raising=False)
    launch = {"manifest": {"launch": {"cache_dir": "bundle-cache"}}}
    check = selfcheck.check_cache_space(context(tmp_path, **launch))
    assert check.details["cache_dir"] == str(tmp_path / "bundle-cache")
    assert f"for the cache directory {tmp_path / 'bundle-cache'} (from the bundle's [launch] cache_dir)" in check.message

    (tmp_path / "cache_dir.txt").write_text(f"{tmp_path / 'chosen'}\n", encoding="utf-8")
    check = selfcheck.check_cache_space(context(tmp_path, **launch))
    assert check.details["cache_dir"] == str(tmp_path / "chosen") and "(from cache_dir.txt)" in check.message

    (tmp_path / "cache_dir.txt").unlink()  # the MSI's CACHEDIR: handed over before msi-finish writes the file
    pending = selfcheck.Context(root=tmp_path, bundle=launch, allow_cpu_fallback=False,
                                pending_cache_dir=str(tmp_path / "msi"))
    (tmp_path / "cache_dir.txt").write_text("older\n", encoding="utf-8")  # an upgrade: the file holds the old value
    check = selfcheck.check_cache_space(pending)
    assert check.details["cache_dir"] == str(tmp_path / "msi") and "(from the MSI's CACHEDIR" in check.message

    monkeypatch.setenv("ORT_BUNDLE_CACHE_DIR", str(tmp_path / "launcher"))
    assert selfcheck.check_cache_space(pending).details["cache_dir"] == str(tmp_path / "launcher")

    monkeypatch.delenv("ORT_BUNDLE_CACHE_DIR")
    (tmp_path / "cache_dir.txt").unlink()
    check = selfcheck.check_cache_space(context(tmp_path))
    assert check.details["cache_dir"] == tempfile.gettempdir()
    assert "in the temp folder" in check.message and "unknown at install time" in check.message


def test_non_ascii_install_path_fails(tmp_path):
    check = selfcheck.check_path(context(tmp_path / "Modèles"))

    assert check.status == "fail" and "Modèles" in check.message and "ASCII" in check.fix


def test_missing_bundle_json_is_a_failed_check_not_a_traceback(tmp_path):
    start = write_package(tmp_path / "installer")

    result = subprocess.run([sys.executable, "-I", str(start), "selfcheck", "--json"], capture_output=True, text=True)

    report = json.loads(result.stdout)
    assert result.returncode == 1 and not report["ok"]
    assert report["checks"][0]["id"] == "bundle" and str(tmp_path / "bundle.json") in report["checks"][0]["message"]


# ---------------------------------------------------------------- the shipped script in a real install root


@pytest.fixture(scope="session")
def ort_venv(tmp_path_factory, ort_linux_wheel) -> Path:
    """A venv holding the real onnxruntime 1.23.1 Linux wheel and its dependencies, made once per session."""
    venv = tmp_path_factory.mktemp("ort-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                    "-q", str(ort_linux_wheel)], check=True)
    return venv


def matmul_model(path: Path) -> Path:
    weights = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5.0) / 7.0
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        initializer=[helper.make_tensor("w", TensorProto.FLOAT, [4, 3], weights.ravel().tolist())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


#: Where the install_root fixture keeps its copy of the package (an install keeps it in installer/).
CHECKER = "checker"


@pytest.fixture
def install_root(tmp_path, ort_venv) -> Path:
    """An install root as the installer leaves it: venv, bundle.json, self-check, one gated model."""
    root = tmp_path / "install"
    shutil.copytree(ort_venv, root / "venv", symlinks=True, copy_function=os.link)
    # The package beside the venv, not in installer/: the receipt audit (`engine verify`, which needs the receipt a
    # real install writes) then skips, as it did when the self-check was one script in selfcheck/.
    write_package(root / CHECKER)
    assert (root / CHECKER / "ort_bundle/selfcheck/identity.onnx").read_bytes() == identity_model_bytes()
    model = matmul_model(tmp_path / "mm.onnx")
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    (record,) = gate_models([ModelInput(name="mm", path=model, sha256=sha, shapes={"x": (3, 4)})],
                            ort_version=ORT_VERSION, work_dir=cache_root() / "modelgate")  # its ORT env made once
    (root / "models").mkdir()
    shutil.copyfile(model, root / "models/mm.onnx")
    bundle = {"format": 1, "name": "demo", "version": "1.0.0", "platform": "linux_x86_64", "python": "3.11",
              "ort": {"version": ORT_VERSION}, "expected_providers": ["CPUExecutionProvider"],
              "vc_runtime_min": None, "gpu": None, "selfcheck": {"identity_model": f"{CHECKER}/ort_bundle/selfcheck/identity.onnx"},
              "models": [{**record.to_json(), "file": "models/mm.onnx"}]}
    (root / "bundle.json").write_text(json.dumps(bundle, indent=2), encoding="utf-8")
    return root


def edit_bundle(root: Path, change) -> None:
    bundle = json.loads((root / "bundle.json").read_text(encoding="utf-8"))
    change(bundle)
    (root / "bundle.json").write_text(json.dumps(bundle), encoding="utf-8")


def run_selfcheck(root: Path, *args: str, python: Path | None = None) -> tuple[int, dict]:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    result = subprocess.run([str(python or root / "venv/bin/python"), str(root / CHECKER / "ort_bundle/__main__.py"),
                             "selfcheck", "--json", *args], capture_output=True, text=True, env=env)
    return result.returncode, json.loads(result.stdout)


def by_id(report: dict) -> dict:
    return {check["id"]: check for check in report["checks"]}


@pytest.mark.integration
def test_selfcheck_passes_in_a_real_installation(install_root):
    code, report = run_selfcheck(install_root)

    checks = by_id(report)
    assert code == 0 and report["ok"], [c for c in report["checks"] if c["status"] == "fail"]
    assert set(checks) == ALL_CHECKS
    assert checks["onnxruntime"]["details"]["location"].startswith(str(install_root / "venv"))
    assert checks["identity"]["status"] == "pass"
    assert "matches the reference" in checks["model:mm"]["message"]
    assert checks["model:mm"]["details"]["latency_ms"] > 0
    loaded = checks["libraries"]["details"]["libraries"]
    assert loaded and all(lib["path"].startswith(str(install_root)) for lib in loaded if lib["family"] == "onnxruntime")

    human = subprocess.run([str(install_root / "venv/bin/python"), str(install_root / CHECKER / "ort_bundle/__main__.py"),
                            "selfcheck"],
                           capture_output=True, text=True)
    assert human.returncode == 0 and human.stdout.rstrip().endswith("Result: PASSED (0 failed, 0 warnings)")


@pytest.mark.integration
def test_onnxruntime_from_another_site_packages_fails_naming_it(install_root):
    code, report = run_selfcheck(install_root, python=Path(sys.executable))

    foreign = str(Path(onnxruntime.__file__).resolve().parent)
    checks = by_id(report)
    assert code == 1 and not report["ok"]
    assert checks["onnxruntime"]["status"] == "fail"
    assert f"imported from {foreign}, not from this installation" in checks["onnxruntime"]["message"]
    assert checks["libraries"]["status"] == "fail" and foreign in checks["libraries"]["message"]


@pytest.mark.integration
def test_missing_model_fails_naming_it(install_root):
    (install_root / "models/mm.onnx").unlink()

    code, report = run_selfcheck(install_root)

    check = by_id(report)["model:mm"]
    assert code == 1 and check["status"] == "fail"
    assert check["message"] == f"model 'mm' file models/mm.onnx is missing from {install_root}"


@pytest.mark.integration
def test_altered_reference_digest_fails(install_root):
    edit_bundle(install_root, lambda b: b["models"][0]["reference"]["outputs"]["y"].update(digest="f" * 64))

    code, report = run_selfcheck(install_root)

    check = by_id(report)["model:mm"]
    assert code == 1 and check["status"] == "fail"
    assert "output 'y' equals the recorded values bit for bit but not the recorded digest" in check["message"]


@pytest.mark.integration
def test_output_outside_the_tolerance_fails(install_root):
    """As if this machine computed something else: neither the digest nor value 4 match any more."""
    def shift(bundle):
        recorded = bundle["models"][0]["reference"]["outputs"]["y"]
        recorded["values"][4] += 0.01
        recorded["digest"] = "0" * 64

    edit_bundle(install_root, shift)
    code, report = run_selfcheck(install_root)

    check = by_id(report)["model:mm"]
    assert code == 1 and "output 'y' element 4 is" in check["message"]


def nvidia_driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.integration
@pytest.mark.skipif(nvidia_driver_present(), reason="this machine has an NVIDIA driver")
def test_gpu_bundle_without_a_driver_fails_unless_cpu_fallback_is_allowed(install_root):
    def expect_cuda(bundle):
        bundle["expected_providers"] = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        bundle["gpu"] = {"cuda": "11.8", "cudnn": "8", "dlls": [], "min_driver": "452.39"}

    edit_bundle(install_root, expect_cuda)

    code, report = run_selfcheck(install_root)
    cuda = by_id(report)["cuda"]
    assert code == 3 and cuda["status"] == "fail"  # EXIT_NO_GPU_DRIVER: its own code, never a pass on the CPU
    assert cuda["details"]["missing_driver"] == "libcuda.so.1"
    assert "no NVIDIA driver: libcuda.so.1 cannot be loaded" in cuda["message"]
    assert "452.39" in cuda["fix"]

    code, report = run_selfcheck(install_root, "--allow-cpu-fallback")
    checks = by_id(report)
    assert code == 0 and checks["cuda"]["status"] == "warn"
    assert "no NVIDIA driver" in checks["cuda"]["message"]
    assert checks["model:mm"]["status"] == "pass"
    assert checks["model:mm"]["details"]["providers"] == ["CPUExecutionProvider"]


def oldest_python() -> str | None:
    """A Python 3.8 interpreter (the oldest target the manifest accepts), if this machine has one."""
    import glob
    import shutil

    installed = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python")))
    found = installed[0] if installed else shutil.which("python3.8")
    if found and subprocess.run([found, "-c", "import sys; assert sys.version_info[:2] == (3, 8)"],
                                capture_output=True).returncode == 0:
        return found
    return None  # pyenv's shim answers even when no 3.8 is active


def test_the_shipped_self_check_runs_on_the_oldest_supported_python(tmp_path: Path) -> None:
    python = oldest_python()
    if python is None:
        pytest.skip("no Python 3.8 on this machine")
    start = write_package(tmp_path / "installer")
    proc = subprocess.run([python, str(start), "selfcheck", "--root", str(tmp_path / "missing"), "--json"],
                          capture_output=True, text=True)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode != 0 and "bundle.json" in proc.stdout
