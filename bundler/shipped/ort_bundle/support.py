"""`run --support-bundle`: one zip for whoever supports this installation.

    <install>/venv/bin/python -m ort_bundle.support [--root DIR] [--install-log FILE ...]

It holds the self-check report (JSON), receipt.json, bundle.json, the install logs, tuning.json, the
latest profiling traces, the loaded modules and libraries with their versions and paths, the relevant
environment variables (values that look like secrets removed), and OS, CPU and GPU facts; `index.json`
lists every member with the file it came from and everything that could not be collected, and why.
Only files of this installation are read: its own folder, its cache folder's profiles/, the install
log receipt.json records (if it is a regular file of the receipt's owner) and the files given. Each item is
collected on its own, so a broken installation still yields a bundle that says what is broken. The zip
is written beside its final name and renamed, in <cache>/support/. Standard library only (onnxruntime
and numpy are imported to list what they load), Python 3.8+.
Exit codes: 0 written, 10 usage, 13 the zip cannot be written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from .machine import cores, cpu_flags, cpu_name, gpus
from .sessions import cache_dir, install_root, profile_dir
from .tuning_file import TUNING_FILE

EXIT_OK, EXIT_USAGE, EXIT_WRITE = 0, 10, 13
INDEX_FORMAT = 1
ROOT_FILES = ("receipt.json", "bundle.json", TUNING_FILE)
MAX_TRACES = 5
MAX_FILE_BYTES = 64 << 20  # a trace or log beyond this is listed as skipped, not zipped
SELFCHECK_TIMEOUT = 900
REMOVED = "<removed: looks like a secret>"
RELEVANT_NAMES = {"PATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "TEMP", "TMP", "TMPDIR", "VIRTUAL_ENV", "CONDA_PREFIX",
                  "XDG_CACHE_HOME", "XDG_STATE_HOME", "PROCESSOR_ARCHITECTURE", "PROCESSOR_IDENTIFIER",
                  "NUMBER_OF_PROCESSORS", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES"}
RELEVANT_PREFIXES = ("ORT_", "ONNX", "OMP_", "KMP_", "MKL_", "OPENBLAS_", "CUDA", "CUDNN", "NVIDIA_", "TRT_",
                     "TENSORRT", "PYTHON", "PIP_", "DNNL_", "OPENVINO")
# A variable whose name says it holds a credential is removed whatever its value looks like (PASS also
# covers PASSWD and PASSPHRASE; KEY covers API_KEY and KEYRING).
SECRET_NAME = re.compile(r"PASS|PWD|SECRET|TOKEN|KEY|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|SIGNATURE",
                         re.IGNORECASE)
# ... and a value that holds one anywhere is removed whole: a partial redaction that misses one encoding
# (a second '@', percent-escapes) would leak the rest, and the value's shape says enough to support.
SECRET_VALUE = (
    re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s]*@"),  # userinfo of any URL: user:pass@, token@, bob@
    re.compile(r"[?&;][^=&;#\s]*(token|key|secret|pass|pwd|auth|credential|sig|session|code)[^=&;#\s]*=",
               re.IGNORECASE),  # a query parameter that carries a credential (?access_token=, &X-Amz-Signature=)
    re.compile(r"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"),  # a JWT: base64url '{"' header, payload, signature
    re.compile(r"\b(bearer|basic)\s+\S+", re.IGNORECASE),
    re.compile(r"(?<![\w/\\.-])(?=[A-Za-z0-9+_=-]*\d)(?=[A-Za-z0-9+_=-]*[A-Za-z])[A-Za-z0-9+_=-]{32,}(?![\w/\\.-])"),
)


@dataclass(frozen=True)
class Member:
    """One zip member and the file it came from (None for what this process wrote itself)."""

    name: str
    source: Optional[str]
    bytes: int


@dataclass
class Collection:
    """What the bundle will hold, gathered item by item; `missing` says what is absent and why."""

    files: List[Tuple[str, Path]] = field(default_factory=list)
    generated: Dict[str, bytes] = field(default_factory=dict)
    missing: List[Dict[str, str]] = field(default_factory=list)

    def add_json(self, name: str, data: object) -> None:
        self.generated[name] = (json.dumps(data, indent=2, default=str) + "\n").encode("utf-8")

    def lack(self, item: str, reason: str) -> None:
        self.missing.append({"item": item, "reason": reason})


# ---------------------------------------------------------------- the environment


def looks_secret(name: str, value: str) -> bool:
    return bool(SECRET_NAME.search(name)) or any(pattern.search(value) for pattern in SECRET_VALUE)


def relevant_environment(environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The variables that change what ONNX Runtime and Python load or how fast they run, secrets removed."""
    environ = dict(os.environ if environ is None else environ)
    chosen = {name: value for name, value in environ.items()
              if name.upper() in RELEVANT_NAMES or name.upper().startswith(RELEVANT_PREFIXES)}
    return {name: (REMOVED if looks_secret(name, value) else value) for name, value in sorted(chosen.items())}


