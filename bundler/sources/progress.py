"""Byte progress on stderr for the long stages (fetch, the zip, package): a bar on a terminal, lines in a log.

A carriage-return bar is what a person at a terminal wants, but in a CI log every redraw becomes part of one
endless line (thousands of them for a 1.5 GB fetch). So the renderer is chosen by whether stderr is a
terminal: tqdm when it is, otherwise one plain line every `LINE_INTERVAL` seconds while bytes move and one
at the end. A quiet run (`-q`, `--json`) shows nothing and never imports tqdm; stdout is never written, so
`--json` output stays parseable.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm

#: Seconds between two progress lines when stderr is not a terminal (a CI log).
LINE_INTERVAL = 10.0


def human(count: float) -> str:
    """Bytes in binary units, as tqdm shows them: `1.5 GiB`, `312.0 MiB`, `900 B`."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


class ByteProgress:
    """Bytes moved so far (and files finished), safe to update from several threads.

    `total` (bytes) is shown when known; `files`, when given, adds `done/files files`. `stream` is stderr unless a
    caller passes another one; whether it is a terminal decides the renderer.
    """

    def __init__(self, desc: str, *, total: int | None = None, files: int | None = None, quiet: bool = False,
                 stream: TextIO | None = None, interval: float | None = None) -> None:
        self.desc = desc
        self.total = total
        self.files = files
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.interval = LINE_INTERVAL if interval is None else interval
        self.count = 0
        self.done = 0
        self._lock = threading.Lock()
        self._start = self._last = time.monotonic()
        self._bar: tqdm[Any] | None = None
        if not quiet and _is_terminal(self.stream):
            from tqdm import tqdm

            self._bar = tqdm(desc=desc, total=total, unit="B", unit_scale=True, unit_divisor=1024, leave=False,
                             file=self.stream, position=0, dynamic_ncols=True)
            self._bar.set_postfix_str(self._files_text(), refresh=False)

    def add(self, count: int) -> None:
        """`count` more bytes arrived (or were written)."""
        if self.quiet or count == 0:
            return
        with self._lock:
            self.count += count
            if self._bar is not None:
                self._bar.update(count)
            elif time.monotonic() - self._last >= self.interval:
                self._line()

    def file_done(self) -> None:
        """One more of `files` finished (fetched, found in the cache, or failed)."""
        if self.quiet:
            return
        with self._lock:
            self.done += 1
            if self._bar is not None:
                self._bar.set_postfix_str(self._files_text())

    def close(self) -> None:
        """Remove the bar; in a log, end with the total when anything moved."""
        if self.quiet:
            return
        with self._lock:
            if self._bar is not None:
                self._bar.close()
            elif self.count:
                self._line(final=True)

    def __enter__(self) -> ByteProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _files_text(self) -> str:
        return f"{self.done}/{self.files} files" if self.files is not None else ""

    def _line(self, *, final: bool = False) -> None:
        """One line in the log: what moved, of what, how fast (called under the lock)."""
        now = time.monotonic()
        self._last = now
        elapsed = max(now - self._start, 1e-6)
        amount = human(self.count) + (f" of {human(self.total)}" if self.total else "")
        files = f", {self._files_text()}" if self.files is not None else ""
        when = f"in {elapsed:.1f} s" if final else f"{human(self.count / elapsed)}/s"
        self.stream.write(f"{self.desc}: {amount}{files}, {when}\n")
        self.stream.flush()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream: lines are always safe
        return False
