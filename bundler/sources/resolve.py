"""Resolution for the target: what pip would install on the target machine, markers evaluated for the target,
repeated until the closure is complete (docs/facts.md §1: pip alone evaluates markers for the build machine)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag, sys_tags
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import Version

from bundler.errors import (
    BuildError,
    InputUnavailableError,
    ManifestError,
    UnsupportedError,
)
from bundler.runner import Runner, run
from bundler.sources.lock import GATE_WHEELS, SHA256_RE, GateWheels, Lock, LockedWheel, Target

logger = logging.getLogger(__name__)

MAX_ROUNDS = 8


#: What the bundle's install engine installs wheels with (pure Python, no dependencies).
INSTALLER_REQUIREMENT = "installer>=0.7"


@dataclass(frozen=True, kw_only=True)
class _Resolved:
    """One distribution of a pip report, with the metadata the marker walk needs."""

    wheel: LockedWheel
    requires_dist: tuple[Requirement, ...]


def resolve(requirements: Sequence[str], *, target: Target, runner: Runner = run, work_dir: Path) -> Lock:
    """Resolve `requirements` into a hash-pinned wheel closure for `target`, with pip doing the resolving."""
    environment = target.marker_environment()
    roots = [req for req in _parse_requirements(requirements) if _applies(req, environment, extra="")]
    normalized = tuple(sorted({str(Requirement(text)) for text in requirements}))
    if not roots:
        return Lock(target=target, requirements=normalized, wheels=())
    asked = list(dict.fromkeys(_pip_requirement(req) for req in roots))
    work_dir.mkdir(parents=True, exist_ok=True)
    for round_number in range(1, MAX_ROUNDS + 1):
        resolved = _pip_resolve(asked, target=target, runner=runner, work_dir=work_dir, round_number=round_number)
        reached, missing = _closure(roots, resolved, environment)
        if not missing:
            return _lock(target, normalized, resolved, reached)
        fresh = [text for text in missing if text not in asked]
        if not fresh:
            msg = (f"pip was asked for {', '.join(missing)} for {target.platform}/{target.python} but its "
                   f"resolution still does not satisfy them; expected pip to honour every requirement it is given.")
            raise BuildError(msg)
        logger.info("round %d: the target also needs %s", round_number, ", ".join(fresh))
        asked.extend(fresh)
    msg = (f"The dependency closure for {target.platform}/{target.python} was still incomplete after "
           f"{MAX_ROUNDS} rounds of pip; expected it to settle (last asked for: {', '.join(asked)}).")
    raise BuildError(msg)


def _parse_requirements(requirements: Sequence[str]) -> list[Requirement]:
    parsed = []
    for text in requirements:
        try:
            parsed.append(Requirement(text))
        except InvalidRequirement as exc:
            msg = f"Requirement {text!r} is not a valid PEP 508 requirement ({exc}); expected e.g. 'numpy>=1.21.6'."
            raise ManifestError(msg) from None
    return parsed


def _applies(req: Requirement, environment: Mapping[str, str], *, extra: str) -> bool:
    return req.marker is None or req.marker.evaluate({**environment, "extra": extra})


def _pip_requirement(req: Requirement) -> str:
    """The requirement as pip must see it: markers already decided for the target, so dropped."""
    if req.url:
        msg = (f"Requirement '{req}' points at a URL; locking resolves from the package index only, "
               f"expected 'name[extras]<specifier>'.")
        raise UnsupportedError(msg)
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    return f"{req.name}{extras}{req.specifier}"


def _pip_resolve(requirements: Sequence[str], *, target: Target, runner: Runner, work_dir: Path,
                 round_number: int) -> dict[str, _Resolved]:
    """One pip dry run: the distributions pip picks for the target's tags, keyed by canonical name."""
    report = work_dir / f"pip-report-{round_number}.json"
    runner([
        sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--disable-pip-version-check",
        "--report", str(report), *target.pip_target_args(), "--target", str(work_dir / "pip-target"),
        *requirements,
    ])
    return _read_report(report, target, target.supported_tags())


def _read_report(report: Path, target: Target, tags: frozenset[Tag]) -> dict[str, _Resolved]:
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        msg = f"pip's report {report} could not be read ({exc}); expected the JSON that 'pip install --report' writes."
        raise BuildError(msg) from exc
    entries = [_report_entry(item, target, tags, report) for item in data.get("install", [])]
    return {canonicalize_name(entry.wheel.name): entry for entry in entries}


