"""bundler/shipped/ort_bundle imports only the standard library at module level (it ships to a machine where nothing
else may be installed yet); third-party packages are imported inside the functions that need them. Its modules
import each other relatively only, and every such import names a module of the package.

lint-imports keeps the shipped package from the build side and names the functions' third-party imports
([tool.importlinter] in pyproject.toml), but only per module; this test holds each module's top level.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import bundler.shipped.ort_bundle

TARGET = Path(bundler.shipped.ort_bundle.__file__).parent
SOURCES = sorted(TARGET.rglob("*.py"))


def module_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports that run when the module is imported: everywhere but inside a function."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        pending.extend(ast.iter_child_nodes(node))


def outside_stdlib(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        if node.level:
            return []  # another module of the package
        names = [node.module or ""]
    else:
        names = [alias.name for alias in node.names]
    return [name for name in names if name.split(".")[0] not in sys.stdlib_module_names]


def test_the_target_imports_only_the_standard_library_at_module_level() -> None:
    found = [f"{path.relative_to(TARGET)}:{node.lineno} imports {name}"
             for path in SOURCES
             for node in module_level_imports(ast.parse(path.read_text(encoding="utf-8")))
             for name in outside_stdlib(node)]
    assert not found, "import these inside the functions that use them:\n" + "\n".join(found)


def test_the_check_sees_an_import_at_module_level_and_not_one_in_a_function() -> None:
    tree = ast.parse("import os\ntry:\n    import numpy\nexcept ImportError:\n    pass\n\n\n"
                     "def f():\n    import onnxruntime\n\n\nclass C:\n    import requests\n")
    assert sorted(name for node in module_level_imports(tree) for name in outside_stdlib(node)) == ["numpy", "requests"]


def imports_of_the_package(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line, the module's dotted name below TARGET or the absolute name, relative?) of every import of `path` that
    names the package or ort-bundler, in functions too."""
    package = list(path.relative_to(TARGET).parent.parts)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
            if node.module:
                yield node.lineno, ".".join([*base, node.module]), True
            else:
                yield from ((node.lineno, ".".join([*base, alias.name]), True) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("bundler", "ort_bundle"):
            yield node.lineno, node.module or "", False
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name, False) for alias in node.names
                        if alias.name.split(".")[0] in ("bundler", "ort_bundle"))


def resolves(dotted: str) -> bool:
    """A module or package of the shipped folder, or a name defined in one (`from . import x` of a module x)."""
    path = TARGET.joinpath(*dotted.split(".")) if dotted else TARGET
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_the_shipped_package_imports_itself_relatively_and_only_what_it_holds() -> None:
    """The package runs from payload/ort_bundle, installer/ort_bundle and site-packages alike: an absolute import
    would find another copy (or none), and a relative one naming no file of the package fails only on the target."""
    found = [f"{path.relative_to(TARGET)}:{line} imports {name}" + ("" if relative else " absolutely")
             for path in SOURCES for line, name, relative in imports_of_the_package(path)
             if not relative or not resolves(name)]
    assert not found, "\n".join(found)


def test_the_import_check_sees_an_absolute_import_and_a_missing_module(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("from bundler.shipped.ort_bundle.records import X\n\n\ndef f():\n    from .nowhere import y\n"
                      "    from . import records\n")
    (tmp_path / "__init__.py").write_text("")
    global TARGET
    saved, TARGET = TARGET, tmp_path
    try:
        found = sorted(imports_of_the_package(source))
        assert found == [(1, "bundler.shipped.ort_bundle.records", False), (5, "nowhere", True), (6, "records", True)]
        assert not resolves("nowhere") and not resolves("records")
    finally:
        TARGET = saved
    assert resolves("records") and resolves("engine.windows.windows_setup") and resolves("selfcheck")


def test_every_subfolder_of_the_package_is_a_package() -> None:
    """The start file's finder knows `ort_bundle.a.b` only as a/b.py or a/b/__init__.py: a folder of modules with no
    __init__.py would be a namespace package in site-packages and nothing at all from the bundle."""
    folders = {path.parent for path in SOURCES}
    assert sorted(str(folder.relative_to(TARGET)) for folder in folders if not (folder / "__init__.py").is_file()) == []
