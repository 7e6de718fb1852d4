"""The install engine: carries out install-plan.json, writes the receipt, audits and uninstalls.

One program for Linux and Windows, shipped in every bundle as payload/installer/ortengine/ (started
through payload/installer/engine.py) and copied into every install as installer/. It runs with the
target's Python before any environment exists, so it uses the standard library only (Python 3.8+);
the wheels are installed with pypa's `installer`, imported from the pinned wheel the bundle ships.
install.sh and install.ps1 are thin front ends: they find the Python and do what must happen outside
it (on Windows: elevation, VC++ runtime, registry, Add/Remove Programs), then run this.

The install, in order: verify every bundle file against SHA256SUMS; check the target folder is ours
(a valid receipt naming this bundle) or empty; under a lock, clean what a killed run left; stage in a
fresh `mkdtemp` folder beside the target; create the environment without pip; install the wheels
with console scripts for the FINAL folder; compile bytecode in parallel; copy the plan's files; carry
over files that are not ours; write the receipt (every file with its sha256); run the self-check;
swap the stage in atomically (Linux: one renameat2 exchange); remove the old install. Any failure
before the swap removes the stage and leaves the previous install as it was.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from .records import (
    INSTALL_EXIT_CODES,
    PLAN_FILE,
    RECEIPT_FILE,
    SUMS_FILE,
    InstalledFile,
    InstallPlan,
    Receipt,
    RecordError,
    SelfcheckOutcome,
    SelfcheckReport,
    safe_relative,
)

WINDOWS = os.name == "nt"
STAGING = ".staging-"
PREVIOUS = ".previous-"
#: Exit codes of `verify`: every installed file matches its receipt, or something changed.
VERIFY_OK = 0
VERIFY_CHANGED = INSTALL_EXIT_CODES["integrity"]


class EngineError(Exception):
    """A failure with the installer exit code it maps to (a key of INSTALL_EXIT_CODES)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Log:
    """Timestamped lines to stderr and, when given, appended to the log file."""

    def __init__(self, path: Optional[Path]) -> None:
        self.path = path

    def __call__(self, message: str) -> None:
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {message}"
        print(line, file=sys.stderr, flush=True)
        if self.path is not None:
            with contextlib.suppress(OSError), open(self.path, "a", encoding="utf-8") as log:
                log.write(line + "\n")


@dataclass(frozen=True)
class Options:
    bundle: Path
    install_dir: Path
    force: bool = False
    self_check: bool = True
    cache_dir: Optional[str] = None
    dry_run: bool = False
    reboot_pending: bool = False  # Windows: VC_redist asked for a reboot before this run
    restrict_acl: bool = False  # Windows per-machine: Administrators/SYSTEM write, users read


#: Creates the environment: (staging venv folder, final venv folder). The default runs the target's
#: `python -m venv --without-pip`; the Wine tests pass the one stand-in (no Windows Python exists there).
MakeEnvironment = Callable[[Path, Path], None]


# ---------------------------------------------------------------- reading and verifying the bundle


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def entry_sha256(path: Path) -> str:
    """A file's sha256; a symbolic link (the venv's bin/python) is recorded by its target text."""
    if path.is_symlink():
        return hashlib.sha256(b"symlink:" + os.fsencode(os.readlink(path))).hexdigest()
    return file_sha256(path)


def load_plan(bundle: Path) -> InstallPlan:
    try:
        return InstallPlan.loads((bundle / PLAN_FILE).read_text(encoding="utf-8"), source=str(bundle / PLAN_FILE))
    except OSError as exc:
        raise EngineError("integrity", f"{bundle / PLAN_FILE} cannot be read ({exc.strerror}); extract the bundle again") from None
    except RecordError as exc:
        raise EngineError("integrity", str(exc)) from None


