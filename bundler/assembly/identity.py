"""What a GPU source is called in licences and the SBOM: its name, version and purl, from what the manifest says."""

from __future__ import annotations

import re
from dataclasses import dataclass

from packageurl import PackageURL
from packaging.utils import canonicalize_name, parse_wheel_filename

from bundler.manifest import Input

_ARCHIVE_SUFFIX = re.compile(r"(\.tar)?\.(zip|whl|tgz|gz|xz|bz2|tar)$", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class SourceIdentity:
    name: str
    version: str | None
    purl: PackageURL


def source_identity(source: Input) -> SourceIdentity:
    """Name, version and purl of a GPU source, from what the manifest says: a requirement or a wheel's file
    name is a PyPI package; any other archive or file is known by its name."""
    if source.kind == "requirement":
        name, _, version = source.location.partition("==")
        name = canonicalize_name(name)
    elif source.filename is not None and source.filename.endswith(".whl"):
        parsed = parse_wheel_filename(source.filename)
        name, version = str(parsed[0]), str(parsed[1])
    else:
        name = _ARCHIVE_SUFFIX.sub("", source.filename or "") or source.key
        return SourceIdentity(name=name, version=None, purl=PackageURL(type="generic", name=name))
    return SourceIdentity(name=name, version=version, purl=PackageURL(type="pypi", name=name, version=version))
