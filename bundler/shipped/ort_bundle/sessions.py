"""Tuned and profiling session options for the sessions an installed application creates.

Two ways in, one set of rules:

* an application asks: ``options = ort_bundle.session_options("tiny-mlp")`` gives a SessionOptions with
  the values `run --tune` measured best on this machine for that `[[models]]` entry (and profiling on
  under `run --profile`); ORT's defaults where nothing applies;
* the start-up hook calls `activate()` when the launcher says so (`[launch] apply_tuning = true` sets
  ORT_BUNDLE_APPLY_TUNING=1 for the entry point; `run --profile` sets ORT_BUNDLE_PROFILE=1): once
  onnxruntime is imported, every InferenceSession created from a bundled model file gets the tuned values.

A value the application set itself always wins: a field is only filled in while it still holds ORT's
default (intra_op_num_threads 0, ORT_SEQUENTIAL, profiling off), and an application's own SessionOptions
object is handed back unchanged once its session exists. A tuning only applies while it is current:
measured on a machine with this many usable cores, for the model file the bundle ships now.
Standard library only (onnxruntime where it is already imported), Python 3.8+. Nothing here raises into
the application but a LookupError for a name that is no `[[models]]` entry: an unreadable tuning goes to
stderr and the session is created as if there were no tuning.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import os
import sys
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .tuning_file import TUNING_FILE, ModelTuning, Settings, TuningFile, TuningFileError

APPLY_ENV = "ORT_BUNDLE_APPLY_TUNING"
PROFILE_ENV = "ORT_BUNDLE_PROFILE"
PROFILE_RUN_ENV = "ORT_BUNDLE_PROFILE_RUN"  # names this run's traces, so `run --profile` finds exactly them
PROFILE_DIR_ENV = "ORT_BUNDLE_PROFILE_DIR"
MESSAGE_PREFIX = "ort_bundle"


def install_root() -> Path:
    """The install folder: the parent of the virtual environment this interpreter runs in."""
    return Path(sys.prefix).resolve().parent


def cache_dir() -> Path:
    """The cache folder the launcher chose (ORT_BUNDLE_CACHE_DIR), else the temp folder."""
    return Path(os.environ.get("ORT_BUNDLE_CACHE_DIR") or tempfile.gettempdir())


def profile_dir() -> Path:
    """Where traces go: the launcher's ORT_BUNDLE_PROFILE_DIR (<cache>/profiles), else <cache>/profiles."""
    return Path(os.environ.get(PROFILE_DIR_ENV) or cache_dir() / "profiles")


def profiling_requested() -> bool:
    return os.environ.get(PROFILE_ENV) == "1"


@dataclass(frozen=True)
class TunedModel:
    """One model's tuning and whether it is in force; `reason` says why not."""

    name: str
    file: str  # install-relative
    settings: Settings
    current: bool
    reason: str


def model_digests(root: Path) -> Dict[str, Tuple[str, str]]:
    """bundle.json's models: name -> (install-relative file, sha256)."""
    from .bundle_info import BundleInfo

    bundle = BundleInfo.read(root / "bundle.json")
    return {str(m["name"]): (str(m["file"]), str(m["sha256"])) for m in bundle.models}


def staleness(model: ModelTuning, tuning: TuningFile, digests: Dict[str, Tuple[str, str]], logical: int) -> str:
    """Why a tuning no longer fits ("" when it does): another model file, or another machine."""
    shipped = digests.get(model.name)
    if shipped is None:
        return f"the bundle has no model '{model.name}' any more"
    if shipped != (model.file, model.sha256):
        return f"model '{model.name}' changed since it was tuned ({shipped[1][:12]}..., tuned {model.sha256[:12]}...)"
    if tuning.machine.logical_cores != logical:
        return (f"tuned on a machine with {tuning.machine.logical_cores} usable cores; "
                f"this process may use {logical}")
    return ""


def tuned_models(root: Optional[Path] = None) -> List[TunedModel]:
    """Every tuned model with its verdict; empty when there is no tuning file. Raises TuningFileError
    (or BundleInfoError) for a file that cannot be read: the self-check reports that."""
    from .machine import logical_cores

    root = root or install_root()
    if not (root / TUNING_FILE).is_file():
        return []
    tuning = TuningFile.read(root)
    digests, logical = model_digests(root), logical_cores()
    found = []
    for model in tuning.models:
        reason = staleness(model, tuning, digests, logical)
        found.append(TunedModel(name=model.name, file=model.file, settings=model.best, current=not reason,
                                reason=reason))
    return found


