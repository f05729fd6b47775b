"""Enqueue in the caller's transaction (the transactional outbox): the job exists iff it commits."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from firesafe import App, IdempotencyConflict, InvalidInput, State
from firesafe.store.base import JobFilter
from tests.conftest import PG_URL, drop_schema
from tests.postgres.conftest import Pg

ORDERS = f"fs_user_{uuid.uuid4().hex[:8]}.orders"


@pytest.fixture
def app(pg: Pg) -> Iterator[App]:
    yield from app_with_orders(pg)


def app_with_orders(pg: Pg) -> Iterator[App]:
    """An app on the test's schema, and the user's own table ORDERS in the user's own schema."""
    a = App(pg.url)
    a.store.migrate()
    with psycopg.connect(PG_URL, autocommit=True) as c:  # the user's own table, in the user's own schema
        c.execute(f"CREATE SCHEMA {ORDERS.split('.')[0]}")
        c.execute(f"CREATE TABLE {ORDERS} (id text PRIMARY KEY)")
    yield a
    a.close()
    drop_schema(ORDERS.split(".")[0])


def declare(app: App):
    @app.job
    def ship(ctx, order_id: str) -> str:
        return order_id

    return ship


def test_a_job_enqueued_in_a_committed_transaction_exists_and_runs(app: App, pg: Pg) -> None:
    ship = declare(app)
    with psycopg.connect(PG_URL) as conn:  # autocommit off: psycopg opens the transaction
        conn.execute(f"INSERT INTO {ORDERS} VALUES (%s)", ("o-1",))
        job = ship.enqueue("o-1", key="ship:o-1", conn=conn)
        assert job.created and job.state == State.QUEUED
        assert app.store.job_get("ship:o-1") is None  # not visible to anyone before the commit
        conn.commit()
    assert app.get("ship:o-1").state == State.QUEUED
    assert app.work(burst=True).succeeded == 1
    assert app.get("ship:o-1").result == "o-1"


def test_a_rolled_back_enqueue_leaves_no_job_and_does_not_reserve_the_key(app: App, pg: Pg) -> None:
    ship = declare(app)
    with psycopg.connect(PG_URL) as conn, pytest.raises(RuntimeError), conn.transaction():
        conn.execute(f"INSERT INTO {ORDERS} VALUES (%s)", ("o-1",))
        ship.enqueue("o-1", key="ship:o-1", conn=conn)
        raise RuntimeError("the order failed validation")
    assert app.store.job_get("ship:o-1") is None
    assert pg.scalar(f"SELECT count(*) FROM {ORDERS}") == 0
    again = ship.enqueue("another order entirely", key="ship:o-1")  # other arguments: no conflict
    assert again.created
    assert app.work(burst=True).succeeded == 1


def test_enqueue_many_in_a_transaction_is_all_or_nothing_with_it(app: App) -> None:
    ship = declare(app)
    items = [{"args": [f"o-{i}"], "key": f"ship:o-{i}"} for i in range(2500)]  # several insert chunks
    with psycopg.connect(PG_URL) as conn:
        jobs = ship.enqueue_many(items, conn=conn)
        assert len(jobs) == 2500 and all(j.created for j in jobs)
        conn.rollback()
    assert app.store.job_count(JobFilter()) == 0
    with psycopg.connect(PG_URL) as conn:
        ship.enqueue_many(items, conn=conn)
        conn.commit()
    assert app.store.job_count(JobFilter()) == 2500


def test_a_conflict_undoes_only_the_enqueue_and_the_callers_transaction_goes_on(app: App, pg: Pg) -> None:
    ship = declare(app)
    ship.enqueue("o-1", key="ship:o-1")
    with psycopg.connect(PG_URL) as conn:
        conn.execute(f"INSERT INTO {ORDERS} VALUES (%s)", ("o-2",))
        with pytest.raises(IdempotencyConflict, match="ship:o-1"):
            ship.enqueue_many([{"args": ["o-2"], "key": "ship:o-2"}, {"args": ["other"], "key": "ship:o-1"}],
                              conn=conn)
        conn.execute(f"INSERT INTO {ORDERS} VALUES (%s)", ("o-3",))  # still usable
        same = ship.enqueue("o-1", key="ship:o-1", conn=conn)
        assert not same.created
        conn.commit()
    assert pg.scalar(f"SELECT count(*) FROM {ORDERS}") == 2
    assert app.store.job_get("ship:o-2") is None


@pytest.mark.parametrize("case", ["autocommit", "not a connection", "failed transaction", "closed"])
def test_a_connection_that_cannot_carry_the_enqueue_is_a_clear_error(app: App, case: str) -> None:
    ship = declare(app)
    conn = psycopg.connect(PG_URL, autocommit=(case == "autocommit"))
    try:
        target: object = conn
        if case == "not a connection":
            target = conn.cursor()
        elif case == "failed transaction":
            with pytest.raises(psycopg.errors.DivisionByZero):
                conn.execute("SELECT 1 / 0")
        elif case == "closed":
            conn.close()
        with pytest.raises(InvalidInput, match=r"conn=|connection"):
            ship.enqueue("o-1", key="ship:o-1", conn=target)
    finally:
        conn.close()
    assert app.store.job_get("ship:o-1") is None


def test_a_reserved_key_answers_in_the_callers_transaction(pg: Pg) -> None:
    """A key whose job's history was pruned is answered from its record inside the caller's
    transaction too: the same call returns the stored outcome, other arguments conflict and undo only
    the enqueue."""
    from firesafe import FakeClock, Retention
    from firesafe.app import RESERVE_SETTLE

    clock = FakeClock()
    app = App(pg.url, clock=clock, retention=Retention(succeeded=60, keys=86400))
    try:
        ship = declare(app)
        ship.enqueue("o-1", key="ship:o-1")
        app.work(burst=True)
        clock.advance(61)
        app.prune()
        clock.advance(RESERVE_SETTLE + 1)
        assert app.prune()["succeeded"] == 1
        with psycopg.connect(PG_URL) as conn:
            conn.execute("CREATE TEMPORARY TABLE mine (n int)")
            again = ship.enqueue("o-1", key="ship:o-1", conn=conn)
            assert not again.created and again.pruned and again.result == "o-1"
            with pytest.raises(IdempotencyConflict):
                ship.enqueue("o-2", key="ship:o-1", conn=conn)
            conn.execute("INSERT INTO mine VALUES (1)")  # the caller's transaction goes on
            conn.commit()
        assert app.store.job_count(JobFilter()) == 0
    finally:
        app.close()
