"""Running Windows programs under Wine for the Windows tier of the tests.

Wine runs the generated `.cmd` scripts and the real `onnxruntime.dll`. One prefix per test module, in a
temporary directory, with a persistent wineserver so each call costs about a second; the server is stopped and
the prefix removed when the module ends. Wine's own
`powershell.exe` and `where` are do-nothing stubs that exit 0: never take their exit code as success.
A missing Wine or mingw is a skip on a developer machine and a failure in CI (CI=true).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

import pytest

from bundler.integrations import tools
from bundler.integrations.tools import Tool

WINE_CANDIDATES = ("/usr/lib/wine/wine64", "wine64", "wine")
MINGW_GCC = tools.MINGW_GCC.program


def _find_wine() -> str | None:
    for candidate in WINE_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def require(tool: Tool) -> str:
    """The path of one of the program's outside tools (bundler/integrations/tools.py): skipped locally, failed in CI."""
    return require_tool(shutil.which(tool.program), f"{tool.program} (Debian package {tool.debian_package})")


def require_tool(path: str | None, what: str) -> str:
    """Skip locally, fail in CI: the Windows tier must run on every submission."""
    if path:
        return path
    msg = f"{what} is not installed (.ci/run installs it with apt-get)"
    if os.environ.get("CI") == "true":
        pytest.fail(msg)
    pytest.skip(msg)


