"""`package --msi` at scale: the MSI writer (bundler.platforms.windows.msi.write_msi, the code `package --msi` runs once
the install image is made) against `gcab -c -z` of the same image followed by `openssl enc` of that cabinet,
in one run (the encrypted copy goes to /dev/null, which favours the baseline); with --install, the MSI
installed by Wine's msiexec and every file's sha256 checked.

The image is incompressible (os.urandom) files of at most 256 MiB each, a STAND-IN `python/python.exe` (a
mingw-built program that exits 0: the MSI's custom actions run it, and the real engine is not what is measured)
and a stand-in receipt. Not a test: run by hand, e.g.

    PYTHONPATH=$PWD python bench/msi_scale.py --size 500
    PYTHONPATH=$PWD python bench/msi_scale.py --size 2300 --install    # past 2 GB: several cabinets beside the MSI

It prints the wall times, the ratio (target <= 1.3), the peak RSS of this process and of its children (gcab,
wixl, msibuild), the cabinets, and with --install the msiexec time and the checked files.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bundler.platforms.windows.msi import CabinetFile, write_msi
from bundler.platforms.windows.msi_source import MsiProduct, guid

CHUNK = 256 << 20
EPOCH = 1767225600


def make_image(image: Path, size: int, work: Path) -> list[str]:
    (image / "python").mkdir(parents=True)
    source = work / "exit0.c"
    source.write_text("int main(void) { return 0; }\n")
    subprocess.run(["x86_64-w64-mingw32-gcc", "-O2", "-o", str(image / "python" / "python.exe"), str(source)],
                   check=True)
    files = ["python/python.exe", "receipt.json"]
    (image / "receipt.json").write_text('{"stand-in": "bench/msi_scale.py"}\n')
    (image / "payload").mkdir()
    left, index = size, 0
    while left > 0:
        part = min(left, CHUNK)
        relative = f"payload/random-{index:03d}.bin"
        with open(image / relative, "wb") as out:
            for start in range(0, part, 16 << 20):
                out.write(os.urandom(min(16 << 20, part - start)))
        files.append(relative)
        left -= part
        index += 1
    for relative in files:
        os.utime(image / relative, (EPOCH, EPOCH))
    return sorted(files)


def peak_mib() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return own, children


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True, kw_only=True)
class Installed:
    """What Wine's msiexec made of the MSI: its exit code, its time, and the files not installed as in the image."""

    returncode: int
    seconds: float
    files: int
    differing: list[str]

    def describe(self) -> str:
        return (f"msiexec /i under Wine: exit {self.returncode}, {self.seconds:.1f} s; {self.files - len(self.differing)} "
                f"of {self.files} files installed with the image's sha256"
                + (f"; differing: {self.differing[:5]}" if self.differing else ""))


def install(msi: Path, image: Path, files: list[str], work: Path) -> Installed:
    prefix = work / "wineprefix"
    env = {**os.environ, "WINEPREFIX": str(prefix), "WINEDEBUG": "-all", "WINEDLLOVERRIDES": "mscoree,mshtml="}
    env.pop("DISPLAY", None)
    wine = shutil.which("/usr/lib/wine/wine64") or shutil.which("wine64") or "wine"
    subprocess.run([wine, "wineboot", "-i"], env=env, capture_output=True, check=False, timeout=600)
    started = time.perf_counter()
    proc = subprocess.run([wine, "msiexec", "/i", f"Z:{msi}".replace("/", "\\"), "INSTALLDIR=C:\\scale",
                           "NOSELFCHECK=1", "/qn"], env=env, capture_output=True, text=True, check=False,
                          timeout=7200)
    elapsed = time.perf_counter() - started
    root = prefix / "drive_c" / "scale"
    bad = [f for f in files if not (root / f).is_file() or sha256(root / f) != sha256(image / f)]
    server = Path(wine).with_name("wineserver")
    subprocess.run([str(server) if server.is_file() else "wineserver", "-k"], env=env, check=False)
    return Installed(returncode=proc.returncode, seconds=elapsed, files=len(files), differing=bad)


def product() -> MsiProduct:
    return MsiProduct(name="scale", version="1.0.0", product_version="1.0.0", publisher="bench",
                      product_code=guid("scale", "product"), upgrade_code=guid("scale", "upgrade"),
                      bundle_sha256="0" * 64, interpreter="python/python.exe", vc_runtime_min=None)


def write(image: Path, files: list[str], work: Path) -> tuple[Path, tuple[CabinetFile, ...]]:
    """What is timed of `package --msi`: the MSI writer on the install image, into `work/out`."""
    (work / "msi").mkdir()
    (work / "out").mkdir()
    msi = work / "out" / "scale-1.0.0-win_amd64.msi"
    cabinets = write_msi(product(), files, image=image, output=msi, work=work / "msi", epoch=EPOCH,
                         package_code=guid("scale", "package"))
    return msi, cabinets


def baseline(image: Path, files: list[str], work: Path) -> float:
    """Seconds of `gcab -c -z` of the image and `openssl enc` of that cabinet (the encrypted copy goes to
    /dev/null: not kept, for the disk at 2 GB)."""
    os.sync()
    started = time.perf_counter()
    subprocess.run(["gcab", "-c", "-z", str(work / "base.cab"), *files], cwd=image, check=True,
                   env={**os.environ, "TZ": "UTC"})
    subprocess.run(["openssl", "enc", "-aes-256-cbc", "-pbkdf2", "-pass", "pass:bench", "-in",
                    str(work / "base.cab"), "-out", os.devnull], check=True)
    seconds = time.perf_counter() - started
    (work / "base.cab").unlink()
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=500, help="payload MiB (default 500)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--install", action="store_true", help="install the MSI under Wine's msiexec and check it")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="msi-scale-", dir=args.workdir))
    try:
        image = work / "image"
        files = make_image(image, args.size << 20, work)
        total = sum((image / f).stat().st_size for f in files)
        os.sync()  # the image's writeback is not charged to whichever side runs first
        started = time.perf_counter()
        msi, cabinets = write(image, files, work)
        ours = time.perf_counter() - started
        own, children = peak_mib()
        base = baseline(image, files, work)
        print(f"payload {total / 2**20:,.0f} MiB in {len(files)} files (incompressible)")
        print(f"package --msi writer: {ours:.1f} s; MSI {msi.stat().st_size:,} bytes, {len(cabinets)} cabinets beside "
              f"it: {', '.join(f'{c.path.name} {c.size:,}' for c in cabinets) or 'none (embedded)'}")
        print(f"baseline gcab -c -z + openssl enc: {base:.1f} s; ratio {ours / base:.2f} (target <= 1.3)")
        print(f"peak RSS: this process {own:,.0f} MiB, largest child {children:,.0f} MiB")
        if args.install:
            print(install(msi, image, files, work).describe())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
