"""A small client of the OCI distribution API: blobs by digest, manifests by tag, over TLS with auth.

Plain `requests` against the distribution spec (opencontainers/distribution-spec `spec.md`), not the
`oras` SDK: the dozen calls we need are a few hundred lines, `requests` is already a dependency, and the
parts that matter to us — chunked uploads from a file, downloads resumed with Range and hashed while
they stream (through the same `download` every other input uses), errors in one sentence that never
carry a credential — are ours to get right either way (README "A team cache and releases on a registry").

Transport: https, trusting the system store (plus `--registry-ca FILE`); plain http only for a loopback
host or with `--insecure-registry`, and then only when the server does not speak TLS. The usual proxy
variables (`HTTPS_PROXY`, `NO_PROXY`, …) apply, through `requests`. Every request, redirects, upload
Locations and token realms included, goes through one guard (`oci_origin`): where it may go, which
origin our credentials are scoped to, and how many bytes and seconds its answer may take.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urljoin

from bundler import __version__
from bundler.errors import HashMismatchError, InputUnavailableError, UsageError
from bundler.hashing import CHUNK
from bundler.sources.download import DEFAULT_MAX_DOWNLOAD, RetryPolicy, download
from bundler.sources.oci_auth import Credential, RegistryAuth, credential_for, default_config_path
from bundler.sources.oci_origin import Guard, Origin, OriginPolicy, ReadLimits, guarded_adapter, is_loopback, origin_of
from bundler.sources.oci_reference import DIGEST_RE as DIGEST_RE
from bundler.sources.oci_reference import SCHEME as SCHEME
from bundler.sources.oci_reference import Reference as Reference
from bundler.sources.oci_reference import parse_reference as parse_reference
from bundler.sources.oci_reference import tag_for as tag_for

if TYPE_CHECKING:
    import requests

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
# The OCI 1.1 empty descriptor: an artifact's config when it has nothing to configure.
EMPTY_CONFIG = "application/vnd.oci.empty.v1+json"
EMPTY_JSON = b"{}"
# What one PATCH of a chunked upload carries: large enough that the round trips do not count, and
# read from the file in CHUNK pieces, so memory holds one piece, not one chunk.
UPLOAD_CHUNK = 64 * 1024**2
MAX_MANIFEST = 4 * 1024**2  # the distribution spec's recommended limit on manifests
TIMEOUT = 60.0

@dataclass(frozen=True, kw_only=True)
class RegistryOptions:
    config: Path | None = None  # Docker's config.json (default: $DOCKER_CONFIG or ~/.docker)
    ca_file: Path | None = None  # also trusted, beside the system store
    insecure: bool = False  # plain http allowed for a host that is not loopback
    limits: ReadLimits | None = None  # each read's deadline (default: ReadLimits.from_env())


@dataclass(frozen=True, kw_only=True)
class Blob:
    digest: str
    size: int


class Registry:
    """One repository on one registry; safe to share between threads (each gets its own session)."""

    def __init__(self, ref: Reference, options: RegistryOptions = RegistryOptions()) -> None:
        self.ref = ref
        self.options = options
        self.name = ref.host
        self._credential: Credential | None = None
        self._auth: RegistryAuth | None = None
        self._base: str | None = None
        self._local = threading.local()
        self._setup = threading.RLock()
        self._context: ssl.SSLContext | None = None
        self._guard: Guard | None = None

    # -- transport ------------------------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        """One context for every session of this client: loading the system store costs tens of milliseconds."""
        with self._setup:
            if self._context is None:
                self._context = self._load_context()
            return self._context

    def _load_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()  # the system store
        if self.options.ca_file is not None:
            try:
                context.load_verify_locations(cafile=str(self.options.ca_file))
            except (OSError, ssl.SSLError) as exc:
                msg = f"--registry-ca: {self.options.ca_file} cannot be used ({exc}); expected PEM CA certificates"
                raise UsageError(msg) from None
        return context

    def guard(self) -> Guard:
        """The one place every request of this client passes (`oci_origin`): origin, credentials, bounds."""
        with self._setup:
            if self._guard is None:
                policy = OriginPolicy(name=self.name, registry=origin_of(self.base()), insecure=self.options.insecure)
                self._guard = Guard(policy, self.options.limits or ReadLimits.from_env())
            return self._guard

    def new_session(self, credential_origin: Origin | None = None) -> requests.Session:
        """A session whose every request, redirects included, goes through the guard, with credentials
        scoped to `credential_origin` (the registry's by default); our TLS trust (loaded on the first https
        request: a plain-http registry need not load the system store), the proxy variables and a
        User-Agent; no auth hook (see `session`)."""
        import requests

        guard = self.guard()
        scope = credential_origin or guard.policy.registry
        registry = self

        class _Session(requests.Session):
            def get_adapter(self, url: str) -> Any:
                if url.lower().startswith("https://") and not getattr(self, "_ort_tls", False):
                    self.mount("https://", guarded_adapter(guard, credential_origin=scope,
                                                           ssl_context=registry._ssl_context()))
                    self._ort_tls = True
                return super().get_adapter(url)

        session = _Session()
        session.mount("http://", guarded_adapter(guard, credential_origin=scope))
        session.headers["User-Agent"] = f"ort-bundler/{__version__}"
        return session

    def session(self) -> requests.Session:
        """This thread's session, carrying the registry's auth."""
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = self.new_session()
            session.auth = self._get_auth()
        return session

    def _get_auth(self) -> RegistryAuth:
        with self._setup:
            if self._auth is None:
                self._credential = credential_for(self.ref.host, self.options.config)
                self._auth = RegistryAuth(guard=self.guard(), credential=self._credential,
                                          new_session=self.new_session)
            return self._auth

    def base(self) -> str:
        """`https://host`; `http://host` only for a loopback (or --insecure-registry) host that speaks no TLS."""
        with self._setup:
            if self._base is None:
                plain_allowed = is_loopback(self.ref.hostname) or self.options.insecure
                tls = True if not plain_allowed else self._speaks_tls()
                self._base = f"{'https' if tls else 'http'}://{self.ref.host}"
            return self._base

    def _speaks_tls(self) -> bool:
        """Whether the server answers a TLS handshake: a probe without certificate checks, which decide nothing
        here (the real requests check them) and would cost loading the system store for a plain-http registry."""
        port = int(self.ref.host.rsplit(":", 1)[1]) if not self.ref.host.endswith("]") and ":" in self.ref.host \
            else 443
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        probe.check_hostname = False
        probe.verify_mode = ssl.CERT_NONE
        try:
            with socket.create_connection((self.ref.hostname, port), timeout=TIMEOUT) as sock, \
                    probe.wrap_socket(sock, server_hostname=self.ref.hostname):
                return True
        except ssl.SSLError:
            return False
        except ConnectionRefusedError as exc:
            raise self._unreachable(exc) from None
        except OSError:
            return True  # unreachable directly (a proxy?): https, and the real request says what fails

    def _tls_failed(self, exc: Exception) -> str:
        text = str(exc)
        if any(s in text for s in ("WRONG_VERSION_NUMBER", "wrong version number", "record layer")):
            return (f"registry {self.name} does not speak TLS; plain http is used only for a loopback host or with "
                    f"--insecure-registry")
        return f"registry {self.name}: TLS failed ({_ssl_reason(exc)}); if it uses a private CA, pass --registry-ca CA.pem"

    def _unreachable(self, exc: Exception) -> InputUnavailableError:
        reason = "connection refused" if "refused" in str(exc).lower() else type(exc).__name__
        return InputUnavailableError(f"registry {self.name} cannot be reached ({reason}); check the host and port "
                                     f"and that it runs")

    def request(self, method: str, path: str, *, ok: tuple[int, ...], what: str, retry: bool = True,
                **kwargs: Any) -> requests.Response:
        """One API call; a status outside `ok` (and 404, which callers ask for) becomes one sentence."""
        import requests

        url = path if path.startswith(("http://", "https://")) else urljoin(self.base() + "/", path.lstrip("/"))
        attempts = 3 if retry else 1
        # A body is never sent on to another origin: only reads follow redirects (to blob storage, say).
        kwargs.setdefault("allow_redirects", method in ("GET", "HEAD"))
        for attempt in range(attempts):
            try:
                response = self.session().request(method, url, timeout=TIMEOUT, **kwargs)
            except requests.exceptions.SSLError as exc:
                raise InputUnavailableError(self._tls_failed(exc)) from None
            except requests.RequestException as exc:
                if attempt + 1 < attempts:
                    time.sleep(0.5 * 2**attempt)
                    continue
                raise self._unreachable(exc) from None
            if response.status_code in ok:
                return response
            if response.status_code in _transient(method) and attempt + 1 < attempts:
                response.close()
                time.sleep(0.5 * 2**attempt)
                continue
            raise self._refused(response, what)
        raise AssertionError("unreachable")  # pragma: no cover

    def _refused(self, response: requests.Response, what: str) -> InputUnavailableError:
        status = response.status_code
        detail = _registry_error(response)
        response.close()
        if status in (401, 403):
            config = self.options.config or default_config_path()
            if self._credential is None:
                return InputUnavailableError(
                    f"registry {self.name} refused {what} (HTTP {status}{detail}): no credentials for {self.ref.host} "
                    f"in {config}; run `docker login {self.ref.host}` or pass --registry-config FILE")
            return InputUnavailableError(
                f"registry {self.name} refused {what} (HTTP {status}{detail}) with the credentials from "
                f"{self._credential.source}; check them (`docker login {self.ref.host}`)")
        return InputUnavailableError(f"registry {self.name} answered HTTP {status}{detail} to {what}")

    # -- blobs ----------------------------------------------------------------------------------

    def blob_path(self, digest: str) -> str:
        return f"/v2/{self.ref.repository}/blobs/{digest}"

    def blob_url(self, digest: str) -> str:
        return self.base() + self.blob_path(digest)

    def blob_size(self, digest: str) -> int | None:
        """The blob's size when the repository has it, else None (HEAD: no bytes move)."""
        response = self.request("HEAD", self.blob_path(digest), ok=(200, 404), what=f"a look-up of blob {digest}",
                                allow_redirects=True)
        response.close()
        if response.status_code == 404:
            return None
        length = response.headers.get("Content-Length", "")
        return int(length) if length.isdigit() else -1

    def push_blob(self, path: Path, *, digest: str, progress: Callable[[int], None] | None = None) -> bool:
        """Upload a file as a blob, in chunks, unless the registry has it; True when bytes were sent.

        The file is hashed as it goes up, and the upload is committed only if it is still the file its
        digest names (the cache could have been altered since it was verified).
        """
        if self.blob_size(digest) is not None:
            return False
        with path.open("rb") as fh:
            self._upload(fh, digest=digest, size=path.stat().st_size, label=str(path), progress=progress)
        return True

    def push_bytes(self, data: bytes, *, media: str = "") -> Blob:
        import io

        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if self.blob_size(digest) is None:
            self._upload(io.BytesIO(data), digest=digest, size=len(data), label=media or digest)
        return Blob(digest=digest, size=len(data))

    def _upload(self, fh: BinaryIO, *, digest: str, size: int, label: str,
                progress: Callable[[int], None] | None = None) -> None:
        response = self.request("POST", f"/v2/{self.ref.repository}/blobs/uploads/", ok=(202,),
                                what=f"the start of an upload of {label}", headers={"Content-Length": "0"})
        location = self._location(response)
        hasher = hashlib.sha256()
        offset = 0
        while offset < size:
            count = min(UPLOAD_CHUNK, size - offset)
            headers = {"Content-Type": "application/octet-stream", "Content-Length": str(count),
                       "Content-Range": f"{offset}-{offset + count - 1}"}
            response = self.request("PATCH", location, ok=(202,), what=f"an upload of {label}", retry=False,
                                    headers=headers, data=_Slice(fh, count, hasher, progress))
            location = self._location(response)
            offset += count
        actual = "sha256:" + hasher.hexdigest()
        if actual != digest:
            self.request("DELETE", location, ok=(204, 404), what="the cancelling of an upload", retry=False)
            msg = f"{label}: hash mismatch while uploading: expected {digest}, read {actual}; fetch it again"
            raise HashMismatchError(msg)
        separator = "&" if "?" in location else "?"
        response = self.request("PUT", f"{location}{separator}digest={digest}", ok=(201,),
                                what=f"the commit of an upload of {label}", retry=False,
                                headers={"Content-Length": "0"})
        response.close()

    def _location(self, response: requests.Response) -> str:
        location = response.headers.get("Location")
        response.close()
        if not location:
            msg = f"registry {self.name} started an upload without a Location header, against the distribution spec"
            raise InputUnavailableError(msg)
        # Relative to the URL that answered (RFC 9110), which for a PATCH may be storage elsewhere.
        return self.guard().policy.upload_target(urljoin(response.url or self.base() + "/", location))

    def fetch_blob(self, blob: Blob, partial: Path, *, label: str, progress: Callable[[int], None] | None = None,
                   stop: threading.Event | None = None, policy: RetryPolicy | None = None,
                   declared_by: str = "the registry declares for it") -> str:
        """Complete `partial` with the blob's bytes (resumed with Range) and return their sha256 (hex).

        The bytes move through `download`, as every other input's do: hashed while streaming, kept for a
        resume when interrupted; the guard bounds them by the size `declared_by` states and by the deadline
        for that size, naming the registry when either is passed.
        """
        bound = blob.size if blob.size >= 0 else DEFAULT_MAX_DOWNLOAD
        what = f"blob {blob.digest} ({label})"
        try:
            with self.guard().reading(what, size=bound, limit_is=declared_by):
                return download(self.blob_url(blob.digest), partial, label=label, session=self.session(),
                                progress=progress, policy=policy or RetryPolicy(), stop=stop, max_size=bound)
        except InputUnavailableError as exc:
            if "HTTP 404" not in str(exc):
                raise
            msg = f"{label}: registry {self.name} has no blob {blob.digest} in {self.ref.repository} (HTTP 404)"
            raise InputUnavailableError(msg) from None

    # -- manifests ------------------------------------------------------------------------------

    def get_manifest(self, reference: str) -> tuple[bytes, str] | None:
        """The manifest a tag or digest names (its bytes and digest), or None when the repository has none."""
        with self.guard().reading(f"the manifest {reference}", size=MAX_MANIFEST,
                                  limit_is="a manifest may have (the distribution spec's limit)"):
            response = self.request("GET", f"/v2/{self.ref.repository}/manifests/{reference}", ok=(200, 404),
                                    what=f"the manifest {reference}", headers={"Accept": OCI_MANIFEST}, stream=True)
            with response:
                if response.status_code == 404:
                    return None
                data = response.raw.read(MAX_MANIFEST + 1, decode_content=True)
        if len(data) > MAX_MANIFEST:
            msg = f"registry {self.name}: the manifest {reference} is larger than {MAX_MANIFEST} bytes"
            raise InputUnavailableError(msg)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if DIGEST_RE.match(reference) and digest != reference:
            msg = f"registry {self.name}: the manifest {reference} came back with the digest {digest}"
            raise HashMismatchError(msg)
        return data, digest

    def put_manifest(self, tag: str, data: bytes) -> str:
        """Tag `data`. A registry still committing a blob that another client pushed at the same moment may refuse a
        manifest naming it (distribution answers 400 DIGEST_INVALID or BLOB_UNKNOWN): asked again after a pause,
        it accepts the manifest once that blob has landed; any other refusal is final."""
        for attempt in range(MANIFEST_ATTEMPTS):
            try:
                response = self.request("PUT", f"/v2/{self.ref.repository}/manifests/{tag}", ok=(201,),
                                        what=f"the manifest for the tag {tag}", retry=False,
                                        headers={"Content-Type": OCI_MANIFEST}, data=data)
            except InputUnavailableError as exc:
                if attempt + 1 == MANIFEST_ATTEMPTS or not any(code in str(exc) for code in BLOB_RACE_ERRORS):
                    raise
                time.sleep(0.5 * 2**attempt)
                continue
            response.close()
            break
        return "sha256:" + hashlib.sha256(data).hexdigest()