def read_sums(bundle: Path) -> Dict[str, str]:
    """SHA256SUMS as {path: hex}, every path checked to stay inside the bundle."""
    try:
        text = (bundle / SUMS_FILE).read_text(encoding="utf-8")
    except OSError:
        raise EngineError("integrity", f"{bundle / SUMS_FILE} is missing; the bundle is incomplete: extract it again") from None
    sums = {}
    for number, line in enumerate(text.splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            raise EngineError("integrity", f"{SUMS_FILE} line {number} is {line!r}, expected '<sha256>  <path>'")
        try:
            sums[safe_relative(name, what=f"{SUMS_FILE} line {number}")] = digest.lower()
        except RecordError as exc:
            raise EngineError("integrity", str(exc)) from None
    return sums


def verify_bundle(bundle: Path, plan: InstallPlan, log: Log) -> str:
    """Every file against SHA256SUMS, before anything changes; returns the bundle's identity (the
    sha256 of SHA256SUMS, which pins every other file)."""
    sums = read_sums(bundle)
    uncovered = sorted({path for path in plan.inputs() if path not in sums})
    if uncovered:
        raise EngineError("integrity", f"{SUMS_FILE} does not cover {', '.join(uncovered)}, which {PLAN_FILE} uses")
    with ThreadPoolExecutor(max_workers=4) as pool:
        actual = dict(zip(sums, pool.map(lambda rel: _bundle_file_sha256(bundle, rel), sums)))
    failed = [f"{rel}: FAILED ({'missing' if actual[rel] is None else 'sha256 ' + str(actual[rel])}, "
              f"expected {sums[rel]})" for rel in sorted(sums) if actual[rel] != sums[rel]]
    if failed:
        more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
        raise EngineError("integrity", f"bundle files do not match {SUMS_FILE}: {'; '.join(failed[:5])}{more}; "
                                       f"extract the bundle again from its zip")
    log(f"verified {len(sums)} files against {SUMS_FILE}")
    return file_sha256(bundle / SUMS_FILE)


def _bundle_file_sha256(bundle: Path, relative: str) -> Optional[str]:
    path = bundle / relative
    if path.is_symlink() or not path.is_file():
        return None
    return file_sha256(path)


# ---------------------------------------------------------------- the target folder


def inside(root: Path, relative: str, *, what: str) -> Path:
    """`root / relative` for a checked relative path, refused when a link on the way leaves `root`."""
    path = root.joinpath(*safe_relative(relative, what=what).split("/"))
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(path.parent)]) != real_root:
        raise EngineError("usage", f"{what} {relative} leads outside {root} through a link; nothing was changed")
    return path


def read_receipt(root: Path) -> Optional[Receipt]:
    """The receipt in `root`, None when there is none; a receipt that is not ours is a usage error."""
    path = root / RECEIPT_FILE
    if not os.path.lexists(path):
        return None
    if path.is_symlink() or not path.is_file():
        raise EngineError("usage", f"{path} is not a regular file; this folder was not made by this installer")
    try:
        return Receipt.loads(path.read_text(encoding="utf-8"), source=str(path))
    except (RecordError, UnicodeDecodeError) as exc:
        raise EngineError("usage", f"{root} holds a receipt.json this installer did not write ({exc}); nothing was "
                                   f"changed: choose another folder or remove it yourself") from None


def check_target(target: Path, plan: InstallPlan) -> Optional[Receipt]:
    """The receipt of our earlier install in `target`, None for a missing or empty folder; anything
    else (a link, a file, a foreign or broken receipt, a folder of someone else's files) is refused."""
    if target.is_symlink():
        raise EngineError("usage", f"{target} is a symbolic link; install into a real folder (nothing was changed)")
    if not target.exists():
        return None
    if not target.is_dir():
        raise EngineError("usage", f"{target} exists and is not a folder")
    receipt = read_receipt(target)
    if receipt is None:
        if any(target.iterdir()):
            raise EngineError("usage", f"{target} exists, is not empty and holds no receipt.json; choose another folder")
        return None
    if receipt.name != plan.name:
        raise EngineError("usage", f"{target} holds {receipt.install_id}, not an installation of {plan.name}; "
                                   f"nothing was changed: choose another folder")
    return receipt


@contextlib.contextmanager
def target_lock(target: Path) -> Iterator[None]:
    """One run per target at a time; holding it proves every staging/previous leftover is dead.

    POSIX: flock on the parent folder (no lock file to leave behind). Windows: a byte lock on
    `.<leaf>.lock` in the parent, removed afterwards when no one else holds it.
    """
    parent = target.parent
    if WINDOWS:
        import msvcrt

        lock_path = parent / f".{target.name}.lock"
        handle = open(lock_path, "a+b")
        try:
            try:
                msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
            except OSError:
                raise EngineError("retry", f"another installation into {target} is running; retry when it has finished") from None
            yield
        finally:
            handle.close()
            with contextlib.suppress(OSError):
                lock_path.unlink()
        return
    import fcntl

    fd = os.open(parent, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EngineError("retry", f"another installation into {target} is running; retry when it has finished") from None
        yield
    finally:
        os.close(fd)


def leftovers(target: Path) -> Tuple[List[Path], List[Path]]:
    """(staging, previous) folders a run into `target` made and did not remove."""
    prefix = f".{target.name}"
    names = sorted(os.listdir(target.parent)) if target.parent.is_dir() else []
    staging = [target.parent / n for n in names if n.startswith(prefix + STAGING)]
    previous = [target.parent / n for n in names if n.startswith(prefix + PREVIOUS)]
    return staging, previous


def remove_tree(path: Path) -> None:
    """Remove a folder we made, never following a link out of it (a link itself is just unlinked)."""
    if path.is_symlink() or not path.is_dir():
        path.unlink()
    else:
        shutil.rmtree(path)


def recover(target: Path, log: Log) -> None:
    """Under the lock: finish or undo what a killed run left. A missing target with a previous-*
    folder means a kill between the two renames of the Windows swap: that folder is the install."""
    staging, previous = leftovers(target)
    if previous and not os.path.lexists(target):
        os.rename(previous[-1], target)
        log(f"restored the previous installation {target} that an interrupted run had moved aside")
        previous = previous[:-1]
    for path in staging + previous:
        remove_tree(path)
        log(f"removed {path}, left by an interrupted run")


# ---------------------------------------------------------------- building the stage


def make_venv(stage_venv: Path, final_venv: Path) -> None:
    """`python -m venv --without-pip` on the target Python: no pip or setuptools the bundle did not pin."""
    proc = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(stage_venv)],
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


