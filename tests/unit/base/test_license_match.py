"""Concluding a licence from the text a wheel ships (issue 26): real licence texts, askalono's matcher.

The texts are the ones installed packages of this environment ship (packaging's two licence files), so
nothing here is a paraphrase: what is concluded is what a build would conclude from the same bytes.
"""

from __future__ import annotations

from email.message import Message
from importlib.metadata import distribution

from license_expression import get_spdx_licensing

from bundler.assembly.licenses import wheel_license
from bundler.license_match import conclude


def shipped(name: str) -> bytes:
    files = [f for f in distribution("packaging").files or () if f.name == name]
    assert files, f"packaging ships no {name} here"
    return files[0].read_binary()


def declared(license_field: str) -> Message:
    metadata = Message()
    metadata["Name"] = "demo"
    metadata["License"] = license_field
    return metadata


def test_a_bsd_text_is_concluded_for_a_package_declaring_bsd() -> None:
    texts = [("licenses/demo/LICENSE.BSD", shipped("LICENSE.BSD")), ("licenses/demo/AUTHORS", b"someone\n" * 40)]
    finding = wheel_license("demo", declared("BSD"), texts)
    assert finding is not None and finding.expression == "BSD-2-Clause"
    assert finding.concluded_from == ("licenses/demo/LICENSE.BSD",)  # AUTHORS is not a licence text
    assert not get_spdx_licensing().validate(finding.expression).errors
    assert finding.text == "BSD-2-Clause, concluded from the text of licenses/demo/LICENSE.BSD"


def test_a_text_the_declaration_does_not_name_stays_unknown_with_the_reason() -> None:
    """askalono takes Apache-2.0 without its appendix for "Pixar": a package declaring "BSD" is not concluded."""
    finding = wheel_license("demo", declared("BSD"), [("licenses/demo/LICENSE", shipped("LICENSE.APACHE"))])
    assert finding is not None and finding.expression is None
    assert finding.reason is not None and "which the declared licence does not name" in finding.reason
    assert finding.declared == "BSD"


def test_a_text_that_is_no_licence_stays_unknown_with_the_closest_match_and_score() -> None:
    prose = b"This package is free for everyone who sends the author a postcard from their home town. " * 4
    found = conclude([("licenses/demo/LICENSE", prose)], declared="BSD")
    assert found.expression is None and found.reason is not None
    assert "licenses/demo/LICENSE matches no SPDX licence closely enough" in found.reason


def test_a_package_declaring_a_certain_licence_is_not_matched_at_all() -> None:
    finding = wheel_license("demo", declared("MIT License"), [("licenses/demo/LICENSE", shipped("LICENSE.APACHE"))])
    assert finding is not None and (finding.expression, finding.concluded_from) == ("MIT", ())