#: How often a manifest is put while the registry says a blob it names is not whole yet (a concurrent push).
MANIFEST_ATTEMPTS = 4
BLOB_RACE_ERRORS = ("DIGEST_INVALID", "BLOB_UNKNOWN")


class _Slice:
    """The next `count` bytes of `fh` as a request body of known length, hashed as the socket reads them.

    A file-like object with a length, so `requests` sends a plain Content-Length body and reads it in small
    blocks: memory holds one block, not one chunk.
    """

    def __init__(self, fh: BinaryIO, count: int, hasher: hashlib._Hash,
                 progress: Callable[[int], None] | None) -> None:
        self.fh, self.count, self.left, self.hasher, self.progress = fh, count, count, hasher, progress

    def __len__(self) -> int:
        return self.count

    def read(self, size: int = -1) -> bytes:
        want = self.left if size is None or size < 0 else min(size, self.left)
        if not want:
            return b""
        piece = self.fh.read(min(want, CHUNK))
        if not piece:
            msg = f"{getattr(self.fh, 'name', 'the file')} ended early while uploading; it changed during the upload"
            raise HashMismatchError(msg)
        self.hasher.update(piece)
        self.left -= len(piece)
        if self.progress:
            self.progress(len(piece))
        return piece


def _transient(method: str) -> tuple[int, ...]:
    """The answers worth another attempt. A look-up may also get 500 while another client uploads the same blob
    (CNCF distribution 2.8 on its filesystem driver, measured with two concurrent pushes), and asking again changes
    nothing on the registry; a write that got 500 may have been done, so it is not repeated."""
    return (429, 500, 502, 503, 504) if method in ("GET", "HEAD") else (429, 502, 503, 504)


def _registry_error(response: requests.Response) -> str:
    """The first code of the spec's error body (`{"errors":[{"code":"DENIED",…}]}`), as `: DENIED`."""
    try:
        if response.request.method == "HEAD":
            return ""
        body = json.loads(response.content[:65536])
        code = body["errors"][0]["code"]
        return f": {code}" if isinstance(code, str) and re.match(r"^[A-Z_]{1,40}$", code) else ""
    except (ValueError, KeyError, IndexError, TypeError):
        return ""


def _ssl_reason(exc: Exception) -> str:
    """OpenSSL's own words (`certificate verify failed: unable to get local issuer certificate`), without the
    connection-pool wrapping `requests` adds around them."""
    found = re.search(r"certificate verify failed: ([^()'\"]+)", str(exc))
    return f"certificate verify failed: {found.group(1).strip()}" if found else type(exc).__name__
