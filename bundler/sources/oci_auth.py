"""Who we are to a registry: credentials from Docker's `config.json`, and the Basic and Bearer token flows.

A team already logs in with `docker login` (or `oras login`, `helm registry login`), which writes
`~/.docker/config.json`: we read the same file rather than invent another. Secrets live only in
`Credential` (whose repr hides them) and in request headers; no message, log line or JSON we produce
carries them: errors name the registry, never the user or the secret.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from bundler.errors import InputUnavailableError, UsageError
from bundler.sources.oci_origin import Guard, Origin, OriginPolicy

if TYPE_CHECKING:
    import requests

log = logging.getLogger(__name__)

# The user name a credential helper returns for an identity (refresh) token instead of a password.
IDENTITY_TOKEN_USER = "<token>"
HELPER_TIMEOUT = 60.0
TOKEN_ANSWER = 64 * 1024  # the most a token service's answer may bring


@dataclass(frozen=True, kw_only=True)
class Credential:
    """A user and password, or an identity token (OAuth2 refresh token) for the bearer flow."""

    username: str = field(default="", repr=False)
    password: str = field(default="", repr=False)
    identity_token: str = field(default="", repr=False)
    source: str  # where it came from, for messages: "config.json auths", "docker-credential-pass"

    def basic(self) -> str | None:
        """The `Authorization: Basic` value, when this is a user and password."""
        if not self.username or not self.password:
            return None
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode("ascii")


def default_config_path() -> Path:
    """Docker's own rule: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`."""
    folder = os.environ.get("DOCKER_CONFIG")
    return Path(folder) / "config.json" if folder else Path.home() / ".docker" / "config.json"


def credential_for(host: str, config: Path | None) -> Credential | None:
    """The credential `config.json` gives for `host` (host[:port]); None when it names none.

    Order as in Docker: a `credHelpers` entry for the host, else an `auths` entry with an inline
    credential, else the default `credsStore`. A `config` the user named must exist; the default may not.
    """
    path = config or default_config_path()
    data = _read_config(path, required=config is not None)
    helpers = data.get("credHelpers") or {}
    if isinstance(helpers, dict) and isinstance(helpers.get(host), str):
        return _from_helper(helpers[host], host)
    entry = _auths_entry(data.get("auths") or {}, host)
    if entry is not None and (found := _from_auths(entry, path, host)) is not None:
        return found
    store = data.get("credsStore")
    if isinstance(store, str) and store:
        return _from_helper(store, host)
    return None


def _read_config(path: Path, *, required: bool) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            msg = f"--registry-config: {path} does not exist; expected Docker's config.json (as `docker login` writes it)"
            raise UsageError(msg) from None
        return {}
    except OSError as exc:
        msg = f"{path}: cannot be read ({exc.strerror}); expected Docker's config.json"
        raise UsageError(msg) from None
    try:
        data = json.loads(text)
    except ValueError as exc:  # the text may hold secrets: say where, not what
        msg = f"{path}: is not valid JSON (line {getattr(exc, 'lineno', '?')}); expected Docker's config.json"
        raise UsageError(msg) from None
    if not isinstance(data, dict):
        msg = f"{path}: found a JSON {type(data).__name__}, expected an object (Docker's config.json)"
        raise UsageError(msg)
    return data


def _normalise(key: str) -> str:
    """`https://host:5000/v1/` and `host:5000` name the same registry in `auths`."""
    if "://" in key:
        key = urlparse(key).netloc
    return key.split("/", 1)[0].lower()


def _auths_entry(auths: Mapping[str, Any], host: str) -> Mapping[str, Any] | None:
    if not isinstance(auths, dict):
        return None
    for key, entry in auths.items():
        if isinstance(key, str) and _normalise(key) == host.lower() and isinstance(entry, dict):
            return entry
    return None


def _from_auths(entry: Mapping[str, Any], path: Path, host: str) -> Credential | None:
    source = f"{path} auths[{host}]"
    if isinstance(token := entry.get("identitytoken"), str) and token:
        return Credential(identity_token=token, source=source)
    if isinstance(auth := entry.get("auth"), str) and auth:
        try:
            user, sep, password = base64.b64decode(auth, validate=True).decode("utf-8").partition(":")
        except ValueError:
            sep, user, password = "", "", ""
        if not sep:
            msg = f"{path}: auths[{host}].auth is not base64 of 'user:password'; run `docker login {host}` again"
            raise UsageError(msg)
        return Credential(username=user, password=password, source=source)
    name, secret = entry.get("username"), entry.get("password")
    if isinstance(name, str) and isinstance(secret, str) and name:
        return Credential(username=name, password=secret, source=source)
    return None


def _from_helper(name: str, host: str) -> Credential | None:
    """Ask `docker-credential-NAME get` (the protocol of docker/docker-credential-helpers)."""
    program = f"docker-credential-{name}"
    exe = shutil.which(program)
    if exe is None:
        msg = f"the Docker configuration names the credential helper {program} for {host}, but it is not on PATH"
        raise InputUnavailableError(msg)
    try:
        proc = subprocess.run([exe, "get"], input=host, capture_output=True, text=True, timeout=HELPER_TIMEOUT)
    except subprocess.TimeoutExpired:
        msg = f"credential helper {program} did not answer for {host} within {HELPER_TIMEOUT:.0f} s"
        raise InputUnavailableError(msg) from None
    if proc.returncode != 0:
        if "credentials not found" in proc.stdout + proc.stderr:
            return None
        # Its output is not repeated: a helper may echo what it was working on.
        msg = f"credential helper {program} failed for {host} (exit {proc.returncode})"
        raise InputUnavailableError(msg)
    try:
        answer = json.loads(proc.stdout)
        user, secret = answer["Username"], answer["Secret"]
    except (ValueError, KeyError, TypeError):
        msg = f"credential helper {program} answered for {host} without the JSON Username and Secret expected"
        raise InputUnavailableError(msg) from None
    if user == IDENTITY_TOKEN_USER:
        return Credential(identity_token=secret, source=program)
    return Credential(username=user, password=secret, source=program)