# ---------------------------------------------------------------- the machine and what is loaded


def memory_bytes() -> Optional[int]:
    if sys.platform == "win32":
        import ctypes

        class Status(ctypes.Structure):
            _fields_ = [("length", ctypes.c_ulong), ("load", ctypes.c_ulong), ("total", ctypes.c_ulonglong),
                        ("avail", ctypes.c_ulonglong), ("rest", ctypes.c_ulonglong * 5)]

        status = Status()
        status.length = ctypes.sizeof(Status)
        ok = ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status))  # type: ignore[attr-defined]
        return int(status.total) if ok else None
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text(encoding="ascii", errors="replace").splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return None


def system_facts(ort: Any) -> Dict[str, Any]:
    found = cores()
    return {
        "os": {"system": platform.system(), "release": platform.release(), "version": platform.version(),
               "platform": platform.platform(), "machine": platform.machine()},
        "python": {"version": platform.python_version(), "executable": sys.executable, "prefix": sys.prefix},
        "cpu": {"name": cpu_name(), "logical_cores": found.logical, "physical_cores": found.physical,
                "cores_source": found.source, "flags": cpu_flags()},
        "memory_bytes": memory_bytes(),
        "gpus": gpus(),
        "onnxruntime": None if ort is None else {"version": ort.__version__, "file": ort.__file__,
                                                 "available_providers": ort.get_available_providers()},
    }


def import_runtime(collection: Collection) -> Any:
    """onnxruntime and numpy imported here, so the module list shows what they load on this machine."""
    try:
        import numpy  # noqa: F401
        import onnxruntime
    except Exception as exc:  # ImportError or a library that failed to load: that is a finding
        collection.lack("onnxruntime", f"import failed: {type(exc).__name__}: {exc}")
        return None
    return onnxruntime


def selfcheck_helpers(root: Path) -> Any:
    """The self-check's library module: it holds the one lister of loaded libraries for both systems."""
    from .selfcheck import libraries

    return libraries


