"""`ort-bundler sign BUNDLE.zip -o SIGNED.zip`: the command-line face of `bundler.signing.bundle`.

Exactly one way to sign: `--cert`/`--key` (PEM), `--pkcs12` (its password from `--password-env NAME`
or a prompt, never an argument), or `--signer COMMAND` (see `bundler.signing.external` for the
contract). The output is `<top folder>.zip` in `-o DIR`, or the file `-o` names, which must be
`<top folder>.zip` or `<top folder>-signed.zip` (verify and the installers know a bundle by its top
folder). Nothing is written unless every signature was made and checked.
"""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path

from bundler.commands.shared import add_signing_options, cache_of, signing_options
from bundler.errors import UsageError, VerificationError

NAME = "sign"
HELP = "sign every .ps1 (Authenticode) and the bundle (SHA256SUMS.p7s)"
DESCRIPTION = "sign every .ps1 (Authenticode) and the bundle as a whole (SHA256SUMS.p7s)"
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


def run(args: argparse.Namespace) -> int:
    import json

    from bundler.signing.bundle import sign_bundle

    options = signing_options(args)
    if options is None:
        msg = "give exactly one of --cert/--key, --pkcs12 or --signer (found none)"
        raise UsageError(msg)
    dest = output_path(args.bundle, args.output)
    result = sign_bundle(args.bundle, dest, options=options, cache=cache_of(args))
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
