"""One module per command, each in the one form `Command` states; `bundler.cli` builds the parser by looping over
them (`cli.COMMANDS`, in the order `ort-bundler --help` lists them).

A command module is the command line's side of one command: what it is called and says (`NAME`, `HELP`,
`EXAMPLES`), its arguments (`configure(parser)`) and what it prints and returns (`run(args)`, the exit code).
The work is imported inside `run` (or the functions it calls), from `bundler.operations` (build, lock, fetch,
reproduce, diff, inspect, init) or the package that owns it (`signing`, `platforms`, `releases`, `review`), so
building the parser imports no command's machinery. `package`, `policy`, `report` and `delta` keep the few
steps that join those packages beside their form. What several commands share (the options every command
takes, the cache, registry and signing options, the output folder) is `bundler.commands.shared`, not a
command; no command imports another (tests/unit/commands/test_command_form.py).

Three optional attributes, read by `cli` with these defaults:

- `DESCRIPTION` (default `HELP`): the first paragraph of `ort-bundler NAME --help`, where it says more than
  the one line `ort-bundler --help` has room for.
- `GROUP` (default False): the command only groups subcommands (`cache push`); its own parser takes none of
  the options every command takes, each subcommand does (`configure` gives them `shared.common_parent()`).
- `INTERNAL_ERROR` (default 1): the exit code of a bug, where 1 means something else (`diff`: "they differ").
"""

from __future__ import annotations

import argparse
from typing import Protocol


class Command(Protocol):
    """The form of a command module (a module is a `Command` by having these names)."""

    NAME: str
    HELP: str
    EXAMPLES: str

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's own arguments to `parser` (which already has the options every command takes)."""

    def run(self, args: argparse.Namespace) -> int:
        """Do the command; return its exit code. A refusal raises a `BundleError`, which `cli` prints and maps."""