def python_modules() -> List[Dict[str, Any]]:
    found = []
    for name, module in sorted(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if "." in name or not path:
            continue
        version = getattr(module, "__version__", None)
        found.append({"name": name, "version": version if isinstance(version, str) else None, "path": path})
    return found


def distributions() -> List[Dict[str, Any]]:
    from importlib import metadata

    found = [{"name": d.metadata["Name"], "version": d.version, "path": str(getattr(d, "_path", ""))}
             for d in metadata.distributions()]
    return sorted(found, key=lambda item: str(item["name"]).lower())


def loaded_modules(root: Path, collection: Collection) -> Dict[str, Any]:
    report: Dict[str, Any] = {"python_modules": python_modules(), "distributions": distributions()}
    try:
        helpers = selfcheck_helpers(root)
        report["libraries"] = [{"path": path, "version": helpers.library_version(path)}
                               for path in helpers.loaded_library_paths()]
    except Exception as exc:  # an altered or missing self-check: list the rest
        collection.lack("libraries", f"the loaded libraries could not be listed: {type(exc).__name__}: {exc}")
    return report


# ---------------------------------------------------------------- files of the installation


def run_selfcheck(root: Path, collection: Collection) -> None:
    script = root / "installer" / "ort_bundle" / "__main__.py"
    if not script.is_file():
        collection.lack("selfcheck.json", f"{script} is missing")
        return
    try:
        proc = subprocess.run([sys.executable, "-I", "-B", str(script), "selfcheck", "--json", "--root", str(root)], capture_output=True,
                              text=True, timeout=SELFCHECK_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        collection.lack("selfcheck.json", f"the self-check did not run: {exc}")
        return
    try:
        collection.add_json("selfcheck.json", json.loads(proc.stdout))
    except ValueError:
        collection.lack("selfcheck.json", f"the self-check exited {proc.returncode} without a JSON report")
    if proc.stderr.strip():
        collection.generated["selfcheck-stderr.txt"] = proc.stderr.encode("utf-8")


def install_id(root: Path) -> Optional[str]:
    """From receipt.json, else bundle.json (name-version): it names the support zip."""
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        return str(json.loads((root / "receipt.json").read_text(encoding="utf-8"))["install_id"])
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        bundle = json.loads((root / "bundle.json").read_text(encoding="utf-8"))
        return f"{bundle['name']}-{bundle['version']}"
    return None


def recorded_log(root: Path) -> Tuple[Optional[Path], str]:
    """The install log receipt.json records (its `install_log`), when it is a regular file owned by the
    receipt's owner; else None and why. Only this log is taken: a log folder is shared by every install of
    the product, and another install's log (or a file planted under a log's name) is not this one's."""
    receipt = root / "receipt.json"
    try:
        owner = os.stat(receipt).st_uid
        recorded = json.loads(receipt.read_text(encoding="utf-8")).get("install_log")
    except (OSError, ValueError, AttributeError) as exc:
        return None, f"{receipt} cannot be read ({exc}), and it names the install log"
    if not recorded or not isinstance(recorded, str):
        return None, (f"{receipt} records no install log (an install by an older installer, by the MSI, or with the "
                      f"log turned off)")
    path = Path(recorded)
    try:
        status = os.lstat(path)
    except OSError as exc:
        return None, f"the install log {path} that {receipt} records cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(status.st_mode):
        return None, f"the install log {path} that {receipt} records is not a regular file: not collected"
    if status.st_uid != owner:
        return None, (f"the install log {path} that {receipt} records belongs to user {status.st_uid}, not to "
                      f"{owner} who owns the receipt: not collected")
    return path, ""


def install_logs(root: Path, given: Sequence[Path], collection: Collection) -> List[Path]:
    """The log receipt.json records, then the --install-log files; no other file is searched for."""
    found = [path for path in given if path.is_file()]
    collection.missing.extend({"item": str(path), "reason": "not a file"} for path in given if not path.is_file())
    recorded, reason = recorded_log(root)
    if recorded is not None:
        return [recorded, *found]
    collection.lack("install log", reason + ("" if found else "; pass --install-log FILE for a log written elsewhere"))
    return found


def log_members(paths: Sequence[Path]) -> List[Tuple[str, Path]]:
    """logs/<file name>, or logs/<n>/<file name> for a second log of the same name (root's and a user's)."""
    members: List[Tuple[str, Path]] = []
    seen: Set[Path] = set()
    for path in paths:
        resolved = path.resolve()
        if resolved in seen:
            continue
        seen.add(resolved)
        taken = {name for name, _ in members}
        name = f"logs/{path.name}"
        members.append((name if name not in taken else f"logs/{len(members)}/{path.name}", path))
    return members


def latest_traces(collection: Collection) -> List[Path]:
    folder = profile_dir()
    try:
        traces = sorted((p for p in folder.glob("*.json") if p.is_file()), key=lambda p: p.stat().st_mtime)
    except OSError as exc:
        collection.lack("profiles", f"{folder} cannot be read: {exc}")
        return []
    if not traces:
        collection.lack("profiles", f"no trace in {folder}; run the launcher with --profile first")
    return traces[-MAX_TRACES:]


def add_file(collection: Collection, name: str, path: Path, *, within: Path) -> None:
    """Zip `path` as `name` if it is a regular file inside `within`: a link planted in the installation
    (tuning.json -> /etc/shadow) must not carry a file of the machine into the bundle."""
    try:
        inside = path.resolve().relative_to(within.resolve()) is not None
    except (OSError, ValueError):
        inside = False
    if path.is_symlink() or not inside:
        collection.lack(name, f"{path} is a link or lies outside {within}: not collected")
        return
    try:
        size = path.stat().st_size
    except OSError as exc:
        collection.lack(name, f"{path}: {exc.strerror or exc}")
        return
    if size > MAX_FILE_BYTES:
        collection.lack(name, f"{path} is {size} bytes, over the {MAX_FILE_BYTES} byte limit: send it separately")
        return
    collection.files.append((name, path))


def collect(root: Path, given_logs: Sequence[Path]) -> Collection:
    collection = Collection()
    for name in ROOT_FILES:
        if (root / name).is_file() or (root / name).is_symlink():
            add_file(collection, name, root / name, within=root)
        else:
            collection.lack(name, f"{root / name} does not exist" +
                            ("; run the launcher with --tune to create it" if name == TUNING_FILE else ""))
    run_selfcheck(root, collection)
    for name, path in log_members(install_logs(root, given_logs, collection)):
        add_file(collection, name, path, within=path.parent)
    for path in latest_traces(collection):
        add_file(collection, f"profiles/{path.name}", path, within=profile_dir())
    ort = import_runtime(collection)
    collection.add_json("modules.json", loaded_modules(root, collection))
    collection.add_json("environment.json", relevant_environment())
    collection.add_json("system.json", system_facts(ort))
    return collection


# ---------------------------------------------------------------- the zip


def index(root: Path, collection: Collection) -> Dict[str, Any]:
    members = [Member(name=name, source=str(path), bytes=path.stat().st_size) for name, path in collection.files]
    members += [Member(name=name, source=None, bytes=len(data)) for name, data in collection.generated.items()]
    return {"format": INDEX_FORMAT, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "root": str(root), "cache_dir": str(cache_dir()), "members": [asdict(m) for m in members],
            "missing": collection.missing}


@contextlib.contextmanager
def replacing(target: Path) -> Iterator[Path]:
    """A temporary file beside `target`, renamed over it only when the block completes."""
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=str(target.parent))
    os.close(handle)
    try:
        yield Path(temporary)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_zip(root: Path, collection: Collection, target: Path) -> Path:
    data = dict(collection.generated)
    data["index.json"] = (json.dumps(index(root, collection), indent=2) + "\n").encode("utf-8")
    with replacing(target) as temporary, zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, path in collection.files:
            archive.write(path, name)  # streamed in chunks: a large log is never held in memory whole
        for name, payload in sorted(data.items()):
            archive.writestr(name, payload)
    return target


def output_path(root: Path) -> Path:
    name = install_id(root) or root.name
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return cache_dir() / "support" / f"{name}-support-{stamp}.zip"


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="run --support-bundle", description="Collect a support bundle.")
    parser.add_argument("--root", type=Path, default=None, help="the installation folder (default: this venv's)")
    parser.add_argument("--install-log", type=Path, action="append", default=[],
                        help="an install log written with --log-path / -LogPath (repeatable)")
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    root = (args.root or install_root()).resolve()
    if not (root / "bundle.json").is_file() and not (root / "receipt.json").is_file():
        print(f"run --support-bundle: {root} holds neither bundle.json nor receipt.json: it is not an installation; "
              "pass --root", file=sys.stderr)
        return EXIT_USAGE
    collection = collect(root, args.install_log)
    target = output_path(root)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_zip(root, collection, target)
    except OSError as exc:
        print(f"run --support-bundle: cannot write {target} ({exc}); set ORT_BUNDLE_CACHE_DIR to a writable folder",
              file=sys.stderr)
        return EXIT_WRITE
    print(f"support bundle written to {target} ({target.stat().st_size} bytes; "
          f"{len(collection.missing)} item{'s' if len(collection.missing) != 1 else ''} missing, see index.json)")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
