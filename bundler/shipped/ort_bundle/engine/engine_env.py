"""The install engine's environment: `python -m venv --without-pip`, the wheels installed by pypa's
`installer` from the bundle's pinned wheel (console scripts and launchers for the final folder),
bytecode compiled in parallel, deterministically, and the self-check run as the launcher runs it.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import warnings
import zipfile
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import IO, Dict, List, Mapping, Optional, Sequence, Tuple

from ..records import InstallPlan, RecordError, SelfcheckReport
from .engine_fs import EngineError, Log, native


def make_venv(stage_venv: Path, final_venv: Path) -> None:
    """`python -I -m venv --without-pip` on the target Python: no pip or setuptools the bundle did not pin. -I: a
    `venv/` another user planted in the folder the administrator started the install from must not run (issue 34 §3)."""
    proc = subprocess.run([sys.executable, "-I", "-m", "venv", "--without-pip", str(stage_venv)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if proc.returncode != 0:
        raise EngineError("install", f"{sys.executable} -m venv --without-pip failed ({proc.returncode}): {proc.stdout.strip()}")


def relocate_venv(stage_venv: Path, final_venv: Path, scripts: str) -> None:
    """pyvenv.cfg and the activate scripts name the folder they were made in: point them at the final one
    (before any wheel adds scripts, which the installer already writes for the final folder)."""
    old, new = os.fsencode(str(stage_venv)), os.fsencode(str(final_venv))
    candidates = [stage_venv / "pyvenv.cfg", *sorted((stage_venv.joinpath(*scripts.split("/"))).iterdir())]
    for path in candidates:
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if old in data and b"\0" not in data[:4096]:
            path.write_bytes(data.replace(old, new))


def _import_installer(wheel: Path):  # type: ignore[no-untyped-def]
    """pypa's installer, imported from the bundle's own (already hash-checked) wheel: never one imported before in
    this process (from another bundle's staging folder, since deleted, which its launchers are read from lazily)."""
    for name in [name for name in sys.modules if name == "installer" or name.startswith("installer.")]:
        del sys.modules[name]
    sys.path.insert(0, str(wheel))
    import installer
    import installer.destinations
    import installer.sources

    return installer


#: The package's start file: the bytecode workers run `compile-worker` through it (`compile_worker`).
START_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "__main__.py")


class Compiler:
    """Bytecode in parallel while the wheels unpack, deterministically: unchecked-hash pycs (no timestamps),
    compiled by worker processes (`compile_worker`, not -I: PYTHONHASHSEED=0, as set constants are marshalled in
    hash order), each naming the source by its final path. Returns the sha256 of every pyc it wrote, for the receipt."""

    CHUNK = 200

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2)
        self.futures: List[Future[List[Tuple[str, str]]]] = []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        self.env.update(PYTHONHASHSEED="0", PYTHONNOUSERSITE="1")

    def submit(self, pairs: Sequence[Tuple[str, str]]) -> None:
        for start in range(0, len(pairs), self.CHUNK):
            self.futures.append(self.pool.submit(self._run, list(pairs[start:start + self.CHUNK])))

    def _run(self, pairs: List[Tuple[str, str]]) -> List[Tuple[str, str]]:
        proc = subprocess.run([sys.executable, "-s", "-B", START_FILE, "compile-worker"], input=json.dumps(pairs),
                              capture_output=True, text=True, env=self.env, check=False)
        if proc.returncode != 0:
            raise EngineError("install", f"compiling bytecode failed: {proc.stderr.strip()[-500:]}")
        return [(pyc, digest) for pyc, digest in json.loads(proc.stdout)]

    def results(self) -> Dict[str, str]:
        try:
            return {os.path.normpath(pyc): digest for future in self.futures for pyc, digest in future.result()}
        finally:
            self.pool.shutdown()


