"""Licences concluded at `lock` and pinned in the lock file, so the build does not match licence texts.

The build matched mpmath's and sympy's licence texts with askalono, about half the time of a first
quickstart build (issue 26, Speed). `lock` now pins each conclusion in a [[license]] table naming the wheel
by file name and sha256, and the build uses a pin only for a wheel of exactly those bytes. The builds
below run in real subprocesses; one blocks importing askalono (a module of that name on PYTHONPATH that
raises ImportError), a stand-in for a build machine without the matcher.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS, run_cli

from bundler.errors import ManifestError
from bundler.license_match import NO_MATCHER, Conclusion
from bundler.sources.license_pins import LicensePin
from bundler.sources.lock import lock_text, read_lock, write_lock

MPMATH = "mpmath-1.3.0-py3-none-any.whl"
STEM = "quickstart-linux-1.0.0-linux_x86_64"
PIN = LicensePin(filename=MPMATH, sha256="a" * 64, matcher_version="0.2.0",
                 conclusion=Conclusion(expression="BSD-3-Clause", files=("licenses/mpmath/LICENSE",)))
UNKNOWN = LicensePin(filename="demo-1.0-py3-none-any.whl", sha256="b" * 64, matcher_version="0.2.0",
                     conclusion=Conclusion(expression=None, files=(), reason="and the text matches nothing"))


def without_pins(text: str) -> str:
    """The lock as `lock` wrote it before [[license]] tables existed: they are its last tables."""
    return text.split("\n[[license]]\n", 1)[0]


@pytest.mark.parametrize("name", ["quickstart-linux", "quickstart-win", "quickstart-win-cuda11.8"])
def test_the_example_locks_pin_mpmath_and_read_back_byte_for_byte(name: str) -> None:
    path = MANIFESTS / f"{name}.lock.toml"
    lock = read_lock(path)
    assert lock_text(lock) == path.read_text(encoding="utf-8")  # what `reproduce` checks of a bundle's lock.toml
    [mpmath] = [pin for pin in lock.licenses if pin.filename == MPMATH]
    [wheel] = [wheel for wheel in lock.wheels if wheel.name == "mpmath"]
    assert mpmath.sha256 == wheel.sha256
    assert (mpmath.conclusion.expression, mpmath.conclusion.files) == ("BSD-3-Clause", ("licenses/mpmath/LICENSE",))
    assert (mpmath.matcher, mpmath.matcher_version) == ("askalono", "0.2.0")


def test_a_pin_round_trips_with_an_expression_or_a_reason(tmp_path: Path) -> None:
    lock = dataclasses.replace(read_lock(MANIFESTS / "quickstart-linux.lock.toml"), licenses=(UNKNOWN, PIN))
    path = tmp_path / "app.lock.toml"
    write_lock(lock, path)
    again = read_lock(path)
    assert again.licenses == (UNKNOWN, PIN)  # sorted by file name
    assert lock_text(again) == path.read_text(encoding="utf-8")


def test_a_lock_written_before_the_pins_reads_and_writes_back_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "old.lock.toml"
    path.write_text(without_pins((MANIFESTS / "quickstart-linux.lock.toml").read_text(encoding="utf-8")),
                    encoding="utf-8")
    lock = read_lock(path)
    assert lock.licenses == () and lock_text(lock) == path.read_text(encoding="utf-8")


@pytest.mark.parametrize(("edit", "message"), [
    (('sha256 = "a0b2b9fe80bbcd81a6647ff13108738cfb482d481d826cc0e02f5b35e5c88d2c"\nexpression', 'sha256 = "a0b2"\nexpression'),
     "key 'license[0]' has sha256 'a0b2', not 64 lowercase hexadecimal digits"),
    (('method = "licence text"', 'method = "guess"'), "key 'license[0]' has method 'guess'"),
    (('expression = "BSD-3-Clause"\n', ''), "key 'license[0]' needs either an expression or the reason"),
    (('matcher = "askalono"', 'matcher = "askalono"\nscore = 1'), "key 'license[0]' has the unknown key 'score'"),
])
def test_a_malformed_pin_is_refused_naming_it(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    text = (MANIFESTS / "quickstart-linux.lock.toml").read_text(encoding="utf-8")
    assert edit[0] in text
    path = tmp_path / "app.lock.toml"
    path.write_text(text.replace(edit[0], edit[1], 1), encoding="utf-8")
    with pytest.raises(ManifestError, match=re.escape(message)):
        read_lock(path)


# --- builds of the Linux quickstart -----------------------------------------------------------------------------

def quickstart(folder: Path, lock: str) -> Path:
    shutil.copytree(MANIFESTS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "quickstart-linux.lock.toml").write_text(lock, encoding="utf-8")
    return folder / "quickstart-linux.toml"


def build(manifest: Path, cache: Path, out: Path, *, matcher: bool) -> dict[str, bytes]:
    """The bundle's records and licence texts, from `ort-bundler build` in a new process; without the matcher,
    importing askalono raises ImportError there."""
    env = dict(os.environ)
    if not matcher:
        blocker = out.with_name(out.name + "-no-askalono")
        blocker.mkdir()
        (blocker / "askalono.py").write_text('raise ImportError("blocked by the test: no matcher here")\n')
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(blocker), env.get("PYTHONPATH")]))
    run_cli("build", "-q", "--no-reuse", "--cache", str(cache), "-o", str(out), str(manifest), env=env)
    with zipfile.ZipFile(out / f"{STEM}.zip") as archive:
        return {name.removeprefix(f"{STEM}/"): archive.read(name) for name in archive.namelist()
                if name.endswith(("sbom.cdx.json", "bundle.json")) or f"{STEM}/licenses/" in name}


def licences(records: dict[str, bytes]) -> tuple[dict[str, object], list[object]]:
    """Each component's licences in the SBOM, and the licence index of bundle.json."""
    sbom = json.loads(records["sbom.cdx.json"])
    return ({c["bom-ref"]: c.get("licenses") for c in sbom["components"]},
            json.loads(records["bundle.json"])["licenses"])


def mpmath_index(records: dict[str, bytes]) -> dict[str, object]:
    return next(e for e in licences(records)[1] if isinstance(e, dict) and e["component"] == "mpmath")


@pytest.mark.integration
def test_the_build_takes_the_pin_without_the_matcher_and_says_the_same_as_matching(
        bundler_cache: Path, tmp_path: Path) -> None:
    pinned = (MANIFESTS / "quickstart-linux.lock.toml").read_text(encoding="utf-8")
    manifest = quickstart(tmp_path / "m", pinned)
    matched = build(manifest, bundler_cache, tmp_path / "matched", matcher=True)
    from_pin = build(manifest, bundler_cache, tmp_path / "pin", matcher=False)
    assert from_pin == matched  # SBOM, bundle.json and licence texts: the same bytes
    assert mpmath_index(from_pin)["license"] == "BSD-3-Clause"

    # The lock as it was before the pins: matched at build time, with the same licences as the pin gives
    old = quickstart(tmp_path / "old", without_pins(pinned))
    assert licences(build(old, bundler_cache, tmp_path / "old-matched", matcher=True)) == licences(matched)
    # and without the matcher (the stand-in works): unknown, with the reason.
    unmatched = mpmath_index(build(old, bundler_cache, tmp_path / "old-unmatched", matcher=False))
    assert unmatched["license"] is None and NO_MATCHER in " ".join(map(str, unmatched["notes"]))


@pytest.mark.integration
def test_a_pin_whose_sha256_is_not_the_wheels_is_ignored_and_the_text_matched_again(
        bundler_cache: Path, tmp_path: Path) -> None:
    text = (MANIFESTS / "quickstart-linux.lock.toml").read_text(encoding="utf-8")
    lock = read_lock(MANIFESTS / "quickstart-linux.lock.toml")
    stale = tuple(dataclasses.replace(pin, sha256="0" * 64, conclusion=Conclusion(expression="MIT", files=pin.conclusion.files))
                  if pin.filename == MPMATH else pin for pin in lock.licenses)
    manifest = quickstart(tmp_path / "m", text)
    write_lock(dataclasses.replace(lock, licenses=stale), manifest.with_name("quickstart-linux.lock.toml"))
    assert mpmath_index(build(manifest, bundler_cache, tmp_path / "matched", matcher=True))["license"] == "BSD-3-Clause"
    unmatched = mpmath_index(build(manifest, bundler_cache, tmp_path / "unmatched", matcher=False))
    assert unmatched["license"] is None and NO_MATCHER in " ".join(map(str, unmatched["notes"]))
