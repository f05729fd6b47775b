"""Fixtures of the PostgreSQL-only tests.

Each test gets its own schema and its own ``application_name`` (both dropped or unused afterwards),
so a test may terminate "every connection" of its own without touching anyone else's. Subprocesses
are killed by pid at teardown if they still run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest

from tests.conftest import PG_URL, drop_schema, need_postgres

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def wait_until(pred: Callable[[], T], timeout: float, what: str, interval: float = 0.02) -> T:
    """Poll ``pred`` until it returns something true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:g}s waiting for {what}")
        time.sleep(interval)


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


class Proc:
    """One ``python -m tests.postgres.procs`` subprocess; output goes to files the test can read."""

    def __init__(self, name: str, args: list[str], folder: Path, stdin: bool = False) -> None:
        self.name = name
        self.out_path = folder / f"{name}.out"
        self.err_path = folder / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.popen = subprocess.Popen([sys.executable, "-m", "tests.postgres.procs", *args], cwd=ROOT,
                                          stdout=out, stderr=err,
                                          stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def send(self, line: str) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(line.encode())
        self.popen.stdin.flush()

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still runs after {timeout:g}s; stderr:\n{self.stderr()[-3000:]}"
                                 ) from None

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    started: list[Proc] = []

    def start(name: str, *args: str, stdin: bool = False) -> Proc:
        p = Proc(name, list(args), tmp_path, stdin=stdin)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.popen.stdin is not None:
            p.popen.stdin.close()
        if p.popen.poll() is None:
            p.signal(signal.SIGKILL)
            p.popen.wait(10)
