"""The documentation names what the program has: every command, option, exit code and manifest key.

The reference pages are generated from the parser, bundler/errors.py and the manifest's key sets when the site
is built (docs/hooks/reference.py); these tests walk those definitions themselves, independently of the
generator, and hold the built site, the README and the hand-written command pages to them. They also prove
that the strict build fails on what it is there to catch: a page left out of the navigation, a broken link.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.docs_site import ROOT, build_site, copy_docs_tree, reference_hook

from bundler import errors
from bundler.cli import build_parser
from bundler.errors import ManifestError
from bundler.manifest import load
from bundler.manifest.inputs import INPUT_KEYS
from bundler.manifest.models import DATA_KEYS, MODEL_KEYS
from bundler.manifest.parse import KEYS, SECTIONS
from bundler.manifest.schema import TABLES, Table

README = ROOT / "README.md"
README_LIMIT = 8 * 1024


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every command and nested command (`cache push`) of the parser, walked here and not by the generator."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[prefix + name] = sub
                found.update(_commands(sub, f"{prefix}{name} "))
    return found


def _leaf_commands() -> list[str]:
    """The commands a user runs: a command with subcommands (`cache`) is run through them."""
    commands = _commands(build_parser())
    return [name for name in commands if not any(other.startswith(name + " ") for other in commands)]


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [option for action in parser._actions for option in action.option_strings]


def _html_text(path: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("site")
    result = build_site(dest)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    return dest


def test_the_site_builds_strictly_with_every_section(site: Path) -> None:
    for page in ("index.html", "get-started/install.html", "get-started/first-bundle.html",
                 "get-started/first-windows-bundle.html", "how-to/gpu.html", "how-to/intune-configmgr.html",
                 "how-to/msi.html", "how-to/signing.html", "how-to/team-registry.html", "how-to/reproduce.html",
                 "how-to/review-with-diff.html", "how-to/air-gapped.html", "reference/commands.html",
                 "reference/manifest.html", "reference/exit-codes.html", "explanation/how-the-build-works.html",
                 "explanation/install.html", "explanation/trust-model.html", "facts.html", "limitations.html",
                 "changelog.html"):
        assert (site / page).is_file(), f"the site has no {page}"


def test_the_generated_command_reference_lists_every_command_and_option(site: Path) -> None:
    """The options every command takes are listed once, and each command that takes them links there."""
    text = _html_text(site / "reference" / "commands.html")
    sections = re.split(r"(?=ort-bundler [a-z][a-z ]*¶)", text)
    common = set(_options(build_parser()))
    for option in common:
        assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", sections[0]), \
            f"reference/commands.html does not list the common option {option}"
    for name, parser in _commands(build_parser()).items():
        section = next((s for s in sections if s.startswith(f"ort-bundler {name}¶")), None)
        assert section is not None, f"reference/commands.html has no section for `ort-bundler {name}`"
        for option in _options(parser):
            if option in common and "--verbose" in _options(parser):
                assert "options every command takes" in section, f"`ort-bundler {name}` does not link {option}"
                continue
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", section), \
                f"reference/commands.html: `ort-bundler {name}` does not list {option}"


def test_every_command_appears_in_the_readme_and_the_command_pages() -> None:
    readme = README.read_text(encoding="utf-8")
    details = (ROOT / "docs" / "reference" / "command-details.md").read_text(encoding="utf-8")
    for name in _leaf_commands():
        assert f"| `{name}` |" in readme, f"README.md's command table has no row for `{name}`"
        assert re.search(rf"^## {re.escape(name)} \{{#", details, re.M), \
            f"docs/reference/command-details.md has no section for `{name}`"
    rows = re.findall(r"^\| `([a-z][a-z ]*)` \|", readme, re.M)
    assert sorted(rows) == sorted(_leaf_commands()), "README.md's command table lists a command the parser lacks"


def test_every_exit_code_appears_in_the_reference_and_the_readme(site: Path) -> None:
    text = _html_text(site / "reference" / "exit-codes.html")
    readme = README.read_text(encoding="utf-8")
    classes = [cls for cls in vars(errors).values()
               if isinstance(cls, type) and issubclass(cls, errors.BundleError)]
    assert len(classes) >= 9
    for cls in classes:
        assert re.search(rf"\b{cls.return_code}\s*{cls.__name__}\b", text), \
            f"reference/exit-codes.html has no row for {cls.__name__} (exit {cls.return_code})"
        if cls is not errors.BundleError:
            assert re.search(rf"\b{cls.return_code} [a-z]", readme), f"README.md names no exit code {cls.return_code}"
    from bundler.shipped.ort_bundle.records import INSTALL_EXIT_CODES

    for name, code in INSTALL_EXIT_CODES.items():
        assert re.search(rf"\b{code}\s*{name}\b", text), f"reference/exit-codes.html lacks the installer's {name}"


def test_every_manifest_key_appears_in_the_reference(site: Path) -> None:
    page = (site / "reference" / "manifest.html").read_text(encoding="utf-8")
    tables = {**{section: KEYS.get(section, set()) for section in SECTIONS}, **KEYS,
              "models": MODEL_KEYS, "models.data": DATA_KEYS, "inputs": INPUT_KEYS}
    for table, keys in tables.items():
        anchor = table.replace(".", "-")
        match = re.search(rf'id="{anchor}".*?</table>', page, re.S)
        assert match, f"reference/manifest.html has no table for [{table}]"
        for key in keys:
            assert f"<code>{key}</code>" in match.group(0), f"reference/manifest.html: [{table}] does not list {key}"


@pytest.mark.parametrize("table", [t for t in TABLES if "." not in t.name and not t.array])
def test_the_parser_accepts_exactly_the_documented_keys(tmp_path: Path, table: Table) -> None:
    """One definition: the keys the parser offers for a table, in its own error, are the ones the reference lists."""
    manifest = tmp_path / "app.toml"
    manifest.write_text(f"[{table.name}]\nqqqqqqqqqqqq = 1\n", encoding="utf-8")
    with pytest.raises(ManifestError) as raised:
        load(manifest)
    found = re.search(rf"{re.escape(table.name)}\.qqqqqqqqqqqq: unknown key; known keys: ([^\n]*)", str(raised.value))
    assert found, str(raised.value)
    documented = set(re.findall(r"^\| `([a-z0-9_]+)` \|", _table_rows(table.name), re.M))
    assert set(found.group(1).split(", ")) == documented


def _table_rows(name: str) -> str:
    """The generated Markdown of one table's section of the manifest reference."""
    page = reference_hook().manifest_keys_markdown()
    start = page.index(f"`[{name}]`")
    return page[start:page.index("###", start + 1)]


