"""The payload's PE files (every DLL and PYD, loose or inside a wheel), extracted once per build and remembered.

Two parts read them: the signature policy (`signature_policy.py`), which every target runs, and Windows' DLL
closure check (`bundler/platforms/windows/closure.py`); so they are the assembly's, below both.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

from bundler.assembly.assembly import Assembly
from bundler.readers.archives import SafeArchive
from bundler.readers.wheel_binaries import wheel_binaries

PE_SUFFIXES = (".dll", ".pyd")


def payload_binaries(assembly: Assembly, work: Path, *, store: Path | None = None) -> dict[str, Path]:
    """Every DLL/PYD of the bundle (label → file on disk); each wheel is opened and extracted only once.

    Labels are bundle paths, or `<wheel bundle path>!<member>` for a binary inside a wheel. What was
    extracted is remembered per member on the assembly, so later checks (signatures) reuse it, and a
    member added after an earlier call is still found. With a `store` (the cache's derived folder) a
    wheel's binaries are extracted once per wheel hash and kept for later builds (`wheel_binaries`).
    """
    found: dict[str, Path] = {}
    if store is not None:  # wheels inflate on threads of their own: ISA-L and the file system let go of the GIL
        wheels = {name: (member.source, member.digest) for name, member in assembly.members.items()
                  if name not in assembly.binaries and name.endswith(".whl") and member.source is not None}
        with ThreadPoolExecutor(max_workers=min(4, len(wheels)) or 1) as pool:
            extracted = {name: pool.submit(wheel_binaries, name, source, digest, store=store)
                         for name, (source, digest) in wheels.items()}
            assembly.binaries.update({name: done.result() for name, done in sorted(extracted.items())})
    for name, member in sorted(assembly.members.items()):
        if name not in assembly.binaries:
            if name.lower().endswith(PE_SUFFIXES):
                assembly.binaries[name] = {name: member.source or _written(member.data, work / "pe" / name)}
            elif member.source is None:
                assembly.binaries[name] = {}
            elif name.endswith(".whl"):
                assembly.binaries[name] = _wheel_binaries(name, member.source, work / "pe" / PurePosixPath(name).name)
            else:
                assembly.binaries[name] = {}
        found.update(assembly.binaries[name])
    return found


def _written(data: bytes | None, path: Path) -> Path:
    """A generated binary, written out so it can be inspected like any other file."""
    assert data is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _wheel_binaries(name: str, wheel: Path, dest: Path) -> dict[str, Path]:
    with SafeArchive.open(wheel, label=name) as archive:
        wanted = [e.name for e in archive.entries if not e.is_dir and e.name.lower().endswith(PE_SUFFIXES)]
        if not wanted:
            return {}
        archive.extract(dest, members=wanted)
    return {f"{name}!{member}": dest / member for member in wanted}
