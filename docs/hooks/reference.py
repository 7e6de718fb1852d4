"""The reference pages' generated parts, made from the code they describe (an MkDocs hook, `hooks:` in mkdocs.yml).

A hand-written page holds a marker such as `<!-- generated: commands -->`; when MkDocs reads the page, the
marker is replaced by Markdown made from the one definition the program itself uses: the commands from the
argparse parser (`bundler.cli.build_parser`), the exit codes from `bundler/errors.py` (and the installer's from
`bundler.shipped.ort_bundle.records.INSTALL_EXIT_CODES`), the manifest's keys from the sets the manifest parser checks
(`bundler/manifest`). So a command, option, exit code or key added in the code appears in the site without
anyone editing a page, and the output depends on nothing but the code (no terminal width, no home folder).

The functions are also imported by tests/repo/test_docs_reference.py, which holds the pages to the parser.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# The tree being documented comes first on sys.path, before any ort-bundler installed in the environment.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The options every command takes (`bundler.commands.shared.add_common_options`) plus argparse's `--help`: listed once.
COMMON_DESTS = frozenset({"help", "verbose", "quiet", "cache"})
USAGE_WIDTH = "100"  # argparse wraps usage lines at $COLUMNS: fixed, so the page is the same on every machine


def _escape(text: str) -> str:
    """Markdown-safe text outside code spans: no raw HTML (`<name>`), no emphasis from `*`, no table pipes."""
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:  # a code span stays as written
            out.append(part)
        else:
            out.append(part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                       .replace("*", r"\*").replace("|", r"\|").replace("_", r"\_"))
    return "".join(out)


def _machine_neutral(text: str) -> str:
    """Help text that names this machine's cache folder says where it is on any machine instead."""
    from bundler.sources.cache import default_cache_dir

    return text.replace(str(default_cache_dir()), "the user cache directory, ~/.cache/ort-bundler on Linux")


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    """(name, parser, one-line help) of each subcommand, in the order the parser lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, sub, helps.get(name, "")


def command_names(parser: argparse.ArgumentParser | None = None) -> list[str]:
    """Every command the parser has, nested ones as `cache push`."""
    parser = parser or _parser()
    names: list[str] = []

    def walk(p: argparse.ArgumentParser, prefix: str) -> None:
        for name, sub, _ in _subcommands(p):
            full = f"{prefix}{name}"
            names.append(full)
            walk(sub, f"{full} ")

    walk(parser, "")
    return names


def options_of(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string and positional name of one parser (its own and those from its parents)."""
    found: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        found.extend(action.option_strings or [action.metavar if isinstance(action.metavar, str) else action.dest])
    return found


def _parser() -> argparse.ArgumentParser:
    from bundler.cli import build_parser

    return build_parser()


