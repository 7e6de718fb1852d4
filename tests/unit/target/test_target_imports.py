"""bundler/target imports only the standard library at module level (it ships to a machine where nothing else
may be installed yet); third-party packages are imported inside the functions that need them.

lint-imports keeps the target from the build side and names the functions' third-party imports
([tool.importlinter] in pyproject.toml), but only per module; this test holds each module's top level.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import bundler.target
from bundler.assembly.launch import ENGINE_MODULES, SANDBOX_MODULES

TARGET = Path(bundler.target.__file__).parent


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
        if node.level or (node.module or "").startswith("bundler.target"):
            return []  # another target module (the self-check imports them absolutely, the build inlines them)
        names = [node.module or ""]
    else:
        names = [alias.name for alias in node.names]
    return [name for name in names if name.split(".")[0] not in sys.stdlib_module_names]


def test_the_target_imports_only_the_standard_library_at_module_level() -> None:
    found = [f"{path.name}:{node.lineno} imports {name}"
             for path in sorted(TARGET.glob("*.py"))
             for node in module_level_imports(ast.parse(path.read_text(encoding="utf-8")))
             for name in outside_stdlib(node)]
    assert not found, "import these inside the functions that use them:\n" + "\n".join(found)


def test_the_check_sees_an_import_at_module_level_and_not_one_in_a_function() -> None:
    tree = ast.parse("import os\ntry:\n    import numpy\nexcept ImportError:\n    pass\n\n\n"
                     "def f():\n    import onnxruntime\n\n\nclass C:\n    import requests\n")
    assert sorted(name for node in module_level_imports(tree) for name in outside_stdlib(node)) == ["numpy", "requests"]


def target_modules_imported(source: str) -> set[str]:
    """The target modules a module imports relatively (`from . import x`, `from .x import y`), in functions too."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {f"{node.module}.py"} if node.module else {f"{alias.name}.py" for alias in node.names}
    return found


def missing_from(shipped: tuple[str, ...]) -> list[str]:
    return [f"{name} imports {imported}, which is not shipped with it" for name in shipped
            for imported in sorted(target_modules_imported((TARGET / name).read_text(encoding="utf-8")))
            if imported not in shipped]


def test_the_shipped_engine_and_sandbox_carry_every_target_module_they_import() -> None:
    """The engine runs from the bundle's and the install's `ortengine` package, try-in-sandbox from the bundle's:
    a module split off another must be listed in launch.py too, or the import fails only on the target."""
    assert not missing_from(ENGINE_MODULES), missing_from(ENGINE_MODULES)
    assert not missing_from((*ENGINE_MODULES, *SANDBOX_MODULES)), missing_from((*ENGINE_MODULES, *SANDBOX_MODULES))


def test_the_shipping_check_sees_a_lazy_import_and_both_forms() -> None:
    source = "from . import disk_space\nfrom .records import X\n\n\ndef f():\n    from .windows_setup import main\n"
    assert target_modules_imported(source) == {"disk_space.py", "records.py", "windows_setup.py"}
    assert missing_from(("engine.py",)) != []