def tuned_settings(name: str, root: Optional[Path] = None) -> Optional[Settings]:
    """The settings `run --tune` chose for model `name`, None when there are none or they no longer fit."""
    root = root or install_root()
    digests = model_digests(root)
    if name not in digests:
        msg = f"'{name}' is not a model of this bundle; its [[models]] are {sorted(digests)}"
        raise LookupError(msg)
    model = next((m for m in tuned_models(root) if m.name == name), None)
    return model.settings if model is not None and model.current else None


def fill(options: Any, settings: Optional[Settings], profile_prefix: Optional[str]) -> List[Tuple[str, Any]]:
    """Set what the options still hold at ORT's default; returns (field, old value) to undo it with."""
    import onnxruntime

    changed: List[Tuple[str, Any]] = []

    def put(field: str, value: Any) -> None:
        changed.append((field, getattr(options, field)))
        setattr(options, field, value)

    if settings is not None:
        if options.intra_op_num_threads == 0:
            put("intra_op_num_threads", settings.intra_op_num_threads)
        sequential = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        if options.execution_mode == sequential and settings.execution_mode != "ORT_SEQUENTIAL":
            put("execution_mode", getattr(onnxruntime.ExecutionMode, settings.execution_mode))
    if profile_prefix is not None and not options.enable_profiling:
        put("enable_profiling", True)
        put("profile_file_prefix", profile_prefix)
    return changed


def profile_prefix(label: str) -> str:
    """<profile dir>/<run>-<label>: ORT appends _<date and time>.json."""
    folder = profile_dir()
    folder.mkdir(parents=True, exist_ok=True)
    run = os.environ.get(PROFILE_RUN_ENV) or f"profile-{os.getpid()}"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label) or "session"
    return str(folder / f"{run}-{safe}")