def test_the_generated_pages_do_not_depend_on_the_machine(tmp_path: Path) -> None:
    """Terminal width and the cache folder change argparse's text; the pages stay the same."""
    script = ("from fixtures.docs_site import reference_hook; h = reference_hook(); "
              "print(h.commands_markdown() + h.exit_codes_markdown() + h.manifest_keys_markdown())")
    outputs = []
    for columns, cache in (("40", str(tmp_path / "a")), ("200", str(tmp_path / "elsewhere" / "b"))):
        env = {"PATH": "/usr/bin:/bin", "COLUMNS": columns, "ORT_BUNDLER_CACHE": cache, "HOME": str(tmp_path),
               "PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "tests")))}
        result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                                check=True, timeout=120)
        assert str(tmp_path) not in result.stdout
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1]


def test_the_readme_is_short_and_runs_the_test_command_ci_runs() -> None:
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes, expected at most {README_LIMIT}"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    test_command = [line for line in ci.splitlines() if "pytest" in line and not line.startswith("#")]
    assert test_command == ["python3 -m pytest -q"]
    assert "```sh\npython3 -m pytest -q\n```" in README.read_text(encoding="utf-8")
    assert "python3 -m venv" in README.read_text(encoding="utf-8") and "pipx install" in README.read_text(
        encoding="utf-8")


@pytest.mark.parametrize(("change", "expected"), [
    ("orphan", "not included in the \"nav\" configuration"),
    ("broken-link", "contains a link 'no-such-page.md'"),
    ("broken-anchor", "does not contain an anchor '#no-such-heading'"),
])
def test_the_strict_build_fails_on_what_it_is_there_to_catch(tmp_path: Path, change: str, expected: str) -> None:
    config = copy_docs_tree(tmp_path / "tree")
    docs = config.parent / "docs"
    if change == "orphan":
        (docs / "orphan.md").write_text("# A page nobody links\n", encoding="utf-8")
    elif change == "broken-link":
        with (docs / "limitations.md").open("a", encoding="utf-8") as f:
            f.write("\nSee [nothing](no-such-page.md).\n")
    else:
        with (docs / "limitations.md").open("a", encoding="utf-8") as f:
            f.write("\nSee [nothing](changelog.md#no-such-heading).\n")
    result = build_site(tmp_path / "site", config=config)
    assert result.returncode != 0, f"the strict build passed with a {change}"
    assert expected in result.stdout + result.stderr