def install_wheels(plan: InstallPlan, bundle: Path, stage_venv: Path, final_venv: Path, interpreter: str,
                   log: Log) -> Dict[str, str]:
    """Every wheel of the plan, without pip: scripts and launchers run `interpreter` (the final one), so
    every RECORD matches the files on disk. Wheels unpack in parallel and each one's modules are compiled
    as soon as it is in place. Returns {absolute path: sha256} of every file written (from the installer's
    own hashes and the compiler's), so the receipt need not read them again."""
    installer = _import_installer(bundle / plan.installer_wheel)
    venv = plan.venv
    site, final_site = str(native(stage_venv, venv.site_packages)), str(native(final_venv, venv.site_packages))
    written: List[Tuple[str, str]] = []
    modules: List[Tuple[str, str]] = []  # (staged source, final path) of every module written so far

    class Destination(installer.destinations.SchemeDictionaryDestination):  # type: ignore[misc, name-defined]
        sources: List[str]  # the staged modules of this distribution, whose bytecode its RECORD lists
        record: Optional[str] = None  # its RECORD, once written

        def finalize_installation(self, scheme, record_file_path, records):  # type: ignore[no-untyped-def]
            super().finalize_installation(scheme, record_file_path, records)
            self.record = os.path.normpath(os.path.join(self.scheme_dict[scheme], record_file_path))

        def write_to_fs(self, scheme, path, stream, is_executable):  # type: ignore[no-untyped-def]
            if scheme == "scripts" and path.endswith(".exe"):
                stream = io.BytesIO(_launcher_without_time(stream.read()))
            target = os.path.normpath(os.path.join(self.scheme_dict[scheme], path))
            # Wheels unpack in parallel: folders they share must not race in the installer's mkdir.
            os.makedirs(os.path.dirname(target), exist_ok=True)
            record = super().write_to_fs(scheme, path, stream, is_executable)
            digest = getattr(record, "hash_", None)  # the installer hashed it while writing
            if digest is not None and digest.name == "sha256":
                written.append((target, _hex_digest(digest.value)))
            if scheme in ("purelib", "platlib") and path.endswith(".py"):
                modules.append((target, os.path.join(final_site, os.path.relpath(target, site))))
                self.sources.append(target)
                if len(modules) >= Compiler.CHUNK:
                    hand_over(whole_chunks=True)
            return record

    destinations: List[Destination] = []

    def install_one(relative: str) -> None:
        name = Path(relative).name.split("-")[0]
        schemes = {"purelib": site, "platlib": site, "scripts": str(native(stage_venv, venv.scripts)),
                   "data": str(stage_venv), "headers": str(stage_venv / "include" / "site" / f"python{plan.python}" / name)}
        destination = Destination(schemes, interpreter=interpreter, script_kind=venv.script_kind)
        destination.sources = []
        destinations.append(destination)
        with installer.sources.WheelFile.open(str(bundle / relative)) as source:
            installer.install(source, destination, {"INSTALLER": b"ort-bundler\n"})

    compiler = Compiler()
    handing = threading.Lock()

    def hand_over(*, whole_chunks: bool = False) -> None:
        """The modules written so far to the compiler: sympy's thousand modules compile while numpy unpacks. While
        wheels unpack, whole chunks only: each chunk is a process, which costs a second under Wine."""
        with handing:
            compiler.submit(_take(modules, multiple=Compiler.CHUNK if whole_chunks else 1))

    notes: List[str] = []
    with warnings.catch_warnings(), ThreadPoolExecutor(max_workers=4) as pool:
        # What pypa installer warns about (a wheel's __pycache__ file it skips, as numpy's Windows wheel has) is
        # a note in the log in the engine's words, not a Python warning with a source path (issue 38 §8a).
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *_: notes.append(str(message))
        progress = WheelProgress(bundle, venv.wheels, log)
        running = {pool.submit(install_one, w): w for w in venv.wheels}
        for future in as_completed(running):
            relative = running[future]
            try:
                future.result()
            except Exception as exc:  # a broken wheel can fail in zipfile, installer or the file system
                compiler.pool.shutdown()
                raise EngineError("install", f"installing {relative} failed: {type(exc).__name__}: {exc}") from None
            hand_over()
            progress.done(relative)
    for note in sorted(set(notes)):
        log(f"note (pypa installer, not an error): {note}")
    hashes = dict(written)
    compiled = compiler.results()
    hashes.update(compiled)
    for destination in destinations:  # RECORD lists the bytecode, as pip's does: the receipt gets its new hash
        if destination.record is not None:
            hashes[destination.record] = list_bytecode(destination.record, destination.sources, compiled, site)
    log(f"installed {len(venv.wheels)} wheels with pypa installer into {final_venv}, bytecode compiled")
    return hashes