def session_options(name: str, *, root: Optional[Path] = None) -> Any:
    """SessionOptions for bundled model `name`: tuned on this machine where `run --tune` was run, and
    profiling on under `run --profile`. Set anything else on them as usual before creating the session."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    try:
        settings = tuned_settings(name, root)
    except (OSError, ValueError) as exc:  # an unreadable tuning.json or bundle.json: ORT's defaults, said once
        warn(f"tuned session options are not applied: {exc}")
        settings = None
    fill(options, settings, profile_prefix(name) if profiling_requested() else None)
    return options


# ---------------------------------------------------------------- the start-up hook's side


class Applier:
    """What the patched InferenceSession consults: the tuning read once, keyed by resolved model path."""

    def __init__(self, root: Path, *, apply_tuning: bool, profile: bool) -> None:
        self.root, self.apply_tuning, self.profile = root, apply_tuning, profile
        self._by_path: Optional[Dict[str, Tuple[str, Settings]]] = None
        self.sessions: weakref.WeakSet[Any] = weakref.WeakSet()

    def by_path(self) -> Dict[str, Tuple[str, Settings]]:
        if self._by_path is None:
            self._by_path = {}
            if self.apply_tuning:
                try:
                    self._by_path = self._load()
                except (OSError, ValueError, TuningFileError) as exc:  # BundleInfoError is a ValueError
                    warn(f"tuned session options are not applied: {exc}")
        return self._by_path

    def _load(self) -> Dict[str, Tuple[str, Settings]]:
        found = {}
        for model in tuned_models(self.root):
            if model.current:
                found[os.path.realpath(str(self.root / model.file))] = (model.name, model.settings)
            else:
                warn(f"the tuning of model '{model.name}' is not applied: {model.reason}; run --tune again")
        return found

    def plan(self, path_or_bytes: Any) -> Tuple[Optional[Settings], Optional[str]]:
        """The settings and profile prefix for a session about to be created from `path_or_bytes`."""
        name, settings = None, None
        if isinstance(path_or_bytes, (str, os.PathLike)):
            key = os.path.realpath(os.fspath(path_or_bytes))
            name, settings = self.by_path().get(key, (None, None))
            name = name or Path(key).stem
        return settings, (profile_prefix(name or "session") if self.profile else None)

    def end_profiling(self) -> None:
        """ORT writes a trace when its session ends; sessions still alive at exit are ended here."""
        for session in list(self.sessions):
            try:
                session.end_profiling()
            except Exception as exc:  # a session half torn down at exit: say so, do not fail the exit
                warn(f"could not end profiling of a session: {exc}")


def warn(message: str) -> None:
    print(f"{MESSAGE_PREFIX}: {message}", file=sys.stderr)


def patch(onnxruntime: Any, applier: Applier) -> None:
    """Wrap InferenceSession.__init__ (the class every import of onnxruntime shares)."""
    cls = onnxruntime.InferenceSession
    original: Callable[..., None] = cls.__init__
    if getattr(original, "_ort_bundle", False):
        return

    def __init__(self: Any, path_or_bytes: Any, sess_options: Any = None, providers: Any = None,
                 provider_options: Any = None, **kwargs: Any) -> None:
        try:
            settings, prefix = applier.plan(path_or_bytes)
        except Exception as exc:  # never stop the application over its tuning
            warn(f"session options not applied: {exc}")
            settings, prefix = None, None
        options, changed = sess_options, []
        if settings is not None or prefix is not None:
            options = sess_options if sess_options is not None else onnxruntime.SessionOptions()
            changed = fill(options, settings, prefix)
        try:
            original(self, path_or_bytes, options, providers, provider_options, **kwargs)
        finally:
            if sess_options is not None:  # the application's object goes back as it gave it
                for field, value in reversed(changed):
                    setattr(sess_options, field, value)
        if prefix is not None:
            applier.sessions.add(self)

    __init__._ort_bundle = True  # type: ignore[attr-defined]
    __init__.__doc__ = original.__doc__
    cls.__init__ = __init__


class _PatchingLoader(importlib.abc.Loader):
    """Runs onnxruntime's own loader, then patches the module; anything else is the real loader's."""

    def __init__(self, real: Any, applier: Applier) -> None:
        self.real, self.applier = real, applier

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.real.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.real.exec_module(module)
        try:
            patch(module, self.applier)
        except Exception as exc:  # an onnxruntime without the expected class: run untuned
            warn(f"session options not applied: {exc}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class _Watcher(importlib.abc.MetaPathFinder):
    """Waits for `import onnxruntime`, then steps aside: one import, one patch."""

    def __init__(self, applier: Applier) -> None:
        self.applier = applier

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None, target: Any = None) -> Any:
        if fullname != "onnxruntime":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader, self.applier)
        return spec


def activate(root: Optional[Path] = None) -> Optional[Applier]:
    """The start-up hook's call: apply tuning (ORT_BUNDLE_APPLY_TUNING=1) and/or profiling
    (ORT_BUNDLE_PROFILE=1) to the sessions this process creates. Does nothing when neither is asked."""
    apply_tuning, profile = os.environ.get(APPLY_ENV) == "1", profiling_requested()
    if not (apply_tuning or profile):
        return None
    applier = Applier(root or install_root(), apply_tuning=apply_tuning, profile=profile)
    if profile:
        atexit.register(applier.end_profiling)
    loaded = sys.modules.get("onnxruntime")
    if loaded is not None:
        patch(loaded, applier)
    else:
        sys.meta_path.insert(0, _Watcher(applier))
    return applier


# ---------------------------------------------------------------- what the self-check reports


@dataclass(frozen=True)
class TuningVerdict:
    """The self-check's `tuning` line: the tuned values and whether they are in force."""

    status: str  # pass | warn | skip
    message: str
    fix: str
    details: Dict[str, Any]


def tuning_verdict(root: Path, *, applied_by_hook: bool) -> TuningVerdict:
    """In force means: current for this machine and model, and applied to the entry point's sessions by
    the hook ([launch] apply_tuning), or else available through ort_bundle.session_options(name)."""
    try:
        models = tuned_models(root)
    except (OSError, ValueError, TuningFileError) as exc:  # BundleInfoError is a ValueError
        return TuningVerdict(status="warn", message=f"the tuning file cannot be used: {exc}",
                             fix="Run the launcher with --tune again.", details={})
    if not models:
        return TuningVerdict(status="skip", fix="", details={"applied_by_hook": applied_by_hook},
                             message="not tuned: run the launcher with --tune to measure the best session options "
                                     "on this machine")
    details = {"applied_by_hook": applied_by_hook,
               "models": [{"name": m.name, "intra_op_num_threads": m.settings.intra_op_num_threads,
                           "execution_mode": m.settings.execution_mode, "current": m.current, "reason": m.reason}
                          for m in models]}
    values = "; ".join(f"{m.name}: {m.settings.label}" for m in models)
    stale = [f"{m.name}: {m.reason}" for m in models if not m.current]
    if stale:
        return TuningVerdict(status="warn", details=details, fix="Run the launcher with --tune again.",
                             message=f"tuned ({values}) but not in force: {'; '.join(stale)}")
    where = "applied to the entry point's sessions" if applied_by_hook else \
        "not applied by the launcher ([launch] apply_tuning is off); available through ort_bundle.session_options(name)"
    return TuningVerdict(status="pass", details=details, fix="", message=f"tuned ({values}): {where}")
