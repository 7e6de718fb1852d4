"""Licence declarations as SPDX expressions, decided with the license-expression package's SPDX index.

A package states its licence in one of three places: `License-Expression` (SPDX, PEP 639), the free-text
`License` field, or trove classifiers. An SPDX expression is accepted when every symbol is in the SPDX
index the license-expression package maintains (it also knows deprecated forms such as `GPL-2.0+`).
Free text and classifiers are mapped only through the tables below, which list the spellings whose
meaning is certain ("3-Clause BSD License" is BSD-3-Clause); a name that covers several licences
("BSD", "BSD License", "Apache Software License") is never guessed: the text is kept as the package
wrote it and the finding says why no mapping is certain.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import Message

from license_expression import Licensing, get_spdx_licensing

# Free-text licence names (compared case-insensitively, white space collapsed) with one certain meaning.
WELL_KNOWN = {
    "apache 2": "Apache-2.0",
    "apache 2.0": "Apache-2.0",
    "apache license 2.0": "Apache-2.0",
    "apache license, version 2.0": "Apache-2.0",
    "apache license version 2.0": "Apache-2.0",
    "apache software license 2.0": "Apache-2.0",
    "mit license": "MIT",
    "the mit license": "MIT",
    "3-clause bsd license": "BSD-3-Clause",
    "bsd 3-clause": "BSD-3-Clause",
    "bsd 3-clause license": "BSD-3-Clause",
    "bsd-3": "BSD-3-Clause",
    "new bsd license": "BSD-3-Clause",
    "modified bsd license": "BSD-3-Clause",
    "revised bsd license": "BSD-3-Clause",
    "2-clause bsd license": "BSD-2-Clause",
    "bsd 2-clause": "BSD-2-Clause",
    "bsd 2-clause license": "BSD-2-Clause",
    "simplified bsd license": "BSD-2-Clause",
    "isc license": "ISC",
    "python software foundation license": "PSF-2.0",
    "mozilla public license 2.0": "MPL-2.0",
    "mpl 2.0": "MPL-2.0",
}
# Trove classifiers that name exactly one licence. "BSD License", "Apache Software License" and the GPL
# classifiers without "or later" do not, so they are absent on purpose.
CLASSIFIERS = {
    "License :: OSI Approved :: MIT License": "MIT",
    "License :: OSI Approved :: MIT No Attribution License (MIT-0)": "MIT-0",
    "License :: OSI Approved :: ISC License (ISCL)": "ISC",
    "License :: OSI Approved :: Python Software Foundation License": "PSF-2.0",
    "License :: OSI Approved :: zlib/libpng License": "Zlib",
    "License :: OSI Approved :: Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "License :: OSI Approved :: The Unlicense (Unlicense)": "Unlicense",
    "License :: OSI Approved :: Boost Software License 1.0 (BSL-1.0)": "BSL-1.0",
    "License :: CC0 1.0 Universal (CC0 1.0) Public Domain Dedication": "CC0-1.0",
}
LICENSE_REF_RE = re.compile(r"(DocumentRef-[A-Za-z0-9.-]+:)?LicenseRef-[A-Za-z0-9.-]+")
MAX_NAME = 100  # a longer License field is a pasted licence text, not a name


@dataclass(frozen=True, kw_only=True)
class LicenseFinding:
    """A component's licence: an SPDX expression when certain, else what was declared and why it is not mapped."""

    expression: str | None  # SPDX, normalised by the index
    declared: str | None  # as the package or manifest wrote it
    source: str  # "License-Expression", "License", "Classifier", "manifest", "ort-bundler", "licence text"
    reason: str | None = None  # why there is no expression; None when there is one
    # The licence files an expression was concluded from (bundler/license_match.py), not declared by the package.
    concluded_from: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """One line for messages and the licence index."""
        if self.expression and self.concluded_from:
            return f"{self.expression}, concluded from the text of {', '.join(self.concluded_from)}"
        if self.expression:
            return self.expression
        return f"unknown: {self.declared!r} {self.reason}" if self.declared else f"unknown: {self.reason}"


@functools.cache
def _licensing() -> Licensing:
    """Loading the index costs tens of milliseconds: only when a licence is looked up, once per process."""
    return get_spdx_licensing()


def spdx_expression(text: str) -> str | None:
    """The normalised SPDX expression if `text` is one whose every symbol the index knows (or is a
    `LicenseRef-` of the user's own, which SPDX allows for licences it does not list), else None."""
    licensing = _licensing()
    info = licensing.validate(text.strip())
    if not info.errors:
        return str(info.normalized_expression)
    if info.invalid_symbols and all(LICENSE_REF_RE.fullmatch(s) for s in info.invalid_symbols) and all(
            e.startswith("Unknown license key") for e in info.errors):
        return str(licensing.parse(text.strip(), validate=False).render())
    return None


def checked(text: str, *, source: str) -> LicenseFinding:
    """A licence given as SPDX (the manifest's, ours): unknown symbols are reported, not guessed."""
    expression = spdx_expression(text)
    reason = None if expression else "not an SPDX expression the SPDX index knows"
    return LicenseFinding(expression=expression, declared=text, source=source, reason=reason)


def metadata_license(metadata: Message) -> LicenseFinding | None:
    """The licence a wheel's METADATA declares, mapped to SPDX where certain; None when it declares none."""
    expression = (metadata.get("License-Expression") or "").strip()
    if expression:
        return checked(expression, source="License-Expression")
    value = _short_license(metadata.get("License"))
    classifiers = [c for c in metadata.get_all("Classifier") or () if c.startswith("License ::")]
    if value:
        mapped = spdx_expression(value) or WELL_KNOWN.get(_normalised(value))
        if mapped:
            return LicenseFinding(expression=mapped, declared=value, source="License")
    from_classifiers = _classifier_license(classifiers)
    if from_classifiers:
        return LicenseFinding(expression=from_classifiers, declared=value or "; ".join(classifiers), source="Classifier")
    if not value and not classifiers:
        return None
    return LicenseFinding(expression=None, declared=value or "; ".join(classifiers),
                          source="License" if value else "Classifier",
                          reason="is no SPDX expression and names no single SPDX licence")


def _short_license(value: str | None) -> str | None:
    """A one-line License field; a pasted licence text (older wheels do that) or UNKNOWN is not a name."""
    text = (value or "").strip()
    if not text or "\n" in text or len(text) > MAX_NAME or text.upper() == "UNKNOWN":
        return None
    return text


def _normalised(value: str) -> str:
    return re.sub(r"\s+", " ", value).strip().casefold()


def _classifier_license(classifiers: Sequence[str]) -> str | None:
    """The licence the classifiers name, when every one of them maps and they agree."""
    mapped = {CLASSIFIERS.get(c) for c in classifiers}
    if len(mapped) == 1 and None not in mapped:
        return mapped.pop()
    return None
