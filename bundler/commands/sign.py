"""`ort-bundler sign BUNDLE.zip -o SIGNED.zip`: the command-line face of `bundler.signing.bundle`.

Exactly one way to sign: `--cert`/`--key` (PEM), `--pkcs12` (its password from `--password-env NAME`
or a prompt, never an argument), or `--signer COMMAND` (see `bundler.signing.external` for the
contract). The output is `<top folder>.zip` in `-o DIR`, or the file `-o` names, which must be
`<top folder>.zip` or `<top folder>-signed.zip` (verify and the installers know a bundle by its top
folder). Nothing is written unless every signature was made and checked.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from bundler.errors import UsageError, VerificationError

if TYPE_CHECKING:
    from bundler.signing.bundle import SignOptions
    from bundler.sources.cache import Cache

EXAMPLES = """examples:
  ort-bundler sign dist/app-1.0.0-win_amd64.zip -o signed/ --cert signer.pem --key signer.key --chain chain.pem
  ORT_P12_PASSWORD=... ort-bundler sign app.zip -o signed/ --pkcs12 signer.p12 --password-env ORT_P12_PASSWORD
  ort-bundler sign app.zip -o signed/ --signer 'my-hsm-sign --profile release'"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path, help="the unsigned bundle zip (as `build` wrote it)")
    parser.add_argument("-o", "--output", type=Path, required=True,
                        help="output folder, or the signed zip (<top>.zip or <top>-signed.zip)")
    add_signing_options(parser)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


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


def sign_command(args: argparse.Namespace, *, cache: Cache) -> int:
    import json

    from bundler.signing.bundle import sign_bundle

    options = signing_options(args)
    if options is None:
        msg = "give exactly one of --cert/--key, --pkcs12 or --signer (found none)"
        raise UsageError(msg)
    dest = output_path(args.bundle, args.output)
    result = sign_bundle(args.bundle, dest, options=options, cache=cache)
    if args.json:
        print(json.dumps({"zip": str(result.zip_path), "sha256": result.sha256, "size": result.size,
                          "signer": result.signer, "signed": list(result.signed)}, indent=2))
    elif not args.quiet:
        print(f"wrote {result.zip_path} ({result.size:,} bytes), signed by {result.signer}: "
              f"{_count(len(result.signed), 'signature')}\nsha256 {result.sha256}")
    return 0


def _count(number: int, noun: str) -> str:
    """`1 signature`, `3 signatures`."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


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


def output_path(source: Path, output: Path) -> Path:
    """`-o DIR` (existing, or any name not ending in .zip) gets `<top>.zip`; a zip name must keep the top folder's."""
    top = _top_folder(source)
    as_folder = output.is_dir() or (not output.exists() and output.suffix.lower() != ".zip")
    dest = output / f"{top}.zip" if as_folder else output
    if dest.name not in (f"{top}.zip", f"{top}-signed.zip"):
        msg = (f"-o {output}: the signed zip must be named {top}.zip or {top}-signed.zip (its top folder), "
               "or give a folder")
        raise UsageError(msg)
    if dest.exists() and dest.resolve() == source.resolve():
        msg = f"-o {output}: that is the input bundle; write the signed bundle elsewhere and keep the unsigned build"
        raise UsageError(msg)
    if dest.exists() and not dest.is_file():
        msg = f"-o {output}: {dest} exists and is not a file"
        raise UsageError(msg)
    return dest


def _top_folder(source: Path) -> str:
    try:
        with zipfile.ZipFile(source) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile) as exc:
        msg = f"{source}: not a readable bundle zip ({exc})"
        raise VerificationError(msg) from None
    if not names:
        msg = f"{source}: the zip is empty, expected a bundle"
        raise VerificationError(msg)
    return names[0].split("/", 1)[0]
