"""The facts parts hand on: set once by their owner, never read before it ran, and the part order proves it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fixtures.cli import MANIFESTS
from fixtures.parts import part_inputs

from bundler.assembly import parts
from bundler.assembly.assembly import Assembly
from bundler.assembly.facts import FactOrderError, Facts, SelfCheckFact
from bundler.assembly.launch import add_scripts
from bundler.assembly.models import add_models
from bundler.assembly.parts import add_all
from bundler.assembly.records import bundle_info
from bundler.assembly.sdk import add_sdk
from bundler.errors import BuildError
from bundler.manifest import load, parse
from bundler.platforms.backends import BACKENDS
from bundler.platforms.linux import backend as linux
from bundler.platforms.windows import backend as windows
from bundler.platforms.windows.closure import add_vc_redist, check_windows
from bundler.platforms.windows.gpu import add_gpu as windows_gpu


def test_reading_a_fact_before_its_part_ran_names_that_part() -> None:
    facts = Facts()
    with pytest.raises(FactOrderError, match="the fact 'closure' was read before the part 'closure' set it"):
        _ = facts.closure


def test_a_fact_is_set_once() -> None:
    facts = Facts()
    facts.selfcheck = SelfCheckFact(script="installer/ort_bundle/__main__.py",
                                    identity_model="installer/ort_bundle/selfcheck/identity.onnx")
    with pytest.raises(FactOrderError, match="'selfcheck' was set twice"):
        facts.selfcheck = SelfCheckFact(script="x", identity_model="y")


def test_a_part_run_before_the_part_it_depends_on_fails_instead_of_reading_none(tmp_path: Path) -> None:
    """The scripts enforce the VC++ minimum that the Windows checks compute: run them first and the build stops
    naming the Windows part, where a dict lookup once returned None and the scripts skipped the check."""
    manifest = load(MANIFESTS / "quickstart-win.toml")
    with pytest.raises(FactOrderError, match="part 'closure'"):
        add_scripts(Assembly(), part_inputs(manifest, work=tmp_path))


def test_reordering_the_parts_is_caught(tmp_path: Path) -> None:
    """VC_redist must meet the minimum the Windows checks set, so it cannot come first."""
    raw = load(MANIFESTS / "quickstart-win.toml").raw
    manifest = parse({**raw, "vc_redist": {"path": "VC_redist.x64.exe", "sha256": "0" * 64}},
                     path=MANIFESTS / "quickstart-win.toml")
    reordered = (add_vc_redist, check_windows)
    with pytest.raises(FactOrderError, match="part 'closure'"):
        add_all(Assembly(), part_inputs(manifest, work=tmp_path), parts=reordered)


def test_the_sdk_part_needs_the_selfcheck_and_gpu_parts_first(tmp_path: Path) -> None:
    raw = load(MANIFESTS / "quickstart-linux.toml").raw
    archive = {"path": "onnxruntime-linux-x64-1.23.1.tgz", "sha256": "0" * 64}
    manifest = parse({**raw, "ort": {**raw["ort"], "archive": archive}}, path=MANIFESTS / "quickstart-linux.toml")
    with pytest.raises(FactOrderError, match="part 'selfcheck'"):
        add_sdk(Assembly(), part_inputs(manifest, work=tmp_path))


@pytest.mark.parametrize("backend", BACKENDS.values(), ids=BACKENDS)
def test_every_part_runs_once_in_one_order(backend) -> None:
    order = [part.__name__ for part in backend.parts]
    assert len(set(order)) == len(order)
    assert order.index("add_gpu") < order.index("add_sdk") < order.index("add_models")
    assert order.index("add_entry_point") < order.index("add_scripts")


def test_a_backend_whose_native_parts_break_its_own_order_is_refused() -> None:
    """The order is data: VC_redist placed before the closure check it must meet fails when the parts are placed."""
    swapped = parts.PlatformParts(bundle_tools=(), gpu=windows_gpu, native=(add_vc_redist, check_windows),
                                  order=(parts.After(part=add_vc_redist, needs=(check_windows,), why="the minimum"),))
    with pytest.raises(AssertionError, match="part add_vc_redist is placed before check_windows; expected it after "
                                             "them: the minimum"):
        parts.parts_for(swapped)


def test_every_rule_of_the_shared_order_can_fail() -> None:
    """Each shared rule names parts that are placed, so none holds by default; reversing one is caught."""
    placed = set(parts.parts_for(parts.PlatformParts(bundle_tools=(), gpu=windows_gpu, native=())))
    for rule in parts._order(windows_gpu):
        assert rule.part in placed
        assert set(rule.needs) <= placed
        with pytest.raises(AssertionError, match=rule.why):
            parts._check(rule, (rule.part, *rule.needs))


def test_the_windows_backend_places_its_native_parts_between_the_sdk_and_the_scripts() -> None:
    order = [part.__name__ for part in windows.parts]
    assert (order.index("add_sdk") < order.index("add_app_local_runtime") < order.index("check_windows")
            < order.index("add_vc_redist") < order.index("add_scripts"))


def test_the_linux_backend_has_none_of_the_windows_parts_and_says_so_in_the_facts(tmp_path: Path) -> None:
    """A Linux bundle ships no sandbox tool, and its records read 'not applicable', not 'not computed yet'."""
    names = {part.__name__ for part in linux.parts}
    assert not names & {"add_app_local_runtime", "check_windows", "add_vc_redist"}
    assembly = Assembly()
    linux.no_native_checks(assembly, part_inputs(load(MANIFESTS / "quickstart-linux.toml"), work=tmp_path))
    assert (assembly.facts.app_local, assembly.facts.closure, assembly.facts.vc_redist) == ((), None, None)


def test_bundle_info_reads_only_facts_that_parts_set(tmp_path: Path) -> None:
    """The records come after the parts: with no part run, writing bundle.json fails naming the first part."""
    manifest = load(MANIFESTS / "quickstart-linux.toml")
    with pytest.raises(FactOrderError, match="part 'python_env'"):
        bundle_info(Assembly(), part_inputs(manifest, work=tmp_path))


def test_the_model_gate_runs_beside_the_parts_before_add_models(tmp_path: Path, monkeypatch) -> None:
    """The gate waits on ORT in a process of its own: it starts with the build, and add_models takes its records."""
    started = threading.Event()

    def gate(build):  # a stand-in for models.gate: when it runs is what this test is about, not ORT
        started.set()
        return []

    waited = []
    monkeypatch.setattr(parts, "gate", gate)
    manifest = parse({**load(MANIFESTS / "quickstart-linux.toml").raw, "models": []},
                     path=MANIFESTS / "quickstart-linux.toml")
    assembly = Assembly()
    add_all(assembly, part_inputs(manifest, work=tmp_path),
            parts=(lambda _assembly, _build: waited.append(started.wait(timeout=60)), add_models))

    assert waited == [True]  # the gate had started while the part before add_models ran
    assert assembly.facts.models == ()


def test_the_model_gate_fails_the_build_at_add_models_after_the_parts_before_it(tmp_path: Path, monkeypatch) -> None:
    def gate(build):  # a stand-in for models.gate that finds a model ORT cannot run
        raise BuildError("model 'm' (models/m.onnx): does not load")

    ran = []
    monkeypatch.setattr(parts, "gate", gate)
    manifest = load(MANIFESTS / "quickstart-linux.toml")
    with pytest.raises(BuildError, match="model 'm' .*does not load"):
        add_all(Assembly(), part_inputs(manifest, work=tmp_path),
                parts=(lambda _assembly, _build: ran.append("earlier"), add_models))
    assert ran == ["earlier"]
