"""What the shipped package prints is ASCII (issue 38 §8b).

On Windows, Python writes to a pipe (install.cmd's log, Intune's and ConfigMgr's capture, `run.cmd ... | more`)
in the ANSI code page, not UTF-8: `…` came out as `�` in an administrator's log, and a character the code page
lacks raises UnicodeEncodeError mid-install. Every string literal of the package except docstrings is held to
ASCII; comments and docstrings are never printed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import bundler.shipped

PACKAGE = Path(bundler.shipped.__file__).parent


def non_ascii_literals(source: str) -> list[tuple[int, str]]:
    """(line, literal) of every str constant that is not a docstring and holds a non-ASCII character."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and not node.value.isascii()]


def test_every_string_the_shipped_package_can_print_is_ascii() -> None:
    found = [f"{path.relative_to(PACKAGE)}:{line}: {text!r}" for path in sorted(PACKAGE.rglob("*.py"))
             for line, text in non_ascii_literals(path.read_text(encoding="utf-8"))]
    assert list(PACKAGE.rglob("*.py")) and not found, "\n".join(found)


def test_the_check_finds_an_ellipsis_in_a_message_but_not_in_a_docstring() -> None:
    source = 'def f():\n    """A docstring… is never printed."""\n    return f"digest {d[:12]}…"\n'
    assert non_ascii_literals(source) == [(3, "…")]
