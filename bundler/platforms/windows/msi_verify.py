"""`ort-bundler verify app.msi`: its Authenticode signature, that the files it installs are the bundle's, and that
every table is the one `package` writes for that bundle.

The files are taken out by msitools' `msiextract` (Windows Installer's tables and cabinet, read by a tool that
is not ours) and held against the receipt the MSI installs with them: the image's record of every file and
its sha256, made by the install engine from the verified bundle. A file that differs, is missing or is not
listed fails the check. The signature is checked by `osslsigncode verify` against the anchors of `--trust`;
without `--trust` a signature is reported, not judged, and with it an unsigned MSI fails (as a bundle does).

The files alone say nothing of what the MSI runs: a deferred SYSTEM custom action rewritten, or a Run-key
Registry row added, leaves them as they were. So the MSI is built again from the image it installs (its
bundle.json, install-plan.json and receipt, the same records `package` read) by the code `package` uses
(bundler/platforms/windows/msi.py's `write_database`, wixl and msibuild), and every table, the summary information
(but its two timestamps) and the list of streams are compared row by row, each difference named by table and
row. There is no second description of what an MSI of ours holds.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bundler.errors import BundleError, VerificationError
from bundler.hashing import file_sha256
from bundler.platforms.windows.msi import image_files, msi_product, package_code, tool, write_database
from bundler.platforms.windows.msi_cabinets import Cabinet, Layout
from bundler.platforms.windows.msi_summary import PID_CREATE_TIME, PID_LAST_SAVE_TIME, fix_summary
from bundler.shipped.ort_bundle.bundle_info import BUNDLE_FILE, BundleInfo, BundleInfoError
from bundler.shipped.ort_bundle.records import PLAN_FILE, RECEIPT_FILE, InstallPlan, Receipt, RecordError

SIGNATURE_STREAM = "\x05DigitalSignature"
#: Streams an Authenticode signature adds (osslsigncode, signtool): not written by `package` before signing.
SIGNATURE_STREAMS = frozenset({SIGNATURE_STREAM, "\x05MsiDigitalSignatureEx"})
#: The summary's timestamps: the bundle's time, which the MSI does not record elsewhere.
UNCHECKED_SUMMARY = frozenset({str(PID_CREATE_TIME), str(PID_LAST_SAVE_TIME)})
#: At most this many differences are listed; the count says how many there were.
LISTED = 20


@dataclass(frozen=True, kw_only=True)
class MsiReport:
    path: Path
    install_id: str
    bundle_sha256: str  # the bundle the image was made from (the receipt's record of it)
    files: int
    changed: tuple[str, ...]
    missing: tuple[str, ...]
    extra: tuple[str, ...]
    tables: tuple[str, ...]  # every difference from the tables `package` writes for this bundle, by table and row
    signed: bool
    signature: str  # what was found of the signature, in words
    signature_ok: bool

    @property
    def ok(self) -> bool:
        return not (self.changed or self.missing or self.extra or self.tables) and self.signature_ok

    def to_json(self) -> dict[str, object]:
        return {"msi": str(self.path), "ok": self.ok, "install_id": self.install_id,
                "bundle_sha256": self.bundle_sha256, "files": self.files,
                "changed": list(self.changed), "missing": list(self.missing), "extra": list(self.extra),
                "tables": list(self.tables), "signed": self.signed, "signature": self.signature}

    def summary(self) -> str:
        lines = [f"{label:8} {item}" for label, items in (("CHANGED", self.changed), ("MISSING", self.missing),
                                                          ("EXTRA", self.extra)) for item in items]
        lines += [f"TABLE    {item}" for item in self.tables[:LISTED]]
        if len(self.tables) > LISTED:
            lines.append(f"TABLE    ... and {len(self.tables) - LISTED} more")
        verdict = "OK" if self.ok else "FAILED"
        lines.append(f"{self.path.name}: {verdict}: {self.install_id}, {self.files} files against its receipt "
                     f"({len(self.changed)} changed, {len(self.missing)} missing, {len(self.extra)} not listed), "
                     f"{'every table as package writes it' if not self.tables else f'{len(self.tables)} table differences'}; "
                     f"signature: {self.signature}")
        return "\n".join(lines)


def verify_msi(msi: Path, *, trust: Path | None) -> MsiReport:
    if not msi.is_file():
        msg = f"{msi}: not found, expected an MSI file"
        raise VerificationError(msg)
    with tempfile.TemporaryDirectory(prefix="ort-bundler-msi-") as tmp:
        root = _extract(msi, Path(tmp))
        receipt = _receipt(msi, root)
        listed = {entry.path: entry.sha256 for entry in receipt.files}
        found = {path.relative_to(root).as_posix(): path for path in sorted(root.rglob("*")) if path.is_file()}
        found.pop(RECEIPT_FILE)
        changed = tuple(rel for rel in sorted(listed) if rel in found and file_sha256(found[rel]) != listed[rel])
        missing = tuple(rel for rel in sorted(listed) if rel not in found)
        extra = tuple(rel for rel in sorted(found) if rel not in listed)
        # The tables are rebuilt from the files the MSI installs: with one missing there is nothing to rebuild
        # from, and the report fails already.
        tables = () if missing else tuple(table_differences(msi, root, receipt, work=Path(tmp) / "rebuilt"))
    signed, signature, signature_ok = _signature(msi, trust)
    return MsiReport(path=msi, install_id=receipt.install_id, bundle_sha256=receipt.bundle_sha256, files=len(listed), changed=changed, missing=missing,
                     extra=extra, tables=tables, signed=signed, signature=signature, signature_ok=signature_ok)


def table_differences(msi: Path, root: Path, receipt: Receipt, *, work: Path) -> list[str]:
    """Every way `msi`'s tables, summary and streams differ from those `package` writes for the image in `root`."""
    info, plan = _records(msi, root)
    work.mkdir()
    rebuilt = work / "rebuilt.msi"
    try:
        product = msi_product(info, plan, bundle_sha256=receipt.bundle_sha256,
                              receipt=(root / RECEIPT_FILE).read_bytes(), source=f"{msi.name}: {BUNDLE_FILE}")
        files = sorted(image_files(receipt))
        layout = cabinet_layout(msi, files)
        write_database(product, files, image=root, output=rebuilt, work=work, purpose="verifying an MSI",
                       layout=layout)
    except BundleError as exc:
        msg = f"{msi.name}: the MSI package would write for its image cannot be made ({exc})"
        raise VerificationError(msg) from None
    fix_summary(rebuilt, package_code=package_code(product, (root / RECEIPT_FILE).read_bytes()), epoch=0)
    expected, found = _database(rebuilt), _database(msi)
    differences = []
    for table in sorted(expected.keys() | found.keys()):
        if table not in found:
            differences.append(f"{table}: the table is missing")
        elif table not in expected:
            differences.append(f"{table}: a table package does not write ({len(found[table].rows)} rows)")
        else:
            differences += _row_differences(table, expected[table], found[table])
    streams = _streams(msi) - SIGNATURE_STREAMS
    written = _streams(rebuilt) | {cabinet.name for cabinet in layout.cabinets if cabinet.embedded}
    differences += [f"stream {name!r}: not one package writes" for name in sorted(streams - written)]
    differences += [f"stream {name!r}: missing" for name in sorted(written - streams)]
    return differences


