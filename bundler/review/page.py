"""The review page's bytes: one Jinja template (templates/review.html.j2) with autoescaping on.

Autoescaping is the whole defence and is not optional: every value the template prints is escaped for HTML
(and so for the inline SVG, which is XML in the same document), unless the template marks it safe, which it
never does for data. The Content-Security-Policy in the page forbids scripts, frames, network fetches and
plug-ins, so even a bug here could not make the page run or load anything.
"""

from __future__ import annotations

from importlib import resources

import jinja2

from bundler.errors import BuildError
from bundler.review.view import Review

TEMPLATE = "review.html.j2"


def render_page(review: Review) -> bytes:
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["bytes"] = lambda n: f"{n:,}"
    resource = resources.files("bundler.templates").joinpath(TEMPLATE)
    if not resource.is_file():
        msg = f"template {TEMPLATE!r} is not in the bundler.templates package; the installation is incomplete"
        raise BuildError(msg)
    return env.from_string(resource.read_text(encoding="utf-8")).render(review=review).encode("utf-8")
