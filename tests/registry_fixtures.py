"""Real CNCF `distribution` registries (Debian's `docker-registry`, 2.8) for the registry tests.

Each instance is a process of its own on 127.0.0.1 with a free port, a temporary config and storage
folder, stopped by its own PID. Variants: plain http (loopback), htpasswd basic auth behind TLS from a CA
made here, and `auth: token` with a small token server written here (distribution ships none). A proxy
that serves wrong bytes for every blob stands in for a broken or malicious registry front.
"""

from __future__ import annotations

import base64
import datetime as dt
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
