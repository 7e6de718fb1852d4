"""Fetch of the quickstart-win inputs from an OCI registry against the same files from a plain http server.

Issue 24's target: a fetch from the registry (`fetch --mirror oci://…`) costs at most 1.2x a fetch of the
same files from a plain `http` file server on loopback. Both sides are the real `fetch_inputs` into a
fresh `Cache` with 4 parallel downloads, so they include hashing while streaming and the atomic adopt;
the registry side adds what a registry costs: the inputs tag's manifest, a HEAD per blob, and the
registry's own serving (Debian's `docker-registry`, distribution 2.8, filesystem storage). The http
side serves the very same cached files with sendfile(2) from a separate process.

The inputs come from a cache that holds quickstart-win (`--cache DIR`, default: ort-bundler's own; it
is filled with `ort-bundler fetch` first when needed, through your pip configuration).
Run: python bench/registry_fetch.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from pathlib import Path

from _payload import machine, workspace

from bundler.manifest import load
from bundler.sources.cache import Cache, default_cache_dir
from bundler.sources.fetch import FetchOptions, cached_inputs, fetch_inputs
from bundler.sources.inputs import all_inputs, target_of
from bundler.sources.oci import Registry, parse_reference
from bundler.sources.oci_inputs import open_mirror, push_inputs

MANIFEST = Path(__file__).resolve().parents[1] / "manifests" / "quickstart-win.toml"


class _FolderServer(ThreadingHTTPServer):
    daemon_threads = True
    folder: Path


class _SendfileHandler(BaseHTTPRequestHandler):
    """Serve files of one folder by name, with their length and no content encoding."""

    protocol_version = "HTTP/1.1"
    server: _FolderServer

    def do_GET(self) -> None:
        path = self.server.folder / self.path.lstrip("/")
        if "/" in self.path.lstrip("/") or not path.is_file():
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(path.stat().st_size))
        self.end_headers()
        with path.open("rb") as fh:
            self.connection.sendfile(fh)

    def log_message(self, format: str, *args: object) -> None:
        """Keep the benchmark's output to its figures."""


def serve(folder: Path, ready: Connection) -> None:
    server = _FolderServer(("127.0.0.1", 0), _SendfileHandler)
    server.folder = folder
    ready.send(server.server_address[1])
    server.serve_forever()


def start_registry(work: Path) -> tuple[subprocess.Popen[bytes], int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = work / "registry.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n"
                      f"    rootdirectory: {work / 'registry'}\nhttp:\n  addr: 127.0.0.1:{port}\n"
                      f"  secret: {secrets.token_hex(16)}\n", encoding="utf-8")
    process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2).close()
            return process, port
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    os.kill(process.pid, signal.SIGTERM)
    raise SystemExit("docker-registry did not start within 20 s")


def timed_fetch(inputs: list, root: Path, options: Callable[[], FetchOptions]) -> float:
    """Seconds of one fetch into a fresh cache; `options` is timed too (for the registry: its client, the tag)."""
    target = target_of(load(MANIFEST))
    subprocess.run(["sync"], check=True)
    start = time.perf_counter()
    fetch_inputs(inputs, cache=Cache(root), target=target, options=options())
    elapsed = time.perf_counter() - start
    shutil.rmtree(root)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", type=Path, default=None, help="a cache holding quickstart-win's inputs")
    parser.add_argument("--workdir", type=Path, default=None, help="where to work (default: a temp dir)")
    parser.add_argument("--repeat", type=int, default=5, help="time each side this many times, keep the fastest")
    args = parser.parse_args()
    if shutil.which("docker-registry") is None:
        raise SystemExit("docker-registry is not installed (Debian: apt-get install docker-registry)")
    print(f"machine: {machine()}")
    cache = Cache(args.cache or default_cache_dir())
    subprocess.run([sys.executable, "-m", "bundler", "fetch", "-q", "--cache", str(cache.root), str(MANIFEST)],
                   check=True)
    manifest = load(MANIFEST)
    inputs = all_inputs(manifest)
    files = cached_inputs(inputs, cache)
    total = sum(path.stat().st_size for path in files.values())
    with workspace(args.workdir) as work:
        served = work / "served"
        served.mkdir()
        for path in files.values():
            os.link(path, served / path.name) if not (served / path.name).exists() else None
        url_inputs = [replace(item, kind="url", location=f"http://127.0.0.1:{{port}}/{files[item.key].name}",
                              filename=files[item.key].name) for item in inputs]
        receive, send = multiprocessing.get_context("spawn").Pipe(duplex=False)
        server = multiprocessing.get_context("spawn").Process(target=serve, args=(served, send), daemon=True)
        server.start()
        process, port = start_registry(work)
        try:
            http_port = receive.recv()
            url_inputs = [replace(item, location=item.location.format(port=http_port)) for item in url_inputs]
            registry = Registry(parse_reference(f"oci://127.0.0.1:{port}/bench/inputs", what="bench", tag=False))
            push_inputs(inputs, manifest, cache=cache, registry=registry)
            print(f"{len(inputs)} inputs, {total / 2**20:.1f} MiB; registry on :{port}, http server on :{http_port}")
            plain, oci = [], []
            for run in range(args.repeat):
                plain.append(timed_fetch(url_inputs, work / f"http-{run}", lambda: FetchOptions(quiet=True, jobs=4)))
                # A new client each time: its transport probe and the inputs tag's manifest are part of the cost.
                oci.append(timed_fetch(inputs, work / f"oci-{run}", lambda: FetchOptions(
                    quiet=True, jobs=4, registry=open_mirror(Registry(registry.ref), manifest))))
        finally:
            os.kill(process.pid, signal.SIGTERM)
            process.wait(timeout=10)
            server.terminate()
            server.join()
    best_http, best_oci = min(plain), min(oci)
    print(f"fetch from http:     {best_http:6.2f} s  (runs: {', '.join(f'{t:.2f}' for t in plain)})")
    print(f"fetch from registry: {best_oci:6.2f} s  (runs: {', '.join(f'{t:.2f}' for t in oci)})")
    print(f"registry/http ratio: {best_oci / best_http:.2f}  (target <= 1.2)")


if __name__ == "__main__":
    main()
