"""Fetch throughput against `curl -o` of the same file from the same local server, in one run.

PRODUCT.md "Performance": fetching should hash as bytes arrive, so a fetch costs about what a plain
download does (target: fetch/curl <= 1.1). The fetch is the real thing: `bundler.sources.fetch.fetch_inputs` of
one `Input(kind="url")` into a fresh `Cache` each time, so it includes streaming through requests, hashing,
the hash check and the atomic adopt into the cache. curl only writes the file.

The server runs in its own process and answers with sendfile(2), so it costs little CPU and both clients
see the same server. Both clients write to the same file system. Run: python bench/fetch_throughput.py
"""

from __future__ import annotations

import argparse
import multiprocessing
import subprocess
import time
from collections.abc import Callable
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from pathlib import Path

from _payload import MB, machine, random_file, workspace

from bundler.manifest import Input
from bundler.sources.cache import Cache
from bundler.sources.fetch import FetchOptions, fetch_inputs
from bundler.sources.lock import Target


class _FileServer(ThreadingHTTPServer):
    daemon_threads = True
    file: Path


class _SendfileHandler(BaseHTTPRequestHandler):
    """Serve the one file, whatever the path, with its length and no content encoding."""

    protocol_version = "HTTP/1.1"
    server: _FileServer

    def do_GET(self) -> None:
        size = self.server.file.stat().st_size
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        with self.server.file.open("rb") as fh:
            self.connection.sendfile(fh)

    def log_message(self, format: str, *args: object) -> None:
        """Keep the benchmark's output to its figures."""


def serve(path: Path, ready: Connection) -> None:
    server = _FileServer(("127.0.0.1", 0), _SendfileHandler)
    server.file = path
    ready.send(server.server_address[1])
    server.serve_forever()


def timed(action: Callable[[], object]) -> float:
    """Seconds of one call, after flushing earlier writes so they are not charged to this one."""
    subprocess.run(["sync"], check=True)
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def fetch_once(url: str, sha256: str, root: Path) -> None:
    item = Input(key="bench", kind="url", location=url, sha256=(sha256,), filename="payload.bin")
    fetched = fetch_inputs([item], cache=Cache(root), target=Target(platform="linux_x86_64", python="3.11"),
                           options=FetchOptions(quiet=True))
    if not fetched["bench"].is_file():
        msg = f"{root}: fetch_inputs returned {fetched['bench']}, which is not a file"
        raise SystemExit(msg)


def curl_once(url: str, dest: Path) -> None:
    subprocess.run(["curl", "--silent", "--show-error", "--fail", "-o", str(dest), url], check=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=500, help="file size in MiB (default 500)")
    parser.add_argument("--workdir", type=Path, default=None, help="where to work (default: a temp dir)")
    parser.add_argument("--repeat", type=int, default=3, help="time each client this many times, keep the fastest")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    print(f"machine: {machine()}")
    with workspace(args.workdir) as work:
        served = random_file(work, "served.bin", args.size * MB)
        receive, send = multiprocessing.get_context("spawn").Pipe(duplex=False)
        server = multiprocessing.get_context("spawn").Process(target=serve, args=(served.path, send), daemon=True)
        server.start()
        try:
            url = f"http://127.0.0.1:{receive.recv()}/payload.bin"
            print(f"serving {args.size} MiB of random bytes at {url} (sendfile, separate process)")
            fetches, curls = [], []
            for run in range(args.repeat):
                curls.append(timed(partial(curl_once, url, work / f"curl-{run}.bin")))
                fetches.append(timed(partial(fetch_once, url, served.sha256, work / f"cache-{run}")))
        finally:
            server.terminate()
            server.join()
        fetch, curl = min(fetches), min(curls)
        print("fetch = bundler.sources.fetch.fetch_inputs of one url Input into a fresh Cache (download, sha256, adopt)")
        print(f"fetch:    {fetch:6.2f} s  ({args.size / fetch:5.0f} MiB/s; runs: {', '.join(f'{t:.2f}' for t in fetches)})")
        print(f"curl -o:  {curl:6.2f} s  ({args.size / curl:5.0f} MiB/s; runs: {', '.join(f'{t:.2f}' for t in curls)})")
        print(f"fetch/curl ratio: {fetch / curl:.2f}  (target <= 1.1)")


if __name__ == "__main__":
    main()
