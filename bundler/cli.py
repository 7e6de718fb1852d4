"""The command line: parse arguments, call one command, turn a `BundleError` into its exit code.

The parser is built by looping over `COMMANDS`, one module per command in the one form `bundler.commands.Command`
states; this module holds only what is the program's own: the options before a command, logging, and the
mapping of errors to exit codes. `main(argv)` returns the exit code instead of exiting, so tests call it
directly. Errors print as one sentence (every problem of a manifest, one per line); the traceback only with
`--verbose`.
"""

from __future__ import annotations

import argparse
import difflib
import gc
import logging
import re
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from bundler import __version__
from bundler.commands import (
    Command,
    apply,
    build,
    cache,
    delta,
    diff,
    fetch,
    init,
    inspect,
    lock,
    package,
    policy,
    publish,
    pull,
    report,
    reproduce,
    sign,
    verify,
)
from bundler.commands.shared import add_common_options
from bundler.errors import BundleError

#: Every command, in the order `ort-bundler --help` lists them: the way from a manifest to a bundle first, then
#: what a team does with bundles.
COMMANDS: tuple[Command, ...] = (init, lock, fetch, build, verify, sign, inspect, reproduce, diff, cache, publish,
                                 pull, package, policy, report, delta, apply)

EXIT_CODES = """exit codes:
  0  success
  1  unexpected internal error (please report it, with --verbose output)
  2  usage error (bad arguments)
  3  invalid manifest or lock file
  4  an input is unavailable (not in the cache, not found, network failure)
  5  hash mismatch
  6  unsafe or unreadable archive
  7  build failure (an inspection or check failed)
  8  verification failure (bundle altered, missing or extra files)
  9  not supported (a capability ort-bundler does not have)
  20-24  apply: a delta refused (damaged, oversize, another bundle, wrong OLD, outside OLD)"""


class _Parser(argparse.ArgumentParser):
    """argparse's parser with a "did you mean" for a mistyped command (`ort-bundler biuld`), as git and pip do."""

    commands: tuple[str, ...] = ()

    def error(self, message: str) -> NoReturn:
        match = re.search(r"invalid choice: '([^']*)'", message)
        if match and self.commands:
            close = difflib.get_close_matches(match.group(1), self.commands, n=1, cutoff=0.6)
            if close:
                message += f"; did you mean '{close[0]}'?"
        super().error(message)


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    """The program's parser: its own options, then one subparser per command module, configured by the module."""
    parser = _Parser(
        prog="ort-bundler", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Turn one pinned manifest into a verified, reproducible, offline ONNX Runtime bundle.",
        epilog=EXIT_CODES)
    parser.add_argument("--version", action="version", version=f"ort-bundler {__version__}")
    add_common_options(parser, defaults=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _Parser(add_help=False)  # as shared.common_parent(), of the parser class the subparsers have
    add_common_options(common, defaults=False)
    for command in commands:
        group = getattr(command, "GROUP", False)
        p = sub.add_parser(command.NAME, parents=[] if group else [common], help=command.HELP,
                           description=getattr(command, "DESCRIPTION", command.HELP), epilog=command.EXAMPLES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        command.configure(p)
    parser.commands = tuple(sub.choices)
    return parser


GC_THRESHOLD = 50_000  # allocations between collections of the youngest generation (CPython's default: 700)


def run() -> NoReturn:
    """The `ort-bundler` program: `main`, with the cyclic garbage collector kept off what lives to the end.

    The modules imported so far live as long as the process, yet every full collection walks them again,
    and so does CPython's exit, several times while it tears the modules down: a quarter of a second of a
    build. `gc.freeze` puts them out of those walks (objects are still freed when their last reference
    goes). A build then allocates hundreds of thousands of objects that live to its end (the modules it
    imports, parsed metadata, PE and certificate structures) and makes little cyclic garbage, so the
    youngest generation is collected every `GC_THRESHOLD` allocations instead of every 700: two hundred
    collections of a first build were 3-5 % of its time. At the end one collection runs what cyclic
    garbage there is, finalizers included, and what is left is frozen too. Atexit handlers run as ever.
    """
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD)
    code = main()
    gc.collect()
    gc.freeze()
    sys.exit(code)


def main(argv: Sequence[str] | None = None, *, commands: Sequence[Command] = COMMANDS) -> int:
    """Run `ort-bundler ARGV…` and return its exit code; `commands` lets a test run a command of its own."""
    parser = build_parser(commands)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors and 0 for --help
        return int(exc.code or 0)
    # -q keeps the build's notes (licences it cannot map, …) out of the output: only errors are printed.
    level = logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.WARNING
    logging.basicConfig(level=level, format="%(message)s")
    command = next(command for command in commands if command.NAME == args.command)
    try:
        return command.run(args)
    except BundleError as exc:
        if args.verbose:
            traceback.print_exc()
        print(f"ort-bundler {args.command}: error: {exc}", file=sys.stderr)
        return exc.return_code
    except KeyboardInterrupt:
        print(f"ort-bundler {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: say so plainly, and how to get the details
        if args.verbose:
            traceback.print_exc()
        print(f"ort-bundler {args.command}: internal error: {type(exc).__name__}: {exc} (run with --verbose for the "
              "traceback)", file=sys.stderr)
        internal_error: int = getattr(command, "INTERNAL_ERROR", 1)
        return internal_error


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
