"""The one place where a registry's bytes and our credentials cross the network: origin, credentials, bounds.

Every request the OCI client makes — to the registry, to where a registry redirects us, to an upload
`Location`, to a token realm — goes out through a `GuardedAdapter`, which applies one policy:

- **Transport.** https anywhere; plain http only to a loopback host, or to the registry's own host with
  `--insecure-registry`. This holds for every URL we are sent to (redirects, Locations, token realms),
  not only the first.
- **Credentials.** An `Authorization` header goes only to the origin (scheme, host, port) it is scoped to:
  the registry's, or for the token service's own session, the realm the registry's own challenge named
  (as Docker scopes it). Every other request has it removed here, whatever added it, and a 401 from
  another origin is an error here, before anything could answer it.
- **Bytes.** A read has an overall deadline scaled to the size it should bring (a floor plus a minimum
  rate, `ORT_BUNDLER_REGISTRY_DEADLINE` to change them), and a body may not bring more than its declared
  size: a slow or endless server is cut off naming the registry, not left to hold a pull forever.

The hashes are checked by the callers, on exactly the bytes that passed here (`Registry.fetch_blob`,
`releases.registry.pull_bundle`).
"""

from __future__ import annotations

import ipaddress
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from bundler.errors import InputUnavailableError, UsageError

if TYPE_CHECKING:
    import requests

DEADLINE_ENV = "ORT_BUNDLER_REGISTRY_DEADLINE"
# What a read may take: FLOOR seconds, plus its size at no less than MIN_RATE bytes per second. 120 s and
# 256 KiB/s allow a 2 GiB release over a slow office link (2.3 hours) and stop a server that sends a byte
# every few seconds, which no per-read timeout ever does.
DEFAULT_FLOOR_S = 120.0
DEFAULT_MIN_RATE = 256 * 1024
# Bodies that carry no content we keep (errors, redirects, token answers) bring at most this much.
SMALL_BODY = 1024**2
_DEFAULT_PORTS = {"http": 80, "https": 443}


def is_loopback(hostname: str) -> bool:
    """127.0.0.0/8, ::1 and `localhost`: where plain http crosses no network."""
    if hostname.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, kw_only=True)
class Origin:
    """scheme://host:port, with the default port written out, so two spellings of one origin compare equal."""

    scheme: str
    host: str  # lower case, without brackets
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def origin_of(url: str) -> Origin:
    """The origin of an absolute URL; a URL without scheme or host is refused by the caller's policy check."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return Origin(scheme=scheme, host=(parts.hostname or "").lower(), port=port or _DEFAULT_PORTS.get(scheme, 0))


@dataclass(frozen=True, kw_only=True)
class ReadLimits:
    """The overall deadline of one read: `floor_s` plus its size at `min_rate` bytes per second."""

    floor_s: float = DEFAULT_FLOOR_S
    min_rate: float = DEFAULT_MIN_RATE

    def seconds_for(self, size: int) -> float:
        return self.floor_s + max(size, 0) / self.min_rate

    @classmethod
    def from_env(cls) -> ReadLimits:
        """`ORT_BUNDLER_REGISTRY_DEADLINE=FLOOR_SECONDS[:MIN_BYTES_PER_SECOND]`, or the defaults."""
        text = os.environ.get(DEADLINE_ENV, "").strip()
        if not text:
            return cls()
        match = re.fullmatch(r"(\d+(?:\.\d+)?)(?::(\d+))?", text)
        if match is None or float(match.group(1)) <= 0 or (match.group(2) is not None and int(match.group(2)) <= 0):
            msg = f"{DEADLINE_ENV}: found {text!r}, expected FLOOR_SECONDS[:MIN_BYTES_PER_SECOND], both above 0"
            raise UsageError(msg)
        rate = float(match.group(2)) if match.group(2) else DEFAULT_MIN_RATE
        return cls(floor_s=float(match.group(1)), min_rate=rate)


@dataclass(frozen=True, kw_only=True)
class OriginPolicy:
    """Where a registry's requests may go, and where its credentials may."""

    name: str  # the registry as the user wrote it (host[:port]), for messages
    registry: Origin
    insecure: bool = False  # --insecure-registry: plain http to the registry's own host

    def check_transport(self, url: str, *, what: str) -> Origin:
        """Refuse a URL that is not https, unless plain http is allowed for its host (see the module)."""
        origin = origin_of(url)
        if origin.scheme not in _DEFAULT_PORTS or not origin.host:
            msg = f"registry {self.name}: {what} names {_shown(url)!r}, which is not an http(s) URL"
            raise InputUnavailableError(msg)
        if origin.scheme == "http" and not self.plain_http_allowed(origin):
            msg = (f"registry {self.name}: {what} goes to {origin}, plain http to a host that is not loopback; "
                   f"refused (only https leaves this machine; --insecure-registry allows plain http to the "
                   f"registry's own host only)")
            raise InputUnavailableError(msg)
        return origin

    def plain_http_allowed(self, origin: Origin) -> bool:
        return is_loopback(origin.host) or (self.insecure and origin.host == self.registry.host)

    def is_registry(self, url: str) -> bool:
        return origin_of(url) == self.registry

    def upload_target(self, url: str) -> str:
        """An upload `Location`: the registry's origin (sent with credentials), or https storage elsewhere
        (sent without them); a plain-http Location on another origin is refused before a byte goes there."""
        origin = self.check_transport(url, what="an upload Location")
        if origin != self.registry and origin.scheme != "https":
            msg = (f"registry {self.name}: its upload Location points to {origin}, another origin over plain "
                   f"http; refused, nothing was sent there (uploads go to the registry itself or to https storage)")
            raise InputUnavailableError(msg)
        return url

    def token_realm(self, realm: str, *, challenged_by: str) -> Origin:
        """A token realm: only from a challenge the registry's own origin sent, over a transport allowed here."""
        if not self.is_registry(challenged_by):
            msg = (f"registry {self.name}: {origin_of(challenged_by)} (not the registry) asked for a token; "
                   f"the registry's credentials are not sent on its behalf")
            raise InputUnavailableError(msg)
        return self.check_transport(realm, what="its token realm")


