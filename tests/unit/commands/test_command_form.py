"""Every command has the one form, and `cli` only loops over the command modules.

Each module of bundler/commands (but `shared`, what several commands use) is one command: `NAME`, `HELP`,
`EXAMPLES`, `configure(parser)`, `run(args)`. The parser lists exactly those modules, in `cli.COMMANDS`'
order; a command's `--help` says what its module says; building the parser imports no command's machinery
(`bundler.operations`), so `verify` and `--help` do not pay for `build`'s; no command imports another.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.cli import REPO

from bundler import commands as commands_package
from bundler.cli import COMMANDS, build_parser, main
from bundler.commands import diff
from bundler.errors import HashMismatchError

COMMANDS_DIR = Path(commands_package.__file__).parent
NOT_COMMANDS = {"__init__", "shared"}  # the package's form and what several commands share


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(actions) == 1
    return dict(actions[0].choices)


def test_every_command_module_has_the_one_form() -> None:
    for module in COMMANDS:
        where = module.__name__
        assert module.__name__ == f"bundler.commands.{module.NAME}", f"{where}: a command's module is named after it"
        assert isinstance(module.HELP, str) and module.HELP and "\n" not in module.HELP, where
        assert isinstance(module.EXAMPLES, str) and module.EXAMPLES.startswith("examples:\n  ort-bundler "), where
        assert list(inspect.signature(module.configure).parameters) == ["parser"], where
        assert list(inspect.signature(module.run).parameters) == ["args"], where
        assert isinstance(getattr(module, "DESCRIPTION", ""), str), where
        assert isinstance(getattr(module, "GROUP", False), bool), where
        assert isinstance(getattr(module, "INTERNAL_ERROR", 1), int), where


def test_the_parser_lists_exactly_the_command_modules_in_order() -> None:
    files = {path.stem for path in COMMANDS_DIR.glob("*.py")} - NOT_COMMANDS
    names = [module.NAME for module in COMMANDS]
    assert sorted(names) == sorted(files), "every module of bundler/commands is a command listed in cli.COMMANDS"
    assert list(_subcommands(build_parser())) == names


def test_a_commands_help_is_what_its_module_says(capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapping: the module's sentence appears whole
    subparsers = _subcommands(build_parser())
    for module in COMMANDS:
        assert main([module.NAME, "--help"]) == 0
        out = capsys.readouterr().out
        assert f"\n\n{getattr(module, 'DESCRIPTION', module.HELP)}\n\n" in out, module.NAME
        assert out.rstrip().endswith(module.EXAMPLES.rstrip()), module.NAME
        takes_common = "--cache" in subparsers[module.NAME].format_help()
        assert takes_common is not getattr(module, "GROUP", False), module.NAME
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    for module in COMMANDS:
        assert f"    {module.NAME:<12} {module.HELP}\n" in listed, module.NAME


def test_building_the_parser_imports_no_commands_machinery() -> None:
    """Nor the readers or the Windows formats (`policy` took 0.3 s of every command's start-up with them)."""
    code = ("import sys; from bundler.cli import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m.startswith(('bundler.operations.', 'bundler.readers.', "
            "'bundler.platforms.windows.', 'cryptography'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=REPO)
    assert proc.stdout.strip() == "[]", proc.stdout


def test_no_command_imports_another() -> None:
    """What two commands share lives in `bundler.commands.shared`, not in one of them."""
    names = {module.NAME for module in COMMANDS}
    for module in COMMANDS:
        tree = ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported = {node.module.removeprefix("bundler.commands.")} | (
                    {alias.name for alias in node.names} if node.module == "bundler.commands" else set())
                assert not (imported & (names - {module.NAME})), f"{module.__name__} imports {node.module}"


class _Failing:
    """A command of the test's own, passed to `main` (as `commands=`): its `run` fails as told."""

    HELP = "fail"
    EXAMPLES = "examples:\n  ort-bundler fail"

    def __init__(self, name: str, error: BaseException, internal_error: int | None = None) -> None:
        self.NAME = name
        self.error = error
        if internal_error is not None:
            self.INTERNAL_ERROR = internal_error

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true")

    def run(self, args: argparse.Namespace) -> int:
        raise self.error


def test_a_failing_command_exits_with_the_code_of_its_error(capsys: pytest.CaptureFixture[str]) -> None:
    bug = _Failing("bug", RuntimeError("boom"))
    differs = _Failing("differs", RuntimeError("boom"), internal_error=diff.INTERNAL_ERROR)
    refused = _Failing("refused", HashMismatchError("x.whl: sha256 1234, expected 5678"))
    commands = (bug, differs, refused)
    assert main(["bug"], commands=commands) == 1
    assert "ort-bundler bug: internal error: RuntimeError: boom (run with --verbose" in capsys.readouterr().err
    assert diff.INTERNAL_ERROR == 70 and diff.DIFFERS == 1  # a crash of `diff` never reads as "they differ"
    assert main(["differs"], commands=commands) == 70
    assert main(["refused"], commands=commands) == HashMismatchError.return_code
    assert capsys.readouterr().err.endswith("ort-bundler refused: error: x.whl: sha256 1234, expected 5678\n")
