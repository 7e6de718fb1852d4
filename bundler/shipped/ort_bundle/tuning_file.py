"""The one definition of the tuning file (`tuning.json` in the install folder).

`run --tune` writes it (ort_bundle.tuning); the start-up hook, `ort_bundle.session_options(name)`, the
self-check and the support bundle read it. It records what was measured, not only the winner, so a
person can see how close the candidates were, and what it was measured for (the machine's cores, the
model's sha256, the ORT version), so a reader can tell a tuning that no longer applies. Standard
library only, Python 3.8+: it ships in every bundle as part of the `ort_bundle` package.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Tuple

TUNING_FILE = "tuning.json"
TUNING_FORMAT = 1
EXECUTION_MODES = ("ORT_SEQUENTIAL", "ORT_PARALLEL")


class TuningFileError(ValueError):
    """A tuning file this code cannot use: the message names the file and the key."""


@dataclass(frozen=True)
class Settings:
    """The session options tuning decides: everything else stays as ORT or the application sets it."""

    intra_op_num_threads: int
    execution_mode: str  # one of EXECUTION_MODES

    @property
    def label(self) -> str:
        return f"{self.intra_op_num_threads} thread{'s' if self.intra_op_num_threads != 1 else ''} " \
               f"{self.execution_mode[4:].lower()}"


@dataclass(frozen=True)
class Measurement:
    """One candidate's timed runs (after its warm-up), in milliseconds.

    `runs` is how many were timed (a time budget may stop before --runs); `spread_pct` is how far p95 lies
    above p50, in percent of p50: a reader sees at once whether two candidates differ by more than the noise.
    Files written before both existed read as 0 (unknown).
    """

    settings: Settings
    p50_ms: float
    p95_ms: float
    min_ms: float
    max_ms: float
    runs: int = 0
    spread_pct: float = 0.0


@dataclass(frozen=True)
class ModelTuning:
    name: str
    file: str  # install-relative, '/' separators
    sha256: str  # of the model file that was measured: a different file means the tuning is stale
    providers: Tuple[str, ...]
    best: Settings
    candidates: Tuple[Measurement, ...]


@dataclass(frozen=True)
class Machine:
    cpu: str
    logical_cores: int
    physical_cores: int
    cores_source: str


@dataclass(frozen=True)
class TuningFile:
    install_id: str
    created_at: str  # UTC, ISO 8601
    ort_version: str
    machine: Machine
    warmup: int
    runs: int
    models: Tuple[ModelTuning, ...]
    format: int = TUNING_FORMAT
    budget_s: float = 0.0  # the time the measuring was given (0: none, every run was made)
    elapsed_s: float = 0.0  # the time it took
    notes: Tuple[str, ...] = ()  # what was changed from the request, e.g. thread counts capped at the cores

    def model(self, name: str) -> ModelTuning | None:
        return next((model for model in self.models if model.name == name), None)

    def to_json(self) -> Dict[str, Any]:
        """Plain JSON values (lists, not the record's tuples), as a reader gets them back."""
        data: Dict[str, Any] = json.loads(json.dumps(asdict(self)))
        return data

    def write(self, root: Path) -> Path:
        """Written beside and renamed over, so a reader never sees half a file."""
        target = root / TUNING_FILE
        handle, temporary = tempfile.mkstemp(prefix=f".{TUNING_FILE}.", suffix=".tmp", dir=str(root))
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                json.dump(self.to_json(), stream, indent=2)
                stream.write("\n")
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        return target

    @classmethod
    def read(cls, root: Path) -> TuningFile:
        path = root / TUNING_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            msg = f"{path} cannot be read as JSON ({exc}); run the launcher with --tune again"
            raise TuningFileError(msg) from None
        return cls.from_json(data, source=str(path))

    @classmethod
    def from_json(cls, data: object, *, source: str = TUNING_FILE) -> TuningFile:
        top = _object(data, source)
        if top.get("format") != TUNING_FORMAT:
            found = f"format is {top['format']!r}" if "format" in top else 'has no "format" key'
            msg = f"{source}: {found}, expected {TUNING_FORMAT}; run --tune again"
            raise TuningFileError(msg)
        machine = _object(top.get("machine"), f"{source}: machine")
        models = top.get("models")
        if not isinstance(models, list):
            msg = f"{source}: models is {type(models).__name__}, expected a list"
            raise TuningFileError(msg)
        return cls(install_id=_text(top, "install_id", source), created_at=_text(top, "created_at", source),
                   ort_version=_text(top, "ort_version", source),
                   machine=Machine(cpu=_text(machine, "cpu", source), logical_cores=_int(machine, "logical_cores", source),
                                   physical_cores=_int(machine, "physical_cores", source),
                                   cores_source=_text(machine, "cores_source", source)),
                   warmup=_int(top, "warmup", source), runs=_int(top, "runs", source),
                   models=_models(models, _int(machine, "logical_cores", source), source),
                   budget_s=_optional_number(top, "budget_s", source), elapsed_s=_optional_number(top, "elapsed_s", source),
                   notes=tuple(str(note) for note in top.get("notes") or ()))


def _models(items: List[Any], logical_cores: int, source: str) -> Tuple[ModelTuning, ...]:
    """Every model's record; a best setting with more threads than the machine's cores is never what tuning
    chooses (it caps them), so a file that says so was not written by it and is refused, not applied."""
    models = tuple(_model(item, f"{source}: models[{index}]") for index, item in enumerate(items))
    for index, model in enumerate(models):
        if logical_cores and model.best.intra_op_num_threads > logical_cores:
            msg = (f"{source}: models[{index}]: best has {model.best.intra_op_num_threads} threads, more than the "
                   f"{logical_cores} logical cores it was measured on; run --tune again")
            raise TuningFileError(msg)
    return models


def _object(value: object, where: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        msg = f"{where} is {type(value).__name__}, expected a JSON object"
        raise TuningFileError(msg)
    return value


def _text(table: Dict[str, Any], key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str):
        msg = f"{where}: {key} is {value!r}, expected a string"
        raise TuningFileError(msg)
    return value


def _int(table: Dict[str, Any], key: str, where: str) -> int:
    value = table.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        msg = f"{where}: {key} is {value!r}, expected a whole number of 0 or more"
        raise TuningFileError(msg)
    return value


def _number(table: Dict[str, Any], key: str, where: str) -> float:
    value = table.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        msg = f"{where}: {key} is {value!r}, expected a number"
        raise TuningFileError(msg)
    return float(value)


def _optional_number(table: Dict[str, Any], key: str, where: str) -> float:
    return _number(table, key, where) if key in table else 0.0


def _settings(value: object, where: str) -> Settings:
    table = _object(value, where)
    mode = _text(table, "execution_mode", where)
    if mode not in EXECUTION_MODES:
        msg = f"{where}: execution_mode is {mode!r}, expected one of {list(EXECUTION_MODES)}"
        raise TuningFileError(msg)
    threads = _int(table, "intra_op_num_threads", where)
    return Settings(intra_op_num_threads=threads, execution_mode=mode)


def _model(value: object, where: str) -> ModelTuning:
    table = _object(value, where)
    candidates = table.get("candidates")
    providers = table.get("providers")
    if not isinstance(candidates, list) or not isinstance(providers, list):
        msg = f"{where}: candidates and providers must be lists"
        raise TuningFileError(msg)
    measured = tuple(
        Measurement(settings=_settings(_object(item, f"{where}: candidates[{index}]").get("settings"),
                                       f"{where}: candidates[{index}].settings"),
                    p50_ms=_number(item, "p50_ms", where), p95_ms=_number(item, "p95_ms", where),
                    min_ms=_number(item, "min_ms", where), max_ms=_number(item, "max_ms", where),
                    runs=int(_optional_number(item, "runs", where)),
                    spread_pct=_optional_number(item, "spread_pct", where))
        for index, item in enumerate(candidates))
    best = _settings(table.get("best"), f"{where}: best")
    if best not in {measurement.settings for measurement in measured}:
        msg = f"{where}: best {best} is not one of the measured candidates"
        raise TuningFileError(msg)
    return ModelTuning(name=_text(table, "name", where), file=_text(table, "file", where),
                       sha256=_text(table, "sha256", where), providers=tuple(str(p) for p in providers),
                       best=best, candidates=measured)
