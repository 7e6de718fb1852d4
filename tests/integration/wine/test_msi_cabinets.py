"""package --msi past one cabinet (issue 37): the image's files in several cabinets within the cabinet format's
limits, written by gcab beside the MSI, with one Media row each; read back by outside tools (gcab, cabextract,
msiinfo), installed and repaired for real by Wine's msiexec.

The limits are the same code at any size: CI lowers the cabinet size (`--cabinet-bytes`) so a bundle of about
220 MB makes several cabinets; the run past 2 GB is bench/msi_scale.py's (not for CI). The split and the refusals
of a file no cabinet holds are also checked on sizes alone, which is how a 3 GB file is shown without writing one.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from fixtures.cli import run_cli
from fixtures.windows_bundles import build_zip, manifest
from fixtures.windows_python import WindowsPython, windows_python  # noqa: F401  (fixture)
from fixtures.wine import Wine, require_tool, wine  # noqa: F401  (fixture)

from bundler.errors import UnsupportedError
from bundler.platforms.windows.msi_cabinets import CAB_FOLDER_BYTES, CABINET_BYTES, split

NAME = "wincab"
#: Small enough that the test bundle (python.org's CPython, numpy, ORT: about 220 MB installed) makes several
#: cabinets, large enough for its largest file (numpy's OpenBLAS, 38 MB).
CABINET = 40_000_000
VC_KEY = "HKLM\\SOFTWARE\\Microsoft\\VisualStudio\\14.0\\VC\\Runtimes\\x64"
INSTALL_DIR = "C:\\Apps\\wincab"
MSIEXEC_TIMEOUT = 900


# -- the split, on sizes alone ------------------------------------------------------------------------------------


def test_files_fill_cabinets_in_order_within_the_byte_and_file_limits() -> None:
    sizes = [(f"f{index:02d}", 40) for index in range(10)]
    assert split(sizes, limit=100) == [("f00", "f01"), ("f02", "f03"), ("f04", "f05"), ("f06", "f07"), ("f08", "f09")]
    assert split(sizes, limit=1000, files=4) == [("f00", "f01", "f02", "f03"), ("f04", "f05", "f06", "f07"),
                                                 ("f08", "f09")]
    assert split([("a", 100), ("b", 0), ("c", 1)], limit=100) == [("a", "b"), ("c",)]
    assert CABINET_BYTES < CAB_FOLDER_BYTES == 0x7FFF8000  # one CAB folder per cabinet


def test_a_file_past_what_any_msi_holds_is_refused_with_the_zip_route_as_the_way_around() -> None:
    with pytest.raises(UnsupportedError) as refused:
        split([("python/small.txt", 10), ("models/big.onnx", 3 << 30)])
    message = str(refused.value)
    assert message.startswith("the install image's file models/big.onnx is 3,221,225,472 bytes, more than an MSI can")
    assert "package --intunewin without --msi" in message and "\n" not in message and refused.value.return_code == 9


def test_a_file_past_a_lowered_cabinet_size_is_refused_naming_the_size_to_ask_for() -> None:
    with pytest.raises(UnsupportedError) as refused:
        split([("a.dll", 5_000_000)], limit=4_000_000)
    assert "more than one cabinet of --cabinet-bytes 4,000,000 holds: raise --cabinet-bytes to at least 5,000,000" \
        in str(refused.value)


# -- a real bundle in several cabinets ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Built:
    bundle: Path
    first: dict  # `package --msi --json` with --cabinet-bytes CABINET
    again: dict  # the same with --intunewin, in another folder


def package(bundle: Path, out: Path, cache: Path, *flags: str) -> dict:
    return json.loads(run_cli("package", "--json", "--cache", str(cache), "-o", str(out), str(bundle), *flags).stdout)


@pytest.fixture(scope="module")
def built(windows_python: WindowsPython, bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    for tool, package_name in (("wixl", "wixl"), ("msibuild", "msitools"), ("msiinfo", "msitools"), ("gcab", "gcab"),
                               ("cabextract", "cabextract")):
        require_tool(shutil.which(tool), f"{tool} (Debian package {package_name})")
    work = tmp_path_factory.mktemp("cabinets")
    unlocked = manifest(work, name=NAME, version="1.0.0", runtime=windows_python.embed_zip, lock=None)
    run_cli("lock", str(unlocked))
    bundle = build_zip(manifest(work, name=NAME, version="1.0.0", runtime=windows_python.embed_zip,
                                lock=unlocked.with_suffix(".lock.toml")), bundler_cache, work)
    flags = ("--msi", "--cabinet-bytes", str(CABINET))
    return Built(bundle=bundle, first=package(bundle, work / "first", bundler_cache, *flags),
                 again=package(bundle, work / "again", bundler_cache, *flags, "--intunewin"))


def table(msi: Path, name: str) -> list[dict[str, str]]:
    lines = subprocess.run(["msiinfo", "export", str(msi), name], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[3:]]


def gcab_listing(cabinet: Path) -> list[tuple[str, int]]:
    """(name, uncompressed size) of each file, as libgcab's own command line lists them."""
    listing = subprocess.run(["gcab", "-l", "-v", str(cabinet)], capture_output=True, text=True, check=True).stdout
    return [(line.split()[0], int(line.split()[1])) for line in listing.splitlines() if line.strip()]


