"""Fixtures of the PostgreSQL-only tests.

Each test gets its own schema and its own ``application_name`` (both dropped or unused afterwards),
so a test may terminate "every connection" of its own without touching anyone else's. Subprocesses
are killed by pid at teardown if they still run.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import PG_URL, drop_schema, need_postgres
from tests.processes import Proc, wait_until

__all__ = ["Pg", "Proc", "wait_until"]



@dataclass
class Pg:
    """One test's corner of the server: a schema, an application_name, and a URL naming both."""

    schema: str
    app_name: str
    url: str

    def admin(self) -> psycopg.Connection[Any]:
        """A connection outside the test's application_name (never terminated by the test)."""
        return psycopg.connect(PG_URL, autocommit=True, application_name="firesafe-test-admin")

    def scalar(self, query: str, params: Any = None) -> Any:
        with self.admin() as conn:
            row = conn.execute(query, params).fetchone()
        return None if row is None else row[0]

    def backends(self) -> list[tuple[int, str]]:
        """``(pid, query)`` of every server backend opened by this test's processes."""
        with self.admin() as conn:
            return conn.execute("SELECT pid, query FROM pg_stat_activity WHERE application_name = %s",
                                (self.app_name,)).fetchall()

    def terminate_all(self) -> int:
        """Terminate every backend of this test's application_name (and no one else's)."""
        with self.admin() as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND pid <> pg_backend_pid()", (self.app_name,)).fetchall()
        return sum(1 for (ok,) in rows if ok)


@pytest.fixture
def pg() -> Iterator[Pg]:
    need_postgres()
    tag = uuid.uuid4().hex[:12]
    schema, app_name = f"fs_test_{tag}", f"fs_test_{tag}"
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield Pg(schema, app_name, f"{PG_URL}{sep}schema={schema}&application_name={app_name}")
    finally:
        drop_schema(schema)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    started: list[Proc] = []

    def start(name: str, *args: str, stdin: bool = False) -> Proc:
        p = Proc("tests.postgres.procs", name, list(args), tmp_path, stdin=stdin)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.popen.stdin is not None:
            p.popen.stdin.close()
        if p.popen.poll() is None:
            p.signal(signal.SIGKILL)
            p.popen.wait(10)


# PgBouncer in transaction mode (tests/postgres/pgbouncer.py): registered here so every test beside
# this file can use it. Imported last: that module reads Pg from this one.
from tests.postgres.pgbouncer import bouncer, pgb  # noqa: E402, F401
