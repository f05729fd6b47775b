"""Shared fixtures. ``store_url`` runs a test once per store: SQLite and PostgreSQL.

PostgreSQL tests each get their own schema, dropped afterwards. If the server at 127.0.0.1:5432 cannot
be reached they are skipped locally, and fail loudly when ``FIRESAFE_REQUIRE_POSTGRES=1`` (CI sets it).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

# One terminal width for every test process (pytest-xdist's workers have no terminal to measure):
# the CLI's tables and wrapped lines read the same in each.
os.environ["COLUMNS"] = "200"

import pytest

from firesafe import App, FakeClock

PG_URL = os.environ.get("FIRESAFE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
_pg_error: str | None = None
_pg_checked = False


def postgres_available() -> str | None:
    """None if PostgreSQL answers, else why not."""
    global _pg_checked, _pg_error
    if not _pg_checked:
        _pg_checked = True
        try:
            import psycopg

            with psycopg.connect(PG_URL, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
            import firesafe.store.postgres  # noqa: F401
        except Exception as exc:
            _pg_error = f"{type(exc).__name__}: {exc}"
    return _pg_error


def need_postgres() -> None:
    why = postgres_available()
    if why is None:
        return
    if os.environ.get("FIRESAFE_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL is required here but unreachable: {why}", pytrace=False)
    pytest.skip(f"PostgreSQL unreachable: {why}")


def drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/firesafe.db"
        return
    need_postgres()
    schema = f"fs_test_{uuid.uuid4().hex[:12]}"
    try:
        yield f"{PG_URL}?schema={schema}"
    finally:
        drop_schema(schema)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def app(store_url: str, clock: FakeClock) -> Iterator[App]:
    a = App(store_url, clock=clock)
    yield a
    a.close()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/firesafe.db"
