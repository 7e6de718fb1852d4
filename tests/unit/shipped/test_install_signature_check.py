"""Issue 27 §1: the signature check must not trust what it checks (real bundles, real openssl, real installs).

The bundle is test_install_sh's small real one (the engine, the pinned pypa installer, a tiny wheel),
signed here with `openssl cms` by a test PKI (tests/fixtures/signing_pki.py) as `ort-bundler sign` signs
SHA256SUMS. Each attack plants what the adversarial run planted: bytecode or an extension module
beside the engine's sources, a replaced checker, a file the signed list does not name; each must end
in exit 11 naming the file, with the planted code never run (its marker file never appears) and
nothing installed. The README's outside check is taken from the rendered README-INSTALL.txt and run.
"""

from __future__ import annotations

import importlib.machinery
import py_compile
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID
from fixtures.signing_pki import Pki
from unit.shipped.test_install_sh import PY, make_bundle, run_sh, script_context, write_sums
from unit.shipped.test_selfcheck import oldest_python

from bundler.assembly.render import render_scripts

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="the signature check runs openssl")

#: The shipped package in the bundle, whose start file starts the engine (payload/ort_bundle/__main__.py).
ENGINE_DIR = "payload/ort_bundle"
TRUST_PY = f"{ENGINE_DIR}/engine/trust.py"
TAG = sys.implementation.cache_tag  # the target Python is this minor version (install.sh checks it)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pki]:
    folder = tmp_path_factory.mktemp("pki")
    return {"good": Pki.make(folder, "good"), "other": Pki.make(folder, "other"),
            "tls": Pki.make(folder, "tls", eku=[ExtendedKeyUsageOID.SERVER_AUTH])}


def sign_folder(root: Path, pki: Pki) -> None:
    """SHA256SUMS.p7s as `ort-bundler sign` writes it: a detached DER CMS signature over SHA256SUMS."""
    subprocess.run(["openssl", "cms", "-sign", "-binary", "-outform", "DER", "-md", "sha256", "-nosmimecap",
                    "-signer", str(pki.cert), "-inkey", str(pki.key), "-certfile", str(pki.chain),
                    "-in", str(root / "SHA256SUMS"), "-out", str(root / "SHA256SUMS.p7s")], check=True)


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory, pki: dict[str, Pki]) -> Path:
    root = make_bundle(tmp_path_factory.mktemp("signed") / "tiny-1.0-linux_x86_64")
    sign_folder(root, pki["good"])
    return root


def copy_of(bundle: Path, tmp_path: Path, name: str = "bundle") -> Path:
    dest = tmp_path / name / bundle.name
    shutil.copytree(bundle, dest, symlinks=True)
    return dest


def marker_code(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').write('the planted code ran')\n"


def plant_pyc(pyc: Path, marker: Path, work: Path) -> None:
    """An unchecked-hash .pyc (Python loads it without looking at the source) that writes `marker`."""
    source = work / f"planted-{pyc.stem}.py"
    source.write_text(marker_code(marker))
    pyc.parent.mkdir(parents=True, exist_ok=True)
    py_compile.compile(str(source), cfile=str(pyc), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)


def plant_extension(path: Path, marker: Path, work: Path) -> None:
    """A real shared object that writes `marker` as soon as it is loaded (a constructor runs at dlopen)."""
    source = work / "planted.c"
    source.write_text('#include <stdio.h>\n'
                      f'__attribute__((constructor)) static void planted(void) {{ FILE *f = fopen("{marker}", "w"); '
                      'if (f) { fputs("the planted code ran", f); fclose(f); } }\n'
                      f'void *PyInit_{path.name.split(".")[0]}(void) {{ return 0; }}\n')
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(path), str(source)], check=True)


def install(bundle: Path, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_sh(bundle / "install.sh", "--install-dir", str(root), "--log-path", str(root.parent / "install.log"), *args)


def test_an_added_bytecode_file_beside_the_engine_is_refused_by_name_and_never_runs(
        signed: Path, pki: dict[str, Pki], tmp_path: Path) -> None:
    """The adversarial run's case: one added unchecked-hash .pyc for ort_bundle/__init__, with and without --trust."""
    for trust in (("--trust", str(pki["good"].root)), ()):
        case = tmp_path / ("trust" if trust else "plain")
        bundle = copy_of(signed, case)
        marker = case / "MARKER"
        added = f"{ENGINE_DIR}/__pycache__/__init__.{TAG}.pyc"
        plant_pyc(bundle / added, marker, case)
        proc = install(bundle, case / "root", *trust)
        assert proc.returncode == 11, (trust, proc.stderr)
        assert f"{added} is in the bundle folder but not in SHA256SUMS" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
        assert not marker.exists() and not (case / "root").exists()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="builds a real shared object")
