"""The lock: a closure resolved for the target's markers, written and read back, accepted by pip with hashes.

Unit tests drive `resolve` with a fake pip that, like the real one, evaluates markers against the build
machine. Integration tests resolve onnxruntime 1.23.1's real dependencies through the real pip, once per
platform per session.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from bundler.errors import (
    BuildError,
    HashMismatchError,
    InputUnavailableError,
    ManifestError,
    UnsupportedError,
)
from bundler.manifest import Input
from bundler.runner import run
from bundler.sources.cache import Cache
from bundler.sources.fetch import FetchOptions, fetch_inputs
from bundler.sources.lock import (
    Lock,
    LockedWheel,
    PinnedModel,
    Target,
    lock_data,
    read_lock,
    requirements_txt,
    write_lock,
)
from bundler.sources.resolve import resolve

WIN = Target(platform="win_amd64", python="3.11")
LINUX = Target(platform="linux_x86_64", python="3.11")
# The fake index's files live under a host that must never leak into a lock.
FAKE_INDEX = "https://mirror.example.invalid/packages"


# --- Target ------------------------------------------------------------------------------------------


def test_windows_marker_environment_decides_windows_only_requirements():
    environment = WIN.marker_environment()
    assert Marker('sys_platform == "win32" and python_version >= "3.8"').evaluate(environment)
    assert Marker('platform_system == "Windows" and os_name == "nt" and platform_machine == "AMD64"').evaluate(environment)
    assert not Marker('sys_platform == "linux"').evaluate(environment)
    assert not Marker('python_version < "3.11"').evaluate(environment)
    assert Marker('implementation_name == "cpython" and python_full_version >= "3.11"').evaluate(environment)


def test_linux_marker_environment_does_not_borrow_windows_values():
    environment = LINUX.marker_environment()
    assert Marker('sys_platform == "linux" and platform_machine == "x86_64" and os_name == "posix"').evaluate(environment)
    assert not Marker('sys_platform == "win32"').evaluate(environment)


def test_pip_platforms_list_every_manylinux_tag_newest_first():
    platforms = LINUX.pip_platforms()
    assert platforms[0] == "manylinux_2_28_x86_64"
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64",
            "linux_x86_64"} <= set(platforms)
    assert WIN.pip_platforms() == ["win_amd64"]


@pytest.mark.parametrize(("platform", "python"),
                         [("macosx_11_0_arm64", "3.11"), ("win_amd64", "3.11.7"), ("win_amd64", "311")])
def test_unsupported_target_is_refused(platform, python):
    with pytest.raises(UnsupportedError, match="not supported"):
        Target(platform=platform, python=python)


# --- resolve with a fake pip ----------------------------------------------------------------------------


class FakePip:
    """A pip that resolves from an in-memory index and, like the real pip, evaluates markers on THIS machine.

    `index` maps a name to {version: (wheel tag, requires_dist)}; it picks the newest version that satisfies
    every specifier it has collected. `hashes=False` publishes wheels without a sha256.
    """

    def __init__(self, index, *, hashes=True, ignore=()):
        self.index = index
        self.hashes = hashes
        self.ignore = set(ignore)
        self.calls: list[list[str]] = []

    def __call__(self, cmd, *, cwd=None, env=None):
        self.calls.append(list(cmd))
        assert cmd[:4] == [sys.executable, "-m", "pip", "install"]
        report = Path(cmd[cmd.index("--report") + 1])
        requested = [Requirement(text) for text in cmd[cmd.index("--target") + 2:]]
        report.write_text(json.dumps({"version": "1", "install": self.install(requested)}), encoding="utf-8")
        return ""

    def install(self, requested):
        specifiers: dict[str, list] = {}
        queue = [req for req in requested if canonicalize_name(req.name) not in self.ignore]
        while queue:
            req = queue.pop()
            name = canonicalize_name(req.name)
            if name in specifiers:
                specifiers[name].append(req.specifier)
                continue
            specifiers[name] = [req.specifier]
            for requires in self.requires(name):
                dep = Requirement(requires)
                if dep.marker is None or dep.marker.evaluate({"extra": ""}):  # the build machine's markers
                    queue.append(dep)
        return [self.entry(name, specs) for name, specs in specifiers.items()]

    def requires(self, name):
        return next(iter(self.index[name].values()))[1]

    def entry(self, name, specs):
        version = max((v for v in self.index[name] if all(s.contains(v, prereleases=True) for s in specs)), key=Version)
        tag, requires = self.index[name][version]
        filename = f"{name}-{version}-{tag}.whl"
        digest = hashlib.sha256(filename.encode()).hexdigest()
        archive = {"hashes": {"sha256": digest}, "hash": f"sha256={digest}"} if self.hashes else {}
        return {
            "download_info": {"url": f"{FAKE_INDEX}/{filename}", "archive_info": archive},
            "requested": True,
            "metadata": {"name": name, "version": version, "requires_dist": list(requires)},
        }


ORT_LIKE_INDEX = {
    "coloredlogs": {"15.0.1": ("py2.py3-none-any", ["humanfriendly (>=9.1)", "capturer (>=2.4) ; extra == 'cron'"])},
    "humanfriendly": {"10.0": ("py2.py3-none-any", [
        'pyreadline ; sys_platform == "win32" and python_version<"3.8"',
        'pyreadline3 ; sys_platform == "win32" and python_version>="3.8"',
        'linuxhelper ; sys_platform == "linux"',
    ])},
    "pyreadline3": {"3.5.4": ("py3-none-any", [])},
    "linuxhelper": {"1.0": ("py3-none-any", [])},
    "capturer": {"3.0": ("py3-none-any", [])},
}


def names(lock: Lock) -> set[str]:
    return {wheel.name for wheel in lock.wheels}


@pytest.mark.skipif(sys.platform == "win32", reason="the fake pip must evaluate markers on a non-Windows machine")
def test_resolve_adds_what_only_the_target_requires_and_drops_what_only_the_build_machine_requires(tmp_path):
    pip = FakePip(ORT_LIKE_INDEX)
    lock = resolve(["coloredlogs"], target=WIN, runner=pip, work_dir=tmp_path)
    assert names(lock) == {"coloredlogs", "humanfriendly", "pyreadline3"}
    assert len(pip.calls) == 2
    assert "pyreadline3" not in pip.calls[0] and "pyreadline3" in pip.calls[1]


@pytest.mark.skipif(sys.platform == "win32", reason="the fake pip must evaluate markers on a non-Windows machine")
def test_resolve_for_the_build_platform_needs_one_round(tmp_path):
    pip = FakePip(ORT_LIKE_INDEX)
    lock = resolve(["coloredlogs"], target=LINUX, runner=pip, work_dir=tmp_path)
    assert names(lock) == {"coloredlogs", "humanfriendly", "linuxhelper"}
    assert len(pip.calls) == 1


def test_resolve_follows_extras_the_target_needs(tmp_path):
    pip = FakePip(ORT_LIKE_INDEX)
    lock = resolve(["coloredlogs[cron]"], target=WIN, runner=pip, work_dir=tmp_path)
    assert {"capturer", "pyreadline3"} <= names(lock)


def test_resolve_asks_pip_again_when_the_target_constrains_a_version(tmp_path):
    index = {
        "app": {"1.0": ("py3-none-any", ['numpy<2 ; sys_platform == "win32"', "numpy"])},
        "numpy": {"1.26.4": ("cp311-cp311-win_amd64", []), "2.3.4": ("cp311-cp311-win_amd64", [])},
    }
    pip = FakePip(index)
    lock = resolve(["app"], target=WIN, runner=pip, work_dir=tmp_path)
    assert {wheel.name: wheel.version for wheel in lock.wheels} == {"app": "1.0", "numpy": "1.26.4"}
    assert "numpy<2" in pip.calls[-1]


def test_top_level_markers_are_decided_for_the_target_before_pip_sees_them(tmp_path):
    index = {"pywin32": {"311": ("cp311-cp311-win_amd64", [])}, "app": {"1.0": ("py3-none-any", [])}}
    pip = FakePip(index)
    lock = resolve(['pywin32 ; sys_platform == "win32"', "app"], target=WIN, runner=pip, work_dir=tmp_path)
    assert names(lock) == {"pywin32", "app"}
    assert "pywin32" in pip.calls[0]
    assert lock.requirements == ("app", 'pywin32; sys_platform == "win32"')
    assert resolve(['pywin32 ; sys_platform == "win32"'], target=LINUX, runner=pip, work_dir=tmp_path).wheels == ()


def test_lock_keeps_hashes_and_file_names_but_never_the_index_url(tmp_path):
    lock = resolve(["coloredlogs"], target=WIN, runner=FakePip(ORT_LIKE_INDEX), work_dir=tmp_path)
    wheel = next(wheel for wheel in lock.wheels if wheel.name == "pyreadline3")
    assert wheel.filename == "pyreadline3-3.5.4-py3-none-any.whl"
    assert wheel.sha256 == hashlib.sha256(wheel.filename.encode()).hexdigest()
    write_lock(lock, tmp_path / "ort.lock")
    assert "index.invalid" not in (tmp_path / "ort.lock").read_text(encoding="utf-8")


def test_wheel_without_sha256_is_an_error(tmp_path):
    with pytest.raises(InputUnavailableError, match="coloredlogs-15.0.1-py2.py3-none-any.whl without a sha256"):
        resolve(["coloredlogs"], target=WIN, runner=FakePip(ORT_LIKE_INDEX, hashes=False), work_dir=tmp_path)


def test_wheel_for_another_platform_is_refused(tmp_path):
    index = {"numpy": {"2.3.4": ("cp311-cp311-manylinux_2_28_x86_64", [])}}
    expected = r"numpy-2.3.4-cp311-cp311-manylinux_2_28_x86_64.whl, whose tags .* do not fit cp311/win_amd64"
    with pytest.raises(BuildError, match=expected):
        resolve(["numpy"], target=WIN, runner=FakePip(index), work_dir=tmp_path)


def test_resolver_stops_when_pip_ignores_a_requirement(tmp_path):
    pip = FakePip(ORT_LIKE_INDEX, ignore={"pyreadline3"})
    with pytest.raises(BuildError, match="pyreadline3.*still does not satisfy"):
        resolve(["coloredlogs"], target=WIN, runner=pip, work_dir=tmp_path)
    assert len(pip.calls) == 2


def test_invalid_requirement_is_a_manifest_error(tmp_path):
    with pytest.raises(ManifestError, match="'numpy>=>1' is not a valid PEP 508 requirement"):
        resolve(["numpy>=>1"], target=WIN, runner=FakePip({}), work_dir=tmp_path)


# --- lock file ------------------------------------------------------------------------------------------

NUMPY = LockedWheel(name="numpy", version="2.3.4", filename="numpy-2.3.4-cp311-cp311-win_amd64.whl", sha256="a" * 64)
SYMPY = LockedWheel(name="sympy", version="1.14.0", filename="sympy-1.14.0-py3-none-any.whl", sha256="b" * 64)
SMALL_LOCK = Lock(target=WIN, requirements=("numpy>=1.21.6", "sympy"), wheels=(NUMPY, SYMPY))


def test_write_then_read_gives_the_same_lock_and_sorted_stable_bytes(tmp_path):
    path = tmp_path / "ort.lock"
    write_lock(Lock(target=WIN, requirements=("sympy", "numpy>=1.21.6"), wheels=(SYMPY, NUMPY)), path)
    first = path.read_bytes()
    assert first.startswith(b"# generated by ort-bundler lock")
    assert first.index(b'"numpy>=1.21.6"') < first.index(b'"sympy"')
    assert first.index(b'name = "numpy"') < first.index(b'name = "sympy"')
    assert read_lock(path) == SMALL_LOCK
    write_lock(SMALL_LOCK, path)
    assert path.read_bytes() == first
    assert [p.name for p in tmp_path.iterdir()] == ["ort.lock"]


def lock_text(**replace: str) -> str:
    """The small lock's TOML with some lines replaced, e.g. sha256='sha256 = "xyz"'."""
    lines = {
        "target": '[target]\nplatform = "win_amd64"\npython = "3.11"\n',
        "resolve": '[resolve]\nrequirements = ["numpy>=1.21.6"]\n',
        "wheel": '[[wheel]]\nname = "numpy"\nversion = "2.3.4"\nfilename = "numpy-2.3.4-cp311-cp311-win_amd64.whl"\n',
        "sha256": f'sha256 = "{"a" * 64}"\n',
    }
    lines.update(replace)
    return "".join(lines.values())


