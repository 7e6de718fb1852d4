"""`oci://HOST[:PORT]/REPO[:TAG|@sha256:…]`: the references our registry commands take, read strictly.

Apart from the client (`oci`) so the grammar can be read, and tested, on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bundler.errors import UsageError

SCHEME = "oci://"

# distribution-spec: <name> is path components of lower-case alphanumerics and separators; tags are
# [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}; digests algorithm:hex.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
REPOSITORY_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
HOST_RE = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::[0-9]{1,5})?$")


@dataclass(frozen=True, kw_only=True)
class Reference:
    """`oci://HOST[:PORT]/REPO[:TAG|@sha256:…]`, checked against the distribution spec's grammar."""

    host: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    def __str__(self) -> str:
        suffix = f"@{self.digest}" if self.digest else f":{self.tag}" if self.tag else ""
        return f"{SCHEME}{self.host}/{self.repository}{suffix}"

    def with_tag(self, tag: str) -> Reference:
        return Reference(host=self.host, repository=self.repository, tag=tag)

    @property
    def hostname(self) -> str:
        host = self.host.rsplit(":", 1)[0] if not self.host.endswith("]") else self.host
        return host.strip("[]")


def parse_reference(text: str, *, what: str, tag: bool) -> Reference:
    """`what` names the argument in the message; `tag` says whether a :TAG or @digest may follow."""
    form = f"{SCHEME}HOST[:PORT]/REPOSITORY" + ("[:TAG]" if tag else "")
    if not text.startswith(SCHEME):
        raise UsageError(f"{what}: found {text!r}, expected {form}")
    rest = text[len(SCHEME):]
    host, _, path = rest.partition("/")
    digest = tag_part = None
    if "@" in path:
        path, _, digest = path.partition("@")
    elif ":" in path.rsplit("/", 1)[-1]:
        path, _, tag_part = path.rpartition(":")
    problem = None
    if not HOST_RE.match(host):
        problem = f"the host {host!r} is not HOST or HOST:PORT"
    elif not REPOSITORY_RE.match(path):
        problem = f"the repository {path!r} is not lower-case path components (letters, digits, . _ -)"
    elif (digest or tag_part) and not tag:
        problem = "a tag or digest is not taken here"
    elif digest is not None and not DIGEST_RE.match(digest):
        problem = f"the digest {digest!r} is not sha256: and 64 hex digits"
    elif tag_part is not None and not TAG_RE.match(tag_part):
        problem = f"the tag {tag_part!r} is not 1-128 of letters, digits, . _ - (not starting with . or -)"
    if problem:
        raise UsageError(f"{what}: {text!r}: {problem}; expected {form}")
    return Reference(host=host, repository=path, tag=tag_part, digest=digest)


def tag_for(text: str) -> str:
    """A tag from a version or name: the characters a tag may not hold become `_` (`1.0.0+cu118` → `1.0.0_cu118`)."""
    tag = re.sub(r"[^A-Za-z0-9._-]", "_", text)
    tag = "_" + tag if tag[:1] in (".", "-", "") else tag
    return tag[:128]
