"""Real CNCF `distribution` registries (Debian's `docker-registry`, 2.8) for the registry tests.

Each instance is a process of its own on 127.0.0.1 with a free port, a temporary config and storage
folder, stopped by its own PID. Variants: plain http (loopback), htpasswd basic auth behind TLS from a CA
made here, and `auth: token` with a small token server written here (distribution ships none). A proxy
that serves wrong bytes for every blob stands in for a broken or malicious registry front.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

REGISTRY_BIN = shutil.which("docker-registry") or "/usr/bin/docker-registry"
USER, PASSWORD = "ci-builder", "s3cret-" + secrets.token_hex(6)  # the password must never show in any output
IDENTITY_TOKEN = "refresh-" + secrets.token_hex(12)  # an OAuth2 refresh token, as `docker login` may store one


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RunningRegistry:
    process: subprocess.Popen[bytes]
    port: int
    root: Path
    scheme: str

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, repo: str = "team/inputs") -> str:
        return f"oci://{self.host}/{repo}"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


def start_registry(root: Path, *, auth: str = "", tls: tuple[Path, Path] | None = None,
                   ca: Path | None = None) -> RunningRegistry:
    """`auth`: a YAML `auth:` block (indented two spaces) or nothing; `tls`: (certificate, key)."""
    if not Path(REGISTRY_BIN).exists():
        message = "docker-registry is not installed (`.ci/run` installs Debian's docker-registry)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    port = free_port()
    (root / "storage").mkdir(parents=True, exist_ok=True)
    tls_block = f"  tls:\n    certificate: {tls[0]}\n    key: {tls[1]}\n" if tls else ""
    config = (f"version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
              f"storage:\n  filesystem:\n    rootdirectory: {root / 'storage'}\n"
              f"  maintenance:\n    uploadpurging:\n      enabled: false\n"
              f"http:\n  addr: 127.0.0.1:{port}\n  secret: {secrets.token_hex(16)}\n{tls_block}"
              + (f"auth:\n{auth}" if auth else ""))
    (root / "config.yml").write_text(config, encoding="utf-8")
    with (root / "registry.log").open("wb") as log:  # the child keeps its own descriptor
        process = subprocess.Popen([REGISTRY_BIN, "serve", str(root / "config.yml")], stdout=log, stderr=log,
                                   stdin=subprocess.DEVNULL)
    scheme = "https" if tls else "http"
    running = RunningRegistry(process=process, port=port, root=root, scheme=scheme)
    context = ssl.create_default_context(cafile=str(ca)) if ca else None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"docker-registry exited: {(root / 'registry.log').read_text(errors='replace')[-2000:]}")
        try:
            urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/v2/", timeout=2, context=context)
            return running
        except urllib.error.HTTPError:
            return running  # 401: up, and asking for credentials
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    running.stop()
    pytest.fail("docker-registry did not answer within 20 s")


def htpasswd_line(user: str, password: str) -> str:
    """distribution's htpasswd backend accepts bcrypt only."""
    import bcrypt

    return f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()}\n"


def write_docker_config(path: Path, host: str, user: str, password: str) -> Path:
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    path.write_text(json.dumps({"auths": {host: {"auth": auth}}}), encoding="utf-8")
    return path


# -- a token server for distribution's `auth: token` ------------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TokenIssuer:
    """Signs the JWTs distribution 2.8 accepts: RS256, the signing certificate in `x5c`, chained to the
    `rootcertbundle` the registry trusts; `access` as the scope asked for, for one user only."""

    key: object
    cert_der: bytes
    service: str
    issuer: str
    requests: list[str]

    def token(self, scope: str | None, subject: str) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        access = []
        if scope:
            kind, name, actions = scope.split(":", 2)
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(self.cert_der).decode()]}
        claims = {"iss": self.issuer, "sub": subject, "aud": self.service, "exp": now + 300, "nbf": now - 10,
                  "iat": now, "jti": secrets.token_hex(8), "access": access}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())  # type: ignore[attr-defined]
        return f"{signing_input}.{_b64url(signature)}"