def native(root: Path, relative: str) -> Path:
    return root.joinpath(*relative.split("/"))


def _import_installer(wheel: Path):  # type: ignore[no-untyped-def]
    """pypa's installer, imported from the bundle's own (already hash-checked) wheel."""
    sys.path.insert(0, str(wheel))
    import installer
    import installer.destinations
    import installer.sources

    return installer


#: Run by each bytecode worker: compile the (source, name shown in tracebacks) pairs it reads from stdin,
#: print [pyc, sha256] of each. A file that does not compile stays source-only, as pip leaves it.
COMPILE_WORKER = """
import hashlib, json, py_compile, sys
done = []
for source, display in json.load(sys.stdin):
    try:
        pyc = py_compile.compile(source, dfile=display, doraise=True,
                                 invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    except (py_compile.PyCompileError, SyntaxError, ValueError):
        continue
    with open(pyc, "rb") as f:
        done.append([pyc, hashlib.sha256(f.read()).hexdigest()])
json.dump(done, sys.stdout)
"""


class Compiler:
    """Bytecode in parallel while the wheels unpack, deterministically: unchecked-hash pycs (no timestamps),
    compiled by worker processes with PYTHONHASHSEED=0 (set constants are marshalled in hash order), each
    naming the source by its final path. Returns the sha256 of every pyc it wrote, for the receipt."""

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
        proc = subprocess.run([sys.executable, "-s", "-B", "-c", COMPILE_WORKER], input=json.dumps(pairs),
                              capture_output=True, text=True, env=self.env, check=False)
        if proc.returncode != 0:
            raise EngineError("install", f"compiling bytecode failed: {proc.stderr.strip()[-500:]}")
        return [(pyc, digest) for pyc, digest in json.loads(proc.stdout)]

    def results(self) -> Dict[str, str]:
        try:
            return {os.path.normpath(pyc): digest for future in self.futures for pyc, digest in future.result()}
        finally:
            self.pool.shutdown()


def install_wheels(plan: InstallPlan, bundle: Path, stage_venv: Path, final_venv: Path, log: Log) -> Dict[str, str]:
    """Every wheel of the plan, without pip: scripts and launchers name the final interpreter, so every
    RECORD matches the files on disk. Wheels unpack in parallel and each one's modules are compiled as
    soon as it is in place. Returns {absolute path: sha256} of every file written (from the installer's
    own hashes and the compiler's), so the receipt need not read them again."""
    installer = _import_installer(bundle / plan.installer_wheel)
    venv = plan.venv
    interpreter = str(native(final_venv, venv.interpreter))
    site, final_site = str(native(stage_venv, venv.site_packages)), str(native(final_venv, venv.site_packages))
    written: List[Tuple[str, str]] = []
    modules: List[Tuple[str, str]] = []  # (staged source, final path) of every module written so far

    class Destination(installer.destinations.SchemeDictionaryDestination):  # type: ignore[misc, name-defined]
        def write_to_fs(self, scheme, path, stream, is_executable):  # type: ignore[no-untyped-def]
            target = os.path.normpath(os.path.join(self.scheme_dict[scheme], path))
            # Wheels unpack in parallel: folders they share must not race in the installer's mkdir.
            os.makedirs(os.path.dirname(target), exist_ok=True)
            record = super().write_to_fs(scheme, path, stream, is_executable)
            digest = getattr(record, "hash_", None)  # the installer hashed it while writing
            if digest is not None and digest.name == "sha256":
                written.append((target, _hex_digest(digest.value)))
            if scheme in ("purelib", "platlib") and path.endswith(".py"):
                modules.append((target, os.path.join(final_site, os.path.relpath(target, site))))
            return record

    def install_one(relative: str) -> None:
        name = Path(relative).name.split("-")[0]
        schemes = {"purelib": site, "platlib": site, "scripts": str(native(stage_venv, venv.scripts)),
                   "data": str(stage_venv), "headers": str(stage_venv / "include" / "site" / f"python{plan.python}" / name)}
        destination = Destination(schemes, interpreter=interpreter, script_kind=venv.script_kind)
        with installer.sources.WheelFile.open(str(bundle / relative)) as source:
            installer.install(source, destination, {"INSTALLER": b"ort-bundler\n"})

    compiler = Compiler()
    with ThreadPoolExecutor(max_workers=4) as pool:
        for relative, future in [(w, pool.submit(install_one, w)) for w in venv.wheels]:
            try:
                future.result()
            except Exception as exc:  # a broken wheel can fail in zipfile, installer or the file system
                compiler.pool.shutdown()
                raise EngineError("install", f"installing {relative} failed: {type(exc).__name__}: {exc}") from None
            compiler.submit(_take(modules))
    hashes = dict(written)
    hashes.update(compiler.results())
    log(f"installed {len(venv.wheels)} wheels with pypa installer into {final_venv}, bytecode compiled")
    return hashes


