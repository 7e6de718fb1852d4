"""No template asks which platform it renders for (issue 25): a text that differs by platform is a shared
template that each platform's own template extends (templates/windows/, templates/linux/), chosen in one
place (bundler/assembly/render.py, platform_template).

Every template is parsed with Jinja2's own parser, so a test written any way (`{% if %}`, `{% elif %}`, an
inline `x if ... else y`, a `{% set %}` or a loop filter) is found, not only the spellings a grep knows.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable

import pytest
from jinja2 import nodes
from unit.assembly.test_render import context

from bundler.assembly.render import make_environment, platform_template, render_scripts
from bundler.target_platform import TARGETS

#: Names and values that say which platform a template renders for.
_PLATFORM_NAMES = {"platform", "windows"}
_PLATFORM_TAGS = set(TARGETS)


def _templates(folder: Traversable, prefix: str = "") -> dict[str, str]:
    """Template name (as the loader takes it) -> source, for every template of the package, subfolders too."""
    found: dict[str, str] = {}
    for entry in folder.iterdir():
        if entry.is_dir() and entry.name != "__pycache__":
            found |= _templates(entry, f"{prefix}{entry.name}/")
        elif entry.name.endswith(".j2"):
            found[prefix + entry.name] = entry.read_text(encoding="utf-8")
    return found


def platform_tests(source: str) -> list[str]:
    """Every condition in `source` that names the platform, as Jinja2 parsed it."""
    tree = make_environment().parse(source)
    tests: list[nodes.Node] = [node.test for node in tree.find_all(nodes.If)]
    tests += [node.test for node in tree.find_all(nodes.CondExpr)]
    tests += [node.test for node in tree.find_all(nodes.For) if node.test is not None]
    found = []
    for test in tests:
        parts = [test, *test.find_all(nodes.Expr)]  # find_all leaves out the node it starts from
        named = [n.name for n in parts if isinstance(n, nodes.Name) and n.name in _PLATFORM_NAMES]
        named += [n.attr for n in parts if isinstance(n, nodes.Getattr) and n.attr in _PLATFORM_NAMES]
        named += [n.value for n in parts if isinstance(n, nodes.Const) and n.value in _PLATFORM_TAGS]
        if named:
            found.append(f"line {test.lineno}: {', '.join(map(str, named))}")
    return found


ALL_TEMPLATES = _templates(resources.files("bundler.templates"))


def test_the_package_templates_include_each_platforms_folder() -> None:
    for target in TARGETS.values():
        assert platform_template(target, "README-INSTALL.txt.j2") in ALL_TEMPLATES
        assert platform_template(target, "onnxruntimeConfig.cmake.j2") in ALL_TEMPLATES


@pytest.mark.parametrize("name", sorted(ALL_TEMPLATES))
def test_no_template_tests_the_platform(name: str) -> None:
    assert platform_tests(ALL_TEMPLATES[name]) == []


@pytest.mark.parametrize("source", [
    '{% if platform == "win_amd64" %}a{% endif %}',
    '{% if x %}{% elif platform != "linux_x86_64" %}b{% endif %}',
    '{{ "run.cmd" if windows else "run.sh" }}',
    '{% set launcher = "run.cmd" if target.windows else "run.sh" %}',
    '{% for d in dirs if platform is eq("win_amd64") %}{{ d }}{% endfor %}',
    '{% if "win_amd64" in tags %}a{% endif %}',
])
def test_the_check_finds_a_platform_test_however_it_is_written(source: str) -> None:
    assert platform_tests(source)


@pytest.mark.parametrize("source", ['{{ install_id }} ({{ platform }})', '{% if runtime_python %}a{% endif %}'])
def test_the_check_lets_a_platform_value_and_other_tests_be(source: str) -> None:
    assert platform_tests(source) == []


def test_each_platforms_readme_says_only_its_own_platform() -> None:
    """The facts the platform templates fill in land in the shared text: launcher, DLL variable, user cache."""
    windows = render_scripts(context("win_amd64"))["README-INSTALL.txt"].decode()
    linux = render_scripts(context("linux_x86_64"))["README-INSTALL.txt"].decode()
    for text, own, other in ((windows, ("run.cmd --verify", "first on PATH,", r"%LOCALAPPDATA%\ort-bundles\demo"),
                              ("run.sh", "LD_LIBRARY_PATH", "~/.cache")),
                             (linux, ("run.sh --verify", "first on LD_LIBRARY_PATH,", "~/.cache/ort-bundles/demo"),
                              ("run.cmd", "install.cmd", "LOCALAPPDATA"))):
        assert all(phrase in text for phrase in own), own
        assert not any(phrase in text for phrase in other), other
