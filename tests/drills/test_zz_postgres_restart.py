"""Drill: the PostgreSQL server itself is restarted mid-run (``pg_ctlcluster ... restart``).

This restarts the shared server, so the test is marked ``pg_restart`` and the drills' conftest moves it
to the very end of the session (nothing runs after it), and it waits for the server to accept
connections again before it goes on. Set FIRESAFE_NO_PG_RESTART=1 to skip it on a machine whose server
other people use at the same moment (test_store_outage.py's PostgreSQL case then still cuts off this
test's own connections and logins, without a restart).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TypeVar

import psycopg
import pytest

from firesafe.errors import StoreError
from tests.conftest import PG_URL, drop_schema, need_postgres
from tests.drills.conftest import Drill, wait_until

T = TypeVar("T")
JOBS = [f"pg:{i}" for i in range(400)]


def cluster() -> list[str]:
    """The pg_ctlcluster command that restarts the local server."""
    if os.environ.get("FIRESAFE_NO_PG_RESTART") == "1":
        pytest.skip("FIRESAFE_NO_PG_RESTART=1: not restarting the shared PostgreSQL server")
    tool = shutil.which("pg_ctlcluster")
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    if not tool or not versions:
        pytest.skip("no pg_ctlcluster here: cannot restart the server")
    return [tool, "--skip-systemctl-redirect", versions[-1], "main", "restart"]


def up() -> bool:
    try:
        with psycopg.connect(PG_URL, connect_timeout=1) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def tolerant(pred: Callable[[], T]) -> Callable[[], T | bool]:
    """A predicate that reads the store, answering False while the store is away."""
    def check() -> T | bool:
        try:
            return pred()
        except StoreError:
            return False
    return check


@pytest.fixture
def pg_store_url() -> Iterator[str]:
    need_postgres()
    schema = f"fs_restart_{uuid.uuid4().hex[:10]}"
    try:
        yield f"{PG_URL}?schema={schema}"
    finally:
        wait_until(up, 60, "the server to accept connections")
        drop_schema(schema)


@pytest.mark.pg_restart
@pytest.mark.postgres
def test_postgres_restarted_mid_run_workers_report_back_off_and_finish(
        pg_store_url: str, make_drill: Callable[..., Drill]) -> None:
    restart = cluster()
    drill = make_drill(pg_store_url)
    drill.app.jobs["pay"].enqueue_many([{"key": k, "args": [i, 0.05]} for i, k in enumerate(JOBS)])
    workers = [drill.worker(f"w{i}", "--concurrency", "4", "--max-lost", "10", "--poll", "0.05") for i in range(2)]
    wait_until(lambda: drill.count(state="succeeded") >= 40, 60, "the first jobs to finish")

    # When the server restarts under them
    drill.app.close()
    started = time.monotonic()
    done = subprocess.run(restart, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    wait_until(up, 60, "the server to accept connections again")
    downtime = time.monotonic() - started

    # Then each worker reports the fault, backs off, resumes, and every job finishes once
    for w in workers:
        wait_until(lambda w=w: "store is reachable again; resuming" in w.stderr(), 60, f"{w.name} to resume")
    wait_until(tolerant(lambda: drill.finished() == len(JOBS)), 120, "every job to finish")
    for w in workers:
        w.signal(signal.SIGTERM)
    lines = []
    for w in workers:
        assert w.wait(30) == 0, w.stderr()[-3000:]
        log = w.stderr()
        assert "Traceback" not in log
        faults = [line for line in log.splitlines() if "store fault" in line]
        assert faults and "retrying in" in faults[0], log[-3000:]
        lines.append(faults[0].split("store fault", 1)[1])
    report = drill.verify(JOBS, allow_dead=False)
    print(f"\n{report.line('postgres restart')} restart_took={downtime:.1f}s\n"
          + "\n".join(f"  logged: store fault{line}" for line in lines))
