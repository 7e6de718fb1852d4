"""The DLL closure as a picture: who loads what, and where each library comes from.

Two columns: the bundle's binaries that import or load something (left), the libraries they need (right),
one line per dependency. Colours say where a library comes from: the bundle, the system, the Visual C++
runtime, the Python runtime, or nowhere known (a problem the build already named). Pure geometry: the
template draws it, escaping every name.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

ROW = 20
BOX_HEIGHT = 16
LEFT_X, RIGHT_X, BOX_WIDTH = 10, 470, 300
TOP = 30
#: Where a library comes from (bundle.json's dll_closure `kind`), in the legend's order.
KINDS = ("payload", "vc_runtime", "python", "system", "unknown")
KIND_LABELS = {"payload": "in the bundle", "vc_runtime": "Visual C++ runtime", "python": "Python runtime",
               "system": "Windows system", "unknown": "not found", "importer": "bundle binary"}


@dataclass(frozen=True, kw_only=True)
class Box:
    x: int
    y: int
    label: str
    kind: str


@dataclass(frozen=True, kw_only=True)
class Line:
    x1: int
    y1: int
    x2: int
    y2: int
    kind: str
    runtime: bool  # loaded by name at run time (dashed), not imported


@dataclass(frozen=True, kw_only=True)
class ClosurePicture:
    width: int
    height: int
    boxes: tuple[Box, ...]
    lines: tuple[Line, ...]
    legend: tuple[tuple[str, str], ...]  # (kind, label)

    @property
    def empty(self) -> bool:
        return not self.boxes


@dataclass(frozen=True, kw_only=True)
class Dependency:
    importer: str
    dll: str
    kind: str
    runtime: bool


def closure_picture(dependencies: Iterable[Dependency]) -> ClosurePicture:
    deps = sorted(set(dependencies), key=lambda d: (d.importer.lower(), d.dll.lower()))
    importers = sorted({d.importer for d in deps}, key=str.lower)
    libraries: dict[str, str] = {}
    for dep in deps:
        libraries.setdefault(dep.dll.lower(), dep.kind)
    ordered = sorted(libraries, key=lambda name: (KINDS.index(libraries[name]) if libraries[name] in KINDS
                                                  else len(KINDS), name))
    names = {d.dll.lower(): d.dll for d in deps}
    left = {name: TOP + i * ROW for i, name in enumerate(importers)}
    right = {name: TOP + i * ROW for i, name in enumerate(ordered)}
    boxes = [Box(x=LEFT_X, y=y, label=name, kind="importer") for name, y in left.items()]
    boxes += [Box(x=RIGHT_X, y=y, label=names[name], kind=libraries[name]) for name, y in right.items()]
    middle = BOX_HEIGHT // 2
    lines = [Line(x1=LEFT_X + BOX_WIDTH, y1=left[d.importer] + middle, x2=RIGHT_X, y2=right[d.dll.lower()] + middle,
                  kind=libraries[d.dll.lower()], runtime=d.runtime) for d in deps]
    height = TOP + max(len(importers), len(ordered), 1) * ROW + 10
    legend = tuple((kind, KIND_LABELS[kind]) for kind in ("importer", *KINDS))
    return ClosurePicture(width=RIGHT_X + BOX_WIDTH + 10, height=height, boxes=tuple(boxes), lines=tuple(lines),
                          legend=legend)
