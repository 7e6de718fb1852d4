"""The renovation of issue 35 moved code, not bundles: the quickstart zips differ from the ones built before it
only in the shipped package.

`quickstart_payload_7d9ac64.json` was written by this module's `main` from the quickstart bundles built at
7d9ac64, the last commit before the renovation (`ort-bundler fetch` and `build` of manifests/quickstart-linux.toml
and quickstart-win.toml). For each bundle it holds the name of every member that is neither the shipped package
nor a script that starts it (the target's scripts, which later work may add to, README-INSTALL.txt and the
launchers' start-up hook), and the sha256 of every one of those that is not a record listing the shipped
package's files (SHA256SUMS, bundle.json, install-plan.json, the SBOM, the provenance statement): the ORT and
dependency wheels, the models, the licences, the SDK. A change to the quickstart manifests or their locks
changes that payload on purpose; rewrite the file then with
`python tests/integration/real_wheels/test_payload_unchanged.py OUT` on a folder holding both new zips.
"""

from __future__ import annotations

import hashlib
import json
import sys
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS
from integration.real_wheels.test_build import LINUX_STEM, WIN_STEM, build

from bundler.target_platform import TARGETS

GOLDEN = Path(__file__).with_name("quickstart_payload_7d9ac64.json")
#: Where the shipped package lies in a bundle, before the renovation (installer/, selfcheck/) and after.
SHIPPED = ("payload/ort_bundle/", "payload/installer/", "payload/selfcheck/")
RECORDS = frozenset({"SHA256SUMS", "bundle.json", "install-plan.json", "sbom.cdx.json", "provenance.intoto.json"})
SCRIPTS = frozenset({*(path for target in TARGETS.values() for path in target.scripts), "README-INSTALL.txt",
                     "payload/launchers/ort_bundle_hook.py"})


def outside_the_shipped_package(bundle: Path) -> dict[str, object]:
    """The member names outside the shipped package and its scripts, and the hashes of the payload (see above)."""
    with zipfile.ZipFile(bundle) as archive:
        top = f"{archive.namelist()[0].split('/')[0]}/"
        names = [info.filename.removeprefix(top) for info in archive.infolist()]
        outside = sorted(name for name in names if name and not name.startswith(SHIPPED) and name not in SCRIPTS)
        payload = {name: hashlib.sha256(archive.read(top + name)).hexdigest() for name in outside
                   if not name.endswith("/") and name not in RECORDS}
    return {"members": outside, "payload": payload}


@pytest.mark.parametrize("stem", [LINUX_STEM, WIN_STEM])
def test_the_quickstart_bundles_differ_from_before_the_renovation_only_in_the_shipped_package(
        stem: str, bundler_cache: Path, tmp_path: Path) -> None:
    manifest = MANIFESTS / f"{stem.split('-1.0.0-')[0]}.toml"
    now = outside_the_shipped_package(build(manifest, tmp_path / "out", bundler_cache))
    before = json.loads(GOLDEN.read_text(encoding="utf-8"))[stem]
    assert now["members"] == before["members"]
    changed = sorted(name for name, digest in before["payload"].items() if now["payload"].get(name) != digest)
    assert changed == [], f"{stem}: these payload members changed since 7d9ac64 (see this module's docstring)"
    assert now["payload"].keys() == before["payload"].keys()


def main(out: Path) -> None:
    golden = {stem: outside_the_shipped_package(out / f"{stem}.zip") for stem in (LINUX_STEM, WIN_STEM)}
    GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