@pytest.mark.parametrize(("replace", "message"), [
    ({"sha256": ""}, "key 'wheel[0].sha256' is missing"),
    ({"sha256": 'sha256 = "ABC123"\n'}, "key 'wheel[0].sha256' is 'ABC123', expected 64 lowercase hexadecimal digits"),
    ({"sha256": "sha256 = 42\n"}, "key 'wheel[0].sha256' is int 42, expected a string"),
    ({"target": '[target]\nplatform = "win_amd64"\n'}, "key 'target.python' is missing"),
    ({"target": '[target]\nplatform = "win_arm64"\npython = "3.11"\n'}, "key 'target.platform' is 'win_arm64'"),
    ({"resolve": '[resolve]\nrequirements = "numpy"\n'}, "key 'resolve.requirements' is str 'numpy', expected a list"),
    ({"resolve": '[resolve]\nrequirments = ["numpy"]\n'}, "did you mean 'resolve.requirements'"),
    ({"resolve": ""}, "key 'resolve' is missing"),
    ({"wheel": '[[wheel]]\nname = "numpy"\nversion = "2.3.5"\nfilename = "numpy-2.3.4-cp311-cp311-win_amd64.whl"\n'},
     "key 'wheel[0].filename' is 'numpy-2.3.4-cp311-cp311-win_amd64.whl', expected the wheel of numpy 2.3.5"),
])
def test_malformed_lock_names_the_file_and_key(tmp_path, replace, message):
    path = tmp_path / "ort.lock"
    path.write_text(lock_text(**replace), encoding="utf-8")
    with pytest.raises(ManifestError) as caught:
        read_lock(path)
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"Lock file {path}: key '")


