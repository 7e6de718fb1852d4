"""Every refusal of the delta applier, through both front ends: the file a bundle ships, run by a plain
`python3 -I -S` (no ort-bundler importable), and `ort-bundler apply`. Each is one sentence, its own exit code,
and nothing written. The zips are real zips made here with zipfile (a top folder, deflated and stored
members, as a bundle has); the deltas are made by the real writer, and the crafted ones are rewritten from
real deltas with their trailer recomputed, so each is refused for the reason it is meant to show."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import REPO, run_cli

from bundler import errors
from bundler.shipped.ort_bundle.delta_apply import EXIT_CODES, MAX_RESULT, PREAMBLE, Release
from bundler.writer.delta import Plan, plan, write_delta
from bundler.writer.delta_match import Copy

APPLIER = REPO / "bundler" / "shipped" / "ort_bundle" / "delta_apply.py"
WHEEL_LIKE = os.urandom(1 << 20)  # stored bytes that do not compress, as a wheel's are


def make_zip(path: Path, top: str, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in sorted(members.items()):
            method = zipfile.ZIP_STORED if name.endswith(".whl") else zipfile.ZIP_DEFLATED
            archive.writestr(zipfile.ZipInfo(f"{top}/{name}", (2026, 1, 1, 0, 0, 0)), data, compress_type=method)
    return path


def release(path: Path, version: str) -> Release:
    with zipfile.ZipFile(path) as archive:
        top = archive.namelist()[0].split("/")[0]
    return Release(file=path.name, top=top, name="app", version=version, platform="linux_x86_64",
                   sha256=hashlib.sha256(path.read_bytes()).hexdigest(), size=path.stat().st_size)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(OLD.zip, NEW.zip, DELTA): a model changed, a wheel unchanged, a record changed, a member added."""
    folder = tmp_path_factory.mktemp("delta")
    members = {"payload/wheels/dep-1.0-py3-none-any.whl": WHEEL_LIKE, "payload/models/m.onnx": b"model-1" * 300,
               "bundle.json": json.dumps({"name": "app", "version": "1.0.0"}).encode()}
    old = make_zip(folder / "app-1.0.0-linux_x86_64.zip", "app-1.0.0-linux_x86_64", members)
    members.update({"payload/models/m.onnx": b"model-2" * 300, "bundle.json": b'{"name": "app", "version": "1.1.0"}',
                    "README.txt": b"new in 1.1.0\n"})
    new = make_zip(folder / "app-1.1.0-linux_x86_64.zip", "app-1.1.0-linux_x86_64", members)
    delta = deltafile(plan(old, new), old, new, folder / "app-1.0.0-to-1.1.0-linux_x86_64.delta")
    return old, new, delta


def deltafile(steps: Plan, old: Path, new: Path, dest: Path) -> Path:
    new_release = release(new, "1.1.0")
    write_delta(steps, new_path=new, old=release(old, "1.0.0"), new=new_release,
                new_line=f"{new_release.sha256}  {new.name}\n", dest=dest, extra={})
    return dest


