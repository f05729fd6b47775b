"""Load named SQL queries from the per-dialect ``.sql`` files.

A query starts with ``-- name: NAME`` and a one-line description comment; its text runs to the
next name. The core queries live in ``sql/<dialect>.sql``; each part (steps, limiters, schedules,
alerts, ...) keeps its own in ``sql/<dialect>/<part>.sql``. Both dialects define the same names.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from firesafe.errors import SchemaTooNew


def _parse(text: str, queries: dict[str, str], origin: str) -> None:
    name: str | None = None
    lines: list[str] = []

    def close() -> None:
        if name is None:
            return
        if name in queries:
            raise RuntimeError(f"query {name!r} is defined twice ({origin})")
        queries[name] = "\n".join(lines).strip()

    for line in text.splitlines():
        if line.startswith("-- name:"):
            close()
            name, lines = line.split(":", 1)[1].strip(), []
        elif name is not None and not line.startswith("--"):
            lines.append(line)
    close()


@cache
def load(dialect: str) -> dict[str, str]:
    """Every named query of a dialect: ``sql/<dialect>.sql`` plus each part's ``sql/<dialect>/*.sql``."""
    root = files("firesafe.store") / "sql"
    queries: dict[str, str] = {}
    _parse((root / f"{dialect}.sql").read_text(), queries, f"{dialect}.sql")
    folder = root / dialect
    if folder.is_dir():
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".sql"):
                _parse(entry.read_text(), queries, f"{dialect}/{entry.name}")
    return queries


def migrations(dialect: str) -> list[tuple[int, str]]:
    """The numbered migration files of a dialect, in order: ``[(1, sql), (2, sql), ...]``."""
    folder = files("firesafe.store") / "migrations" / dialect
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            found.append((int(entry.name.split("_", 1)[0]), entry.read_text()))
    return sorted(found)


@cache
def latest_version(dialect: str) -> int:
    """The newest migration this code ships for a dialect: the schema version it needs (0 if none
    can be read)."""
    try:
        return max((v for v, _ in migrations(dialect)), default=0)
    except (OSError, ValueError):
        return 0


def check_version(where: str, dialect: str, version: int) -> int:
    """``version``, if this code can use a store at that schema version: raises
    :class:`~firesafe.errors.SchemaTooNew` when a newer firesafe migrated it (an older schema is
    ``migrate``'s business, not this check's)."""
    supported = latest_version(dialect)
    if supported and version > supported:
        raise SchemaTooNew(where, version, supported)
    return version