def test_the_engine_reads_only_its_sources_no_bytecode_and_no_extension_module(
        signed: Path, tmp_path: Path) -> None:
    """Bytecode for every engine module and a real `engine_fs.<abi>.so` that writes a marker when loaded: the
    engine starts, finds them, names them and exits 11; none of them ran (they would run before any check)."""
    bundle = copy_of(signed, tmp_path)
    marker = tmp_path / "MARKER"
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    plant_extension(bundle / ENGINE_DIR / "engine" / f"engine_fs{suffix}", marker, tmp_path)
    for module in sorted((bundle / ENGINE_DIR).rglob("*.py")):
        plant_pyc(module.parent / "__pycache__" / f"{module.stem}.{TAG}.pyc", marker, tmp_path)
    (bundle / ENGINE_DIR / "argparse.py").write_text(marker_code(marker))  # beside the start file
    proc = install(bundle, tmp_path / "root")
    assert proc.returncode == 11, proc.stderr
    assert f"{ENGINE_DIR}/__pycache__/__init__.{TAG}.pyc, " in proc.stderr and "more are in the bundle folder" in proc.stderr
    assert not marker.exists() and not (tmp_path / "root").exists()
    # The start script alone, as `run.sh --verify` starts the installed copy, also with the oldest Python a target
    # may have (before 3.11, -I still puts the script's folder first on sys.path: argparse.py beside it).
    for python in filter(None, (sys.executable, oldest_python())):
        proc = subprocess.run([python, "-I", "-B", str(bundle / ENGINE_DIR / "__main__.py"), "engine", "verify",
                               "--root", str(tmp_path / "nowhere")], capture_output=True, text=True)
        assert proc.returncode == 10 and "holds no receipt.json" in proc.stderr, (python, proc.stderr)
        assert not marker.exists(), python


def test_the_checker_runs_only_from_a_copy_that_matches_the_signed_sums(
        signed: Path, pki: dict[str, Pki], tmp_path: Path) -> None:
    """A replaced trust.py (alone, or with SHA256SUMS rewritten to match it) never runs: openssl checks the
    signature first, then the private copy's sha256 against the signed list."""
    trojan = "import sys\n" + marker_code(tmp_path / "MARKER") + "print('bundle signature verified')\nsys.exit(0)\n"
    for rewrite_sums in (False, True):
        case = tmp_path / f"rewrite-{rewrite_sums}"
        bundle = copy_of(signed, case)
        (bundle / TRUST_PY).write_text(trojan)
        if rewrite_sums:
            write_sums(bundle)
            (bundle / "SHA256SUMS").write_text(
                "".join(line + "\n" for line in (bundle / "SHA256SUMS").read_text().splitlines()
                        if not line.endswith("SHA256SUMS.p7s")))
        proc = install(bundle, case / "root", "--trust", str(pki["good"].root))
        assert proc.returncode == 11, (rewrite_sums, proc.stderr)
        expected = "SHA256SUMS.p7s does not verify against" if rewrite_sums else "trust.py does not match the signed SHA256SUMS"
        assert expected in proc.stderr, proc.stderr
        assert not (tmp_path / "MARKER").exists() and not (case / "root").exists()


def test_the_private_copy_is_removed_and_a_good_bundle_installs(signed: Path, pki: dict[str, Pki], tmp_path: Path) -> None:
    work = tmp_path / "tmp"
    work.mkdir()
    bundle = copy_of(signed, tmp_path)
    proc = run_sh(bundle / "install.sh", "--install-dir", str(tmp_path / "root"), "--trust", str(pki["good"].root),
                  "--no-self-check", env={"TMPDIR": str(work)})
    assert proc.returncode == 0, proc.stderr
    assert "bundle signature verified: signed by CN=good Code Signing" in proc.stdout
    assert (tmp_path / "root" / "receipt.json").is_file()
    assert list(work.iterdir()) == []  # the private copy of the checker is gone before the engine starts


def test_a_signer_without_the_code_signing_usage_is_refused_though_its_name_says_code_signing(
        signed: Path, pki: dict[str, Pki], tmp_path: Path) -> None:
    """The TLS certificate's subject is `CN=tls Code Signing`: only its extended key usage counts."""
    bundle = copy_of(signed, tmp_path)
    sign_folder(bundle, pki["tls"])
    proc = install(bundle, tmp_path / "root", "--trust", str(pki["tls"].root))
    assert proc.returncode == 11 and "not for code signing" in proc.stderr, proc.stderr
    direct = subprocess.run([sys.executable, "-I", "-B", str(bundle / TRUST_PY), str(bundle),
                             "--trust", str(pki["tls"].root)], capture_output=True, text=True)
    assert direct.returncode == 11 and "is not for code signing" in direct.stderr, direct.stderr


def test_trust_py_refuses_a_stray_file_by_name(signed: Path, pki: dict[str, Pki], tmp_path: Path) -> None:
    bundle = copy_of(signed, tmp_path)
    (bundle / "payload" / "models" / "Thumbs.db").write_bytes(b"\x00" * 16)
    proc = subprocess.run([sys.executable, "-I", "-B", str(bundle / TRUST_PY), str(bundle),
                           "--trust", str(pki["good"].root)], capture_output=True, text=True)
    assert proc.returncode == 11, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "trust.py: payload/models/Thumbs.db is in the bundle folder but not in SHA256SUMS; a bundle folder holds only "
        "the files SHA256SUMS lists: remove it or extract the bundle's zip again into an empty folder (nothing was "
        "changed)"]


