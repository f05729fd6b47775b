"""Find the Python code blocks of a Markdown page, and run a page's blocks in order.

Every fenced block whose info string starts with ``python`` (or ``py``) runs, unless the line
before its fence (blank lines aside) is the comment ``<!-- no-run -->``: use that for code that
needs what a page cannot give it (a running server, your own module, another machine).

Run one page, in the current directory (the tests run each page in a fresh temporary one)::

    python -m tests.docs.blocks docs/keys.md

A failing block's traceback names the page and the line of the failing statement.

The printed output is checked too: a one-line ``print(...)`` statement followed by a comment, as in
``print(job.state)   # succeeded``, must print what the comment says. The comment may go on to explain
after a colon or a space (``# 15.0: the worst case``), and ``...`` in it matches anything, as in
doctest. Comments on the lines below a print are read as prose, not checked.
"""

from __future__ import annotations

import ast
import builtins
import io
import re
import sys
import textwrap
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

NO_RUN = "<!-- no-run -->"
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the block's first code line in the page
    code: str
    lang: str
    run: bool


def blocks(text: str) -> list[Block]:
    """Every fenced code block of a page, with its language and whether it is marked no-run.

    >>> page = "Intro\\n\\n```python\\nx = 1\\n```\\n\\n<!-- no-run -->\\n```python\\nboom()\\n```\\n"
    >>> [(b.line, b.code, b.run) for b in blocks(page)]
    [(4, 'x = 1\\n', True), (9, 'boom()\\n', False)]
    """
    found: list[Block] = []
    lines = text.splitlines()
    previous = ""  # the last non-blank line outside a block
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                previous = lines[i].strip()
            i += 1
            continue
        fence, indent = m["fence"], m["indent"]
        lang = (m["info"].split() or [""])[0].lower()
        start = i + 1
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(fence[0] * len(fence))
                                      and not lines[i].strip().strip(fence[0])):
            i += 1
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[start:i]]
        found.append(Block(start + 1, textwrap.dedent("\n".join(body) + "\n"), lang, previous != NO_RUN))
        previous = ""
        i += 1
    return found


def runnable(text: str) -> list[Block]:
    """The blocks a page runs: Python ones not marked ``<!-- no-run -->``."""
    return [b for b in blocks(text) if b.lang in ("python", "py") and b.run]


def output_matches(said: str, printed: str) -> bool:
    """Whether a print's trailing comment agrees with what it printed.

    >>> output_matches("15.0", "15.0"), output_matches("2.5: a quarter of 10 s", "2.5")
    (True, True)
    >>> output_matches("key 'k' is taken: ...", "key 'k' is taken: it was enqueued with other arguments")
    True
    >>> output_matches("True False", "True True"), output_matches("1", "10")
    (False, False)
    """
    printed = printed.strip()
    if said == printed or said.startswith((printed + ":", printed + " ")):
        return True
    pattern = ".*".join(re.escape(part) for part in said.split("..."))
    return "..." in said and re.fullmatch(pattern, printed, re.DOTALL) is not None


def claims(block: Block) -> list[tuple[int, str]]:
    """The ``(page line, comment)`` of each one-line ``print(...)  # comment`` in a block."""
    found = []
    lines = block.code.splitlines()
    for node in ast.walk(ast.parse(block.code)):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "print"
                and node.lineno == node.end_lineno and node.end_col_offset is not None):
            rest = lines[node.lineno - 1].encode()[node.end_col_offset:].decode().strip()
            if rest.startswith("#") and rest.lstrip("#").strip():
                found.append((block.line + node.lineno - 1, rest.lstrip("#").strip()))
    return found


class Mismatch(AssertionError):
    pass


def run_page(path: str | Path) -> int:
    """Run a page's blocks in order in one namespace, checking commented prints; returns how many ran."""
    page = Path(path)
    printed: dict[int, list[str]] = defaultdict(list)

    def recording_print(*args: object, **kwargs: object) -> None:
        if kwargs.get("file") is None:
            frame = sys._getframe(1)
            if frame.f_code.co_filename == str(page):
                buffer = io.StringIO()
                builtins.print(*args, **{**kwargs, "file": buffer})  # type: ignore[arg-type]
                printed[frame.f_lineno].append(buffer.getvalue())
        builtins.print(*args, **kwargs)  # type: ignore[arg-type]

    namespace: dict[str, object] = {"__name__": "__main__", "print": recording_print}
    todo = runnable(page.read_text())
    for block in todo:
        # Pad with blank lines so tracebacks show the page's own line numbers.
        code = compile("\n" * (block.line - 1) + block.code, str(page), "exec")
        exec(code, namespace)
        for line, said in claims(block):
            if line not in printed:
                raise Mismatch(f"{page}:{line}: this print never ran (its comment says {said!r})")
            got = printed[line][0]
            if not output_matches(said, got):
                raise Mismatch(f"{page}:{line}: the comment says {said!r} but it printed {got.strip()!r}")
    for value in list(namespace.values()):  # close the apps a page opened, so their files are released
        close = getattr(value, "close", None)
        if type(value).__name__ == "App" and callable(close):
            close()
    return len(todo)


if __name__ == "__main__":
    count = run_page(sys.argv[1])
    print(f"ran {count} block(s) of {sys.argv[1]}")