def _shown(url: str) -> str:
    """A URL for a message: scheme, host, port and path, never a query (upload state, signed storage URLs)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"[:200]


@dataclass
class _Read:
    what: str  # "blob sha256:… (app.zip)", for messages
    size: int  # what the deadline is scaled to
    limit: int  # the most a successful body may bring
    limit_is: str  # what sets that limit, for messages
    seconds: float
    deadline: float


class Guard:
    """A registry client's policy and the bounds of the read each thread is doing now."""

    def __init__(self, policy: OriginPolicy, limits: ReadLimits) -> None:
        self.policy = policy
        self.limits = limits
        self._local = threading.local()

    @contextmanager
    def reading(self, what: str, *, size: int, limit_is: str) -> Iterator[None]:
        """Bound this thread's requests while the block runs: the deadline for `size` bytes, and no more
        than `size` bytes in a successful body (`limit_is` says who declared that size)."""
        seconds = self.limits.seconds_for(size)
        previous = getattr(self._local, "read", None)
        self._local.read = _Read(what=what, size=size, limit=size, limit_is=limit_is, seconds=seconds,
                                 deadline=time.monotonic() + seconds)
        try:
            yield
        finally:
            self._local.read = previous

    def current(self) -> _Read:
        read = getattr(self._local, "read", None)
        if read is None:  # an API call outside a read: the floor, and a small body
            seconds = self.limits.floor_s
            read = _Read(what="an API call", size=SMALL_BODY, limit=SMALL_BODY,
                         limit_is="an answer that carries no content may bring", seconds=seconds,
                         deadline=time.monotonic() + seconds)
        return read

    def late(self, read: _Read) -> InputUnavailableError:
        return InputUnavailableError(
            f"registry {self.policy.name}: {read.what} did not arrive within {read.seconds:.0f} s (the time allowed "
            f"for {read.size:,} bytes: {self.limits.floor_s:.0f} s plus {self.limits.min_rate / 1024:.0f} KiB/s); a "
            f"server this slow is cut off; set {DEADLINE_ENV}=FLOOR_SECONDS[:MIN_BYTES_PER_SECOND] to allow more")

    def too_much(self, read: _Read, *, url: str, found: int | None, limit: int) -> InputUnavailableError:
        sent = f"declares {found:,} bytes, more than" if found is not None else "sent more than"
        return InputUnavailableError(
            f"registry {self.policy.name}: {read.what} from {origin_of(url)} {sent} the {limit:,} bytes "
            f"{read.limit_is}; refused")

    # -- the checks the adapter runs on every request and response -------------------------------------

    def before(self, request: requests.PreparedRequest, credential_origin: Origin, timeout: Any) -> Any:
        """Check the URL's transport, drop credentials not scoped to it, and cap the timeout by the deadline."""
        url = request.url or ""
        read = self.current()
        self.policy.check_transport(url, what=f"the request for {read.what}")
        if origin_of(url) != credential_origin:
            request.headers.pop("Authorization", None)
        left = read.deadline - time.monotonic()
        if left <= 0:
            raise self.late(read)
        if isinstance(timeout, tuple):
            return tuple(min(t, left) if t is not None else left for t in timeout)
        return min(timeout, left) if isinstance(timeout, (int, float)) else left

    def after(self, response: requests.Response, credential_origin: Origin) -> None:
        """A 401 from an origin our credentials are not scoped to is an error here, before any auth hook
        could answer it; a body is bounded by its declared size and the deadline."""
        url = response.url or ""
        origin = origin_of(url)
        if response.status_code == 401 and origin != credential_origin:
            response.close()
            msg = (f"registry {self.policy.name}: we were sent on to {origin}, which asks for credentials (HTTP "
                   f"401); the registry's credentials go only to {credential_origin}, so it was not answered")
            raise InputUnavailableError(msg)
        read = self.current()
        if 200 <= response.status_code < 300:
            start = _range_start(response)
            limit, left = read.limit, read.limit - start
        else:  # an error or a redirect: a few words at most
            start, limit = 0, SMALL_BODY
            left = limit
        length = _declared_length(response)
        if response.request.method != "HEAD" and length is not None and length > left:
            response.close()
            raise self.too_much(read, url=url, found=start + length, limit=limit)
        _bound_body(response, self, read, left=left, limit=limit, url=url)


