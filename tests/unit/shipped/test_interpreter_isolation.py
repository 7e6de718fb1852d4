"""Every Python we start runs isolated from the caller's folder (issue 34 §3).

A bundle without its own interpreter used to start its `[launch] module` entry point as `python -m NAME`, without
-I: an `ort_bundle/` or a `NAME.py` that another user left in the folder the caller stands in ran as the caller.
The launcher now starts every Python with -I -B (and a script entry point with its own folder first on sys.path,
which -I would drop); the engine's `python -m venv` and its bytecode workers keep the current folder off sys.path.

Each case runs for real on Linux: run.sh of an install folder (test_launcher's venv with the shipped `ort_bundle`
package), started from a folder holding modules that record that they ran, and the engine's own subprocesses
started from such a folder. Windows' run.cmd hands over to the same module (test_wine_launcher.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from unit.shipped.test_launcher import PY, REPORTER, context, install, report, venv  # noqa: F401  (venv: a fixture)

from bundler.assembly.render import EntryPoint
from bundler.shipped.ort_bundle.engine import engine_env

#: A module that leaves PWNED in the folder it was planted in when it is imported, then fails loudly.
PLANT = "import pathlib; (pathlib.Path(__file__).resolve().parent / 'PWNED').write_text(__name__); raise SystemExit(99)\n"


def planted_folder(tmp_path: Path, *modules: str) -> Path:
    """The caller's current folder, holding a planted `ort_bundle` package and these planted modules."""
    folder = tmp_path / "shared folder"
    (folder / "ort_bundle").mkdir(parents=True)
    for name in ("__init__.py", "launcher.py", "profile.py"):
        (folder / "ort_bundle" / name).write_text(PLANT, encoding="utf-8")
    for name in modules:
        (folder / f"{name}.py").write_text(PLANT, encoding="utf-8")
    return folder


def run_from(folder: Path, run_sh: Path, *args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cache.parent), "ORT_BUNDLE_CACHE_DIR": str(cache),
           "PYTHONPATH": str(folder)}
    return subprocess.run([str(run_sh), *args], cwd=folder, capture_output=True, text=True, env=env, timeout=120,
                          check=False)


def pwned(folder: Path) -> list[str]:
    return [str(path) for path in folder.rglob("PWNED")]


def test_a_module_entry_point_never_runs_a_module_planted_in_the_callers_folder(venv: Path, tmp_path: Path) -> None:
    root = tmp_path / "install"
    run_sh = install(root, venv, context(entry_point=EntryPoint(kind="module", value="demo_cli")))
    installed = root / "venv" / "lib" / f"python{PY}" / "site-packages" / "demo_cli.py"
    installed.write_text(REPORTER, encoding="utf-8")
    folder = planted_folder(tmp_path, "demo_cli", "json", "runpy")
    seen = report(run_from(folder, run_sh, "arg", cache=tmp_path / "cache"))
    assert seen["argv"] == [str(installed), "arg"] and seen["isolated"] == 1
    assert pwned(folder) == []
    # run --profile starts the entry point the same way (one definition: launch_config.python_command).
    profiled = run_from(folder, run_sh, "--profile", "p", cache=tmp_path / "cache")
    assert profiled.returncode == 7, profiled.stderr
    assert json.loads(profiled.stdout)["argv"] == [str(installed), "p"] and pwned(folder) == []


