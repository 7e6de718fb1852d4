"""`ort-bundler verify`: check a finished bundle without trusting anything inside it but SHA256SUMS.

Structure (one top folder named like the bundle, the required files), `bundle.json` (parses and agrees
with the folder name), every `SHA256SUMS` entry (streamed and hashed), and the files the sums do not
mention. All findings are collected; any finding makes the bundle fail.
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from bundler.errors import VerificationError
from bundler.hashing import CHUNK, file_sha256

REQUIRED = ("SHA256SUMS", "bundle.json", "install-plan.json")
# What reading one member can raise: damaged data, an encrypted entry, an unknown compression method.
UNREADABLE = (zipfile.BadZipFile, OSError, EOFError, RuntimeError, NotImplementedError)
SUM_LINE = re.compile(r"^([0-9a-f]{64})  (\S.*)$")


@dataclass(frozen=True, kw_only=True)
class Report:
    bundle: str
    files: int
    missing: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    altered: tuple[str, ...] = ()
    problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.altered or self.problems)

    def to_json(self) -> dict:
        return {"bundle": self.bundle, "ok": self.ok, "files": self.files, "missing": list(self.missing),
                "extra": list(self.extra), "altered": list(self.altered), "problems": list(self.problems)}

    def summary(self) -> str:
        lines = [f"{self.bundle}: {'OK' if self.ok else 'FAILED'} ({self.files} files checked)"]
        lines += [f"  missing: {n}" for n in self.missing]
        lines += [f"  extra (not in SHA256SUMS): {n}" for n in self.extra]
        lines += [f"  altered (hash differs): {n}" for n in self.altered]
        lines += [f"  problem: {p}" for p in self.problems]
        return "\n".join(lines)


def verify_bundle(path: Path) -> Report:
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        msg = f"{path}: no such file"
        raise VerificationError(msg) from None
    except OSError as exc:
        msg = f"{path}: cannot be read ({exc.strerror}), expected a bundle zip file"
        raise VerificationError(msg) from None
    except zipfile.BadZipFile as exc:
        msg = f"{path.name}: not a readable zip ({exc}); the bundle is truncated or not a bundle"
        raise VerificationError(msg) from None
    with archive:
        return _verify(path, archive)


def _verify(path: Path, archive: zipfile.ZipFile) -> Report:
    problems: list[str] = []
    files = [i for i in archive.infolist() if not i.is_dir()]
    tops = {i.filename.split("/", 1)[0] for i in archive.infolist()}
    if len(tops) != 1 or any("/" not in i.filename for i in files):
        msg = f"{path.name}: found top-level entries {sorted(tops)[:5]}, expected one top folder"
        raise VerificationError(msg)
    top = tops.pop()
    names = {i.filename[len(top) + 1:]: i for i in files}
    seen: dict[str, str] = {}
    for info in files:  # an extractor may write either copy of a duplicated name: never ours
        folded = info.filename.casefold()
        if folded in seen:
            problems.append(f"{info.filename} appears twice (also as {seen[folded]}); a bundle has unique names")
        seen.setdefault(folded, info.filename)
        if info.flag_bits & 0x1:
            problems.append(f"{info.filename} is marked encrypted; ort-bundler never writes encrypted entries")
    for required in REQUIRED:
        if required not in names:
            problems.append(f"{required} is missing")
    if path.name != f"{top}.zip":
        problems.append(f"the top folder is {top!r} but the file is named {path.name!r}")
    sums = _read_sums(archive, names, problems)
    _check_bundle_json(archive, names, top, problems)
    missing = tuple(sorted(n for n in sums if n not in names))
    extra = tuple(sorted(n for n in names if n not in sums and n != "SHA256SUMS"))
    altered = tuple(sorted(n for n in sums if n in names and _sha256(archive, names[n]) != sums[n]))
    sidecar = path.with_name(path.name + ".sha256")
    if sidecar.is_file():
        recorded = sidecar.read_text(encoding="ascii", errors="replace").split()[:1]
        if recorded != [file_sha256(path)]:
            problems.append(f"{sidecar.name} does not match the zip's sha256")
    return Report(bundle=path.name, files=len(sums), missing=missing, extra=extra, altered=altered,
                  problems=tuple(problems))


def _read_sums(archive: zipfile.ZipFile, names: dict[str, zipfile.ZipInfo], problems: list[str]) -> dict[str, str]:
    info = names.get("SHA256SUMS")
    if info is None:
        return {}
    sums: dict[str, str] = {}
    try:
        text = archive.read(info).decode("utf-8", "replace")
    except UNREADABLE as exc:
        problems.append(f"SHA256SUMS is not readable: {exc}")
        return {}
    for number, line in enumerate(text.splitlines(), 1):
        match = SUM_LINE.match(line)
        if not match:
            problems.append(f"SHA256SUMS line {number}: found {line[:60]!r}, expected '<sha256>  <path>'")
            continue
        sums[match.group(2)] = match.group(1)
    return sums


def _check_bundle_json(archive: zipfile.ZipFile, names: dict[str, zipfile.ZipInfo], top: str, problems: list[str]) -> None:
    info = names.get("bundle.json")
    if info is None:
        return
    try:
        record = json.loads(archive.read(info))
    except (ValueError, *UNREADABLE) as exc:  # ValueError: not JSON, not UTF-8
        problems.append(f"bundle.json is not readable JSON: {exc}")
        return
    if not isinstance(record, dict):
        problems.append(f"bundle.json holds a {type(record).__name__}, expected an object")
        return
    expected = "{name}-{version}-{platform}".format_map({k: record.get(k) for k in ("name", "version", "platform")})
    if expected != top:
        problems.append(f"bundle.json describes {expected!r} but the top folder is {top!r}")


def _sha256(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> str:
    digest = hashlib.sha256()
    try:
        with archive.open(info) as fh:
            while chunk := fh.read(CHUNK):
                digest.update(chunk)
    except UNREADABLE:
        return "unreadable"  # damaged, encrypted or an unknown compression method: reported as altered
    return digest.hexdigest()