# -- the challenge/response flows -----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Challenge:
    scheme: str  # "basic" or "bearer"
    params: Mapping[str, str]


_PARAM_RE = re.compile(r'([A-Za-z0-9_-]+)=(?:"([^"]*)"|([^",\s]*))')


def parse_challenge(header: str) -> Challenge | None:
    """`Bearer realm="…",service="…",scope="repository:a/b:pull,push"` (RFC 7235: quoted values hold commas)."""
    scheme, _, rest = header.strip().partition(" ")
    if not scheme:
        return None
    params = {m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3) for m in _PARAM_RE.finditer(rest)}
    return Challenge(scheme=scheme.lower(), params=params)


class RegistryAuth:
    """Answers the registry's 401 challenge, and remembers the answer for the next requests to the registry.

    Used as a `requests` auth hook: every request to the registry's own origin carries the last
    Authorization that worked; a 401 from that origin with `WWW-Authenticate: Bearer` fetches a token for
    the scope it names from the realm (with the credential, if any, as Basic, or an identity token by the
    OAuth2 refresh-token grant) and sends the request once more. Requests to any other origin (a
    redirect, an upload Location) get nothing from here, and their 401s are never answered: the guard
    (`oci_origin`) turns them into errors and removes any Authorization not scoped to where it goes.
    Bodies are never streamed into a request that may be challenged: the client makes a body-less
    request first (HEAD, POST), which earns the token.
    """

    def __init__(self, *, guard: Guard, credential: Credential | None,
                 new_session: Callable[[Origin], requests.Session]) -> None:
        self.guard = guard
        self.policy: OriginPolicy = guard.policy
        self.registry = guard.policy.name
        self.credential = credential
        self.new_session = new_session  # for the token service: the same TLS trust and proxies, scoped to the realm
        self._header: str | None = None
        self._expires = 0.0
        self._lock = threading.Lock()

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        if self.policy.is_registry(request.url or ""):
            with self._lock:
                if self._header and time.monotonic() < self._expires:
                    request.headers["Authorization"] = self._header
        request.hooks.setdefault("response", []).append(self._on_response)
        return request

    def _on_response(self, response: requests.Response, **kwargs: Any) -> requests.Response:
        if response.status_code != 401 or getattr(response.request, "_ort_retried", False):
            return response
        if not self.policy.is_registry(response.url or ""):
            return response  # the guard already refused it; never answered for another origin
        challenge = parse_challenge(response.headers.get("WWW-Authenticate", ""))
        if challenge is None or challenge.scheme not in ("basic", "bearer"):
            return response
        header, lifetime = self._answer(challenge, response)
        if header is None:
            return response
        with self._lock:
            self._header, self._expires = header, time.monotonic() + max(lifetime - 10.0, 1.0)
        response.content  # noqa: B018 - read the body so the connection is reused
        response.close()
        retry = response.request.copy()
        retry.headers["Authorization"] = header
        retry._ort_retried = True  # type: ignore[attr-defined]
        sent = response.connection.send(retry, **kwargs)
        sent.history.append(response)
        sent.request = retry
        return sent

    def _answer(self, challenge: Challenge, response: requests.Response) -> tuple[str | None, float]:
        if challenge.scheme == "basic":
            basic = self.credential.basic() if self.credential else None
            return basic, 3600.0
        return self._token(challenge, response)

    def _token(self, challenge: Challenge, response: requests.Response) -> tuple[str | None, float]:
        import requests

        realm = challenge.params.get("realm", "")
        parsed = urlparse(realm)
        if parsed.scheme not in ("https", "http") or not parsed.netloc:
            msg = f"registry {self.registry}: its token challenge names no usable realm URL (found {realm!r})"
            raise InputUnavailableError(msg)
        origin = self.policy.token_realm(realm, challenged_by=response.url or "")
        cred = self.credential
        params = {k: v for k, v in challenge.params.items() if k in ("service", "scope")}
        try:
            with self.new_session(origin) as session, \
                    self.guard.reading(f"a token from {origin}", size=TOKEN_ANSWER, limit_is="a token answer may bring"):
                if cred and cred.identity_token:
                    answer = session.post(realm, timeout=60, allow_redirects=False, data={
                        **params, "grant_type": "refresh_token", "client_id": "ort-bundler",
                        "refresh_token": cred.identity_token})
                else:
                    headers = {"Authorization": basic} if cred and (basic := cred.basic()) else {}
                    answer = session.get(realm, params=params, headers=headers, timeout=60, allow_redirects=False)
                answer.content  # noqa: B018 - read within the token read's bounds
        except requests.RequestException as exc:
            msg = f"registry {self.registry}: its token service {parsed.netloc} cannot be reached ({type(exc).__name__})"
            raise InputUnavailableError(msg) from None
        if answer.status_code in (401, 403):
            return None, 0.0  # the caller reports the registry's own 401 with the registry's name
        if answer.status_code != 200:
            msg = f"registry {self.registry}: its token service {parsed.netloc} answered HTTP {answer.status_code}"
            raise InputUnavailableError(msg)
        try:
            body = answer.json()
            token = body.get("token") or body.get("access_token")
            lifetime = float(body.get("expires_in") or 60)
        except (ValueError, AttributeError, TypeError):
            token = None
        if not isinstance(token, str) or not token:
            msg = f"registry {self.registry}: its token service {parsed.netloc} answered without a token"
            raise InputUnavailableError(msg)
        return f"Bearer {token}", lifetime
