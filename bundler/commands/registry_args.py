"""The options every registry command shares (`cache push`, `publish`, `pull`, `fetch --mirror oci://`).

Imported by `cli` to build the parser, so the client (`ssl`, `socket`) is imported only by a command that
talks to a registry: `build` and `verify` never pay for it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bundler.sources.oci import Registry, RegistryOptions

SCHEME = "oci://"  # bundler.sources.oci.SCHEME


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