def test_every_problem_is_reported_at_once(tmp_path):
    path = tmp_path / "ort.lock"
    path.write_text(lock_text(target='[target]\npython = 3.11\n', sha256='sha256 = "nothex"\n'), encoding="utf-8")
    with pytest.raises(ManifestError) as caught:
        read_lock(path)
    assert len(caught.value.problems) == 3
    assert {"target.platform", "target.python", "wheel[0].sha256"} == {p.split("'")[1] for p in caught.value.problems}
    path.write_text(lock_text(target='[target]\nplatform = "win_arm64"\npython = "3.x"\n'), encoding="utf-8")
    with pytest.raises(ManifestError) as caught:
        read_lock(path)
    assert [p.split("'")[1] for p in caught.value.problems] == ["target.platform", "target.python"]


MODEL = PinnedModel(name="tiny", sha256="c" * 64, ort_version="1.23.1",
                    record='{"inputs":[{"name":"x","shape":["n",null],"type":"tensor(float)"}],"opsets":{"ai.onnx":13},'
                           '"outputs":[],"reference":{"outputs":{"y":{"values":["nan",1.5,18446744073709551615]}}},'
                           '"shapes":{}}')


def test_pinned_model_records_survive_the_lock_file_unchanged(tmp_path):
    path = tmp_path / "ort.lock"
    lock = Lock(target=WIN, requirements=SMALL_LOCK.requirements, wheels=SMALL_LOCK.wheels, models=(MODEL,))
    write_lock(lock, path)
    assert read_lock(path) == lock
    assert b"[[model]]" in path.read_bytes()
    assert tomllib.loads(path.read_text(encoding="utf-8")) == lock_data(lock)  # what bundle.json records