def cabinet_layout(msi: Path, files: list[str]) -> Layout:
    """The cabinets `msi`'s Media table names, each holding the next of `files` (in package's sequence order) up to
    its LastSequence: where package cut the files depends on the --cabinet-bytes it was given and whether the one
    cabinet was small enough to embed, which the MSI alone records. Every other column is then checked by the
    rebuild (a File row moved to another sequence shows as a difference)."""
    media = _table("Media", _msiinfo(msi, "export", "Media"))
    cabinets, taken = [], 0
    for key in sorted(media.rows, key=lambda key: int(key[0])):
        row = media.rows[key]
        last = int(row["LastSequence"]) if row["LastSequence"].isdigit() else -1
        if not taken <= last <= len(files):
            msg = f"{msi.name}: Media row {key[0]} ends at sequence {row['LastSequence']}, expected {taken} to {len(files)}"
            raise VerificationError(msg)
        name = row["Cabinet"]
        cabinets.append(Cabinet(name=name.removeprefix("#"), embedded=name.startswith("#"),
                                files=tuple(files[taken:last]), last_sequence=last))
        taken = last
    if taken != len(files):
        msg = f"{msi.name}: its Media table holds {taken} files, expected the {len(files)} its receipt lists"
        raise VerificationError(msg)
    return Layout(cabinets=tuple(cabinets))


def _records(msi: Path, root: Path) -> tuple[BundleInfo, InstallPlan]:
    """The image's bundle.json and install-plan.json (both checked against the receipt with the other files)."""
    try:
        info = BundleInfo.read(root / BUNDLE_FILE)
        plan = InstallPlan.loads((root / PLAN_FILE).read_text(encoding="utf-8"), source=f"{msi.name}: {PLAN_FILE}")
    except FileNotFoundError as exc:
        msg = f"{msi.name}: installs no {Path(str(exc.filename)).name}, so its tables cannot be checked"
        raise VerificationError(msg) from None
    except (BundleInfoError, RecordError) as exc:
        msg = f"{msi.name}: {exc}"
        raise VerificationError(msg) from None
    return info, plan


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    keys: tuple[str, ...]  # the primary key's columns
    rows: dict[tuple[str, ...], dict[str, str]]  # by primary key