class WheelProgress:
    """One line per wheel as it is in place, with the bytes done so far: a GPU bundle's wheels take minutes to
    unpack, and a silent install (Intune, ConfigMgr) shows only its log, which must show that it moves."""

    def __init__(self, bundle: Path, wheels: Sequence[str], log: Log) -> None:
        self.sizes = {wheel: os.path.getsize(bundle / wheel) for wheel in wheels}
        self.total, self.bytes, self.count, self.log = sum(self.sizes.values()), 0, 0, log

    def done(self, wheel: str) -> None:
        self.count += 1
        self.bytes += self.sizes[wheel]
        self.log(f"installed wheel {self.count}/{len(self.sizes)} {Path(wheel).name} ({_megabytes(self.bytes)} of "
                 f"{_megabytes(self.total)} MB)")


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f}"


def bytecode_path(source: str) -> str:
    """Where the compile workers (no pycache prefix) put a module's bytecode: `importlib.util.cache_from_source`
    would answer from this process's own `sys.pycache_prefix`, which the engine's start script sets."""
    folder, name = os.path.split(source)
    return os.path.join(folder, "__pycache__", f"{os.path.splitext(name)[0]}.{sys.implementation.cache_tag}.pyc")


def list_bytecode(record: str, sources: Sequence[str], compiled: Mapping[str, str], site: str) -> str:
    """Add the bytecode compiled for a distribution's modules to its RECORD as pip lists it (`path,,`: no hash,
    no size), so `importlib.metadata` and an outside `pip uninstall` know every file; returns RECORD's new sha256."""
    pycs = sorted({pyc for pyc in map(bytecode_path, sources) if pyc in compiled})
    with open(record, encoding="utf-8", newline="") as stream:
        listed = {row[0] for row in csv.reader(stream) if row}
    rows = io.StringIO()
    writer = csv.writer(rows, delimiter=",", quotechar='"', lineterminator="\n")  # as pypa installer writes RECORD
    for path in (os.path.relpath(pyc, site).replace(os.sep, "/") for pyc in pycs):
        if path not in listed:
            writer.writerow([path, "", ""])
    with open(record, "a", encoding="utf-8", newline="") as stream:
        stream.write(rows.getvalue())
    with open(record, "rb") as stream:
        return hashlib.sha256(stream.read()).hexdigest()