def _take(items: List[Tuple[str, str]]) -> List[Tuple[str, str]]:
    """Everything in `items` so far, removed from it (the unpacking threads keep appending)."""
    taken = items[:len(items)]
    del items[:len(taken)]
    return taken


def _hex_digest(urlsafe_b64: str) -> str:
    import base64

    return base64.urlsafe_b64decode(urlsafe_b64 + "=" * (-len(urlsafe_b64) % 4)).hex()


def copy_entries(entries: Sequence[Tuple[str, str]], source_root: Path, dest_root: Path) -> None:
    for source_rel, target_rel in entries:
        source = inside(source_root, source_rel, what=f"{PLAN_FILE} 'from'")
        target = inside(dest_root, target_rel, what=f"{PLAN_FILE} 'to'")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        if not WINDOWS:
            os.chmod(target, 0o755 if target_rel.endswith(".sh") else 0o644)


def place_files(plan: InstallPlan, options: Options, stage: Path, stage_venv: Path) -> None:
    copy_entries([(e.source, e.target) for e in plan.copy], options.bundle, stage)
    copy_entries([(e.source, e.target) for e in plan.venv.site_packages_files], options.bundle,
                 native(stage_venv, plan.venv.site_packages))
    shutil.copyfile(options.bundle / PLAN_FILE, stage / PLAN_FILE)
    if options.cache_dir:
        (stage / "cache_dir.txt").write_text(options.cache_dir + "\n", encoding="utf-8")


def carry_over(previous: Optional[Receipt], target: Path, stage: Path, plan: InstallPlan) -> Tuple[str, ...]:
    """Files in the old install that are not ours (user data, a cache folder) are linked into the
    stage, so they survive the swap; the originals stay in place until the swap has happened."""
    if previous is None:
        return ()
    ours = {entry.path for entry in previous.files} | {RECEIPT_FILE}
    kept = []
    for relative in walk(target):
        if relative in ours or (relative.startswith(plan.venv.dir + "/") and "/__pycache__/" in relative):
            continue
        destination = native(stage, relative)
        if os.path.lexists(destination):
            continue  # the new install has its own file there
        destination.parent.mkdir(parents=True, exist_ok=True)
        source = native(target, relative)
        try:
            os.link(source, destination, follow_symlinks=False)
        except OSError:
            shutil.copy2(source, destination, follow_symlinks=False)
        kept.append(relative)
    return tuple(sorted(kept))


def walk(root: Path) -> List[str]:
    """Every file and link below `root`, '/'-separated and sorted; links are never followed."""
    found = []
    for folder, dirs, files in os.walk(root):
        base = Path(folder).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        found += [prefix + name for name in files]
        found += [prefix + name for name in dirs if os.path.islink(os.path.join(folder, name))]
    return sorted(found)


def walk_folders(root: Path) -> Tuple[str, ...]:
    """Every folder below `root` (not through links), '/'-separated and sorted."""
    found = []
    for folder, dirs, _ in os.walk(root):
        base = Path(folder).relative_to(root).as_posix()
        found += [("" if base == "." else base + "/") + name for name in dirs
                  if not os.path.islink(os.path.join(folder, name))]
    return tuple(sorted(found))