def _database(msi: Path) -> dict[str, Table]:
    """Every table of `msi` as msitools' `msiinfo export` writes it (the summary information is one of them)."""
    names = _msiinfo(msi, "tables").split()
    return {name: _table(name, _msiinfo(msi, "export", name)) for name in names}


def _table(name: str, text: str) -> Table:
    """An .idt export: column names, their types, the table's name and key columns, then one row a line."""
    lines = text.split("\n")
    lines = [line.removesuffix("\r") for line in lines]
    if name == "_ForceCodepage":
        return Table(columns=("codepage",), keys=("codepage",), rows={(text.strip(),): {"codepage": text.strip()}})
    columns = tuple(lines[0].split("\t"))
    keys = tuple(lines[2].split("\t")[1:]) or columns[:1]
    rows = {}
    for line in lines[3:]:
        if not line:
            continue
        row = dict(zip(columns, line.split("\t")))
        if name == "_SummaryInformation" and row.get("PropertyId") in UNCHECKED_SUMMARY:
            continue
        rows[tuple(row.get(key, "") for key in keys)] = row
    return Table(columns=columns, keys=keys, rows=rows)


def _row_differences(name: str, expected: Table, found: Table) -> list[str]:
    differences = []
    for key in sorted(expected.rows.keys() | found.rows.keys()):
        label = f"{name} row {'/'.join(key)}"
        theirs, ours = found.rows.get(key), expected.rows.get(key)
        if theirs is None:
            differences.append(f"{label}: missing")
        elif ours is None:
            differences.append(f"{label}: a row package does not write ({_shown(theirs)})")
        elif theirs != ours:
            changed = [column for column in expected.columns if theirs.get(column) != ours.get(column)]
            differences += [f"{label}: {column} is {theirs.get(column)!r}, package writes {ours.get(column)!r}"
                            for column in changed]
    return differences


def _shown(row: dict[str, str]) -> str:
    return ", ".join(f"{column}={value!r}" for column, value in row.items())[:300]


def _streams(msi: Path) -> set[str]:
    return set(_msiinfo(msi, "streams").splitlines())


def _msiinfo(msi: Path, *args: str) -> str:
    proc = subprocess.run([tool("msiinfo", purpose="verifying an MSI"), args[0], str(msi), *args[1:]],
                          capture_output=True, check=False)
    if proc.returncode != 0:
        msg = f"{msi.name}: msiinfo {args[0]} cannot read it ({proc.stderr.decode('utf-8', 'replace').strip()[-300:]})"
        raise VerificationError(msg)
    return proc.stdout.decode("utf-8", "replace")


def _extract(msi: Path, dest: Path) -> Path:
    """The MSI's files below `dest`; returns the install folder (the one folder msiextract makes)."""
    proc = subprocess.run([tool("msiextract", purpose="verifying an MSI"), "-C", str(dest), str(msi)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        msg = f"{msi.name}: msiextract cannot read it ({proc.stderr.strip()[-300:]}); expected an MSI"
        raise VerificationError(msg)
    folders = [path for path in dest.iterdir() if path.is_dir()]
    if len(folders) != 1:
        msg = f"{msi.name}: holds {len(folders)} top folders, expected the one install folder package --msi writes"
        raise VerificationError(msg)
    return folders[0]


def _receipt(msi: Path, root: Path) -> Receipt:
    try:
        return Receipt.loads((root / RECEIPT_FILE).read_text(encoding="utf-8"), source=f"{msi.name}: {RECEIPT_FILE}")
    except FileNotFoundError:
        msg = f"{msi.name}: installs no {RECEIPT_FILE}, so it is not an MSI that package --msi wrote"
        raise VerificationError(msg) from None
    except RecordError as exc:
        raise VerificationError(str(exc)) from None


def _signature(msi: Path, trust: Path | None) -> tuple[bool, str, bool]:
    """(signed, in words, acceptable): judged by osslsigncode against `trust` when given."""
    import olefile

    with olefile.OleFileIO(str(msi)) as ole:
        signed = ole.exists(SIGNATURE_STREAM)
    if not signed:
        return False, "unsigned" + (" (--trust asks for a signature)" if trust else ""), trust is None
    if trust is None:
        return True, "signed (not checked: give --trust CA.pem)", True
    proc = subprocess.run([tool("osslsigncode", purpose="checking an MSI's signature"), "verify", "-CAfile", str(trust), "-in", str(msi)], capture_output=True, text=True,
                          check=False)
    if proc.returncode == 0:
        return True, f"verified against {trust.name}", True
    reason = next((line.strip() for line in proc.stdout.splitlines() + proc.stderr.splitlines()
                   if "fail" in line.lower() or "error" in line.lower()), f"exit code {proc.returncode}")
    return True, f"does not verify against {trust.name}: {reason}", False