def test_the_files_are_in_several_cabinets_beside_the_msi_each_within_the_limits(built: Built) -> None:
    msi = Path(built.first["msi"]["path"])
    cabinets = [Path(c["path"]) for c in built.first["msi"]["cabinets"]]
    assert len(cabinets) >= 3, cabinets
    assert all(c.parent == msi.parent and re.fullmatch(r"[0-9A-F]{5}\d{3}\.cab", c.name) for c in cabinets)  # 8.3
    assert "payload.cab" not in subprocess.run(["msiinfo", "streams", str(msi)], capture_output=True, text=True,
                                               check=True).stdout.split()  # nothing embedded: tables only
    media = sorted(table(msi, "Media"), key=lambda row: int(row["DiskId"]))
    assert [row["Cabinet"] for row in media] == [c.name for c in cabinets]
    files = {row["File"]: row for row in table(msi, "File")}
    assert sorted(int(row["Sequence"]) for row in files.values()) == list(range(1, len(files) + 1))
    first = 1
    for row, cabinet in zip(media, cabinets):
        tested = subprocess.run(["cabextract", "-t", str(cabinet)], capture_output=True, text=True, check=False)
        assert tested.returncode == 0 and "All done, no errors" in tested.stdout, tested.stdout + tested.stderr
        listed = gcab_listing(cabinet)
        assert 0 < sum(size for _, size in listed) <= CABINET and len(listed) <= 65_535
        assert cabinet.stat().st_size < 2**31
        # The cabinet holds exactly the File rows of its sequence range, by key, in sequence order, at their sizes.
        last = int(row["LastSequence"])
        expected = sorted((r for r in files.values() if first <= int(r["Sequence"]) <= last),
                          key=lambda r: int(r["Sequence"]))
        assert listed == [(r["File"], int(r["FileSize"])) for r in expected]
        first = last + 1
    assert first == len(files) + 1
    sums = (msi.parent / (msi.name + ".sha256")).read_text()
    checked = subprocess.run(["sha256sum", "-c", msi.name + ".sha256"], cwd=msi.parent, capture_output=True,
                             text=True, check=False)
    assert checked.returncode == 0 and sums.count("\n") == len(cabinets) + 1, checked.stdout + checked.stderr


def test_two_runs_give_byte_identical_msis_and_cabinets(built: Built) -> None:
    pairs = [(built.first["msi"]["path"], built.again["msi"]["path"])]
    pairs += [(a["path"], b["path"]) for a, b in zip(built.first["msi"]["cabinets"], built.again["msi"]["cabinets"],
                                                     strict=True)]
    for one, other in pairs:
        assert Path(one).name == Path(other).name and Path(one).read_bytes() == Path(other).read_bytes(), one


def test_the_intunewin_carries_the_msi_and_every_cabinet(built: Built) -> None:
    """A Win32 app's setup folder is the MSI's folder on the client: msiexec reads the cabinets from there."""
    from unit.platforms.windows.test_intunewin import read_intunewin, zip_files

    [app] = [p for p in built.again["packages"] if p["role"] == "app"]
    inner = zip_files(read_intunewin(Path(app["path"])).inner)
    wanted = [Path(built.again["msi"]["path"]), *(Path(c["path"]) for c in built.again["msi"]["cabinets"])]
    assert sorted(inner) == sorted(path.name for path in wanted)
    assert all(inner[path.name] == path.read_bytes() for path in wanted)


def test_verify_reads_the_cabinets_beside_the_msi(built: Built, tmp_path: Path) -> None:
    msi = Path(built.first["msi"]["path"])
    report = json.loads(run_cli("verify", "--json", str(msi)).stdout)
    assert report["ok"] and report["tables"] == [] and report["files"] == built.first["msi"]["files"] - 1, report
    # One cabinet left behind: the MSI alone is not the product, and verify says so.
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copyfile(msi, alone / msi.name)
    for cabinet in built.first["msi"]["cabinets"][1:]:
        shutil.copyfile(cabinet["path"], alone / Path(cabinet["path"]).name)
    refused = run_cli("verify", str(alone / msi.name), check=False)
    assert refused.returncode == 8, refused.stdout + refused.stderr


