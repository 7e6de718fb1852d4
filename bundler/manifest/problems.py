"""Collecting every problem of a manifest before reporting them together, with the key path, what was found and
what was expected (and a 'did you mean' for a misspelt key)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any


class Problems:
    """Collects every problem in one manifest, each phrased the same way."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: list[str] = []

    def add(self, key: str, message: str) -> None:
        self.items.append(f"{self.path.name}: {key}: {message}")

    def found(self, key: str, value: object, expected: str) -> None:
        self.add(key, f"found {show(value)}, expected {expected}")

    def unknown_keys(self, key: str, table: Mapping[str, Any], allowed: AbstractSet[str]) -> None:
        for name in table:
            if name in allowed:
                continue
            close = difflib.get_close_matches(name, sorted(allowed), n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(sorted(allowed))}"
            where = f"{key}.{name}" if key else name
            self.add(where, f"unknown key{hint}")


def show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def string_at(table: Mapping[str, Any], key: str, where: str, problems: Problems, *,
            pattern: re.Pattern[str] | None = None, expected: str = "a string",
            required: bool = True) -> str | None:
    if key not in table:
        if required:
            problems.add(f"{where}.{key}", f"missing, expected {expected}")
        return None
    value = table[key]
    if not isinstance(value, str) or (pattern and not pattern.fullmatch(value)):
        problems.found(f"{where}.{key}", value, expected)
        return None
    return value