def hash_tree(root: Path, skip: Sequence[str], known: Mapping[str, str]) -> Tuple[InstalledFile, ...]:
    """Every file below `root` with its sha256; `known` ({absolute path: sha256} of what this run wrote
    itself and never changed since) spares reading those again."""
    paths = [rel for rel in walk(root) if rel not in set(skip)]

    def digest(rel: str) -> str:
        path = native(root, rel)
        return known.get(os.path.normpath(str(path))) or entry_sha256(path)

    with ThreadPoolExecutor(max_workers=4) as pool:
        digests = list(pool.map(digest, paths))
    return tuple(InstalledFile(path=rel, sha256=value) for rel, value in zip(paths, digests))


def restrict_acl(stage: Path) -> None:
    """A folder an administrator creates under C:\\ inherits "Authenticated Users: Modify": keep write
    access for Administrators and SYSTEM, read and run for users, before anything is copied in."""
    proc = subprocess.run(["icacls.exe", str(stage), "/inheritance:r", "/grant:r", "*S-1-5-32-544:(OI)(CI)F",
                           "*S-1-5-18:(OI)(CI)F", "*S-1-5-32-545:(OI)(CI)RX"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if proc.returncode != 0:
        raise EngineError("install", f"icacls could not restrict write access to {stage}: {proc.stdout.strip()}")


# ---------------------------------------------------------------- the self-check


def selfcheck_env(plan: InstallPlan, root: Path) -> Dict[str, str]:
    env = dict(os.environ)
    folders = [str(native(root, folder)) for folder in plan.dll_dirs]
    previous = env.get(plan.dll_path_variable)
    env[plan.dll_path_variable] = os.pathsep.join(folders + ([previous] if previous else []))
    env.update(PYTHONNOUSERSITE="1", PIP_NO_INDEX="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    return env


def run_selfcheck(plan: InstallPlan, root: Path, log: Log) -> Tuple[int, Optional[SelfcheckReport]]:
    """The installed self-check, in `root`, as the launcher runs it; (exit code, its report)."""
    python = str(native(root, plan.venv.dir + "/" + plan.venv.interpreter))
    script = root / "selfcheck" / "selfcheck.py"
    command = [python, str(script), "--json"] if script.is_file() else \
        [python, "-c", "import onnxruntime; print('onnxruntime', onnxruntime.__version__)"]
    proc = subprocess.run(command, capture_output=True, text=True,
                          env=selfcheck_env(plan, root), check=False)
    for line in (proc.stdout + proc.stderr).splitlines()[-40:]:
        log(f"self-check: {line}")
    report = None
    if script.is_file():
        with contextlib.suppress(RecordError):
            report = SelfcheckReport.loads(proc.stdout)
    return proc.returncode, report


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


def selfcheck_outcome(plan: InstallPlan, options: Options, stage: Path, log: Log) -> SelfcheckOutcome:
    if not options.self_check:
        return SelfcheckOutcome(ran=False)
    log("running the self-check in the staged installation")
    code, report = run_selfcheck(plan, stage, log)
    failed = tuple(check.id for check in report.failed()) if report else ()
    outcome = SelfcheckOutcome(ran=True, exit_code=code, passed=code == 0, failed_checks=failed)
    if code == 0:
        return outcome
    if options.reboot_pending and reboot_explains(report):
        log(f"warning: the self-check failed ({', '.join(failed)}) in a way the pending VC++ runtime update "
            f"explains; it runs again after the reboot")
        return replace(outcome, deferred_until_reboot=True)
    detail = f" (failed: {', '.join(failed)})" if failed else ""
    raise EngineError("selfcheck", f"the self-check failed with exit code {code}{detail}; the previous installation "
                                   f"is untouched")


# ---------------------------------------------------------------- swap


def _exchange(a: Path, b: Path) -> bool:
    """Linux renameat2(RENAME_EXCHANGE): both names stay valid at every instant. False when unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    function = getattr(libc, "renameat2", None)
    if function is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if function(at_fdcwd, os.fsencode(str(a)), at_fdcwd, os.fsencode(str(b)), rename_exchange) == 0:
        return True
    return False


def swap(stage: Path, target: Path) -> Optional[Path]:
    """Put the stage at `target`; returns the folder now holding the old install (to delete), if any."""
    if not os.path.lexists(target):
        os.rename(stage, target)
        return None
    if _exchange(stage, target):
        return stage
    previous = target.parent / f".{target.name}{PREVIOUS}{os.urandom(6).hex()}"
    os.rename(target, previous)  # fails, never follows, if something already has that name
    try:
        os.rename(stage, target)
    except OSError as exc:
        os.rename(previous, target)
        raise EngineError("install", f"cannot move the new installation into {target}: {exc} (is a program from it "
                                     f"still running?)") from None
    return previous


# ---------------------------------------------------------------- install


def check_python(plan: InstallPlan) -> None:
    found = "%d.%d" % sys.version_info[:2]
    if found != plan.python:
        raise EngineError("prerequisite", f"{sys.executable} is Python {found} but this bundle's wheels need Python "
                                          f"{plan.python}; pass the path of a Python {plan.python}")


def check_space(plan: InstallPlan, bundle: Path, target: Path) -> None:
    needed = sum((bundle / w).stat().st_size for w in plan.venv.wheels) * 4
    needed += sum((bundle / e.source).stat().st_size for e in plan.copy) + (100 << 20)
    probe = target.parent
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(str(probe)).free
    if free < needed:
        raise EngineError("prerequisite", f"only {free >> 20} MB free on the file system of {probe}; the install needs "
                                          f"{needed >> 20} MB")


def install(options: Options, log: Log, *, make_environment: MakeEnvironment = make_venv) -> str:
    """The whole install; returns 'installed', 'unchanged' or 'deferred' (self-check after the reboot)."""
    plan = load_plan(options.bundle)
    bundle_sha256 = verify_bundle(options.bundle, plan, log)
    if make_environment is make_venv:
        check_python(plan)
    target = options.install_dir
    previous = check_target(target, plan)
    if previous is not None and previous.bundle_sha256 == bundle_sha256 and not options.force:
        log(f"{plan.install_id} from this bundle is already installed in {target}; nothing to do (--force reinstalls)")
        return "unchanged"
    check_space(plan, options.bundle, target)
    if options.dry_run:
        log(f"dry run: would install {plan.install_id} into {target}"
            + (f", replacing {previous.install_id} and keeping files that are not ours" if previous else ""))
        log("dry run: nothing was changed")
        return "unchanged"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EngineError("install", f"cannot create {target.parent}: {exc.strerror}") from None
    with target_lock(target):
        recover(target, log)
        previous = check_target(target, plan)  # what recover() restored, if anything
        return _install_locked(plan, options, log, previous, bundle_sha256, make_environment)


def _install_locked(plan: InstallPlan, options: Options, log: Log, previous: Optional[Receipt], bundle_sha256: str,
                    make_environment: MakeEnvironment) -> str:
    target = options.install_dir
    stage = Path(tempfile.mkdtemp(prefix=f".{target.name}{STAGING}", dir=str(target.parent)))
    try:
        receipt = _build_stage(plan, options, log, previous, bundle_sha256, stage, make_environment)
        old = swap(stage, target)
    except BaseException:
        with contextlib.suppress(OSError):
            remove_tree(stage)
        raise
    if old is not None:
        try:
            remove_tree(old)
        except OSError as exc:
            log(f"warning: could not remove the previous installation {old}: {exc}; the next run removes it")
    log(f"installed {plan.install_id} into {target} (receipt: {target / RECEIPT_FILE})")
    return "deferred" if receipt.selfcheck.deferred_until_reboot else "installed"


def _build_stage(plan: InstallPlan, options: Options, log: Log, previous: Optional[Receipt], bundle_sha256: str,
                 stage: Path, make_environment: MakeEnvironment) -> Receipt:
    target = options.install_dir
    if not WINDOWS:
        os.chmod(stage, 0o755)
    if options.restrict_acl:
        restrict_acl(stage)
    stage_venv, final_venv = native(stage, plan.venv.dir), native(target, plan.venv.dir)
    log(f"creating the environment in {stage_venv}")
    make_environment(stage_venv, final_venv)
    relocate_venv(stage_venv, final_venv, plan.venv.scripts)
    known = install_wheels(plan, options.bundle, stage_venv, final_venv, log)
    place_files(plan, options, stage, stage_venv)
    kept = carry_over(previous, target, stage, plan)
    receipt = Receipt(install_id=plan.install_id, name=plan.name, version=plan.version, platform=plan.platform,
                      bundle_sha256=bundle_sha256, installed_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      install_dir=str(target), python_executable=sys.executable,
                      python_version="%d.%d.%d" % sys.version_info[:3], selfcheck=SelfcheckOutcome(ran=False),
                      reboot_required=options.reboot_pending, files=hash_tree(stage, (RECEIPT_FILE, *kept), known),
                      folders=walk_folders(stage), kept=kept)
    write_receipt(stage, receipt)
    receipt = replace(receipt, selfcheck=selfcheck_outcome(plan, options, stage, log))
    write_receipt(stage, receipt)
    return receipt


def write_receipt(root: Path, receipt: Receipt) -> None:
    """Written beside and renamed over, so a receipt is always whole."""
    temporary = root / f".{RECEIPT_FILE}.tmp"
    temporary.write_text(receipt.dumps(), encoding="utf-8")
    os.replace(temporary, root / RECEIPT_FILE)


# ---------------------------------------------------------------- audit and uninstall


@dataclass(frozen=True)
class Audit:
    changed: Tuple[str, ...]
    missing: Tuple[str, ...]
    extra: Tuple[str, ...]  # in the environment: could change what runs, so they fail the audit
    not_ours: Tuple[str, ...]  # elsewhere: user files and caches, reported only

    @property
    def ok(self) -> bool:
        return not (self.changed or self.missing or self.extra)


def audit(root: Path) -> Audit:
    """Every installed file against the receipt: changed, missing, and files nobody installed."""
    receipt = read_receipt(root)
    if receipt is None:
        raise EngineError("usage", f"{root} holds no {RECEIPT_FILE}; it is not an installation")
    listed = {entry.path: entry.sha256 for entry in receipt.files}
    present = set(walk(root)) - {RECEIPT_FILE}
    changed = tuple(rel for rel in sorted(present & set(listed)) if entry_sha256(native(root, rel)) != listed[rel])
    guarded = _guarded_folders(root)
    unlisted = sorted(present - set(listed))
    extra = tuple(rel for rel in unlisted if any(rel.startswith(folder + "/") for folder in guarded)
                  and rel not in receipt.kept)
    not_ours = tuple(rel for rel in unlisted if rel not in extra)
    return Audit(changed=changed, missing=tuple(sorted(set(listed) - present)), extra=extra, not_ours=not_ours)


def _guarded_folders(root: Path) -> Tuple[str, ...]:
    """The environment and the DLL folders, from the installed copy of the plan."""
    try:
        plan = InstallPlan.loads((root / PLAN_FILE).read_text(encoding="utf-8"), source=str(root / PLAN_FILE))
    except (OSError, RecordError):
        return ("venv",)
    return (plan.venv.dir, *plan.dll_dirs)


def uninstall(install_dir: Path, log: Log, *, name: Optional[str], dry_run: bool) -> List[str]:
    """Remove exactly what the receipt lists, then folders that end up empty; files not ours stay."""
    if install_dir.is_symlink():
        raise EngineError("usage", f"{install_dir} is a symbolic link; nothing was changed")
    receipt = read_receipt(install_dir) if install_dir.is_dir() else None
    if receipt is None:
        log(f"nothing to uninstall: {install_dir} holds no installation")
        return []
    if name is not None and receipt.name != name:
        raise EngineError("usage", f"{install_dir} holds {receipt.install_id}, not {name}; nothing was changed")
    paths = [(entry.path, inside(install_dir, entry.path, what=RECEIPT_FILE)) for entry in receipt.files]
    present = [(rel, path) for rel, path in paths if os.path.lexists(path)]
    if dry_run:
        return [rel for rel, _ in present]
    with target_lock(install_dir):
        for _, path in present:
            path.unlink()
        folders = [inside(install_dir, rel + "/x", what=RECEIPT_FILE).parent for rel in receipt.folders]
        _remove_empty_folders([path for _, path in paths] + [folder / "x" for folder in folders], install_dir)
        (install_dir / RECEIPT_FILE).unlink()
        with contextlib.suppress(OSError):
            install_dir.rmdir()
    return [rel for rel, _ in present] + [RECEIPT_FILE]


def _remove_empty_folders(paths: Sequence[Path], root: Path) -> None:
    folders = {parent for path in paths for parent in path.parents if root in parent.parents}
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        if folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir()):
            folder.rmdir()


def record_after_reboot(root: Path, log: Log) -> int:
    """The deferred self-check, run once after the reboot (RunOnce): its result goes into the receipt."""
    receipt = read_receipt(root)
    if receipt is None:
        raise EngineError("usage", f"{root} holds no {RECEIPT_FILE}")
    plan = InstallPlan.loads((root / PLAN_FILE).read_text(encoding="utf-8"), source=str(root / PLAN_FILE))
    code, _ = run_selfcheck(plan, root, log)
    outcome = replace(receipt.selfcheck, after_reboot=code == 0)
    write_receipt(root, replace(receipt, selfcheck=outcome))
    log(f"the self-check after the reboot {'passed' if code == 0 else f'failed with exit code {code}'}")
    return 0 if code == 0 else INSTALL_EXIT_CODES["selfcheck"]


# ---------------------------------------------------------------- command line


def parser() -> argparse.ArgumentParser:
    main_parser = argparse.ArgumentParser(prog="engine.py", description=__doc__.splitlines()[0])
    sub = main_parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("install", help="install the bundle")
    run.add_argument("--bundle", type=Path, required=True)
    run.add_argument("--install-dir", type=Path, required=True)
    run.add_argument("--cache-dir")
    run.add_argument("--log-file", type=Path)
    for flag in ("--force", "--no-self-check", "--dry-run", "--reboot-pending", "--restrict-acl"):
        run.add_argument(flag, action="store_true")
    remove = sub.add_parser("uninstall", help="remove what the receipt lists")
    remove.add_argument("--install-dir", type=Path, required=True)
    remove.add_argument("--bundle", type=Path, help="only remove an installation of this bundle")
    remove.add_argument("--log-file", type=Path)
    remove.add_argument("--dry-run", action="store_true")
    verify = sub.add_parser("verify", help=f"audit every installed file against the receipt (exit {VERIFY_OK} or "
                                           f"{VERIFY_CHANGED})")
    verify.add_argument("--root", type=Path, required=True)
    verify.add_argument("--json", action="store_true")
    after = sub.add_parser("after-reboot", help="run the deferred self-check and record it in the receipt")
    after.add_argument("--root", type=Path, required=True)
    after.add_argument("--log-file", type=Path)
    return main_parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Exit codes are INSTALL_EXIT_CODES; `verify` exits 0 or 11. Errors are one line on stderr."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["verify"] and "--verify" in args_list:
        args_list.remove("--verify")  # run.sh/run.cmd pass their own arguments through, --verify first
    try:
        args = parser().parse_args(args_list)
    except SystemExit as exc:
        return 0 if exc.code == 0 else INSTALL_EXIT_CODES["usage"]
    log = Log(getattr(args, "log_file", None))
    try:
        return _dispatch(args, log)
    except EngineError as exc:
        log(f"ERROR: {exc}")
        code = INSTALL_EXIT_CODES[exc.code]
        return INSTALL_EXIT_CODES["install"] if code > 255 and not WINDOWS else code
    except OSError as exc:
        log(f"ERROR: {exc.filename or ''}: {exc.strerror or exc}; nothing was changed in the installation")
        return INSTALL_EXIT_CODES["install"]
    except Exception as exc:  # a defect of this program must still end in a documented code, with its reason
        log(f"ERROR: the install engine failed unexpectedly: {type(exc).__name__}: {exc}")
        return INSTALL_EXIT_CODES["install"]


def _dispatch(args: argparse.Namespace, log: Log) -> int:
    folder = str(getattr(args, "install_dir", None) or getattr(args, "root", ""))
    if any(ord(c) < 0x20 or c == "\x7f" for c in folder):
        raise EngineError("usage", f"the install folder {folder!r} contains a line break or control character; "
                                   f"choose a plain path")
    if args.command == "install":
        options = Options(bundle=args.bundle.resolve(), install_dir=Path(os.path.abspath(args.install_dir)),
                          force=args.force, self_check=not args.no_self_check, cache_dir=args.cache_dir,
                          dry_run=args.dry_run, reboot_pending=args.reboot_pending, restrict_acl=args.restrict_acl)
        outcome = install(options, log)
        print(outcome)
        return INSTALL_EXIT_CODES["reboot"] if outcome == "deferred" else 0
    if args.command == "uninstall":
        name = load_plan(args.bundle.resolve()).name if args.bundle else None
        removed = uninstall(Path(os.path.abspath(args.install_dir)), log, name=name, dry_run=args.dry_run)
        verb = "would remove" if args.dry_run else "removed"
        if removed:
            log(f"{verb} from {args.install_dir}: {len(removed)} files")
        if args.dry_run:
            log("dry run: nothing was changed")
        return 0
    if args.command == "after-reboot":
        return record_after_reboot(Path(os.path.abspath(args.root)), log)
    return _verify(Path(os.path.abspath(args.root)), as_json=args.json)


def _verify(root: Path, *, as_json: bool) -> int:
    result = audit(root)
    if as_json:
        print(json.dumps({"ok": result.ok, "changed": list(result.changed), "missing": list(result.missing),
                          "extra": list(result.extra), "not_ours": list(result.not_ours)}, indent=2))
    else:
        for label, items in (("CHANGED", result.changed), ("MISSING", result.missing), ("EXTRA", result.extra),
                             ("not ours", result.not_ours)):
            for item in items:
                print(f"{label:8} {item}")
        print(f"Result: {'OK' if result.ok else 'FAILED'} ({len(result.changed)} changed, {len(result.missing)} "
              f"missing, {len(result.extra)} extra in the environment, {len(result.not_ours)} not installed by us)")
    return VERIFY_OK if result.ok else VERIFY_CHANGED


if __name__ == "__main__":
    sys.exit(main())
