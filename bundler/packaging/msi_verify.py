"""`ort-bundler verify app.msi`: its Authenticode signature, and that the files it installs are the bundle's.

The files are taken out by msitools' `msiextract` (Windows Installer's tables and cabinet, read by a tool that
is not ours) and held against the receipt the MSI installs with them: the image's record of every file and
its sha256, made by the install engine from the verified bundle. A file that differs, is missing or is not
listed fails the check. The signature is checked by `osslsigncode verify` against the anchors of `--trust`;
without `--trust` a signature is reported, not judged, and with it an unsigned MSI fails (as a bundle does).
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bundler.errors import VerificationError
from bundler.hashing import file_sha256
from bundler.packaging.msi import tool
from bundler.target.records import RECEIPT_FILE, Receipt, RecordError

SIGNATURE_STREAM = "\x05DigitalSignature"


@dataclass(frozen=True, kw_only=True)
class MsiReport:
    path: Path
    install_id: str
    bundle_sha256: str  # the bundle the image was made from (the receipt's record of it)
    files: int
    changed: tuple[str, ...]
    missing: tuple[str, ...]
    extra: tuple[str, ...]
    signed: bool
    signature: str  # what was found of the signature, in words
    signature_ok: bool

    @property
    def ok(self) -> bool:
        return not (self.changed or self.missing or self.extra) and self.signature_ok

    def to_json(self) -> dict[str, object]:
        return {"msi": str(self.path), "ok": self.ok, "install_id": self.install_id,
                "bundle_sha256": self.bundle_sha256, "files": self.files,
                "changed": list(self.changed), "missing": list(self.missing), "extra": list(self.extra),
                "signed": self.signed, "signature": self.signature}

    def summary(self) -> str:
        lines = [f"{label:8} {item}" for label, items in (("CHANGED", self.changed), ("MISSING", self.missing),
                                                          ("EXTRA", self.extra)) for item in items]
        verdict = "OK" if self.ok else "FAILED"
        lines.append(f"{self.path.name}: {verdict}: {self.install_id}, {self.files} files against its receipt "
                     f"({len(self.changed)} changed, {len(self.missing)} missing, {len(self.extra)} not listed); "
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
    signed, signature, signature_ok = _signature(msi, trust)
    return MsiReport(path=msi, install_id=receipt.install_id, bundle_sha256=receipt.bundle_sha256, files=len(listed), changed=changed, missing=missing,
                     extra=extra, signed=signed, signature=signature, signature_ok=signature_ok)


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