def resolve_gate(requirements: Sequence[str], *, host: Target, runner: Runner = run, work_dir: Path) -> GateWheels:
    """This machine's ORT and NumPy wheels for the model gate (`requirements`: one of each), as this interpreter's
    pip would install them here: a dry run with pip's own configuration and this interpreter's tags (the gate's
    environment is made from this interpreter), wheels only, no dependencies (the gate installs none)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    report = work_dir / "pip-report-gate.json"
    runner([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
            "--only-binary", ":all:", "--disable-pip-version-check", "--report", str(report), *requirements])
    resolved = _read_report(report, host, frozenset(sys_tags()))
    if sorted(resolved) != sorted(GATE_WHEELS):
        msg = (f"pip resolved {sorted(resolved) or 'nothing'} for {' '.join(requirements)} on this machine; expected "
               f"one wheel each of {' and '.join(GATE_WHEELS)} for the model gate")
        raise BuildError(msg)
    return GateWheels(target=host, wheels=tuple(resolved[name].wheel for name in sorted(resolved)))


def _report_entry(item: Mapping[str, Any], target: Target, supported: frozenset[Tag], report: Path) -> _Resolved:
    metadata = item.get("metadata", {})
    name, version = canonicalize_name(metadata.get("name", "")), metadata.get("version", "")
    download = item.get("download_info", {})
    filename = _wheel_filename(download.get("url", ""), name, report)
    wheel_name, wheel_version, _, tags = parse_wheel_filename(filename)
    if wheel_name != name or wheel_version != Version(version):
        msg = f"pip's report {report} pairs {filename} with {name} {version}; expected the wheel of that release."
        raise BuildError(msg)
    if not tags & supported:
        msg = (f"pip resolved {filename}, whose tags {sorted(map(str, tags))} do not fit "
               f"{target.python_tag}/{target.platform}; expected a wheel the target can install.")
        raise BuildError(msg)
    sha256 = _report_sha256(download.get("archive_info", {}))
    if sha256 is None:
        msg = (f"pip resolved {filename} without a sha256 from the package index; expected an index that publishes "
               f"sha256 hashes, since every locked wheel must be hash-pinned.")
        raise InputUnavailableError(msg)
    locked = LockedWheel(name=name, version=version, filename=filename, sha256=sha256)
    return _Resolved(wheel=locked, requires_dist=_requires_dist(metadata.get("requires_dist") or [], filename))


def _requires_dist(texts: Sequence[str], filename: str) -> tuple[Requirement, ...]:
    requires = []
    for text in texts:
        try:
            requires.append(Requirement(text))
        except InvalidRequirement as exc:
            msg = (f"{filename} declares Requires-Dist {text!r}, which is not valid PEP 508 ({exc}); "
                   f"expected a valid requirement.")
            raise BuildError(msg) from None
    return tuple(requires)


def _wheel_filename(url: str, name: str, report: Path) -> str:
    """Only the last path segment survives: the rest of the URL names the package index."""
    filename = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    try:
        parse_wheel_filename(filename)
    except InvalidWheelFilename:
        msg = f"pip's report {report} resolves {name or 'a package'} to {filename!r}, not a wheel; expected a .whl file."
        raise BuildError(msg) from None
    return filename


def _report_sha256(archive_info: Mapping[str, Any]) -> str | None:
    """pip ≥ 23 fills `hashes`; older reports carry only the legacy `hash` = "sha256=…" field."""
    value = (archive_info.get("hashes") or {}).get("sha256")
    if value is None:
        algorithm, _, legacy = (archive_info.get("hash") or "").partition("=")
        value = legacy if algorithm == "sha256" else None
    value = value.lower() if value else None
    return value if value and SHA256_RE.match(value) else None


def _closure(roots: Sequence[Requirement], resolved: Mapping[str, _Resolved],
             environment: Mapping[str, str]) -> tuple[set[str], list[str]]:
    """Walk the requirements with the target's markers: what pip's result covers, and what it lacks."""
    seen_extras: dict[str, set[str]] = {}
    missing: dict[str, None] = {}
    queue = list(roots)
    while queue:
        req = queue.pop()
        name = canonicalize_name(req.name)
        entry = resolved.get(name)
        if entry is None or not req.specifier.contains(entry.wheel.version, prereleases=True):
            missing[_pip_requirement(req)] = None
            continue
        wanted = {""} | {canonicalize_name(extra) for extra in req.extras}
        new_extras = wanted - seen_extras.setdefault(name, set())
        seen_extras[name] |= new_extras
        queue.extend(dep for dep in entry.requires_dist for extra in sorted(new_extras)
                     if _applies(dep, environment, extra=extra))
    return set(seen_extras), list(missing)


def _lock(target: Target, requirements: tuple[str, ...], resolved: Mapping[str, _Resolved], reached: set[str]) -> Lock:
    dropped = sorted(set(resolved) - reached)
    if dropped:
        logger.info("left out %s: required only on the build machine, not on %s", ", ".join(dropped), target.platform)
    wheels = tuple(sorted((resolved[name].wheel for name in reached), key=lambda wheel: wheel.name))
    return Lock(target=target, requirements=requirements, wheels=wheels)


def resolve_installer(*, target: Target, runner: Runner = run, work_dir: Path) -> LockedWheel:
    """pypa's installer for the target's Python, pinned apart from the environment's closure."""
    lock = resolve([INSTALLER_REQUIREMENT], target=target, runner=runner, work_dir=work_dir / "installer")
    found = [wheel for wheel in lock.wheels if wheel.name == "installer"]
    if not found:
        msg = f"pip resolved no wheel of {INSTALLER_REQUIREMENT!r} for {target.platform}/{target.python}; expected one"
        raise BuildError(msg)
    return found[0]