def test_a_script_entry_point_imports_from_its_own_folder_and_nothing_from_the_callers(venv: Path,
                                                                                      tmp_path: Path) -> None:
    """-I drops the script's folder from sys.path: the launcher puts app/ there itself, first, as `python
    script.py` would, so a module shipped beside the script imports; the caller's folder is never searched."""
    root = tmp_path / "install"
    run_sh = install(root, venv, context(entry_point=EntryPoint(kind="script", value="app/main.py")))
    (root / "app" / "helper.py").write_text("WHERE = __file__\n", encoding="utf-8")
    (root / "app" / "main.py").write_text("import helper, sys\n" + REPORTER.replace(
        '"pid": os.getpid(),', '"pid": os.getpid(), "helper": helper.WHERE, "name": __name__, "path0": sys.path[0],'),
        encoding="utf-8")
    folder = planted_folder(tmp_path, "helper", "json", "runpy")
    seen = report(run_from(folder, run_sh, "two words", cache=tmp_path / "cache"))
    assert seen["argv"] == [str(root / "app" / "main.py"), "two words"] and seen["isolated"] == 1
    assert (seen["helper"], seen["name"], seen["path0"]) == (str(root / "app" / "helper.py"), "__main__",
                                                              str(root / "app"))
    assert pwned(folder) == []
    # --self-check and the bare interpreter (no entry point) run isolated too.
    (root / "installer" / "ort_bundle").mkdir(parents=True)
    (root / "installer" / "ort_bundle" / "__main__.py").write_text(REPORTER, encoding="utf-8")
    assert report(run_from(folder, run_sh, "--self-check", cache=tmp_path / "cache"))["isolated"] == 1
    assert pwned(folder) == []


def test_the_engines_venv_and_bytecode_workers_ignore_the_current_folder(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m venv` put the current folder first on sys.path: a planted `venv/` ran as the administrator. The
    bytecode workers (`python -c`, not -I, so PYTHONHASHSEED keeps their output reproducible) imported a planted
    `json.py` the same way."""
    folder = planted_folder(tmp_path, "json", "hashlib", "py_compile")
    (folder / "venv").mkdir()
    for name in ("__init__.py", "__main__.py"):
        (folder / "venv" / name).write_text(PLANT, encoding="utf-8")
    monkeypatch.chdir(folder)
    engine_env.make_venv(tmp_path / "env", tmp_path / "env")
    assert (tmp_path / "env" / "pyvenv.cfg").is_file() and pwned(folder) == []
    source = tmp_path / "module.py"
    source.write_text("VALUE = {1, 2, 3}\n", encoding="utf-8")
    compiler = engine_env.Compiler()
    compiler.submit([(str(source), "/final/module.py")])
    assert list(compiler.results()) == [engine_env.bytecode_path(str(source))] and pwned(folder) == []
    assert sys.flags.isolated == 0  # the test itself runs from the planted folder unharmed: nothing imported it


def test_the_bytecode_worker_is_a_module_of_the_package_started_through_the_start_file(tmp_path: Path) -> None:
    """The worker was code in a string run with `python -c`; it is `engine/compile_worker.py`, started as the start
    file's `compile-worker` program (no -I, for PYTHONHASHSEED): a `json.py` planted beside the start file, beside
    the worker or in the caller's folder is never imported, and its output is reproducible."""
    package = Path(engine_env.__file__).resolve().parent.parent
    copy = tmp_path / "ort_bundle"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    folder = planted_folder(tmp_path, "json", "hashlib", "py_compile")
    for planted in (copy / "json.py", copy / "engine" / "json.py", copy / "engine" / "py_compile.py"):
        planted.write_text(PLANT, encoding="utf-8")
    source = tmp_path / "module.py"
    source.write_text("VALUE = {'a', 'b', 'c'}\n", encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0", "PYTHONNOUSERSITE": "1"}
    pycs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-s", "-B", str(copy / "__main__.py"), "compile-worker"], cwd=folder,
                              input=json.dumps([[str(source), "/final/module.py"]]),
                              capture_output=True, text=True, env=env, check=False)
        assert proc.returncode == 0, proc.stderr
        [[pyc, digest]] = json.loads(proc.stdout)
        assert pyc == engine_env.bytecode_path(str(source))
        pycs.append((digest, Path(pyc).read_bytes()))
    assert pycs[0] == pycs[1] and pwned(folder) == [] and pwned(copy) == [] and pwned(copy / "engine") == []
    assert not hasattr(engine_env, "COMPILE_WORKER")