def runtime_bundle(root: Path, marker: Path, pki: Pki) -> Path:
    """The small bundle with a bundled interpreter ([python] runtime): payload/python/bin/python3, here a
    script that leaves a marker and hands over to this machine's Python, listed in the signed SHA256SUMS."""
    bundle = make_bundle(root)
    scripts = render_scripts(replace(script_context(), runtime_bundle_python="payload/python/bin/python3"))
    (bundle / "install.sh").write_bytes(scripts["install.sh"])
    interpreter = bundle / "payload" / "python" / "bin" / "python3"
    interpreter.parent.mkdir(parents=True)
    python = shutil.which(f"python{PY}") or sys.executable
    interpreter.write_text(f"#!/bin/sh\necho ran >>{marker}\nexec {python} \"$@\"\n")
    interpreter.chmod(0o755)
    (bundle / "payload" / "python" / "lib").mkdir()
    (bundle / "payload" / "python" / "lib" / "os.py").write_text("# the interpreter's own file\n")
    (bundle / "SHA256SUMS").unlink()
    write_sums(bundle)
    sign_folder(bundle, pki)
    return bundle


def test_a_bundled_interpreter_runs_only_once_its_folder_matches_and_holds_nothing_added(
        pki: dict[str, Pki], tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    source = runtime_bundle(tmp_path / "source" / "tiny-1.0-linux_x86_64", marker, pki["good"])
    cases = {"added": ("payload/python/lib/sitecustomize.py", "payload/python/lib/sitecustomize.py is in the bundle folder but not in SHA256SUMS"),
             "changed": ("payload/python/lib/os.py", "the bundled interpreter's folder payload/python does not match")}
    for name, (path, expected) in cases.items():
        bundle = copy_of(source, tmp_path, name)
        with (bundle / path).open("a") as fh:
            fh.write("print('planted')\n")
        proc = install(bundle, tmp_path / name / "root", "--trust", str(pki["good"].root))
        assert proc.returncode == 11 and expected in proc.stderr, (name, proc.stderr)
        assert not marker.exists() and not (tmp_path / name / "root").exists(), name
    bundle = copy_of(source, tmp_path, "intact")
    proc = install(bundle, tmp_path / "intact" / "root", "--trust", str(pki["good"].root), "--dry-run")
    assert "bundle signature verified" in proc.stdout, proc.stdout + proc.stderr
    assert marker.exists()  # the intact interpreter ran the checker


def outside_check(readme: str) -> list[str]:
    """The commands README-INSTALL.txt gives for checking a bundle from outside, as printed."""
    lines = readme.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Checking a bundle from outside"))
    block = lines[start:]
    first = next(i for i, line in enumerate(block) if line.startswith("    "))
    commands = []
    for line in block[first:]:
        if not line.startswith("    "):
            break
        commands.append(line.strip())
    return commands


def test_the_readme_outside_check_runs_as_printed_and_finds_an_added_file(
        signed: Path, pki: dict[str, Pki], tmp_path: Path) -> None:
    commands = outside_check((signed / "README-INSTALL.txt").read_text())
    assert [c.split()[0] for c in commands] == ["openssl", "openssl", "sha256sum", "find"], commands
    bundle = copy_of(signed, tmp_path)

    def run_all(anchor: Path) -> list[subprocess.CompletedProcess[str]]:
        return [subprocess.run(["sh", "-c", command.replace("CA.pem", str(anchor))], cwd=bundle,
                               capture_output=True, text=True) for command in commands]

    verify, usage, sums, extra = run_all(pki["good"].root)
    assert verify.returncode == 0 and "Verification successful" in verify.stderr, verify.stderr
    assert usage.returncode == 0 and "Code Signing" in usage.stdout, usage.stdout + usage.stderr
    assert sums.returncode == 0 and sums.stdout == "" and sums.stderr == ""
    assert extra.returncode == 0 and extra.stdout == "", extra.stdout
    plant_pyc(bundle / ENGINE_DIR / "__pycache__" / f"__init__.{TAG}.pyc", tmp_path / "MARKER", tmp_path)
    (bundle / "Thumbs.db").write_bytes(b"\x00")
    assert sorted(run_all(pki["good"].root)[3].stdout.splitlines()) == [
        "./Thumbs.db", f"./{ENGINE_DIR}/__pycache__/__init__.{TAG}.pyc"]
    assert run_all(pki["other"].root)[0].returncode != 0
    (bundle / "bundle.json").write_text("{}")
    assert run_all(pki["good"].root)[2].returncode != 0
    proc = install(bundle, tmp_path / "root")  # and the installer itself names the stray file
    assert proc.returncode == 11 and "Thumbs.db" in proc.stderr and not (tmp_path / "root").exists(), proc.stderr
