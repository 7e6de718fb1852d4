"""The model gate's own wheels: inputs on the kind of machine the lock's [gate] table pins them for.

The gate runs each model in the very ORT version the bundle ships, on the build machine
(`bundler/assembly/ortenv.py`). When that machine cannot install the bundle's own ORT and NumPy wheels (a
win_amd64 bundle built on Linux), `lock` pins this machine's wheels of the same versions in a [gate] table:
its platform tag and Python minor, and each wheel's name, version, file name and sha256. On a machine of
that kind (same platform, same Python, the wheels' tags among its own) they are inputs like any other:
`fetch` brings them through pip, held to their hashes, and the gate's environment is made from exactly
them. Anywhere else, and with a lock written before the table existed, they are not inputs, and the gate
falls back to pip's index, unpinned, with a warning.
"""

from __future__ import annotations

import sys
import sysconfig

from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from bundler.errors import UnsupportedError
from bundler.manifest import Input
from bundler.sources.lock import GateWheels, Lock, LockedWheel, Target
from bundler.target_platform import host_platform

#: The input key of a [gate] wheel: `gate:onnxruntime`, `gate:numpy`.
GATE_KEY_PREFIX = "gate:"


def host_target() -> Target | None:
    """This machine as a [gate] table describes it (platform tag, Python minor), or None when it is not one
    of the platforms a bundle can target (the gate then runs unpinned here)."""
    platform = host_platform()
    if platform is None:
        return None
    try:
        return Target(platform=platform.tag, python=f"{sys.version_info.major}.{sys.version_info.minor}")
    except UnsupportedError:  # a Python that is no CPython 3.N minor a target can name
        return None


def host_installable(filename: str) -> bool:
    """Whether `filename` is a wheel this interpreter can install (one of its tags is the host's)."""
    if not filename.endswith(".whl"):
        return False
    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return False
    return not tags.isdisjoint(sys_tags())


def gate_problem(lock: Lock | None) -> str | None:
    """Why the lock's [gate] wheels are not this machine's, or None when they are."""
    if lock is None:
        return "the manifest has no lock"
    if lock.gate is None:
        return "the lock has no [gate] table (written before ort-bundler pinned them, or on another kind of machine)"
    host, pinned = host_target(), lock.gate.target
    if host is None:
        return (f"its [gate] table pins them for {pinned.platform} / Python {pinned.python}, and this machine "
                f"({sysconfig.get_platform()}) is none of the platforms a bundle targets")
    if host != pinned:
        return (f"its [gate] table pins them for {pinned.platform} / Python {pinned.python}, this machine is "
                f"{host.platform} / Python {host.python}")
    refused = [wheel.filename for wheel in lock.gate.wheels if not host_installable(wheel.filename)]
    if refused:
        return f"this machine's pip cannot install the [gate] table's {', '.join(refused)}"
    return None


def gate_inputs(lock: Lock | None) -> list[Input]:
    """The [gate] wheels as inputs, on the kind of machine they were pinned for; none elsewhere."""
    if lock is None or lock.gate is None or gate_problem(lock) is not None:
        return []
    return pinned_inputs(lock.gate)


def pinned_inputs(gate: GateWheels) -> list[Input]:
    return [_input(wheel) for wheel in sorted(gate.wheels, key=lambda wheel: wheel.name)]


def _input(wheel: LockedWheel) -> Input:
    return Input(key=f"{GATE_KEY_PREFIX}{wheel.name}", kind="requirement", location=f"{wheel.name}=={wheel.version}",
                 sha256=(wheel.sha256,), filename=wheel.filename)


def pip_targets(lock: Lock | None) -> dict[str, Target]:
    """Input key → the machine pip fetches it for, where that is not the bundle's target: the [gate] wheels."""
    if lock is None or lock.gate is None:
        return {}
    return {item.key: lock.gate.target for item in gate_inputs(lock)}