def test_verify_catches_a_cabinet_swapped_with_its_receipt_rewritten_to_match(built: Built, tmp_path: Path) -> None:
    """The MSI's signature does not cover its external cabinets (nor does msiexec check them). A cabinet rebuilt
    by an attacker with a file changed and the receipt's sha256 of it changed to match passes the files-against-
    receipt check, but the receipt's MD5 is in the MSI's own MsiFileHash table, so verify's rebuild names it."""
    from bundler.platforms.windows.msi_source import identifier

    folder = tmp_path / "swapped"
    shutil.copytree(Path(built.first["msi"]["path"]).parent, folder)
    msi = folder / Path(built.first["msi"]["path"]).name
    receipt_key = identifier("f", "receipt.json")
    [cabinet] = [folder / Path(c["path"]).name for c in built.first["msi"]["cabinets"]
                 if receipt_key in dict(gcab_listing(Path(c["path"])))]
    names = [name for name, _ in gcab_listing(cabinet)]
    unpacked = tmp_path / "unpacked"
    subprocess.run(["gcab", "-x", "-C", str(unpacked), str(cabinet)], check=True, capture_output=True)
    receipt = json.loads((unpacked / receipt_key).read_text())
    keys = {identifier("f", entry["path"]): entry for entry in receipt["files"]}
    victim = next(name for name in names if name in keys)
    data = bytearray((unpacked / victim).read_bytes())
    data[0] ^= 0xFF  # same size: the File row's FileSize still holds
    (unpacked / victim).write_bytes(bytes(data))
    keys[victim]["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    (unpacked / receipt_key).write_text(json.dumps(receipt, indent=2) + "\n")
    cabinet.unlink()
    subprocess.run(["gcab", "-c", "-z", "-n", str(cabinet), *names], cwd=unpacked, check=True, capture_output=True)
    refused = run_cli("verify", "--json", str(msi), check=False)
    assert refused.returncode == 8, refused.stdout + refused.stderr
    report = json.loads(refused.stdout)
    assert not report["changed"] and any(line.startswith(f"MsiFileHash row {receipt_key}:") for line in report["tables"])


def test_a_file_past_the_cabinet_size_is_refused_before_anything_is_written(built: Built, bundler_cache: Path,
                                                                           tmp_path: Path) -> None:
    out = tmp_path / "out"
    refused = run_cli("package", "--msi", "--cabinet-bytes", str(1 << 20), "--cache", str(bundler_cache), "-o",
                      str(out), str(built.bundle), check=False)
    lines = [line for line in refused.stderr.strip().splitlines() if not line.startswith("package: ")]  # stages
    assert refused.returncode == 9 and len(lines) == 1, refused.stderr
    assert "the install image's file " in lines[0] and "more than one cabinet of --cabinet-bytes 1,048,576" in lines[0]
    assert "raise --cabinet-bytes to at least" in lines[0] and not out.exists()


@pytest.mark.parametrize("flags", [("--msi", "--cabinet-bytes", "1000"), ("--msi", "--cabinet-bytes", "3000000000"),
                                   ("--intunewin", "--cabinet-bytes", "8000000")])
def test_a_cabinet_size_out_of_range_or_without_msi_is_a_usage_error(flags: tuple[str, ...], tmp_path: Path) -> None:
    refused = run_cli("package", *flags, "-o", str(tmp_path / "out"), str(tmp_path / "none.zip"), check=False)
    assert refused.returncode == 2 and "--cabinet-bytes" in refused.stderr, refused.stderr
    assert not (tmp_path / "out").exists()


# -- under Wine's msiexec -----------------------------------------------------------------------------------------


def hashes_below(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_msiexec_installs_from_the_cabinets_and_repairs_a_file_from_one_of_them(wine: Wine, built: Built) -> None:
    for name, value in (("Installed", 1), ("Major", 14), ("Minor", 44), ("Bld", 35208)):
        wine.reg_add(VC_KEY, name, value)  # STAND-IN: Wine has no VC++ runtime; the launch condition reads these
    msi = wine.to_windows(Path(built.first["msi"]["path"]))
    installed = wine.run(["msiexec", "/i", msi, f"INSTALLDIR={INSTALL_DIR}", "NOSELFCHECK=1", "/qn"],
                         timeout=MSIEXEC_TIMEOUT)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    root = wine.drive_c() / "Apps" / NAME
    expected = {entry["path"]: entry["sha256"] for entry in json.loads((root / "receipt.json").read_text())["files"]}
    found = hashes_below(root)
    found.pop("receipt.json"), found.pop("cache_dir.txt", None)
    assert found == expected
    # A file from the last cabinet and one from the first deleted: the repair reads both cabinets again.
    sequence = {row["File"]: int(row["Sequence"]) for row in table(Path(built.first["msi"]["path"]), "File")}
    ordered = sorted(expected, key=lambda path: sequence[identifier_of(path)])
    early, late = ordered[0], ordered[-1]
    first_disk = min(int(row["LastSequence"]) for row in table(Path(built.first["msi"]["path"]), "Media"))
    assert sequence[identifier_of(early)] <= first_disk < sequence[identifier_of(late)]
    for path in (early, late):
        (root / path).unlink()
    repaired = wine.run(["msiexec", "/i", msi, "REINSTALL=ALL", "REINSTALLMODE=amus", "NOSELFCHECK=1", "/qn"],
                        timeout=MSIEXEC_TIMEOUT)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    for path in (early, late):
        assert hashlib.sha256((root / path).read_bytes()).hexdigest() == expected[path], path
    removed = wine.run(["msiexec", "/x", built.first["msi"]["product_code"], "/qn"], timeout=MSIEXEC_TIMEOUT)
    assert removed.returncode == 0 and not any(root.rglob("*.dll")), removed.stdout + removed.stderr


def identifier_of(path: str) -> str:
    from bundler.platforms.windows.msi_source import identifier

    return identifier("f", path)
