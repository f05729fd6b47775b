"""Load named SQL queries from the per-dialect ``.sql`` files.

A query starts with ``-- name: NAME`` and a one-line description comment; its text runs to the
next name. Both dialect files define the same names.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def load(dialect: str) -> dict[str, str]:
    text = (files("firesafe.store") / "sql" / f"{dialect}.sql").read_text()
    queries: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("-- name:"):
            if name:
                queries[name] = "\n".join(lines).strip()
            name, lines = line.split(":", 1)[1].strip(), []
        elif name is not None and not line.startswith("--"):
            lines.append(line)
    if name:
        queries[name] = "\n".join(lines).strip()
    return queries


def migrations(dialect: str) -> list[tuple[int, str]]:
    """The numbered migration files of a dialect, in order: ``[(1, sql), (2, sql), ...]``."""
    folder = files("firesafe.store") / "migrations" / dialect
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            found.append((int(entry.name.split("_", 1)[0]), entry.read_text()))
    return sorted(found)
