"""Issue 27 §5 and a minor: the launchers name no bytecode folder; an upgrade logs what it drops.

For real, as root on Linux: the small bundle of test_install_sh is installed with --cache-dir in a
folder of mode 1777; another user (uid 65534) plants unchecked-hash bytecode where a bytecode prefix
in that folder would be looked up, for the standard library's `json` and for the installed package.
run.sh (the entry point and --self-check) must never run it (its marker file never appears) and the
normal run must still work.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from unit.shipped.test_install_sh import PY, make_bundle, run_sh

NOBODY = 65534
#: What the other user runs to write bytecode: a Python of the target's minor version they can run (the
#: tests' own may live in a folder only root can enter).
PLANTER_PYTHON = Path(f"/usr/bin/python{PY}")
PLANTER = """
import os, py_compile, sys
source, marker = sys.argv[1], sys.argv[2]
with open(source, "w") as fh:
    fh.write("open(%r, 'w').write('planted bytecode ran')\\n" % marker)
for pyc in sys.argv[3:]:
    os.makedirs(os.path.dirname(pyc), exist_ok=True)
    py_compile.compile(source, cfile=pyc, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
"""


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder like /tmp: mode 1777, reachable by every user (pytest's own temp folders are 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="ort-bundler-shared-", dir="/tmp"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="plants as another user: needs root on Linux")
@pytest.mark.skipif(not PLANTER_PYTHON.is_file(), reason=f"the other user needs a Python {PY} of the system's")
def test_bytecode_planted_by_another_user_in_a_shared_cache_folder_never_runs(
        tmp_path: Path, shared_folder: Path) -> None:
    bundle = make_bundle(tmp_path / "bundle" / "tiny-1.0-linux_x86_64")
    root = tmp_path / "root"
    cache = shared_folder / "cache"
    proc = run_sh(bundle / "install.sh", "--install-dir", str(root), "--log-path", str(tmp_path / "install.log"),
                  "--cache-dir", str(cache))
    assert proc.returncode == 0, proc.stderr
    python = root / "venv" / "bin" / "python"
    # Where a bytecode prefix in the cache folder would send the imports of the standard library's json and
    # of the installed package (asked of the installed Python itself, which writes nothing: -B).
    where = subprocess.run([str(python), "-B", "-X", f"pycache_prefix={cache}/pycache", "-c",
                            "import importlib.util as u, json, tinypkg; "
                            "print(u.cache_from_source(json.__file__)); print(u.cache_from_source(tinypkg.__file__))"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert all(p.startswith(f"{cache}/pycache/") for p in where), where
    marker = shared_folder / "MARKER"  # the planted code runs as whoever starts run.sh: root, here
    cache.mkdir(exist_ok=True)
    cache.chmod(0o1777)  # as the issue found it: the cache folder is one others can write
    planted = subprocess.run([str(PLANTER_PYTHON), "-I", "-c", PLANTER, str(shared_folder / "planted.py"), str(marker), *where],
                             user=NOBODY, group=NOBODY, extra_groups=[], capture_output=True, text=True)
    assert planted.returncode == 0, planted.stderr
    assert all(os.stat(p).st_uid == NOBODY for p in where)

    report = tmp_path / "report.json"
    run = run_sh(root / "run.sh", "one", env={"STANDIN_REPORT": str(report), "PYTHONPYCACHEPREFIX": str(cache / "pycache")})
    check = run_sh(root / "run.sh", "--self-check")
    assert not marker.exists(), "the bytecode another user planted in the cache folder ran"
    assert run.returncode == 0 and check.returncode == 0, run.stderr + check.stderr
    env = json.loads(report.read_text())["env"]
    # The cache folder others can write (1777) is shared on purpose: each user works in a private folder inside it.
    assert env["PYTHONPYCACHEPREFIX"] is None and env["TEMP"] == f"{cache}/user-{os.geteuid()}/tmp"
    assert subprocess.run(["sh", str(root / "run.sh"), "--verify"], capture_output=True, text=True).returncode == 0


def test_a_forced_reinstall_logs_every_file_and_folder_it_does_not_carry_over(tmp_path: Path) -> None:
    """Issue 27, minor: files added in the environment, folders included, and empty folders of the user are
    named in the log; a file of the user's outside the guarded folders is carried over as before."""
    bundle = make_bundle(tmp_path / "bundle" / "tiny-1.0-linux_x86_64")
    root = tmp_path / "root"
    log = tmp_path / "install.log"
    assert run_sh(bundle / "install.sh", "--install-dir", str(root), "--no-self-check").returncode == 0
    (root / "venv" / "added.py").write_text("planted = True\n")
    (root / "venv" / "mine" / "deeper").mkdir(parents=True)
    (root / "venv" / "stuff").mkdir()
    (root / "venv" / "stuff" / "file.txt").write_text("x")
    (root / "data" / "empty").mkdir(parents=True)
    (root / "notes.txt").write_text("the user's")
    proc = run_sh(bundle / "install.sh", "--install-dir", str(root), "--no-self-check", "--force", "--log-path", str(log))
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in log.read_text().splitlines() if "not carried over" in line]
    assert len(lines) == 2, lines
    assert lines[0].endswith("not carried over (only the bundle's files belong in the environment, DLL and code "
                             "folders): venv/added.py, venv/mine/, venv/mine/deeper/, venv/stuff/, venv/stuff/file.txt")
    assert lines[1].endswith("not carried over (empty folders that are not ours: only files are carried over): "
                             "data/, data/empty/")
    assert (root / "notes.txt").read_text() == "the user's" and not (root / "venv" / "added.py").exists()