@pytest.mark.parametrize(("model", "message"), [
    ('[[model]]\nname = "m"\nsha256 = "' + "c" * 64 + '"\nort_version = "1.23.1"\nrecord = "[1]"\n',
     "key 'model[0].record' is not a JSON object"),
    ('[[model]]\nname = "m"\nsha256 = "c"\nort_version = "1.23.1"\nrecord = "{}"\n',
     "key 'model[0].sha256' is 'c', expected 64 lowercase hexadecimal digits"),
    ('[[model]]\nname = "m"\nsha256 = "' + "c" * 64 + '"\nrecord = "{}"\n', "key 'model[0].ort_version' is missing"),
    ('[[model]]\nname = "m"\nsha256 = "' + "c" * 64 + '"\nort_version = "1"\nrecord = "{}"\nrecod = 1\n',
     "did you mean 'model[0].record'"),
])
def test_malformed_model_pin_names_the_key(tmp_path, model, message):
    path = tmp_path / "ort.lock"
    path.write_text(lock_text() + model, encoding="utf-8")
    with pytest.raises(ManifestError) as caught:
        read_lock(path)
    assert message in str(caught.value)


def test_lock_that_is_not_toml_or_absent_is_a_manifest_error(tmp_path):
    path = tmp_path / "ort.lock"
    path.write_text("[target\n", encoding="utf-8")
    with pytest.raises(ManifestError, match="is not valid UTF-8 TOML"):
        read_lock(path)
    with pytest.raises(ManifestError, match="could not be read"):
        read_lock(tmp_path / "missing.lock")


