"""Concluding a wheel's licence from the licence text it ships, when its metadata names none with certainty.

mpmath and sympy declare "BSD", which names several licences (bundler/spdx.py never guesses which), yet
their wheels ship the text itself, and the text is BSD-3-Clause. Matching a text to the SPDX licence list is
a solved problem with maintained tools; we use askalono (the `pyaskalono` bindings), which compares the text
with every SPDX licence text by normalised word bigrams and gives the closest with a score.

We conclude only what is safe to sign off on: every licence file (LICENSE*, COPYING*) is split at separator
lines (sympy's file holds five licences, one per section), every section must match one SPDX licence with a
score of at least `THRESHOLD`, and one of the matches must belong to the family the package declared ("BSD"
for BSD-3-Clause): a text that matches only something the package never claimed (askalono calls Apache-2.0
without its appendix "Pixar") is reported, not concluded. The result is the conjunction of the matches,
marked `concluded` in the SBOM with the files named; anything less stays unknown with the reason.

`lock` runs the matcher and pins each conclusion in the lock file (bundler/sources/license_pins.py), so a
build only matches a wheel the lock pins nothing for: pyaskalono 0.2 loads its licence store on every call
and holds the GIL while it matches (0.2 s a section), half the time of a first quickstart build.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

THRESHOLD = 0.85  # askalono's own CLI calls 0.8 a confident match; sympy's sections score 0.89-0.95
SEPARATOR = re.compile(r"(?m)^[ \t]*(?:-{10,}|={10,}|\*{10,})[ \t]*$")
LICENSE_FILE = re.compile(r"(LICEN[CS]E|COPYING)([._-][^/]*)?", re.IGNORECASE)
MIN_SECTION = 100  # characters: shorter pieces between separators are headings, not licence texts
MATCHER = "askalono"
MATCHER_DISTRIBUTION = "pyaskalono"
NO_MATCHER = f"and no licence text matcher ({MATCHER}) is installed"


@dataclass(frozen=True, kw_only=True)
class Conclusion:
    """An SPDX expression concluded from `files`, or why none was."""

    expression: str | None
    files: tuple[str, ...]
    reason: str | None = None


def conclude(texts: Sequence[tuple[str, bytes]], *, declared: str) -> Conclusion:
    """The licence the texts state, checked against what the package `declared` (see the module's docstring)."""
    files = tuple((path, data) for path, data in texts if LICENSE_FILE.fullmatch(path.rsplit("/", 1)[-1]))
    if not files:
        return Conclusion(expression=None, files=(), reason="and the wheel ships no licence text to match")
    return _conclude(files, declared)


@functools.cache
def _conclude(files: tuple[tuple[str, bytes], ...], declared: str) -> Conclusion:
    """Cached per process: the licence part and the SBOM part ask for the same wheel, and a match costs 0.1 s."""
    try:
        import askalono
    except ImportError:
        return Conclusion(expression=None, files=(), reason=NO_MATCHER)
    found: list[str] = []
    for path, data in files:
        for section in _sections(data.decode("utf-8", "replace")):
            match = askalono.identify(section)
            if match.score < THRESHOLD:
                return Conclusion(expression=None, files=(), reason=(
                    f"and the text of {path} matches no SPDX licence closely enough (the closest is {match.name} at "
                    f"{match.score:.2f}, {MATCHER}; {THRESHOLD} needed)"))
            found.append(match.name)
    ids = sorted(set(found))
    if not any(_family(spdx_id) in declared.casefold() for spdx_id in ids):
        return Conclusion(expression=None, files=(), reason=(
            f"and the licence text matches {' AND '.join(ids)}, which the declared licence does not name"))
    return Conclusion(expression=" AND ".join(ids), files=tuple(path for path, _ in files))


def matcher_version() -> str | None:
    """The installed matcher's version, which a pin records beside what it concluded; None when not installed."""
    from importlib import metadata  # only `lock` asks: a build need not import it

    try:
        return metadata.version(MATCHER_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def _sections(text: str) -> list[str]:
    pieces = [piece.strip() for piece in SEPARATOR.split(text)]
    return [piece for piece in pieces if len(piece) >= MIN_SECTION] or [text]


def _family(spdx_id: str) -> str:
    """"BSD-3-Clause" → "bsd", "Apache-2.0" → "apache": the word a declared licence name would contain."""
    word = re.match(r"[A-Za-z]+", spdx_id)
    return word.group(0).casefold() if word else spdx_id.casefold()
