"""A real HTTP/1.1 server on 127.0.0.1 for download tests, with misbehaviours on demand.

Tests talk to it over real sockets, so what is proven is what `requests` and urllib3 actually do with
a dropped connection, an ignored Range header or a stalled body, not what a mock assumes they do.
Each route is a behaviour: a function of the handler and the index of this request on that path
(0 for the first), so "cut the connection on the first request, then serve the rest" is one line.
Every request is recorded (path, Range header, start and end time) for the test to assert on.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Behaviour = Callable[["Handler", int], None]

_RANGE_RE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclass(kw_only=True)
class Request:
    """One request as the server saw it; `finished` is set when its handler returned."""

    path: str
    range: str | None
    index: int  # the how-many-th request on this path, from 0
    started: float
    finished: float | None = None


@dataclass(kw_only=True)
class BarrierLog:
    """Whether every request that waited at a barrier met the others there."""

    broken: list[str] = field(default_factory=list)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        behaviour, record = self.server.owner.begin(self.path, self.headers.get("Range"))
        try:
            if behaviour is None:
                send_status(self, 404)
            else:
                behaviour(self, record.index)
        finally:
            self.server.owner.end(record)

    def log_message(self, format: str, *args: object) -> None:
        """Silent: the records are what tests read; a log line per request only clutters pytest's output."""

    def write_body(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: LocalHTTPServer

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up mid-body (the point of several tests) is not a server error."""


class LocalHTTPServer:
    """Routes, request records and a `release` event that stalled responses wait for."""

    def __init__(self) -> None:
        self.routes: dict[str, Behaviour] = {}
        self.requests: list[Request] = []
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._active = 0
        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> LocalHTTPServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.wait_idle()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def route(self, path: str, behaviour: Behaviour) -> str:
        """Serve `path` with `behaviour`; returns its URL."""
        self.routes[path] = behaviour
        return self.url(path)

    def seen(self, path: str | None = None) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if path is None or r.path == path]

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until no handler is running, so records (and `finished` times) are complete."""
        with self._idle:
            if not self._idle.wait_for(lambda: self._active == 0, timeout=timeout):
                msg = f"the test server still had {self._active} request(s) running after {timeout} s"
                raise AssertionError(msg)

    def begin(self, path: str, range_header: str | None) -> tuple[Behaviour | None, Request]:
        with self._lock:
            index = sum(1 for r in self.requests if r.path == path)
            record = Request(path=path, range=range_header, index=index, started=time.monotonic())
            self.requests.append(record)
            self._active += 1
            return self.routes.get(path), record

    def end(self, record: Request) -> None:
        with self._idle:
            record.finished = time.monotonic()
            self._active -= 1
            self._idle.notify_all()


# -- behaviours ----------------------------------------------------------------------------------------


def send_status(handler: Handler, code: int) -> None:
    body = f"HTTP {code}\n".encode("ascii")
    handler.send_response(code)
    handler.send_header("Content-Type", "text/plain")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.write_body(body)


def _send_headers(handler: Handler, code: int, length: int, extra: dict[str, str] | None = None) -> None:
    handler.send_response(code)
    handler.send_header("Content-Type", "application/octet-stream")
    handler.send_header("Content-Length", str(length))
    handler.send_header("Accept-Ranges", "bytes")
    for name, value in (extra or {}).items():
        handler.send_header(name, value)
    handler.end_headers()


def serve(data: bytes) -> Behaviour:
    """A well-behaved file server: 200, or 206 for `Range: bytes=N-[M]`, or 416 past the end."""

    def behaviour(handler: Handler, index: int) -> None:
        match = _RANGE_RE.match(handler.headers.get("Range") or "")
        if match is None:
            _send_headers(handler, 200, len(data))
            handler.write_body(data)
            return
        start = int(match.group(1))
        end = min(int(match.group(2)), len(data) - 1) if match.group(2) else len(data) - 1
        if start >= len(data):
            _send_headers(handler, 416, 0, {"Content-Range": f"bytes */{len(data)}"})
            return
        _send_headers(handler, 206, end - start + 1, {"Content-Range": f"bytes {start}-{end}/{len(data)}"})
        handler.write_body(data[start:end + 1])

    return behaviour


def ignore_range(data: bytes) -> Behaviour:
    """A server without Range support: always 200 and the whole file."""

    def behaviour(handler: Handler, index: int) -> None:
        _send_headers(handler, 200, len(data))
        handler.write_body(data)

    return behaviour


def status(code: int) -> Behaviour:
    def behaviour(handler: Handler, index: int) -> None:
        send_status(handler, code)

    return behaviour


def cut_after(data: bytes, sent: int) -> Behaviour:
    """Promise the whole file (Content-Length), send `sent` bytes, then close the connection."""

    def behaviour(handler: Handler, index: int) -> None:
        _send_headers(handler, 200, len(data))
        handler.write_body(data[:sent])
        handler.close_connection = True

    return behaviour


def stall_after(data: bytes, sent: int) -> Behaviour:
    """Send `sent` bytes of the file, then hang until the server's `release` event (or 30 s)."""

    def behaviour(handler: Handler, index: int) -> None:
        _send_headers(handler, 200, len(data))
        handler.write_body(data[:sent])
        handler.server.owner.release.wait(30)
        handler.close_connection = True

    return behaviour


def slowly(data: bytes, *, pieces: int, delay: float) -> Behaviour:
    """The whole file in `pieces` writes with a pause before each, so concurrent clients overlap."""

    def behaviour(handler: Handler, index: int) -> None:
        _send_headers(handler, 200, len(data))
        step = -(-len(data) // pieces)
        for start in range(0, len(data), step):
            time.sleep(delay)
            handler.write_body(data[start:start + step])

    return behaviour


def in_turn(*behaviours: Behaviour) -> Behaviour:
    """The first request gets the first behaviour, the second the second; the last one repeats."""

    def behaviour(handler: Handler, index: int) -> None:
        behaviours[min(index, len(behaviours) - 1)](handler, index)

    return behaviour


def after_barrier(barrier: threading.Barrier, log: BarrierLog, then: Behaviour) -> Behaviour:
    """Answer only once `barrier.parties` requests are in flight together; a timeout is logged, not hidden."""

    def behaviour(handler: Handler, index: int) -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            log.broken.append(handler.path)
        then(handler, index)

    return behaviour


def endless(chunk: int = 64 * 1024) -> Behaviour:
    """200 without a Content-Length, then bytes until the client hangs up: a server that never stops."""

    def behaviour(handler: Handler, index: int) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        block = b"\xab" * chunk
        handler.close_connection = True
        try:
            while not handler.server.owner.release.is_set():
                handler.write_body(block)
        except OSError:  # the client stopped reading: the point of the test
            return

    return behaviour


def declares(length: int, data: bytes = b"") -> Behaviour:
    """A Content-Length of `length` (possibly far beyond what follows), then `data`, then a closed connection."""

    def behaviour(handler: Handler, index: int) -> None:
        _send_headers(handler, 200, length)
        handler.close_connection = True
        try:
            handler.write_body(data)
        except OSError:
            return

    return behaviour
