"""docs/guides/django.md shows the example project's code as it is: every Python block of the page
is found, as written (or indented, as a method), in a file of examples/django_project (whose tests run it)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.docs.blocks import blocks

ROOT = Path(__file__).resolve().parents[2]


def test_every_snippet_of_the_django_guide_is_code_of_the_example() -> None:
    sources = [p.read_text() for p in (ROOT / "examples" / "django_project").rglob("*.py")]
    snippets = [b.code for b in blocks((ROOT / "docs" / "guides" / "django.md").read_text())
                if b.lang.startswith("py")]
    assert len(snippets) == 4
    for code in snippets:
        found = any(textwrap.indent(code, " " * n) in source for source in sources for n in (0, 4, 8))
        assert found, f"not in examples/django_project (a method's body may be indented):\n{code}"
