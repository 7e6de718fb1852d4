"""What several commands share, so that no command imports another: the options every command takes (and the
cache they name), the registry options (`cache push`, `publish`, `pull`, `fetch --mirror oci://`), the ways to
sign (`sign`, `package --msi`) and the output folder a command stages its files in (`package`, `policy`).

Imported by every command module, so by `cli` to build the parser: the registry client (`ssl`, `socket`) and
the signing code are imported only inside the functions that use them, and `build` and `verify` never pay
for them.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

from bundler.errors import UsageError
from bundler.sources.cache import CACHE_ENV, Cache, default_cache_dir

if TYPE_CHECKING:
    from bundler.signing.bundle import SignOptions
    from bundler.sources.oci import Registry, RegistryOptions

SCHEME = "oci://"  # bundler.sources.oci.SCHEME


# -- the options every command takes -----------------------------------------------------------------------


def add_common_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
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


def common_parent() -> argparse.ArgumentParser:
    """A parent parser (`parents=[…]`) giving a command's parser the options every command takes."""
    common = argparse.ArgumentParser(add_help=False)
    add_common_options(common, defaults=False)
    return common


def cache_of(args: argparse.Namespace) -> Cache:
    """The cache `--cache` names, else the default (`$ORT_BUNDLER_CACHE`, else the user cache folder)."""
    return Cache(args.cache if args.cache else default_cache_dir())


def say(args: argparse.Namespace, text: str) -> None:
    """Print a command's one-line answer, unless `--quiet`."""
    if not args.quiet:
        print(text)


# -- a registry --------------------------------------------------------------------------------------------


def add_registry_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("registry")
    group.add_argument("--registry-config", type=Path, metavar="FILE",
                       help="Docker's config.json with the registry's credentials (default: $DOCKER_CONFIG/config.json "
                            "or ~/.docker/config.json; `auths`, `credHelpers`, `credsStore`)")
    group.add_argument("--registry-ca", type=Path, metavar="CA.pem",
                       help="also trust these CA certificates for the registry's TLS (beside the system store)")
    group.add_argument("--insecure-registry", action="store_true",
                       help="allow plain http to a registry that is not on loopback (loopback always may)")


def registry_options(args: argparse.Namespace) -> RegistryOptions:
    from bundler.sources.oci import RegistryOptions

    return RegistryOptions(config=getattr(args, "registry_config", None), ca_file=getattr(args, "registry_ca", None),
                           insecure=bool(getattr(args, "insecure_registry", False)))


def open_registry(args: argparse.Namespace, text: str, *, what: str, tag: bool) -> Registry:
    from bundler.sources.oci import Registry, parse_reference

    return Registry(parse_reference(text, what=what, tag=tag), registry_options(args))


def mirror_arg(text: str) -> Path | str:
    """`--mirror`: a folder, or a registry when it starts with oci:// (kept as text, parsed by the command)."""
    return text if text.startswith(SCHEME) else Path(text)


# -- signing -----------------------------------------------------------------------------------------------


def add_signing_options(parser: argparse.ArgumentParser) -> None:
    """The ways to sign, shared by `sign` and `package --msi`."""
    parser.add_argument("--cert", type=Path, help="PEM code-signing certificate (may be followed by its chain)")
    parser.add_argument("--key", type=Path, help="unencrypted PEM private key of --cert")
    parser.add_argument("--pkcs12", type=Path, help="PKCS#12 (.p12/.pfx) file with the key and certificate")
    parser.add_argument("--password-env", metavar="NAME",
                        help="environment variable holding the --pkcs12 password (default: prompt)")
    parser.add_argument("--chain", type=Path, help="PEM intermediate certificates to include")
    parser.add_argument("--timestamp-url", metavar="URL",
                        help="RFC 3161 timestamp server for the script signatures (the signature then differs "
                             "on every run)")
    parser.add_argument("--signer", metavar="COMMAND",
                        help="external signing command, run as COMMAND INPUT OUTPUT for each file")


def signing_options(args: argparse.Namespace) -> SignOptions | None:
    """The one way to sign the arguments give, None when they give none."""
    from bundler.signing.bundle import SignOptions
    from bundler.signing.credentials import environment, load_pem_identity, load_pkcs12_identity, pkcs12_password
    from bundler.signing.external import parse_command

    ways = [name for name, given in (("--cert/--key", args.cert or args.key), ("--pkcs12", args.pkcs12),
                                     ("--signer", args.signer)) if given]
    if not ways and not args.timestamp_url and not args.chain:
        return None
    if len(ways) != 1:
        msg = f"give exactly one of --cert/--key, --pkcs12 or --signer (found {', '.join(ways) or 'none'})"
        raise UsageError(msg)
    if args.signer:
        if args.timestamp_url:
            msg = "--timestamp-url does nothing with --signer: let your signing tool timestamp its signatures"
            raise UsageError(msg)
        return SignOptions(signer_command=parse_command(args.signer))
    if args.pkcs12:
        password = pkcs12_password(args.password_env, environ=environment(), prompt=sys.stdin.isatty())
        identity = load_pkcs12_identity(args.pkcs12, password, chain=args.chain)
    else:
        if not (args.cert and args.key):
            msg = "--cert and --key go together: give both"
            raise UsageError(msg)
        identity = load_pem_identity(args.cert, args.key, chain=args.chain)
    return SignOptions(identity=identity, timestamp_url=args.timestamp_url)


# -- the output folder -------------------------------------------------------------------------------------


def check_output_folder(out: Path) -> None:
    """`-o` must be a folder, existing or to be made: refused before anything is read."""
    if out.exists() and not out.is_dir():
        msg = f"-o {out}: found a file, expected a folder (existing or to be made) for the packages"
        raise UsageError(msg)


@contextmanager
def output_staging(out: Path) -> Iterator[Path]:
    """A hidden folder inside `out` for the unpacked bundle and the outputs, on the outputs' file system (so they
    are moved into place by a rename), removed however the run ends; so is `out` when this run made it and
    failed."""
    made = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=out, prefix=".ort-bundler-package-", suffix=".tmp"))
    except OSError as exc:
        msg = f"-o {out}: the output folder cannot be used ({exc.strerror}); choose another one"
        raise UsageError(msg) from None
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if made:
            with suppress(OSError):  # not empty: another process put something there meanwhile
                out.rmdir()
        raise
    shutil.rmtree(staging, ignore_errors=True)
