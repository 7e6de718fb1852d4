"""The command line: parse arguments, call one action, turn a `BundleError` into its exit code.

`main(argv)` returns the exit code instead of exiting, so tests call it directly. Errors print as one
sentence (every problem of a manifest, one per line); the traceback only with `--verbose`.
"""

from __future__ import annotations

import argparse
import difflib
import gc
import json
import logging
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from bundler import __version__
from bundler.commands.registry_args import add_registry_options, mirror_arg
from bundler.errors import BundleError, UsageError
from bundler.manifest import Manifest
from bundler.sources.cache import CACHE_ENV, Cache, default_cache_dir
from bundler.sources.fetch import FetchOptions

if TYPE_CHECKING:
    from bundler.packaging.msi_verify import MsiReport
    from bundler.signing.verify import Report
    from bundler.sources.lock import Lock

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

EXAMPLES = {
    "init": "examples:\n  ort-bundler init\n  ort-bundler init --from onnxruntime-1.23.1-cp311-cp311-win_amd64.whl model.onnx -o app.toml",
    "lock": "examples:\n  ort-bundler lock manifests/quickstart-win.toml",
    "fetch": "examples:\n  ort-bundler fetch manifests/quickstart-linux.toml\n  ort-bundler fetch app.toml --offline\n"
             "  ort-bundler fetch app.toml --mirror /media/usb/inputs",
    "build": "examples:\n  ort-bundler build manifests/quickstart-linux.toml\n  ort-bundler build app.toml -o out/",
    "verify": "examples:\n  ort-bundler verify dist/quickstart-linux-1.0.0-linux_x86_64.zip --json\n"
              "  ort-bundler verify --trust our-root-ca.pem signed/app-1.0.0-win_amd64.zip\n"
              "  ort-bundler verify --trust our-root-ca.pem packages/app-1.0.0-win_amd64.msi",
    "inspect": "examples:\n  ort-bundler inspect onnxruntime.dll\n  ort-bundler inspect model.onnx --json",
    "reproduce": "examples:\n  ort-bundler reproduce dist/quickstart-linux-1.0.0-linux_x86_64.zip\n"
                 "  ort-bundler reproduce release.zip --mirror /media/usb/inputs -o rebuilt/ --json\n"
                 "exit 0 when the rebuild is byte-identical, 8 when members differ (each named, with its reason)",
    "diff": "examples:\n  ort-bundler diff app-1.0.0-win_amd64.zip app-1.1.0-win_amd64.zip\n"
            "  ort-bundler diff old.zip new.zip --scripts\n  ort-bundler diff old.zip new.zip --json\n"
            "exit 0 when the bundles are the same, 1 when they differ (as diff(1) and `git diff --exit-code`), "
            "above 1 on an error (an internal error: 70)",
}


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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ort-bundler", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Turn one pinned manifest into a verified, reproducible, offline ONNX Runtime bundle.",
        epilog=EXIT_CODES)
    parser.add_argument("--version", action="version", version=f"ort-bundler {__version__}")
    _common_options(parser, defaults=True)
    common = _Parser(add_help=False)
    _common_options(common, defaults=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], help=help_text, description=help_text, epilog=EXAMPLES[name],
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    p = command("init", "write a commented starter manifest, pinning local files with --from")
    p.add_argument("--from", dest="from_files", nargs="+", type=Path, default=[], metavar="FILE",
                   help="local files to pin: an ORT wheel, ORT release archive, VC_redist.x64.exe, .onnx models")
    p.add_argument("-o", "--output", type=Path, default=Path("ort-bundle.toml"), help="manifest to write")
    p.add_argument("--force", action="store_true", help="overwrite an existing manifest")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(action=_init)

    p = command("lock", "resolve the Python dependency closure for the target platform into a lock file")
    p.add_argument("manifest", type=Path)
    p.add_argument("--json", action="store_true", help="print what was locked as JSON")
    p.set_defaults(action=_lock)

    p = command("fetch", "download every pinned input into the cache, verifying hashes as they stream")
    p.add_argument("manifest", type=Path)
    p.add_argument("--offline", action="store_true", help="use only the cache; never the network")
    p.add_argument("--mirror", type=mirror_arg, metavar="DIR|oci://HOST/REPO",
                   help="look for inputs in DIR (by file name or sha256), or by digest in a registry "
                        "(see `cache push`), never the network")
    p.add_argument("-j", "--jobs", type=int, default=4, help="parallel downloads (default 4)")
    p.add_argument("--json", action="store_true", help="print what was fetched as JSON")
    add_registry_options(p)
    p.set_defaults(action=_fetch)

    p = command("build", "build the bundle zip from the cache only")
    p.add_argument("manifest", type=Path)
    p.add_argument("-o", "--output", type=Path, default=Path("dist"), help="output folder (default: dist)")
    p.add_argument("-j", "--jobs", type=int, default=None, help="compression threads (default: CPU count)")
    p.add_argument("--no-reuse", action="store_true",
                   help="assemble the bundle even when the cache holds the one built from exactly the same inputs")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(action=_build)

    p = command("verify", "check a finished bundle (structure, bundle.json, every SHA256SUMS entry) or the MSI "
                          "package --msi wrote (its files against its receipt, its signature)")
    p.add_argument("bundle", type=Path)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--trust", type=Path, metavar="CA.pem",
                   help="check every signature against these anchor certificates; an unsigned bundle then fails")
    p.set_defaults(action=_verify)

    from bundler.commands import sign

    p = sub.add_parser("sign", parents=[common], help="sign every .ps1 (Authenticode) and the bundle (SHA256SUMS.p7s)",
                       description="sign every .ps1 (Authenticode) and the bundle as a whole (SHA256SUMS.p7s)",
                       epilog=sign.EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sign.configure(p)
    p.set_defaults(action=lambda args: sign.sign_command(args, cache=_cache(args)))

    p = command("inspect", "explain one artifact: ORT archive, wheel, DLL/PYD, or ONNX model")
    p.add_argument("path", type=Path)
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.set_defaults(action=_inspect)

    p = command("reproduce", "rebuild a bundle from the manifest and lock it records and compare the bytes")
    p.add_argument("bundle", type=Path)
    sources = p.add_mutually_exclusive_group()
    sources.add_argument("--mirror", type=Path, help="look for inputs the bundle lacks in DIR, never the network")
    sources.add_argument("--offline", action="store_true", help="inputs the bundle lacks come from the cache only")
    p.add_argument("-o", "--output", type=Path, default=None, help="keep the rebuilt zip in this folder")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(action=_reproduce)

    p = command("diff", "what changed between two bundles, in plain words")
    p.add_argument("old", type=Path)
    p.add_argument("new", type=Path)
    p.add_argument("--scripts", action="store_true", help="show a unified diff of every changed script")
    p.add_argument("--json", action="store_true", help="print the changes as JSON")
    p.set_defaults(action=_diff)

    # A team's cache and releases on an OCI registry, and the Windows packages: each module configures its parser
    # and runs it.
    from bundler.commands import apply, delta, package, policy, publish, pull, report
    from bundler.commands import cache as cache_command

    for module in (cache_command, publish, pull, package, policy, report, delta, apply):
        p = sub.add_parser(module.NAME, parents=[] if module is cache_command else [common], help=module.HELP,
                           description=module.HELP, epilog=module.EXAMPLES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.configure(p, common)
        p.set_defaults(action=lambda args, run=module.run: run(args, cache=_cache(args)))
    parser.commands = tuple(sub.choices)
    return parser


def _common_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """The options every command takes, accepted before the command (`ort-bundler --cache DIR build …`) and after.

    The program's parser holds the defaults; each command's copy has none (`SUPPRESS`), so an option given
    before the command is not overwritten by the command's default, and one given after it wins.
    """
    flag_default: bool | str = False if defaults else argparse.SUPPRESS
    cache_default: Path | str | None = None if defaults else argparse.SUPPRESS
    parser.add_argument("-v", "--verbose", action="store_true", default=flag_default,
                        help="log every step; show tracebacks")
    parser.add_argument("-q", "--quiet", action="store_true", default=flag_default,
                        help="print only errors; no progress bars")
    parser.add_argument("--cache", type=Path, default=cache_default,
                        help=f"the content-addressed cache (default: ${CACHE_ENV} or {default_cache_dir()})")


# `diff`'s own answer is 1 ("they differ", as diff(1)); its internal error takes EX_SOFTWARE (sysexits.h) so a
# script never reads a crash as a difference. Every documented error code is above 1 already.
DIFF_DIFFERS = 1
DIFF_INTERNAL_ERROR = 70

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors and 0 for --help
        return int(exc.code or 0)
    # -q keeps the build's notes (licences it cannot map, …) out of the output: only errors are printed.
    level = logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.WARNING
    logging.basicConfig(level=level, format="%(message)s")
    action: Callable[[argparse.Namespace], int] = args.action
    try:
        return action(args)
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
        return DIFF_INTERNAL_ERROR if args.command == "diff" else 1


# -- actions -------------------------------------------------------------------------------------------


def _cache(args: argparse.Namespace) -> Cache:
    return Cache(args.cache if args.cache else default_cache_dir())


def _say(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(text)


def _manifest(args: argparse.Namespace) -> Manifest:
    from bundler.manifest import load

    return load(args.manifest)


def _init(args: argparse.Namespace) -> int:
    from bundler.commands.init import write_starter

    starter = write_starter(args.output, args.from_files, force=args.force)
    for warning in starter.warnings:
        logging.getLogger("bundler").warning("warning: %s", warning)
    if args.json:
        print(json.dumps(starter.to_json(), indent=2))
        return 0
    path = starter.path
    _say(args, f"wrote {path}; edit it, then run `ort-bundler lock {path}` and `ort-bundler fetch {path}`")
    return 0


def _lock(args: argparse.Namespace) -> int:
    from bundler.commands.lock import lock_manifest

    manifest = _manifest(args)
    lock, path = lock_manifest(manifest, cache=_cache(args), options=FetchOptions(quiet=args.quiet or args.json))
    if args.json:
        print(json.dumps(lock_json(lock, path), indent=2))
        return 0
    _say(args, f"locked {len(lock.wheels)} wheels for {lock.target.platform} / Python {lock.target.python} in {path}")
    if lock.gate is not None:
        _say(args, f"and, for the model gate on this kind of machine, ORT and NumPy for {lock.gate.target.platform} / "
                   f"Python {lock.gate.target.python} ([gate])")
    if manifest.python.lock is None:
        _say(args, f"add this to {manifest.path.name} so build uses it:\n[python]\nlock = \"{path.name}\"")
    return 0


def lock_json(lock: Lock, path: Path) -> dict[str, object]:
    """`lock --json`: the lock file and what it pins, for scripts (issue 38, item 8d)."""
    return {"lock": str(path), "target": {"platform": lock.target.platform, "python": lock.target.python},
            "wheels": [{"name": w.name, "version": w.version, "filename": w.filename, "sha256": w.sha256}
                       for w in lock.wheels],
            "installer": lock.installer.filename if lock.installer else None,
            "models": [{"name": m.name, "sha256": m.sha256, "ort_version": m.ort_version} for m in lock.models],
            "gate": ({"platform": lock.gate.target.platform, "python": lock.gate.target.python}
                     if lock.gate is not None else None)}


def _fetch(args: argparse.Namespace) -> int:
    from bundler.commands.fetch import fetch_manifest, registry_mirror

    if args.jobs < 1:
        raise UsageError(f"--jobs: found {args.jobs}, expected a positive number")
    if args.offline and args.mirror:
        raise UsageError("--offline and --mirror: choose one (both never use the network)")
    mirror = args.mirror if isinstance(args.mirror, Path) else None
    if mirror and not mirror.is_dir():
        raise UsageError(f"--mirror: {args.mirror} is not a directory")
    manifest = _manifest(args)
    registry = registry_mirror(args, args.mirror, manifest) if isinstance(args.mirror, str) else None
    options = FetchOptions(offline=args.offline, mirror=mirror, registry=registry, jobs=args.jobs,
                           quiet=args.quiet or args.json)
    files = fetch_manifest(manifest, cache=_cache(args), options=options)
    if args.json:
        print(json.dumps({key: str(path) for key, path in sorted(files.items())}, indent=2))
    else:
        _say(args, f"{len(files)} inputs in the cache {_cache(args).root}")
    return 0


def _build(args: argparse.Namespace) -> int:
    import os

    from bundler.commands.build import build, warn_environment_epoch

    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs: found {args.jobs}, expected a positive number")
    manifest = _manifest(args)
    warn_absent_local_files(manifest)
    warn_environment_epoch(manifest, os.environ)
    result = build(manifest, cache=_cache(args), out_dir=args.output, jobs=args.jobs,
                   quiet=args.quiet or args.json, reuse=not args.no_reuse)
    if args.json:
        print(json.dumps({"zip": str(result.zip_path), "sha256": result.sha256, "size": result.size,
                          "reused": result.reused}, indent=2))
    else:
        how = " (the same inputs as a build before: its zip, reused)" if result.reused else ""
        _say(args, f"wrote {result.zip_path} ({result.size:,} bytes){how}\nsha256 {result.sha256}")
    return 0


def warn_absent_local_files(manifest: Manifest) -> None:
    """build reads the cache only, so a wrong `path` whose pinned bytes are cached still builds, and so does one
    outside the manifest's folder that fetch will refuse: say the manifest is wrong (a warning, not an error:
    the bundle is right, the manifest is not). Not in `build` itself, which
    `reproduce` runs on a manifest whose local files are deliberately absent."""
    from bundler.sources.inputs import absent_local_files, outside_folder

    inputs = manifest.inputs()
    for problem in [*outside_folder(inputs, manifest.path.parent), *absent_local_files(inputs)]:
        logging.getLogger("bundler").warning("warning: %s (this build used the cached file)", problem)


def _verify(args: argparse.Namespace) -> int:
    from bundler.errors import VerificationError
    from bundler.signing.verify import verify_bundle

    if args.bundle.suffix.lower() == ".msi":
        from bundler.packaging.msi_verify import verify_msi

        report: Report | MsiReport = verify_msi(args.bundle, trust=args.trust)
    else:
        report = verify_bundle(args.bundle, trust=args.trust, cache=_cache(args))
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif not report.ok or not args.quiet:
        print(report.summary(), file=sys.stdout if report.ok else sys.stderr)
    return 0 if report.ok else VerificationError.return_code


def _inspect(args: argparse.Namespace) -> int:
    from bundler.commands.inspect import describe, inspect_path

    findings = inspect_path(args.path)
    print(json.dumps(findings, indent=2, sort_keys=True) if args.json else describe(findings))
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    from bundler.commands.reproduce import reproduce
    from bundler.errors import VerificationError

    if args.mirror and not args.mirror.is_dir():
        raise UsageError(f"--mirror: {args.mirror} is not a directory")
    options = FetchOptions(offline=args.offline, mirror=args.mirror, quiet=args.quiet or args.json)
    report = reproduce(args.bundle, cache=_cache(args), options=options, keep=args.output)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif not report.identical or not args.quiet:
        print(report.summary(), file=sys.stdout if report.identical else sys.stderr)
    return 0 if report.identical else VerificationError.return_code


def _diff(args: argparse.Namespace) -> int:
    """0 when the bundles are the same, 1 when they differ: scripts and CI gate on it as on diff(1)."""
    from bundler.commands.diff import diff_bundles

    report = diff_bundles(args.old, args.new, scripts=args.scripts)
    print(json.dumps(report.to_json(), indent=2) if args.json else report.summary())
    return 0 if report.identical else DIFF_DIFFERS


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