def _usage(parser: argparse.ArgumentParser) -> str:
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = USAGE_WIDTH
    try:
        return _machine_neutral(parser.format_usage().strip().removeprefix("usage: "))
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def _option_line(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    if action.option_strings:
        metavar = "" if action.nargs == 0 else " " + formatter._format_args(action, action.dest.upper())
        name = ", ".join(action.option_strings) + metavar
    else:
        name = formatter._format_args(action, action.dest)
    text = _machine_neutral(formatter._expand_help(action)) if action.help else ""
    line = f"- `{name}`"
    if action.required and action.option_strings:
        line += " (required)"
    default = action.default
    if action.option_strings and action.nargs != 0 and default not in (None, argparse.SUPPRESS, [], "") \
            and "default" not in text:
        line += f" (default: `{_machine_neutral(str(default))}`)"
    return line + (f": {_escape(text)}" if text else "")


def _command_section(name: str, parser: argparse.ArgumentParser, help_text: str, level: int) -> list[str]:
    anchor = name.replace(" ", "-")
    lines = [f"{'#' * level} ort-bundler {name} {{#{anchor}}}", ""]
    description = parser.description or help_text
    if description:
        lines += [_escape(_machine_neutral(description)), ""]
    lines += ["```text", _usage(parser), "```", ""]
    # A command that takes the common options links to them; one that only has --help (a group such as `cache`)
    # lists it.
    takes_common = any(a.dest in COMMON_DESTS - {"help"} for a in parser._actions)
    skipped = COMMON_DESTS if takes_common else frozenset()
    own = [a for a in parser._actions if not isinstance(a, argparse._SubParsersAction) and a.dest not in skipped]
    positionals = [a for a in own if not a.option_strings]
    optionals = [a for a in own if a.option_strings]
    if positionals:
        lines += ["Arguments:", ""] + [_option_line(parser, a) for a in positionals] + [""]
    if optionals:
        lines += ["Options:", ""] + [_option_line(parser, a) for a in optionals] + [""]
    if takes_common:
        lines += ["And the [options every command takes](#common-options).", ""]
    if parser.epilog:
        lines += ["```text", parser.epilog.strip(), "```", ""]
    for sub_name, sub, sub_help in _subcommands(parser):
        lines += _command_section(f"{name} {sub_name}", sub, sub_help, level + 1)
    return lines


def commands_markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """The reference of every command: usage, arguments, options and examples, as the parser defines them."""
    parser = parser or _parser()
    lines = ["## Options every command takes {#common-options}", "",
             "Accepted before the command (`ort-bundler --cache DIR build …`) and after it.", "",
             "```text", _usage(parser), "```", ""]
    lines += [_option_line(parser, a) for a in parser._actions
              if a.option_strings and not isinstance(a, argparse._SubParsersAction)]
    lines.append("")
    lines += ["| command | what it does |", "|---|---|"]
    for name, _sub, help_text in _subcommands(parser):
        lines.append(f"| [`{name}`](#{name}) | {_escape(help_text)} |")
    lines.append("")
    for name, sub, help_text in _subcommands(parser):
        lines += _command_section(name, sub, help_text, 2)
    return "\n".join(lines).rstrip() + "\n"


# -- exit codes ----------------------------------------------------------------------------------------------


def _doc_line(cls: type) -> str:
    doc = cls.__dict__.get("__doc__") or ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def exit_code_rows() -> list[tuple[int, str, str]]:
    """(code, class, meaning) of every error class in bundler/errors.py, by code."""
    from bundler import errors

    rows: list[tuple[int, str, str]] = []
    for name, cls in inspect.getmembers(errors, inspect.isclass):
        if cls.__module__ != errors.__name__ or not issubclass(cls, errors.BundleError):
            continue
        if cls is errors.BundleError:
            meaning = ("An unexpected internal error: a bug (any failure that is not one of the classes below); please "
                       "report it with the `--verbose` output")
        else:
            meaning = _doc_line(cls)
            if not meaning:
                msg = f"bundler/errors.py: {name} has no docstring; its first line is what exit code " \
                      f"{cls.return_code} means in the documentation"
                raise ValueError(msg)
        rows.append((cls.return_code, name, meaning))
    return sorted(rows)


#: What each of the installer's exit codes means, by its name in INSTALL_EXIT_CODES (bundler/shipped/ort_bundle/records.py).
INSTALL_CODE_MEANINGS = {
    "ok": "success",
    "reboot": "success; a reboot is needed (the VC++ runtime asked for one): a soft reboot for Intune and ConfigMgr",
    "retry": "another install or removal of this bundle is running: retry",
    "usage": "usage error, or an install folder that is not ours",
    "integrity": "integrity: a file differs from SHA256SUMS or the receipt, or a signature check failed",
    "prerequisite": "a missing prerequisite (the target Python, a 64-bit Python, openssl for `--trust`)",
    "install": "the install failed",
    "selfcheck": "the self-check failed (the previous installation, if any, stays)",
    "in_use": "files of the installation are in use: nothing was changed, retry",
}


def exit_codes_markdown() -> str:
    from bundler.shipped.ort_bundle.records import INSTALL_EXIT_CODES

    lines = ["| code | error class | meaning |", "|---|---|---|", "| 0 | | success |"]
    lines += [f"| {code} | `{name}` | {_escape(meaning)} |" for code, name, meaning in exit_code_rows()]
    lines += ["", "## The installer's exit codes {#installer}", "",
              "`install.sh`, `install.cmd`, `install.ps1`, the uninstallers and `run.sh --verify` / `run.cmd --verify` "
              "(from `INSTALL_EXIT_CODES` in `bundler/shipped/ort_bundle/records.py`):", "",
              "| code | name | meaning |", "|---|---|---|"]
    missing = sorted(set(INSTALL_EXIT_CODES) - set(INSTALL_CODE_MEANINGS))
    if missing:
        msg = f"docs/hooks/reference.py: INSTALL_CODE_MEANINGS has no meaning for {', '.join(missing)}"
        raise ValueError(msg)
    for name, code in sorted(INSTALL_EXIT_CODES.items(), key=lambda item: item[1]):
        lines.append(f"| {code} | `{name}` | {_escape(INSTALL_CODE_MEANINGS[name])} |")
    return "\n".join(lines) + "\n"


# -- the manifest's keys -------------------------------------------------------------------------------------

def manifest_tables() -> dict[str, dict[str, str]]:
    """Each table of the manifest and what each of its keys means, from the parser's own schema."""
    from bundler.manifest.schema import INPUT, TABLES

    return {table.name: dict(table.keys) for table in (*TABLES, INPUT)}


def _input_keys(table: str) -> dict[str, str]:
    """The input table's keys, where `table` is an input table, described by reference to [Inputs](#inputs)."""
    from bundler.manifest.schema import INPUT, TABLES

    if not any(t.name == table and t.takes_input for t in TABLES):
        return {}
    return {key: f"as in [an input table](#inputs): {doc}" for key, doc in INPUT.keys.items()}


def manifest_keys_markdown() -> str:
    tables = manifest_tables()
    from bundler.manifest.schema import TABLES

    arrays = {table.name for table in TABLES if table.array}
    lines: list[str] = []
    for table in sorted(tables, key=lambda t: (t == "input", t)):
        if table == "input":
            heading = "Inputs {#inputs}"
            intro = ("Every input (`[ort] capi`, `wheel`, `archive`, `[python] runtime`, `[vc_redist]`, "
                     "`[[gpu.sources]]`, `[[models]]`, `[[models.data]]`, `[launch] script` and `program`) is a "
                     "table with exactly one source (`url`, `path` or `requirement`) and its `sha256`.")
        else:
            heading = f"`[[{table}]]`" if table in arrays else f"`[{table}]`"
            anchor = table.replace(".", "-")
            heading += f" {{#{anchor}}}"
            intro = ""
        lines += [f"### {heading}", ""] + ([intro, ""] if intro else [])
        lines += ["| key | what it is |", "|---|---|"]
        for key, doc in sorted({**_input_keys(table), **tables[table]}.items()):
            lines.append(f"| `{key}` | {doc} |")
        lines.append("")
    return "\n".join(lines)


MARKERS: dict[str, Callable[[], str]] = {
    "<!-- generated: commands -->": commands_markdown,
    "<!-- generated: exit-codes -->": exit_codes_markdown,
    "<!-- generated: manifest-keys -->": manifest_keys_markdown,
}


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs' hook: replace each marker on a page with what it stands for."""
    for marker, make in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown
