"""The install installs the bytes it compared with SHA256SUMS, never a second reading of the bundle folder
(issue 34 §4).

The engine used to hash the bundle folder, then copy from it again: a file another user swapped in between (a
bundle folder they can write) was installed, recorded in the receipt and passed `--verify`. Now every file the
install uses is hashed while it is copied into a private folder the engine made, compared there, and the install
reads only that folder. The swaps here happen at fixed points, through hooks on the engine's own steps (never by
timing): right after the check (the old window: now refused, as the copy no longer matches), and while the
install is being built from the private copy (the bundle folder is no longer read: the checked bytes go in).
Run for real on test_install_sh's small bundle.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from unit.shipped.test_install_sh import make_bundle, write_sums

from bundler.shipped.ort_bundle.engine import engine
from bundler.shipped.ort_bundle.records import Receipt

EVIL = b"print('swapped in after the check')\n"
ENTRY = "payload/app/entry.py"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def install(bundle: Path, target: Path) -> str:
    return engine.install(engine.Options(bundle=bundle, install_dir=target, self_check=False), engine.Log(None))


def no_private_copy_left(parent: Path) -> bool:
    return [p.name for p in parent.iterdir() if p.name.startswith(".")] == []


def test_a_file_swapped_right_after_the_check_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = make_bundle(tmp_path / "bundle")
    target = tmp_path / "apps" / "tiny"
    checked = engine.verify_bundle

    def check_then_swap(*args: Any, **kwargs: Any) -> str:
        identity = checked(*args, **kwargs)
        (bundle / ENTRY).write_bytes(EVIL)  # the point between the check and the copy
        return identity

    monkeypatch.setattr(engine, "verify_bundle", check_then_swap)
    with pytest.raises(engine.EngineError, match=f"{ENTRY} changed since it was checked") as refused:
        install(bundle, target)
    assert refused.value.code == "integrity"
    assert not target.exists() and no_private_copy_left(target.parent)


def test_sums_rewritten_to_match_the_swap_are_refused_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = make_bundle(tmp_path / "bundle")
    target = tmp_path / "apps" / "tiny"
    checked = engine.verify_bundle

    def check_then_rewrite(*args: Any, **kwargs: Any) -> str:
        identity = checked(*args, **kwargs)
        (bundle / ENTRY).write_bytes(EVIL)
        write_sums(bundle)  # a consistent bundle again, but not the one that was checked
        return identity

    monkeypatch.setattr(engine, "verify_bundle", check_then_rewrite)
    with pytest.raises(engine.EngineError, match="SHA256SUMS changed since it was checked"):
        install(bundle, target)
    assert not target.exists() and no_private_copy_left(target.parent)


def test_a_file_swapped_while_the_install_is_built_is_never_installed(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = make_bundle(tmp_path / "bundle")
    original = (bundle / ENTRY).read_bytes()
    sums = (bundle / "SHA256SUMS").read_bytes()
    target = tmp_path / "apps" / "tiny"
    build = engine.populate
    seen: list[Path] = []

    def swap_then_build(plan: Any, source: Path, *args: Any, **kwargs: Any) -> Any:
        (bundle / ENTRY).write_bytes(EVIL)  # the bundle folder, after every file was hashed into the copy
        seen.append(source)
        return build(plan, source, *args, **kwargs)

    monkeypatch.setattr(engine, "populate", swap_then_build)
    assert install(bundle, target) == "installed"
    assert (target / "app" / "entry.py").read_bytes() == original
    assert seen and seen[0] != bundle and seen[0].parent == target.parent  # built from the private copy
    receipt = Receipt.loads((target / "receipt.json").read_text(encoding="utf-8"))
    recorded = {f.path: f.sha256 for f in receipt.files}
    assert recorded["app/entry.py"] == sha256(original) and receipt.bundle_sha256 == sha256(sums)
    assert engine.audit(target).ok and not seen[0].exists() and no_private_copy_left(target.parent)


def test_placed_files_are_linked_from_the_private_copy_once_then_stand_alone(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """On Linux a file's first place is a hard link to its private copy, not a second copy (a GPU bundle's 1.5 GB
    of libraries were written twice); a file placed twice (the shipped package, in installer/ and site-packages)
    gets a copy the second time; once the private copy is gone, every installed file has one name."""
    bundle = make_bundle(tmp_path / "bundle")
    target = tmp_path / "apps" / "tiny"
    build = engine.populate
    during: dict[str, int] = {}

    def build_then_look(plan: Any, source: Path, stage: Path, *args: Any, **kwargs: Any) -> Any:
        known = build(plan, source, stage, *args, **kwargs)
        during.update({rel: (stage / rel).stat().st_nlink for rel in ("app/entry.py", "installer/ort_bundle/__main__.py")})
        site = next(stage.glob("venv/lib/python*/site-packages/ort_bundle/__main__.py"))
        during["site"] = site.stat().st_nlink
        return known

    monkeypatch.setattr(engine, "populate", build_then_look)
    assert install(bundle, target) == "installed"
    assert during["app/entry.py"] == 2  # the stage's name and the private copy's
    assert sorted([during["installer/ort_bundle/__main__.py"], during["site"]]) == [1, 2]  # one link, one copy
    installed = [p for p in target.rglob("*") if p.is_file() and not p.is_symlink()]
    assert installed and {p.stat().st_nlink for p in installed} == {1}
    assert (target / "app" / "entry.py").read_bytes() == (bundle / ENTRY).read_bytes()
    assert engine.audit(target).ok and no_private_copy_left(target.parent)
