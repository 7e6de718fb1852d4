"""The records that cross from the build to the target machine, each defined once, with a format number.

The build writes `install-plan.json` through these definitions; the install engine, the self-check
and the launchers' audit read `install-plan.json`, `receipt.json` and the self-check report through
the same ones. This module runs on the target with only the standard library (Python 3.8+), so the
definitions are plain frozen dataclasses with hand-written readers: every reader names the file and
the key that is wrong and what it expected, because these files come from outside the program that
reads them. The build's own `bundle.json` definition joins this file later (kept apart below).

Every path a record holds is checked by `safe_relative`, the one "stays below its root" rule.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Any, Dict, List, Mapping, Optional, Tuple

# ---------------------------------------------------------------- the install records (install engine)

PLAN_FILE = "install-plan.json"
RECEIPT_FILE = "receipt.json"
SUMS_FILE = "SHA256SUMS"
PLAN_FORMAT = 2
RECEIPT_FORMAT = 2
SELFCHECK_FORMAT = 1

#: Exit codes of install.*, uninstall.* and the engine, documented in README-INSTALL.txt and each --help.
#: 0, 3010 and 1618 are the codes Intune and ConfigMgr already understand; the others are distinct,
#: small, and clear of cmd.exe's 1 ("not recognized") and PowerShell's 1 (unhandled).
INSTALL_EXIT_CODES: Mapping[str, int] = {
    "ok": 0,
    "reboot": 3010,
    "retry": 1618,
    "usage": 10,
    "integrity": 11,
    "prerequisite": 12,
    "install": 13,
    "selfcheck": 14,
    "in_use": 15,
}


def log_file_name(install_id: str, install_dir: str, kind: str) -> str:
    """The default log's name: `<install id>-<first 8 hex of sha256(install folder's absolute path)>-<kind>.log`.

    Two installs of one name and version into different folders (as root, both in /var/log/ort-bundler) never
    share a log. `install_dir` is the absolute path as the installer names it, hashed as UTF-8; install.sh
    computes the same with `printf '%s' "$install_dir" | sha256sum`, windows_setup.open_log calls this.
    """
    digest = hashlib.sha256(install_dir.encode("utf-8")).hexdigest()[:8]
    return f"{install_id}-{digest}-{kind}.log"


class RecordError(ValueError):
    """A record that cannot be used safely; the message names the file, the key and what was expected."""


def safe_relative(path: object, *, what: str) -> str:
    """`path` when it is a relative '/'-separated path that stays below its root, else RecordError.

    Refused: empty, absolute, a drive or stream (':'), a backslash (on Windows it is a separator, so
    `a\\..\\..\\x` would climb), NUL, and any empty, '.' or '..' part.
    """
    text = path if isinstance(path, str) else ""
    parts = text.split("/")
    if (not text or "\\" in text or ":" in text or "\0" in text or PurePosixPath(text).is_absolute()
            or any(part in ("", ".", "..") for part in parts)):
        msg = f"{what} {path!r} is not a relative path below its root (expected 'folder/file' without '..', '\\' or ':')"
        raise RecordError(msg)
    return text


class _Reader:
    """Typed access to one JSON object, with messages that name the file and the key."""

    def __init__(self, data: object, *, source: str, prefix: str = "") -> None:
        if not isinstance(data, dict):
            msg = f"{source}: {prefix or 'the file'} is {type(data).__name__}, expected a JSON object"
            raise RecordError(msg)
        self.data: Dict[str, Any] = data
        self.source = source
        self.prefix = prefix

    def where(self, key: str) -> str:
        return f"{self.source}: key '{self.prefix}{key}'"

    def get(self, key: str, kind: type, expected: str) -> Any:
        if key not in self.data:
            raise RecordError(f"{self.where(key)} is missing, expected {expected}")
        value = self.data[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise RecordError(f"{self.where(key)} is {value!r}, expected {expected}")
        return value

    def text(self, key: str) -> str:
        return str(self.get(key, str, "a string"))

    def optional_text(self, key: str) -> Optional[str]:
        if self.data.get(key) is None:
            return None
        return self.text(key)

    def path(self, key: str) -> str:
        return safe_relative(self.text(key), what=self.where(key))

    def paths(self, key: str) -> Tuple[str, ...]:
        items = self.get(key, list, "a list of relative paths")
        return tuple(safe_relative(item, what=f"{self.where(key)}[{index}]") for index, item in enumerate(items))

    def child(self, key: str) -> _Reader:
        return _Reader(self.get(key, dict, "a JSON object"), source=self.source, prefix=f"{self.prefix}{key}.")

    def children(self, key: str) -> List[_Reader]:
        items = self.get(key, list, "a list of JSON objects")
        return [_Reader(item, source=self.source, prefix=f"{self.prefix}{key}[{index}].")
                for index, item in enumerate(items)]

    def format(self, expected: int) -> int:
        if "format" not in self.data:
            raise RecordError(f'{self.source} has no "format" key; this program reads format {expected}')
        found = self.data["format"]
        if found != expected:
            raise RecordError(f"{self.source} has format {found!r}; this program reads format {expected}")
        return expected


def _load_json(text: str, *, source: str) -> object:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise RecordError(f"{source} is not valid JSON ({exc})") from None


def dumps(data: Mapping[str, Any]) -> str:
    """The one JSON form of every record: sorted keys, two-space indent, a final newline."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


@dataclass(frozen=True)
class PlanEntry:
    """One file the installer copies: `source` is bundle-relative, `target` install-relative."""

    source: str
    target: str

    def to_json(self) -> Dict[str, str]:
        return {"from": self.source, "to": self.target}

    @classmethod
    def read(cls, reader: _Reader) -> PlanEntry:
        return cls(source=reader.path("from"), target=reader.path("to"))


@dataclass(frozen=True)
class VenvPlan:
    """The environment: where it goes, its layout on the target platform, and the wheels it holds.

    The layout (interpreter, scripts, site_packages, script_kind) comes from the build's target
    platform, so the engine never compares platform names.
    """

    dir: str
    interpreter: str  # below dir: bin/python or Scripts/python.exe
    scripts: str  # below dir: bin or Scripts
    site_packages: str  # below dir: lib/python3.11/site-packages or Lib/site-packages
    script_kind: str  # pypa installer's launcher kind: posix or win-amd64
    wheels: Tuple[str, ...]  # bundle-relative, installed in this order
    requirements: str  # bundle-relative requirements.txt (for people and pip users; the engine reads wheels)
    site_packages_files: Tuple[PlanEntry, ...]
    #: A bundled interpreter ([python] runtime): its files, copied to make the environment instead of running
    #: `python -m venv`; the layout above then names the interpreter's own folders (python/bin/python3.11, ...).
    runtime: Tuple[PlanEntry, ...] = ()

    def to_json(self) -> Dict[str, Any]:
        data = asdict(self)
        data["wheels"] = list(self.wheels)
        data["site_packages_files"] = [entry.to_json() for entry in self.site_packages_files]
        data["runtime"] = [entry.to_json() for entry in self.runtime]
        return data

    @classmethod
    def read(cls, reader: _Reader) -> VenvPlan:
        kind = reader.text("script_kind")
        if kind not in ("posix", "win-amd64"):
            raise RecordError(f"{reader.where('script_kind')} is {kind!r}, expected 'posix' or 'win-amd64'")
        return cls(dir=reader.path("dir"), interpreter=reader.path("interpreter"), scripts=reader.path("scripts"),
                   site_packages=reader.path("site_packages"), script_kind=kind, wheels=reader.paths("wheels"),
                   requirements=reader.path("requirements"),
                   site_packages_files=tuple(PlanEntry.read(r) for r in reader.children("site_packages_files")),
                   runtime=tuple(PlanEntry.read(r) for r in reader.children("runtime")) if "runtime" in reader.data else ())


@dataclass(frozen=True)
class InstallPlan:
    """install-plan.json: everything the engine does, and nothing it has to guess."""

    install_id: str
    name: str
    version: str
    platform: str
    python: str  # the target's minor version, "3.11"
    dll_path_variable: str  # LD_LIBRARY_PATH or PATH
    installer_wheel: str  # bundle-relative wheel of pypa's installer, used by the engine, never installed
    venv: VenvPlan
    copy: Tuple[PlanEntry, ...]
    dll_dirs: Tuple[str, ...]  # install-relative
    format: int = PLAN_FORMAT

    def to_json(self) -> Dict[str, Any]:
        data = asdict(self)
        data.update(venv=self.venv.to_json(), copy=[entry.to_json() for entry in self.copy],
                    dll_dirs=list(self.dll_dirs))
        return data

    def inputs(self) -> List[str]:
        """Every bundle file the plan uses: each must be covered by SHA256SUMS."""
        entries = [*self.copy, *self.venv.site_packages_files, *self.venv.runtime]
        return [PLAN_FILE, self.installer_wheel, self.venv.requirements, *self.venv.wheels,
                *(entry.source for entry in entries)]

    @classmethod
    def from_json(cls, data: object, *, source: str = PLAN_FILE) -> InstallPlan:
        reader = _Reader(data, source=source)
        reader.format(PLAN_FORMAT)
        return cls(install_id=reader.text("install_id"), name=reader.text("name"), version=reader.text("version"),
                   platform=reader.text("platform"), python=reader.text("python"),
                   dll_path_variable=reader.text("dll_path_variable"), installer_wheel=reader.path("installer_wheel"),
                   venv=VenvPlan.read(reader.child("venv")),
                   copy=tuple(PlanEntry.read(r) for r in reader.children("copy")), dll_dirs=reader.paths("dll_dirs"))

    @classmethod
    def loads(cls, text: str, *, source: str = PLAN_FILE) -> InstallPlan:
        return cls.from_json(_load_json(text, source=source), source=source)


@dataclass(frozen=True)
class InstalledFile:
    """One file the installer created, with the sha256 it had when the install finished."""

    path: str
    sha256: str


@dataclass(frozen=True)
class SelfcheckOutcome:
    """What the install-time self-check said; `deferred_until_reboot` only when a pending VC++ runtime
    update explains every failed check, and then `after_reboot` is filled in by the deferred run."""

    ran: bool
    exit_code: Optional[int] = None
    passed: Optional[bool] = None
    failed_checks: Tuple[str, ...] = ()
    deferred_until_reboot: bool = False
    after_reboot: Optional[bool] = None

    @classmethod
    def read(cls, reader: _Reader) -> SelfcheckOutcome:
        code = reader.data.get("exit_code")
        passed = reader.data.get("passed")
        after = reader.data.get("after_reboot")
        if (code is not None and not isinstance(code, int)) or passed not in (None, True, False) \
                or after not in (None, True, False):
            raise RecordError(f"{reader.where('')} has an exit_code, passed or after_reboot of the wrong type")
        failed = reader.get("failed_checks", list, "a list of check ids")
        return cls(ran=bool(reader.get("ran", bool, "true or false")), exit_code=code, passed=passed,
                   failed_checks=tuple(str(item) for item in failed),
                   deferred_until_reboot=bool(reader.get("deferred_until_reboot", bool, "true or false")),
                   after_reboot=after)


@dataclass(frozen=True)
class Receipt:
    """receipt.json: the record that makes a folder ours, that uninstall trusts and --verify audits."""

    install_id: str
    name: str
    version: str
    platform: str
    bundle_sha256: str
    installed_at: str
    install_dir: str
    python_executable: str
    python_version: str
    selfcheck: SelfcheckOutcome
    reboot_required: bool
    files: Tuple[InstalledFile, ...]  # every file the installer created, receipt.json aside
    folders: Tuple[str, ...] = ()  # every folder the installer created: removed on uninstall when empty
    kept: Tuple[str, ...] = ()  # files that were not ours, carried over from the previous install
    #: The install log's absolute path (the support bundle takes this one): an optional key of format 2, left
    #: out when there is none (the MSI's image, a dry run), so engines that predate it read the receipt too.
    install_log: Optional[str] = None
    format: int = RECEIPT_FORMAT

    def to_json(self) -> Dict[str, Any]:
        data = asdict(self)
        if self.install_log is None:
            del data["install_log"]
        data["files"] = [{"path": f.path, "sha256": f.sha256} for f in self.files]
        data["kept"] = list(self.kept)
        data["folders"] = list(self.folders)
        data["selfcheck"]["failed_checks"] = list(self.selfcheck.failed_checks)
        return data

    def dumps(self) -> str:
        return dumps(self.to_json())

    @classmethod
    def from_json(cls, data: object, *, source: str = RECEIPT_FILE) -> Receipt:
        reader = _Reader(data, source=source)
        reader.format(RECEIPT_FORMAT)
        files = []
        for entry in reader.children("files"):
            digest = entry.text("sha256")
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise RecordError(f"{entry.where('sha256')} is {digest!r}, expected 64 lowercase hex digits")
            files.append(InstalledFile(path=entry.path("path"), sha256=digest))
        return cls(install_id=reader.text("install_id"), name=reader.text("name"), version=reader.text("version"),
                   platform=reader.text("platform"), bundle_sha256=reader.text("bundle_sha256"),
                   installed_at=reader.text("installed_at"), install_dir=reader.text("install_dir"),
                   python_executable=reader.text("python_executable"), python_version=reader.text("python_version"),
                   selfcheck=SelfcheckOutcome.read(reader.child("selfcheck")),
                   reboot_required=bool(reader.get("reboot_required", bool, "true or false")),
                   files=tuple(files), folders=reader.paths("folders"), kept=reader.paths("kept"),
                   install_log=reader.optional_text("install_log"))

    @classmethod
    def loads(cls, text: str, *, source: str = RECEIPT_FILE) -> Receipt:
        return cls.from_json(_load_json(text, source=source), source=source)


# ---------------------------------------------------------------- the self-check report


@dataclass(frozen=True)
class Check:
    """One line of the self-check report: what was checked, the verdict, and what to do about a failure."""

    id: str
    status: str  # pass | fail | warn | skip
    message: str
    fix: str = ""
    details: Dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SelfcheckReport:
    """What `selfcheck.py --json` prints; the engine reads it to decide what a reboot may excuse."""

    ok: bool
    root: str
    checks: Tuple[Check, ...]
    format: int = SELFCHECK_FORMAT

    def to_json(self) -> Dict[str, Any]:
        return {"format": self.format, "ok": self.ok, "root": self.root, "checks": [asdict(c) for c in self.checks]}

    def failed(self) -> List[Check]:
        return [check for check in self.checks if check.status == "fail"]

    @classmethod
    def from_json(cls, data: object, *, source: str = "the self-check report") -> SelfcheckReport:
        reader = _Reader(data, source=source)
        reader.format(SELFCHECK_FORMAT)
        checks = []
        for item in reader.children("checks"):
            details = item.data.get("details") or {}
            checks.append(Check(id=item.text("id"), status=item.text("status"), message=item.text("message"),
                                fix=str(item.data.get("fix") or ""), details=details if isinstance(details, dict) else {}))
        return cls(ok=bool(reader.get("ok", bool, "true or false")), root=reader.text("root"), checks=tuple(checks))

    @classmethod
    def loads(cls, text: str, *, source: str = "the self-check report") -> SelfcheckReport:
        return cls.from_json(_load_json(text, source=source), source=source)