def test_requirements_txt_pins_every_wheel_by_version_and_hash():
    assert requirements_txt([SYMPY, NUMPY]) == (
        f"numpy==2.3.4 --hash=sha256:{'a' * 64}\nsympy==1.14.0 --hash=sha256:{'b' * 64}\n"
    )


# --- runner ---------------------------------------------------------------------------------------------


def test_runner_returns_stdout_and_honours_cwd_and_env(tmp_path):
    script = "import os, sys; print(os.getcwd()); print(os.environ['ORT_BUNDLER_PROBE']); print('noise', file=sys.stderr)"
    out = run([sys.executable, "-c", script], cwd=tmp_path, env={"ORT_BUNDLER_PROBE": "seen", "SYSTEMROOT": "C:\\Windows"})
    assert out.splitlines() == [str(tmp_path), "seen"]


def test_runner_failure_carries_the_tail_of_stderr():
    script = "import sys; [print(f'line {i}', file=sys.stderr) for i in range(100)]; sys.exit(3)"
    with pytest.raises(BuildError, match="exited with code 3") as caught:
        run([sys.executable, "-c", script])
    message = str(caught.value)
    assert "line 99" in message and "line 80" in message
    assert "line 79\n" not in message


def test_runner_reports_a_missing_program():
    with pytest.raises(BuildError, match="Could not start"):
        run(["ort-bundler-no-such-program"])


# --- integration: the real onnxruntime dependencies through the real pip -----------------------------------


def wheel_requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(metadata).decode("utf-8"))
    return message.get_all("Requires-Dist") or []


@pytest.fixture(scope="session")
def ort_requirements(ort_win_wheel) -> list[str]:
    requirements = wheel_requires_dist(ort_win_wheel)
    assert {canonicalize_name(Requirement(r).name) for r in requirements} == {
        "coloredlogs", "flatbuffers", "numpy", "packaging", "protobuf", "sympy"}
    return requirements


@pytest.fixture(scope="session")
def win_lock(ort_requirements, tmp_path_factory) -> Lock:
    return resolve(ort_requirements, target=WIN, work_dir=tmp_path_factory.mktemp("resolve-win"))


@pytest.fixture(scope="session")
def linux_lock(ort_requirements, tmp_path_factory) -> Lock:
    return resolve(ort_requirements, target=LINUX, work_dir=tmp_path_factory.mktemp("resolve-linux"))


def wheel_tags(lock: Lock) -> dict[str, set[tuple[str, str, str]]]:
    return {wheel.filename: {(tag.interpreter, tag.abi, tag.platform) for tag in parse_wheel_filename(wheel.filename)[3]}
            for wheel in lock.wheels}


