"""A griffe extension for the API reference: docstrings are written for ``help()`` and doctest,
so before mkdocstrings renders them as Markdown, fence their doctest examples as ``pycon`` code
(otherwise ``>>>`` reads as a block quote and ``[1, 2]`` as a link) and drop Sphinx roles
(``:class:`X``` becomes ```X```).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|attr|mod|exc|data|obj|ref):(`+)")


def fence_doctests(text: str) -> str:
    """Wrap each run of doctest lines (``>>>`` up to the next blank line) in a pycon fence.

    >>> print(fence_doctests("Add.\\n\\n>>> 1 + 1\\n2\\n\\nDone."))
    Add.
    <BLANKLINE>
    ```pycon
    >>> 1 + 1
    2
    ```
    <BLANKLINE>
    Done.
    """
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}```pycon")
            while i < len(lines) and lines[i].strip():
                out.append(lines[i])
                i += 1
            out.append(f"{indent}```")
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        if obj.docstring is not None and obj.docstring.value:
            value = ROLE.sub(r"\1", obj.docstring.value)
            obj.docstring.value = fence_doctests(value)
