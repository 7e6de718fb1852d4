"""Outside the platform backends (`bundler/platforms/`) no build code asks which platform it builds for.

A target's identity (`bundler.target_platform.TargetPlatform`) carries values (line endings, venv layout, binary
format, ...) that code reads; what a target does differently is its backend's. A `.windows` flag, or a comparison
with a platform's tag or name, anywhere else is a branch a new target would have to find and edit. The code that
ships to the install machine (`bundler/shipped/ort_bundle/`) is not build code: it asks the machine it runs on (`os.name`),
which is its job, and is held only to the `.windows` rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from fixtures.cli import REPO

from bundler.target_platform import TARGETS

BUNDLER = REPO / "bundler"
BACKENDS = BUNDLER / "platforms"
IDENTITY = BUNDLER / "target_platform.py"
TARGET = BUNDLER / "shipped"
#: What a platform test compares with: every target's tag and name, and the names of the identities themselves.
PLATFORM_WORDS = frozenset({*TARGETS, *(t.name for t in TARGETS.values())})
IDENTITIES = frozenset({"WINDOWS", "LINUX"})
#: Values naming a platform, whose (in)equality with anything but None is a platform test.
PLATFORM_FIELDS = frozenset({"platform", "binary_format", "runtime_layout", "archive_os"})


def _questions(tree: ast.AST, *, build_side: bool) -> list[tuple[int, str]]:
    """(line, what) of every place the module asks which platform it is."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "windows":
            found.append((node.lineno, "a `.windows` flag"))
        elif build_side and isinstance(node, ast.Compare) and (what := _platform_test(node)):
            found.append((node.lineno, what))
    return found


def _platform_test(node: ast.Compare) -> str | None:
    operands = [node.left, *node.comparators]
    for operand in operands:
        if isinstance(operand, ast.Constant) and operand.value in PLATFORM_WORDS:
            return f"a comparison with {operand.value!r}"
        named = operand.value if isinstance(operand, ast.Attribute) else operand
        if isinstance(named, ast.Name) and named.id in IDENTITIES:
            return f"a comparison with {named.id}"
    if any(isinstance(operand, ast.Constant) and operand.value is None for operand in operands):
        return None
    if not any(isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)) for op in node.ops):
        return None
    for operand in operands:
        name = operand.attr if isinstance(operand, ast.Attribute) else getattr(operand, "id", None)
        if name in PLATFORM_FIELDS:
            return f"`{name}` compared for (in)equality"
    return None


def _modules() -> list[Path]:
    return sorted(p for p in BUNDLER.rglob("*.py") if BACKENDS not in p.parents and p != IDENTITY)


@pytest.mark.parametrize("module", _modules(), ids=lambda p: p.relative_to(BUNDLER).as_posix())
def test_no_module_outside_the_backends_asks_which_platform_it_is(module: Path) -> None:
    tree = ast.parse(module.read_text(encoding="utf-8"), filename=str(module))
    questions = _questions(tree, build_side=TARGET not in module.parents)
    assert questions == [], "\n".join(f"{module.name}:{line}: {what}; read a TargetPlatform value or ask the "
                                      f"backend (bundler/platforms/) instead" for line, what in questions)


@pytest.mark.parametrize(("source", "question"), [
    ("if build.target.windows:\n    pass", "a `.windows` flag"),
    ("ok = manifest.bundle.platform == 'win_amd64'", "a comparison with 'win_amd64'"),
    ("ok = tag != LINUX.tag", "a comparison with LINUX"),
    ("ok = target is WINDOWS", "a comparison with WINDOWS"),
    ("ok = target.binary_format == wanted", "`binary_format` compared for (in)equality"),
    ("ok = platform != other", "`platform` compared for (in)equality"),
    ("ok = 'linux' in name", "a comparison with 'linux'"),
])
def test_the_check_finds_each_way_of_asking(source: str, question: str) -> None:
    assert [what for _, what in _questions(ast.parse(source), build_side=True)] == [question]


def test_the_check_lets_values_and_validity_checks_through() -> None:
    source = ("newline = TARGETS[platform].newline\nok = platform in TARGETS\nok = platform is None\n"
              "ok = program.endswith(target.program_suffix)\nok = kind == 'embeddable'\nok = tag == DT_NULL\n")
    assert _questions(ast.parse(source), build_side=True) == []