def _range_start(response: requests.Response) -> int:
    """The offset a 206 answer starts at (a resumed download asked for `Range: bytes=N-`)."""
    if response.status_code != 206:
        return 0
    found = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
    return int(found.group(1)) if found else 0


def _declared_length(response: requests.Response) -> int | None:
    length = response.headers.get("Content-Length", "")
    return int(length) if length.isdigit() else None


def _bound_body(response: requests.Response, guard: Guard, read: _Read, *, left: int, limit: int, url: str) -> None:
    """Wrap the body's reads (`read`, `read1`, `read_chunked`: every way requests and `download` take bytes)
    so each checks the deadline and the count of bytes this body has brought. `read(n)` waits for n bytes,
    however slowly they come: it becomes a loop of `read1`, which returns what one receive brought, so the
    deadline is checked between every two pieces."""
    raw = response.raw
    if raw is None or getattr(raw, "_ort_guarded", False):
        return
    seen = [0]
    read1 = raw.read1

    def count(data: bytes) -> bytes:
        seen[0] += len(data or b"")
        if seen[0] > left:
            raise guard.too_much(read, url=url, found=None, limit=limit)
        if time.monotonic() > read.deadline:
            raise guard.late(read)
        return data

    def bounded_read1(amt: int | None = None, decode_content: bool | None = None) -> bytes:
        if time.monotonic() > read.deadline:
            raise guard.late(read)
        return count(read1(amt, decode_content=decode_content))

    def bounded_read(amt: int | None = None, decode_content: bool | None = None, cache_content: bool = False) -> bytes:
        pieces: list[bytes] = []
        got = 0
        while amt is None or got < amt:
            piece = bounded_read1(None if amt is None else amt - got, decode_content)
            if not piece:
                break
            pieces.append(piece)
            got += len(piece)
        return b"".join(pieces)

    def bounded_chunks(method: Callable[..., Iterator[bytes]]) -> Callable[..., Iterator[bytes]]:
        def wrapped(*args: Any, **kwargs: Any) -> Iterator[bytes]:
            for piece in method(*args, **kwargs):
                yield count(piece)

        return wrapped

    for name, value in (("read", bounded_read), ("read1", bounded_read1),
                        ("read_chunked", bounded_chunks(raw.read_chunked)), ("_ort_guarded", True)):
        setattr(raw, name, value)


def guarded_adapter(guard: Guard, *, credential_origin: Origin, ssl_context: Any = None) -> requests.adapters.HTTPAdapter:
    """A transport adapter that runs `guard` on every request it sends and every response it returns,
    redirects included (requests sends each hop through the session's adapter)."""
    from requests.adapters import HTTPAdapter

    class GuardedAdapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            if ssl_context is not None:
                kwargs["ssl_context"] = ssl_context
            super().init_poolmanager(*args, **kwargs)

        def send(self, request: requests.PreparedRequest, stream: bool = False, timeout: Any = None,
                 verify: Any = True, cert: Any = None, proxies: Any = None) -> requests.Response:
            timeout = guard.before(request, credential_origin, timeout)
            response = super().send(request, stream=stream, timeout=timeout, verify=verify, cert=cert,
                                    proxies=proxies)
            guard.after(response, credential_origin)
            return response

    return GuardedAdapter()