def make_token_issuer(folder: Path, service: str) -> tuple[TokenIssuer, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from signing_pki import make_cert, pem

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca = make_cert("token CA", ca_key, issuer=None, issuer_key=ca_key, ca=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = make_cert("token signer", key, issuer=ca, issuer_key=ca_key, ca=False)
    bundle = folder / "token-root.pem"
    bundle.write_bytes(pem(ca))
    issuer = TokenIssuer(key=key, cert_der=cert.public_bytes(serialization.Encoding.DER), service=service,
                         issuer="ort-bundler-test-issuer", requests=[])
    return issuer, bundle


class _TokenHandler(BaseHTTPRequestHandler):
    server: _TokenServer

    def do_GET(self) -> None:
        query = parse_qs(urlparse(self.path).query)
        issuer = self.server.issuer
        issuer.requests.append(self.path)
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") != expected:
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps({"token": issuer.token(query.get("scope", [None])[0], USER), "expires_in": 300}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        """The OAuth2 refresh-token grant distribution's token spec describes for identity tokens."""
        form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode())
        issuer = self.server.issuer
        issuer.requests.append("POST " + " ".join(sorted(form)))
        if form.get("grant_type") != ["refresh_token"] or form.get("refresh_token") != [IDENTITY_TOKEN]:
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps({"access_token": issuer.token(form.get("scope", [None])[0], USER), "expires_in": 300})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format: str, *args: object) -> None:
        pass


class _TokenServer(ThreadingHTTPServer):
    daemon_threads = True
    issuer: TokenIssuer


def start_token_server(issuer: TokenIssuer) -> tuple[_TokenServer, str]:
    server = _TokenServer(("127.0.0.1", 0), _TokenHandler)
    server.issuer = issuer
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/token"


# -- a proxy that corrupts blobs ---------------------------------------------------------------------


class _CorruptingHandler(BaseHTTPRequestHandler):
    """Forwards to the registry, recording each request's Range header; with `corrupt`, every blob body
    comes back with its first byte flipped (same length)."""

    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def _forward(self, method: str) -> None:
        self.server.ranges.append((self.path, self.headers.get("Range")))
        # As a forward proxy (HTTP_PROXY) it is sent absolute URIs; as a front, paths.
        path = urlparse(self.path)._replace(scheme="", netloc="").geturl() if "://" in self.path else self.path
        request = urllib.request.Request(f"http://{self.server.upstream}{path}", method=method,
                                         headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
        try:
            response = urllib.request.urlopen(request, timeout=30)
            status, headers, body = response.status, response.headers, response.read()
        except urllib.error.HTTPError as exc:
            status, headers, body = exc.code, exc.headers, exc.read()
        if self.server.corrupt and method == "GET" and "/blobs/sha256:" in path and body:
            body = bytes([body[0] ^ 0xFF]) + body[1:]
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)) if method != "HEAD" else headers.get("Content-Length", "0"))
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._forward("GET")

    def do_HEAD(self) -> None:
        self._forward("HEAD")

    def log_message(self, format: str, *args: object) -> None:
        pass


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    upstream: str
    corrupt: bool
    ranges: list[tuple[str, str | None]]


def start_corrupting_proxy(upstream: str, *, corrupt: bool = True) -> _ProxyServer:
    server = _ProxyServer(("127.0.0.1", 0), _CorruptingHandler)
    server.upstream, server.corrupt, server.ranges = upstream, corrupt, []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def make_tls(folder: Path) -> tuple[Path, Path, Path]:
    """A CA made here and a server certificate for 127.0.0.1 from it: (ca.pem, cert.pem, key.pem)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    now = dt.datetime.now(dt.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca = (x509.CertificateBuilder().subject_name(name("registry test CA")).issuer_name(name("registry test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (x509.CertificateBuilder().subject_name(name("127.0.0.1")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    return paths


# -- hostile fronts and other origins ----------------------------------------------------------------
#
# A front stands where the registry stands for the client (its host:port is the registry's origin, its
# Basic login the registry's credentials) and forwards to a real registry, except where a rule answers
# instead: a redirect elsewhere, an upload Location on another origin, a slow or endless body, a crafted
# manifest. An "other origin" is a second server on another port, recording what reaches it.


@dataclass
class Seen:
    method: str
    path: str
    authorization: str | None
    body: int  # bytes of request body received


Rule = Callable[["FrontHandler", str, bytes], bool]  # True when the rule answered the request itself


class FrontHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _FrontServer

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append(Seen(method, self.path, self.headers.get("Authorization"), len(body)))
        if self.server.basic and self.headers.get("Authorization") != self.server.basic:
            self.reply(401, {"WWW-Authenticate": 'Basic realm="front"'}, b"")
            return
        if self.server.rule is not None and self.server.rule(self, method, body):
            return
        self.reply(*self.forward(method, body))

    def forward(self, method: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        """The real registry's answer; the Host header is kept so its Locations name the front."""
        upstream = http.client.HTTPConnection(self.server.upstream, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("authorization", "connection")}
        try:
            upstream.request(method, self.path, body=body if method not in ("GET", "HEAD") else None, headers=headers)
            response = upstream.getresponse()
            data = response.read()
            kept = {k: v for k, v in response.getheaders()
                    if k.lower() not in ("content-length", "transfer-encoding", "connection")}
            if method == "HEAD":
                kept["Content-Length"] = response.getheader("Content-Length") or "0"
            return response.status, kept, data
        finally:
            upstream.close()

    def reply(self, status: int, headers: dict[str, str], data: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def log_message(self, format: str, *args: object) -> None:
        pass


class _FrontServer(ThreadingHTTPServer):
    daemon_threads = True
    upstream: str
    basic: str | None
    rule: Rule | None
    seen: list[Seen]

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up on a slow or endless body is the point of those tests."""


@dataclass
class Front:
    server: _FrontServer

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def url(self, repo: str) -> str:
        return f"oci://{self.host}/{repo}"

    @property
    def seen(self) -> list[Seen]:
        return self.server.seen

    def __enter__(self) -> Front:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_front(upstream: RunningRegistry, *, rule: Rule | None = None, login: bool = True) -> Front:
    """A front for `upstream` at its own port; with `login`, it asks for USER/PASSWORD (Basic) on every request."""
    server = _FrontServer(("127.0.0.1", 0), FrontHandler)
    server.upstream, server.rule, server.seen = upstream.host, rule, []
    server.basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode() if login else None
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return Front(server=server)


def is_blob_get(method: str, path: str) -> bool:
    return method == "GET" and "/blobs/sha256:" in path


def redirect_blobs(to: str) -> Rule:
    """Blob GETs answered with a 307 to the same path at `to` (another origin), as blob storage is."""

    def rule(handler: FrontHandler, method: str, body: bytes) -> bool:
        if not is_blob_get(method, handler.path):
            return False
        handler.reply(307, {"Location": f"{to}{handler.path}"}, b"")
        return True

    return rule


def relocate_uploads(to: str) -> Rule:
    """The registry's answer to the start of an upload, with its Location moved to `to` (another origin)."""

    def rule(handler: FrontHandler, method: str, body: bytes) -> bool:
        if method != "POST" or not handler.path.rstrip("/").endswith("/blobs/uploads"):
            return False
        status, headers, data = handler.forward(method, body)
        path = urlparse(headers.get("Location", "/upload"))
        headers["Location"] = f"{to}{path.path}?{path.query}"
        handler.reply(status, headers, data)
        return True

    return rule


def slow_bodies(delay: float, *, match: Callable[[str, str], bool] = is_blob_get) -> Rule:
    """The real answer to matching requests, its true Content-Length first, then one byte every `delay` s."""

    def rule(handler: FrontHandler, method: str, body: bytes) -> bool:
        if not match(method, handler.path):
            return False
        status, headers, data = handler.forward(method, body)
        handler.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(data))}.items():
            handler.send_header(name, value)
        handler.end_headers()
        try:
            for index in range(len(data)):
                handler.wfile.write(data[index:index + 1])
                handler.wfile.flush()
                time.sleep(delay)
        except OSError:
            pass
        handler.close_connection = True
        return True

    return rule


