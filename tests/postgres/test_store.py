"""PostgreSQL-specific behaviour: the database clock, NOTIFY wake-ups, fork safety, lost connections."""

from __future__ import annotations

import gc
import os
import statistics
import sys
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from firesafe import App, State
from firesafe.errors import StoreError
from firesafe.store.base import ClaimParams, JobFilter
from firesafe.store.postgres import _INHERITED
from firesafe.stores.postgres import PostgresStore
from tests.conftest import PG_URL
from tests.postgres.conftest import Pg, wait_until
from tests.postgres.procs import build_app, read_effects


@pytest.fixture
def app(pg: Pg) -> Iterator[App]:
    a = App(pg.url)  # no clock given: the database's clock
    yield a
    a.close()


def declare(app: App):
    @app.job
    def noop(ctx, n: int) -> int:
        return n

    @app.job(queue="other")
    def elsewhere(ctx) -> None: ...

    return noop, elsewhere


def test_without_an_injected_clock_times_come_from_the_database(app: App, pg: Pg) -> None:
    noop, _ = declare(app)
    store = app.store
    assert isinstance(store, PostgresStore) and store.clock is None
    before = pg.scalar("SELECT extract(epoch FROM clock_timestamp())::float8")
    job = noop.enqueue(1, key="k")
    after = pg.scalar("SELECT extract(epoch FROM clock_timestamp())::float8")
    assert before <= job.created_at.timestamp() <= after
    assert before <= store.now() and store.now() - after < 5
    [claimed] = store.job_claim(ClaimParams(("default",), 1, "w", 30.0))
    lease_end = pg.scalar(f'SELECT lease_expires FROM "{pg.schema}".firesafe_jobs WHERE key = %s', ("k",))
    assert 29 < lease_end - claimed.job.updated_at.timestamp() <= 30.0001


def test_an_idle_listener_wakes_at_once_and_only_for_its_queues(app: App) -> None:
    noop, elsewhere = declare(app)
    store = app.store
    assert isinstance(store, PostgresStore)
    woke = threading.Event()
    listener = store.listen(["default"], woke.set)
    try:
        assert listener.ready(10)
        assert woke.wait(5)  # every (re)connect wakes once: jobs may have arrived meanwhile
        woke.clear()
        elsewhere.enqueue(key="other-queue")
        noop.enqueue(1, key="delayed", delay=60)  # not runnable yet: no wake-up for it
        assert not woke.wait(0.3)
        start = time.monotonic()
        noop.enqueue(2, key="now")
        assert woke.wait(5)
        assert time.monotonic() - start < 2.0  # a NOTIFY, not a poll: well under a second when idle
    finally:
        listener.close()


def test_a_notification_from_the_callers_transaction_fires_on_commit_only(app: App) -> None:
    noop, _ = declare(app)
    store = app.store
    assert isinstance(store, PostgresStore)
    woke = threading.Event()
    listener = store.listen(["default"], woke.set)
    try:
        assert listener.ready(10) and woke.wait(5)
        woke.clear()
        with psycopg.connect(PG_URL) as conn:
            noop.enqueue(1, key="outbox", conn=conn)
            assert not woke.wait(0.3)
            conn.commit()
        assert woke.wait(5)
    finally:
        listener.close()


def test_wait_for_jobs_returns_true_on_arrival_and_false_on_timeout(app: App) -> None:
    noop, _ = declare(app)
    store = app.store
    assert isinstance(store, PostgresStore)
    assert store.wait_for_jobs(["default"], 0.2) is False
    timer = threading.Timer(0.3, lambda: noop.enqueue(1, key="k"))
    timer.start()
    try:
        assert store.wait_for_jobs(["default"], 10) is True
    finally:
        timer.join()


def test_an_idle_worker_starts_a_new_job_within_milliseconds_not_at_its_next_poll(pg: Pg, procs, tmp_path) -> None:
    effects = str(tmp_path / "effects.log")
    app = build_app(pg.url, effects)
    try:
        app.store.migrate()
        worker = procs("worker", "worker", pg.url, "--effects", effects, "--poll", "5", "--concurrency", "2")
        wait_until(lambda: any(q.startswith("LISTEN") for _, q in pg.backends()), 30, "the worker to LISTEN")
        latencies = []
        for n in range(5):
            sent = time.time()
            app.jobs["effect"].enqueue(n, key=f"e{n}")
            wait_until(lambda n=n: len(read_effects(effects)) > n, 10, f"job {n} to start")
            latencies.append(read_effects(effects)[n][2] - sent)
        worker.signal(15)
        assert worker.wait(30) == 0, worker.stderr()
    finally:
        app.close()
    # The worker polls every 5 s: only a NOTIFY can start the jobs this soon.
    assert max(latencies) < 2.5, latencies
    assert statistics.median(latencies) < 0.5, latencies


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_gets_its_own_connections_and_leaves_the_parents_alone(app: App, pg: Pg) -> None:
    noop, _ = declare(app)
    store = app.store
    assert isinstance(store, PostgresStore)
    noop.enqueue(1, key="parent-1")

    def backend_pid() -> int:
        with store._conn() as c:
            return c.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]

    parent_pid = backend_pid()
    parents = {p for p, _ in pg.backends()}
    assert parent_pid in parents
    pid = os.fork()
    if pid == 0:  # the child: use the store, drop everything inherited, exit
        code = 1
        try:
            child = noop.enqueue(2, key="child-1")
            code = 0 if child.created and backend_pid() != parent_pid else 2
            store.close()
            for thing in _INHERITED:  # close what the child inherited: this must not close it in the parent
                if isinstance(thing, psycopg.Connection):
                    thing.close()
            _INHERITED.clear()
            gc.collect()
        finally:
            sys.stdout.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert parents <= {p for p, _ in pg.backends()}  # every connection of the parent survived the child
    assert all(backend_pid() in parents for _ in range(4))
    assert app.get("child-1").state == State.QUEUED
    assert noop.enqueue(3, key="parent-2").created


def test_a_terminated_connection_is_one_store_error_then_the_pool_recovers(app: App, pg: Pg) -> None:
    noop, _ = declare(app)
    noop.enqueue(1, key="before")
    assert pg.terminate_all() >= 1
    failures = 0
    for _ in range(3):  # the first use of the dead connection fails; the pool replaces it
        try:
            noop.enqueue(2, key="after")
            break
        except StoreError as exc:
            assert "connection" in str(exc) or "terminat" in str(exc)
            failures += 1
    assert failures <= 1
    assert app.store.job_count(JobFilter()) == 2