def standalone(old: Path, delta: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """The applier as the far side runs it: the shipped file, a Python that cannot import ort-bundler."""
    return subprocess.run([sys.executable, "-I", "-S", str(APPLIER), str(old), str(delta), "-o", str(out)],
                          capture_output=True, text=True)


def through_cli(old: Path, delta: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("apply", str(old), str(delta), "-o", str(out), check=False)


FRONT_ENDS = pytest.mark.parametrize("front", [standalone, through_cli], ids=["python3-I-S", "ort-bundler"])


def refused(proc: subprocess.CompletedProcess[str], kind: str, out: Path, *words: str) -> None:
    assert proc.returncode == EXIT_CODES[kind], proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and all(word in lines[0] for word in words), proc.stderr
    assert not out.exists() or list(out.iterdir()) == [], "a refusal left something behind"


def rewritten(delta: Path, dest: Path, *, header=None, preamble_length: int | None = None,
              body=None) -> Path:
    """A copy of a real delta with its header (or body) edited and its sha256 trailer made to match again."""
    data = delta.read_bytes()
    magic, version, length = PREAMBLE.unpack_from(data)
    head = json.loads(data[PREAMBLE.size:PREAMBLE.size + length])
    rest = data[PREAMBLE.size + length:-32]
    if header is not None:
        header(head)
    encoded = json.dumps(head).encode()
    rest = body(rest) if body is not None else rest
    content = PREAMBLE.pack(magic, version, preamble_length or len(encoded)) + encoded + rest
    dest.write_bytes(content + hashlib.sha256(content).digest())
    return dest


@FRONT_ENDS
def test_a_sound_delta_rebuilds_the_new_zip_and_its_sha256_file(pair, tmp_path, front) -> None:
    old, new, delta = pair
    proc = front(old, delta, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    result = tmp_path / "out" / new.name
    assert result.read_bytes() == new.read_bytes()
    assert (tmp_path / "out" / f"{new.name}.sha256").read_text() == f"{hashlib.sha256(new.read_bytes()).hexdigest()}  {new.name}\n"
    assert "app 1.1.0 for linux_x86_64" in proc.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [new.name, f"{new.name}.sha256"]


def test_the_delta_copies_the_unchanged_wheel_instead_of_carrying_it(pair) -> None:
    _, new, delta = pair
    assert delta.stat().st_size < len(WHEEL_LIKE) // 20 < new.stat().st_size


@FRONT_ENDS
def test_another_release_or_an_altered_copy_of_old_is_the_wrong_old(pair, tmp_path, front) -> None:
    old, new, delta = pair
    refused(front(new, delta, tmp_path / "a"), "wrong_old", tmp_path / "a", str(new), old.name)
    altered = tmp_path / old.name
    data = bytearray(old.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the stored wheel: the zip still opens, its sha256 differs
    altered.write_bytes(bytes(data))
    refused(front(altered, delta, tmp_path / "b"), "wrong_old", tmp_path / "b", "sha256", old.name)


@FRONT_ENDS
def test_a_zip_of_another_bundle_is_refused_as_such(pair, tmp_path, front) -> None:
    _, _, delta = pair
    other = make_zip(tmp_path / "other-1.0.0-linux_x86_64.zip", "other-1.0.0-linux_x86_64", {"bundle.json": b"{}"})
    refused(front(other, delta, tmp_path / "out"), "other_bundle", tmp_path / "out", "another bundle",
            "app 1.0.0 for linux_x86_64")


@FRONT_ENDS
def test_a_damaged_or_truncated_delta_is_refused(pair, tmp_path, front) -> None:
    old, _, delta = pair
    data = delta.read_bytes()
    flipped = bytearray(data)
    flipped[-40] ^= 0x01  # the last literal byte: the ops and header still read, the trailer does not match
    (tmp_path / "flipped.delta").write_bytes(bytes(flipped))
    refused(front(old, tmp_path / "flipped.delta", tmp_path / "a"), "damaged", tmp_path / "a")
    (tmp_path / "cut.delta").write_bytes(data[:len(data) - 100])
    refused(front(old, tmp_path / "cut.delta", tmp_path / "b"), "damaged", tmp_path / "b", "truncated")
    (tmp_path / "not.delta").write_bytes(b"PK\x03\x04 not a delta at all")
    refused(front(old, tmp_path / "not.delta", tmp_path / "c"), "damaged", tmp_path / "c", "ORTDELTA")


@FRONT_ENDS
def test_a_delta_recording_another_result_is_refused_after_the_result_is_hashed(pair, tmp_path, front) -> None:
    """The header and trailer are sound and OLD is right: only the result's own sha256 (taken on the hashing
    thread beside the copy) can tell that the bytes written are not the release the delta names."""
    old, new, delta = pair
    other = "0" * 64

    def record(head: dict) -> None:
        head["new"]["sha256"] = other
        head["new_sha256_line"] = f"{other}  {new.name}\n"

    crafted = rewritten(delta, tmp_path / "other.delta", header=record)
    refused(front(old, crafted, tmp_path / "out"), "damaged", tmp_path / "out",
            f"sha256 {hashlib.sha256(new.read_bytes()).hexdigest()}", f"records {other}")


@FRONT_ENDS
def test_a_delta_naming_a_result_outside_the_folder_is_refused(pair, tmp_path, front) -> None:
    old, _, delta = pair

    def escape(head: dict) -> None:
        head["new"]["file"] = "../escaped.zip"
        head["new_sha256_line"] = f"{head['new']['sha256']}  ../escaped.zip\n"

    crafted = rewritten(delta, tmp_path / "escape.delta", header=escape)
    refused(front(old, crafted, tmp_path / "out"), "damaged", tmp_path / "out", "../escaped.zip")
    assert not (tmp_path / "escaped.zip").exists()


@FRONT_ENDS
def test_a_delta_copying_from_outside_old_is_refused(pair, tmp_path, front) -> None:
    old, new, _ = pair
    size = new.stat().st_size
    beyond = Plan(copies=(Copy(0, size, old.stat().st_size - 10),), new_size=size, members=plan(old, new).members)
    crafted = deltafile(beyond, old, new, tmp_path / "beyond.delta")
    refused(front(old, crafted, tmp_path / "out"), "outside_old", tmp_path / "out", "op 0", "of OLD")


@FRONT_ENDS
def test_oversize_declarations_are_refused_before_anything_is_written(pair, tmp_path, front) -> None:
    old, _, delta = pair
    huge = rewritten(delta, tmp_path / "huge.delta", header=lambda head: head["new"].update(size=MAX_RESULT + 1))
    refused(front(old, huge, tmp_path / "a"), "oversize", tmp_path / "a", "result", str(MAX_RESULT + 1))
    header = rewritten(delta, tmp_path / "header.delta", preamble_length=1 << 30)
    refused(front(old, header, tmp_path / "b"), "oversize", tmp_path / "b", "header")
    disk = os.statvfs(tmp_path).f_blocks * os.statvfs(tmp_path).f_frsize  # the whole disk: never free, however
    assert disk + (1 << 30) <= MAX_RESULT  # much others delete meanwhile, and under the absolute bound
    more = rewritten(delta, tmp_path / "more.delta", header=lambda head: head["new"].update(size=disk + (1 << 30)))
    refused(front(old, more, tmp_path / "c"), "oversize", tmp_path / "c", "bytes free")


def test_the_applier_and_ort_bundler_share_one_exit_code_per_refusal() -> None:
    from bundler.commands.apply import ERRORS

    assert {kind: ERRORS[kind].return_code for kind in EXIT_CODES} == EXIT_CODES
    codes = [EXIT_CODES[kind] for kind in ("damaged", "oversize", "other_bundle", "wrong_old", "outside_old")]
    assert len(set(codes)) == 5 and not set(codes) & {c.return_code for c in vars(errors).values()
                                                      if isinstance(c, type) and c.__name__ in {
                                                          "UsageError", "ManifestError", "InputUnavailableError",
                                                          "HashMismatchError", "UnsafeArchiveError", "BuildError",
                                                          "VerificationError", "UnsupportedError"}}


def test_the_ops_are_varints_as_the_format_says(pair) -> None:
    """The documented encoding, read back by hand from a real delta: tag = length << 1 | kind, copies zigzag."""
    old, new, delta = pair
    data = delta.read_bytes()
    _, _, length = PREAMBLE.unpack_from(data)
    head = json.loads(data[PREAMBLE.size:PREAMBLE.size + length])
    assert head["format"] == 1 and head["new"]["sha256"] == hashlib.sha256(new.read_bytes()).hexdigest()
    assert head["old"]["size"] == old.stat().st_size and head["new_sha256_line"].endswith(f"  {new.name}\n")
    assert struct.unpack(">8s", data[:8])[0] == b"ORTDELTA"
    assert data[-32:] == hashlib.sha256(data[:-32]).digest()


def test_every_bundle_ships_the_applier_the_launcher_starts_with_apply() -> None:
    from bundler.assembly.shipped_package import package_files
    from bundler.shipped.ort_bundle import launcher

    assert package_files()["ort_bundle/delta_apply.py"] == APPLIER.read_bytes()
    assert launcher.SWITCHES["--apply"] == "apply" and launcher.WINDOWS_ALIASES["-apply"] == "apply"


@FRONT_ENDS
def test_a_result_that_cannot_be_put_in_place_is_one_sentence_and_leaves_no_temporary_file(pair, tmp_path, front):
    old, new, delta = pair
    (tmp_path / "out" / new.name).mkdir(parents=True)  # a folder where the zip goes: the rename fails
    proc = front(old, delta, tmp_path / "out")
    assert proc.returncode == EXIT_CODES["unavailable"] and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and new.name in proc.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == [new.name]


HALF_THEN_FAIL = """
import errno, os, runpy, sys
real, calls = os.copy_file_range, []
def flaky(src, dst, count, offset_src=None, *rest):
    calls.append(count)
    if len(calls) > 1:  # the first call copies half, the next fails as across file systems
        raise OSError(errno.EXDEV, "cross-device")
    return real(src, dst, count // 2, offset_src, *rest)
os.copy_file_range = flaky
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print("calls", len(calls))
"""


@pytest.mark.skipif(not hasattr(os, "copy_file_range"), reason="copy_file_range is Linux's")
def test_a_kernel_copy_that_stops_halfway_is_finished_from_the_mapped_old_zip(pair, tmp_path) -> None:
    old, new, delta = pair
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", HALF_THEN_FAIL, str(APPLIER), str(old), str(delta),
                           "-o", str(tmp_path / "out")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "calls 2" in proc.stdout  # the wheel-like member (1 MiB) went to the kernel, then the fallback took over
    assert (tmp_path / "out" / new.name).read_bytes() == new.read_bytes()


SYNC_ORDER = """
import json, os, runpy, sys
events, real_fsync, real_replace = [], os.fsync, os.replace
def fsync(fd):
    events.append("fsync " + os.path.basename(os.readlink("/proc/self/fd/%d" % fd)))
    real_fsync(fd)
def replace(src, dst):
    events.append("replace " + os.path.basename(src))
    real_replace(src, dst)
os.fsync, os.replace = fsync, replace
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print("events", json.dumps(events))
"""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names open files through /proc")
def test_the_result_reaches_the_disk_before_it_takes_its_name(pair, tmp_path) -> None:
    """A crash after the rename must not leave a half-written zip under the release's name."""
    old, new, delta = pair
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", SYNC_ORDER, str(APPLIER), str(old), str(delta),
                           "-o", str(tmp_path / "out")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    events = json.loads(proc.stdout.rsplit("events ", 1)[1])
    partial = [e.split(" ", 1)[1] for e in events if e.startswith("replace ") and e.endswith(".partial")]
    assert len(partial) == 1 and partial[0].startswith(f".{new.name}."), events
    assert events.index(f"fsync {partial[0]}") < events.index(f"replace {partial[0]}"), events


def test_the_result_hash_names_a_piece_it_cannot_hash_and_never_blocks_the_writer() -> None:
    from bundler.shipped.ort_bundle.delta_apply import DeltaError, ResultHash

    result = ResultHash()
    for piece in [b"x", object(), *[b"y"] * 20]:  # more pieces than the queue holds, after the failure
        result.pieces.put(piece)  # type: ignore[arg-type]
    result.pieces.put(None)
    with pytest.raises(DeltaError, match="cannot hash the result") as caught:
        result.hexdigest()
    assert caught.value.kind == "unavailable"


def test_the_result_is_synced_as_it_is_written_not_only_at_the_end(pair, tmp_path, monkeypatch) -> None:
    """The disk writes while the hashes run: with a sync every byte, every op is followed by one, and the
    final fsync still comes before the name (test_the_result_reaches_the_disk_before_it_takes_its_name)."""
    from bundler.shipped.ort_bundle import delta_apply

    if not hasattr(os, "fdatasync"):
        pytest.skip("fdatasync is POSIX's")
    old, new, delta = pair
    synced: list[int] = []
    monkeypatch.setattr(delta_apply, "SYNC_EVERY", 1)
    monkeypatch.setattr(delta_apply.os, "fdatasync", lambda fd: synced.append(os.fstat(fd).st_size))
    assert delta_apply.main([str(old), str(delta), "-o", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / new.name).read_bytes() == new.read_bytes()
    assert len(synced) >= 3 and synced == sorted(synced) and synced[-1] == new.stat().st_size, synced
