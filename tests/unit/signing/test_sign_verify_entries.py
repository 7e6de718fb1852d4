"""verify against hostile bundles (issue 18 item 10): entries that leave the bundle folder, links, broken data.

Each bundle is a small zip made here, raw where zipfile would refuse or normalise what an attacker
writes, with a SHA256SUMS that lists the hostile entry with its true hash: so only the entry's
name or type, or its damaged data, can make verify fail. Every case must exit 8 with a one-line
reason naming the entry, and no traceback.
"""

from __future__ import annotations

import hashlib
import json
import stat
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from fixtures.crafted_archives import RawMember, deflated, stored, write_raw_zip

from bundler.cli import main

TOP = "demo-1.0.0-linux_x86_64"
BUNDLE_JSON = json.dumps({"name": "demo", "version": "1.0.0", "platform": "linux_x86_64"}).encode()
PLAN = b'{"format": 1}\n'


def bundle(path: Path, extra: list[RawMember], *, listed: dict[str, bytes] | None = None) -> Path:
    """A minimal bundle: the required files, `extra` entries, and SHA256SUMS listing `listed` too."""
    files = {"bundle.json": BUNDLE_JSON, "install-plan.json": PLAN, **(listed or {})}
    sums = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in sorted(files.items()))
    members = [stored(f"{TOP}/{name}", data) for name, data in files.items() if name in ("bundle.json",
                                                                                       "install-plan.json")]
    members.append(stored(f"{TOP}/SHA256SUMS", sums.encode()))
    return write_raw_zip(path / f"{TOP}.zip", members + extra)


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def verify(capsys: pytest.CaptureFixture[str]) -> Callable[[Path], Result]:
    """`ort-bundler verify --json` in this process (the CLI's own `main`), its exit code and output."""
    def run(zip_path: Path) -> Result:
        code = main(["verify", "--json", str(zip_path)])
        out, err = capsys.readouterr()
        assert "Traceback" not in err and "internal error" not in err
        return Result(code, out, err)
    return run


def test_the_minimal_bundle_itself_verifies(verify: Callable[[Path], Result], tmp_path: Path) -> None:
    """The control: without a hostile entry the same construction passes, so each failure below is the entry's."""
    assert verify(bundle(tmp_path, [])).returncode == 0


@pytest.mark.parametrize("relative", ["../../x", "payload/../../x", "/abs/path", "/etc/cron.d/x", "./x",
                                      "payload//x", "a\\..\\..\\x"])
def test_an_entry_naming_a_path_outside_the_bundle_fails_even_when_listed(verify: Callable[[Path], Result], tmp_path: Path, relative: str) -> None:
    data = b"owned\n"
    zip_path = bundle(tmp_path, [stored(f"{TOP}/{relative}", data)], listed={relative: data})
    proc = verify(zip_path)
    assert proc.returncode == 8
    report = json.loads(proc.stdout)
    assert not report["ok"]
    assert any(repr(relative)[1:-1] in p and "bundle folder" in p for p in report["problems"]), report["problems"]


@pytest.mark.parametrize(("kind", "target"), [(stat.S_IFLNK, b"/etc/passwd"), (stat.S_IFLNK, b"../../.bashrc"),
                                              (stat.S_IFCHR, b""), (stat.S_IFIFO, b"")])
def test_a_link_or_special_entry_fails_even_when_listed(verify: Callable[[Path], Result], tmp_path: Path, kind: int, target: bytes) -> None:
    entry = stored(f"{TOP}/payload/link", target, external_attr=(kind | 0o777) << 16)
    proc = verify(bundle(tmp_path, [entry], listed={"payload/link": target}))
    assert proc.returncode == 8
    assert any("payload/link" in p and "symbolic link or special file" in p
               for p in json.loads(proc.stdout)["problems"])


def test_a_sums_line_naming_a_path_outside_the_bundle_is_a_problem(verify: Callable[[Path], Result], tmp_path: Path) -> None:
    proc = verify(bundle(tmp_path, [], listed={"../outside": b"x"}))
    assert proc.returncode == 8
    assert any("'../outside'" in p for p in json.loads(proc.stdout)["problems"])


def _corrupt_deflate(name: str, content: bytes) -> RawMember:
    """A deflated member whose first block header says type 3, which does not exist (zlib: error -3).

    The CRC and sizes are the truth, so only the damaged stream can make reading it fail.
    """
    good = deflated(name, content)
    broken = bytes([good.payload[0] | 0b110]) + good.payload[1:]
    with pytest.raises(zlib.error):
        zlib.decompressobj(-15).decompress(broken)
    return RawMember(name=good.name, payload=broken, crc=good.crc, size=good.size, method=8)


@pytest.mark.parametrize("member", ["payload/data.txt", "bundle.json", "SHA256SUMS"])
def test_corrupt_deflate_data_is_exit_8_naming_the_member(verify: Callable[[Path], Result], tmp_path: Path, member: str) -> None:
    files = {"bundle.json": BUNDLE_JSON, "install-plan.json": PLAN, "payload/data.txt": b"data " * 1000}
    files["SHA256SUMS"] = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n"
                                  for name, data in sorted(files.items())).encode()
    members = [_corrupt_deflate(f"{TOP}/{name}", data) if name == member else deflated(f"{TOP}/{name}", data)
               for name, data in files.items()]
    proc = verify(write_raw_zip(tmp_path / f"{TOP}.zip", members))
    assert proc.returncode == 8, proc.stderr
    problems = json.loads(proc.stdout)["problems"]
    assert any(member in p and ("cannot be read" in p or "not readable" in p) for p in problems), problems


def test_a_nul_in_an_entry_name_is_refused_not_truncated(verify: Callable[[Path], Result], tmp_path: Path) -> None:
    data = b"payload\n"
    entry = stored(f"{TOP}/payload/app.py\0.txt", data)
    proc = verify(bundle(tmp_path, [entry], listed={"payload/app.py": data}))
    assert proc.returncode == 8
    assert any("NUL" in p for p in json.loads(proc.stdout)["problems"])