def _launcher_without_time(data: bytes) -> bytes:
    """A Windows script launcher (launcher, shebang, zip of __main__.py) with its zip member dated 1980-01-01:
    pypa installer dates it now, so two installs of one bundle would differ in every launcher."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        [member] = archive.infolist()
        code = archive.read(member)
    rebuilt = io.BytesIO()
    with zipfile.ZipFile(rebuilt, "w") as archive:
        archive.writestr(zipfile.ZipInfo(member.filename, date_time=(1980, 1, 1, 0, 0, 0)), code)
    return data[:member.header_offset] + rebuilt.getvalue()


def compile_site_files(plan: InstallPlan, stage_venv: Path, final_venv: Path) -> Dict[str, str]:
    """Bytecode for the modules the plan puts into site-packages itself (the DLL-directory hook), so the
    first run of an installed interpreter writes nothing there that the receipt does not list."""
    site, final_site = native(stage_venv, plan.venv.site_packages), native(final_venv, plan.venv.site_packages)
    pairs = [(str(native(site, e.target)), str(native(final_site, e.target))) for e in plan.venv.site_packages_files
             if e.target.endswith(".py")]
    compiler = Compiler()
    compiler.submit(pairs)
    return compiler.results()


def _take(items: List[Tuple[str, str]], *, multiple: int = 1) -> List[Tuple[str, str]]:
    """The items so far, as many as a multiple of `multiple`, removed from `items` (the unpacking threads keep
    appending; one taker at a time)."""
    count = len(items) // multiple * multiple
    taken = items[:count]
    del items[:count]
    return taken


def _hex_digest(urlsafe_b64: str) -> str:
    import base64

    return base64.urlsafe_b64decode(urlsafe_b64 + "=" * (-len(urlsafe_b64) % 4)).hex()


def selfcheck_env(plan: InstallPlan, root: Path) -> Dict[str, str]:
    env = dict(os.environ)
    folders = [str(native(root, folder)) for folder in plan.dll_dirs]
    previous = env.get(plan.dll_path_variable)
    env[plan.dll_path_variable] = os.pathsep.join(folders + ([previous] if previous else []))
    env.update(PYTHONNOUSERSITE="1", PIP_NO_INDEX="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    return env


#: The self-check of a tiny model takes seconds; a hung one (a driver, a dialog) must not hold the install.
SELFCHECK_TIMEOUT = 900


def run_selfcheck(plan: InstallPlan, root: Path, log: Log, *,
                  cache_dir: Optional[str] = None) -> Tuple[int, Optional[SelfcheckReport]]:
    """The installed self-check, in `root`, as the launcher runs it; (exit code, its report). `cache_dir`: the
    cache folder the install records after the check (the MSI's CACHEDIR), so the check measures that one.

    Always isolated (-I: no PYTHONPATH, no user site, not the script's folder on sys.path) and without
    bytecode writes (-B): as an administrator or SYSTEM it must not import a module planted beside it."""
    python = str(native(root, plan.venv.dir + "/" + plan.venv.interpreter))
    script = root / "installer" / "ort_bundle" / "__main__.py"
    command = [python, "-I", "-B", str(script), "selfcheck", "--json"] if script.is_file() else \
        [python, "-I", "-B", "-c", "import onnxruntime; print('onnxruntime', onnxruntime.__version__)"]
    if cache_dir and script.is_file():
        command += ["--cache-dir", cache_dir]
    # Files, not pipes: a process the self-check starts in passing (Windows starts explorer.exe for the first
    # DXGI call of a session without a desktop) inherits the handles and would hold a pipe open for good.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            code = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=selfcheck_env(plan, root),
                                  timeout=SELFCHECK_TIMEOUT, check=False).returncode
        except subprocess.TimeoutExpired:
            raise EngineError("selfcheck", f"the self-check did not finish within {SELFCHECK_TIMEOUT} s") from None
        stdout, stderr = (_read_text(stream) for stream in (out, err))
    report = None
    if script.is_file():
        with contextlib.suppress(RecordError):
            report = SelfcheckReport.loads(stdout)
    if report is None:
        for line in (stdout + stderr).splitlines():
            log(f"self-check: {line}")
        return code, None
    for check in report.checks:
        log(f"self-check: {check.status.upper():4} {check.id}: {check.message}")
    for line in stderr.splitlines()[-20:]:
        log(f"self-check (stderr): {line}")
    return code, report


def _read_text(stream: IO[bytes]) -> str:
    stream.seek(0)
    return stream.read().decode("utf-8", "replace").replace("\r\n", "\n")


def reboot_explains(report: Optional[SelfcheckReport]) -> bool:
    """True only when every failed check is one a pending VC++ runtime update causes: onnxruntime's
    binding failing to load a DLL, or an msvcp140.dll older than the bundle needs. A model mismatch,
    a missing provider or anything else is never excused by a reboot."""
    if report is None or not report.failed():
        return False
    for check in report.failed():
        dll = check.id == "onnxruntime" and "DLL" in check.message
        runtime = check.id == "libraries" and "msvcp140" in check.message.lower() and "older than" in check.message
        if not (dll or runtime):
            return False
    return True