@pytest.mark.integration
def test_windows_lock_resolved_on_linux_contains_pyreadline3_and_only_windows_wheels(win_lock):
    assert {"coloredlogs", "flatbuffers", "numpy", "packaging", "protobuf", "sympy", "humanfriendly", "mpmath",
            "pyreadline3"} <= names(win_lock)
    for filename, tags in wheel_tags(win_lock).items():
        assert {platform for _, _, platform in tags} <= {"win_amd64", "any"}, filename
        assert any(abi in ("cp311", "abi3", "none") for _, abi, _ in tags), filename
        assert all(abi != "cp311" or interpreter == "cp311" for interpreter, abi, _ in tags), filename
    assert any(tags & {("cp311", "cp311", "win_amd64")} for tags in wheel_tags(win_lock).values())
    assert all(len(w.sha256) == 64 for w in win_lock.wheels)


@pytest.mark.integration
def test_linux_lock_has_no_pyreadline3_and_only_linux_wheels(linux_lock):
    assert "pyreadline3" not in names(linux_lock)
    assert {"humanfriendly", "mpmath", "numpy"} <= names(linux_lock)
    for filename, tags in wheel_tags(linux_lock).items():
        platforms = {platform for _, _, platform in tags}
        assert all(p == "any" or p.startswith(("manylinux", "linux_")) for p in platforms), filename


@pytest.mark.integration
def test_real_lock_roundtrips_through_the_file(win_lock, tmp_path):
    path = tmp_path / "ort.lock"
    write_lock(win_lock, path)
    assert read_lock(path) == win_lock
    assert "://" not in path.read_text(encoding="utf-8")


@pytest.mark.integration
def test_pip_installs_the_locked_wheels_offline_with_required_hashes_and_refuses_a_wrong_hash(win_lock, tmp_path_factory):
    work = tmp_path_factory.mktemp("offline-install")
    good = work / "requirements.txt"
    good.write_text(requirements_txt(win_lock.wheels), encoding="utf-8")
    wheelhouse = work / "wheelhouse"
    run([sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", *WIN.pip_target_args(),
         "--dest", str(wheelhouse), "-r", str(good)])
    assert sorted(p.name for p in wheelhouse.iterdir()) == sorted(w.filename for w in win_lock.wheels)
    offline = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index",
               "--find-links", str(wheelhouse), "--require-hashes", *WIN.pip_target_args(), "--target", str(work / "t")]
    report = work / "report.json"
    run([*offline, "--report", str(report), "-r", str(good)])
    installed = {canonicalize_name(item["metadata"]["name"]) for item in json.loads(report.read_text())["install"]}
    assert installed == names(win_lock)

    bad = work / "bad-requirements.txt"
    wrong = win_lock.wheels[0].sha256[::-1]
    bad.write_text(requirements_txt([LockedWheel(**{**vars(win_lock.wheels[0]), "sha256": wrong}), *win_lock.wheels[1:]]),
                   encoding="utf-8")
    with pytest.raises(BuildError, match=r"(?s)exited with code [1-9].*HASHES") as caught:
        run([*offline, "-r", str(bad)])
    assert wrong in str(caught.value)


@pytest.mark.integration
def test_fetch_takes_a_locked_wheel_through_pip_and_refuses_one_whose_hash_differs(win_lock, tmp_path):
    """Locked wheels are fetched by `fetch` through pip's own configuration, hash-checked by pip and by us."""
    wheel = next(w for w in win_lock.wheels if w.name == "flatbuffers")
    cache = Cache(tmp_path / "cache")
    good = Input(key="lock:flatbuffers", kind="requirement", location=f"flatbuffers=={wheel.version}",
                 sha256=(wheel.sha256,), filename=wheel.filename)
    fetched = fetch_inputs([good], cache=cache, target=WIN, options=FetchOptions(quiet=True))["lock:flatbuffers"]
    assert fetched.name == wheel.filename
    assert hashlib.sha256(fetched.read_bytes()).hexdigest() == wheel.sha256
    forged = Input(key="lock:flatbuffers", kind="requirement", location=f"flatbuffers=={wheel.version}",
                   sha256=("0" * 64,), filename=wheel.filename)
    with pytest.raises(HashMismatchError, match="lock:flatbuffers: hash mismatch"):
        fetch_inputs([forged], cache=Cache(tmp_path / "other"), target=WIN, options=FetchOptions(quiet=True))
    assert not list((tmp_path / "other").glob("sha256/*/*/*"))