@dataclass(frozen=True)
class Wine:
    exe: str
    prefix: Path

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
        env.update(WINEPREFIX=str(self.prefix), WINEDEBUG="-all", WINEDLLOVERRIDES="mscoree,mshtml=")
        return env

    def drive_c(self) -> Path:
        return self.prefix / "drive_c"

    def to_windows(self, path: Path) -> str:
        """A Linux path as Wine sees it through the Z: drive."""
        return str(PureWindowsPath("Z:" + str(path.resolve()).replace("/", "\\")))

    def run(self, args: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a Windows program, bounded by `timeout`; its output comes back through pipes.

        Pipes, not files: python.org's CPython cannot set up its standard streams on a file handle under Wine
        ("init_sys_streams ... Invalid handle"). A background service that Wine starts on demand (the task
        scheduler, msiexec's server) inherits the pipes and keeps them open: so the output is read by threads,
        and once the program has exited whatever was written is taken without waiting for that end-of-file.
        """
        merged = self.env
        if env:
            merged.update(env)
        proc = subprocess.Popen([self.exe, *args], env=merged, cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        chunks: dict[str, list[bytes]] = {"out": [], "err": []}
        readers = [threading.Thread(target=_drain, args=(stream, chunks[name]), daemon=True)
                   for name, stream in (("out", proc.stdout), ("err", proc.stderr))]
        for reader in readers:
            reader.start()
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            for reader in readers:
                reader.join(timeout=5)
            seen = (b"".join(chunks["out"]) + b"\n---\n" + b"".join(chunks["err"])).decode("utf-8", "replace")
            raise AssertionError(f"{args} did not finish within {timeout} s; its output so far:\n{seen[-6000:]}") from None
        for reader in readers:
            reader.join(timeout=5)
        return subprocess.CompletedProcess(proc.args, code, b"".join(chunks["out"]).decode("utf-8", "replace"),
                                           b"".join(chunks["err"]).decode("utf-8", "replace"))

    def cmd(self, script: Path | str, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run `script` as a user would type it in a console: `"script" args…` on one line.

        `script` is a Linux path (reached through Z:) or a Windows path (`C:\\...`, as Add/Remove Programs
        names it). `args` are raw command-line text (quote them as a user would). Passing them through argv would
        let Wine re-quote them with the C runtime's rules, which cmd.exe does not read, so the line goes
        into a caller batch file instead. The caller hands over to the script without `call` (so `%` and
        `^` are not expanded twice), and the script's `exit /b` code becomes the process exit code.
        """
        line = " ".join([f'"{script if isinstance(script, str) else self.to_windows(script)}"', *args])
        with tempfile.TemporaryDirectory() as tmp:
            caller = Path(tmp) / "caller.cmd"
            caller.write_bytes(b"@echo off\r\n" + line.encode("ascii") + b"\r\n")
            return self.run(["cmd", "/c", self.to_windows(caller)], env=env, cwd=cwd, timeout=timeout)

    def reg_add(self, key: str, name: str, value: str | int) -> None:
        kind, data = ("REG_DWORD", str(value)) if isinstance(value, int) else ("REG_SZ", value)
        done = self.run(["reg", "add", key, "/v", name, "/t", kind, "/d", data, "/f", "/reg:64"])
        assert done.returncode == 0, f"reg add {key} {name}: {done.stdout}{done.stderr}"

    def reg_query(self, key: str) -> dict[str, str] | None:
        """The values of a registry key as `wine reg query` prints them, None when the key does not exist."""
        found = self.run(["reg", "query", key, "/reg:64"])
        if found.returncode != 0:
            return None
        values = {}
        for line in found.stdout.splitlines():
            parts = line.strip().split(None, 2)
            if len(parts) >= 2 and parts[1].startswith("REG_"):
                values[parts[0]] = parts[2] if len(parts) == 3 else ""
        return values


def _drain(stream, chunks: list[bytes]) -> None:  # type: ignore[no-untyped-def]
    with stream:
        for block in iter(lambda: stream.read1(65536), b""):
            chunks.append(block)


@pytest.fixture(scope="module")
def wine(tmp_path_factory: pytest.TempPathFactory):
    """A booted prefix for one test module.

    Module-scoped, and said so: each test module imports this fixture, and pytest makes an imported fixture once
    per importing module whatever its scope, so a "session" prefix was in truth one per module whose
    wineserver and services all lived until the worker's session ended. Here each module's prefix is what
    keeps its installs, registry keys and planted DLLs from the next module's, and it is gone when the module is.
    """
    exe = require_tool(_find_wine(), "wine64 (Debian package wine64)")
    prefix = tmp_path_factory.mktemp("wineprefix")
    w = Wine(exe=exe, prefix=prefix)
    server = shutil.which("wineserver") or "/usr/lib/wine/wineserver64"
    subprocess.run([server, "-p"], env=w.env, check=False)
    # The first program run in a fresh prefix also makes the prefix (wineboot). Once, in a full CI run, it
    # exited 1 with no output, and the same test passed when run again alone: so it is run up to three
    # times before the prefix counts as broken.
    for _ in range(3):
        boot = w.run(["cmd", "/c", "exit /b 0"], timeout=300)
        if boot.returncode == 0:
            break
    assert boot.returncode == 0, f"wine prefix did not boot (exit {boot.returncode}): {boot.stderr[-2000:]}"
    # A crash must not start winedbg, which holds the process for minutes; Windows 10 is what the bundles need
    # (Wine 8 reports Windows 7 by default).
    w.reg_add("HKLM\\Software\\Microsoft\\Windows NT\\CurrentVersion\\AeDebug", "Auto", "0")
    w.reg_add("HKCU\\Software\\Wine\\WineDbg", "ShowCrashDialog", 0)
    w.reg_add("HKCU\\Software\\Wine", "Version", "win10")
    yield w
    subprocess.run([server, "-k"], env=w.env, check=False)
    with contextlib.suppress(subprocess.TimeoutExpired):  # a server slow to go leaves only its prefix behind
        subprocess.run([server, "-w"], env=w.env, check=False, timeout=60)
    shutil.rmtree(prefix, ignore_errors=True)


@pytest.fixture(scope="session")
def mingw_gcc() -> str:
    return require(tools.MINGW_GCC)


def compile_windows_exe(gcc: str, source: Path, output: Path, *extra: str) -> Path:
    """Cross-compile a small C program into a real x64 PE executable."""
    subprocess.run([gcc, "-O2", "-o", str(output), str(source), *extra], check=True, capture_output=True, text=True)
    return output