def endless_body(match: Callable[[str, str], bool] = is_blob_get) -> Rule:
    """200 without a Content-Length, then bytes until the client hangs up."""

    def rule(handler: FrontHandler, method: str, body: bytes) -> bool:
        if not match(method, handler.path):
            return False
        handler.send_response(200)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True
        block = b"\xab" * 65536
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline:
                handler.wfile.write(block)
        except OSError:
            pass
        return True

    return rule


def serve_manifest(tag: str, data: bytes) -> Rule:
    """The given bytes as the manifest of `tag` (whatever the real registry would accept)."""

    def rule(handler: FrontHandler, method: str, body: bytes) -> bool:
        if method not in ("GET", "HEAD") or not handler.path.endswith(f"/manifests/{tag}"):
            return False
        handler.reply(200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json",
                            "Docker-Content-Digest": "sha256:" + hashlib.sha256(data).hexdigest()}, data)
        return True

    return rule


class _OtherHandler(BaseHTTPRequestHandler):
    """Another origin: records every request; `mode` "basic" or "bearer" asks for credentials, "storage"
    serves `blobs` (by path) and takes uploads."""

    protocol_version = "HTTP/1.1"
    server: _OtherServer

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append(Seen(method, self.path, self.headers.get("Authorization"), len(body)))
        mode, path = self.server.mode, urlparse(self.path).path
        if mode == "basic":
            self._reply(401, {"WWW-Authenticate": 'Basic realm="elsewhere"'}, b"")
        elif mode == "bearer":
            self._reply(401, {"WWW-Authenticate": f'Bearer realm="{self.server.realm}",service="x",scope="y"'}, b"")
        elif method in ("GET", "HEAD") and path in self.server.blobs:
            self._reply(200, {}, self.server.blobs[path])
        elif method == "PATCH":
            self._reply(202, {"Location": path, "Range": f"0-{max(length - 1, 0)}"}, b"")
        elif method == "PUT":
            self._reply(201, {"Location": path}, b"")
        else:
            self._reply(404, {}, b"")

    def _reply(self, status: int, headers: dict[str, str], data: bytes) -> None:
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(data))}.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def log_message(self, format: str, *args: object) -> None:
        pass


class _OtherServer(ThreadingHTTPServer):
    daemon_threads = True
    mode: str
    realm: str
    blobs: dict[str, bytes]
    seen: list[Seen]


@dataclass
class Other:
    server: _OtherServer
    scheme: str

    @property
    def base(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"

    @property
    def seen(self) -> list[Seen]:
        return self.server.seen

    def __enter__(self) -> Other:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_other(mode: str, *, blobs: dict[str, bytes] | None = None, realm: str = "",
                tls: tuple[Path, Path] | None = None) -> Other:
    """Another origin on 127.0.0.1 (its own port); `tls`: (certificate, key) to speak https."""
    server = _OtherServer(("127.0.0.1", 0), _OtherHandler)
    server.mode, server.realm, server.blobs, server.seen = mode, realm, dict(blobs or {}), []
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(tls[0]), str(tls[1]))
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return Other(server=server, scheme="https" if tls else "http")
