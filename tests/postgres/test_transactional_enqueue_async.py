"""Enqueue in the caller's async transaction (a psycopg ``AsyncConnection``): what
``test_transactional_enqueue.py`` proves of a sync connection, with ``enqueue_async(conn=...)``.

Given an AsyncConnection in an open transaction, when a job is enqueued with it, then the job exists iff
that transaction commits, the answers and errors are those of the sync call, a failed enqueue undoes
only itself, and a connection that cannot carry it is refused in the sync call's words.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict
from typing import Any

import psycopg
import pytest

from firesafe import App, IdempotencyConflict, InvalidInput, Job, State, StoreError
from firesafe.store.base import JobFilter
from firesafe.stores.postgres import PostgresStore
from tests.conftest import PG_URL
from tests.postgres.conftest import Pg
from tests.postgres.test_transactional_enqueue import ORDERS, app_with_orders


@pytest.fixture
def app(pg: Pg) -> Iterator[App]:
    yield from app_with_orders(pg)


def declare(app: App) -> Any:
    @app.job
    def ship(ctx: Any, order_id: str) -> str:
        return order_id

    return ship


def in_transaction(test: Callable[[psycopg.AsyncConnection[Any]], Awaitable[Any]], **options: Any) -> Any:
    """Run ``test`` with an AsyncConnection of its own (autocommit off: psycopg opens the transaction)."""
    async def main() -> Any:
        async with await psycopg.AsyncConnection.connect(PG_URL, **options) as conn:
            return await test(conn)

    return asyncio.run(main())


def test_a_job_enqueued_in_a_committed_async_transaction_exists_and_runs(app: App, pg: Pg) -> None:
    ship = declare(app)

    async def test(conn: psycopg.AsyncConnection[Any]) -> Job:
        await conn.execute(f"INSERT INTO {ORDERS} VALUES (%s)", ("o-1",))
        job = await ship.enqueue_async("o-1", key="ship:o-1", conn=conn)
        assert app.store.job_get("ship:o-1") is None  # not visible to anyone before the commit
        await conn.commit()
        return job

    job = in_transaction(test)
    assert job.created and job.state == State.QUEUED
    assert app.get("ship:o-1").state == State.QUEUED
    assert app.work(burst=True).succeeded == 1
    assert app.get("ship:o-1").result == "o-1"


def test_a_batch_answers_as_the_sync_call_and_is_all_or_nothing_with_the_transaction(app: App) -> None:
    """Given a batch of several insert chunks, then the async call answers what the sync one answers
    (the same plan runs both), and a rollback keeps none of it."""
    ship = declare(app)
    items = [{"args": [f"o-{i}"], "key": f"ship:o-{i}"} for i in range(2500)]

    async def rolled_back(conn: psycopg.AsyncConnection[Any]) -> list[Job]:
        jobs = await ship.enqueue_many_async(items, conn=conn)
        await conn.rollback()
        return jobs

    jobs = in_transaction(rolled_back)
    assert len(jobs) == 2500 and all(j.created for j in jobs)
    assert app.store.job_count(JobFilter()) == 0

    with psycopg.connect(PG_URL) as sync_conn:
        sync_jobs = ship.enqueue_many(items, conn=sync_conn)
        sync_conn.rollback()

    def shape(job: Job) -> dict[str, Any]:
        return {k: v for k, v in asdict(job).items() if k not in ("id", "created_at", "updated_at", "run_at")}

    assert [shape(j) for j in jobs] == [shape(j) for j in sync_jobs]
    assert [j.key for j in jobs] == [i["key"] for i in items]  # in the batch's order
    assert [j.id for j in jobs] == sorted(j.id for j in jobs)  # ids in enqueue order (FIFO)

    async def committed(conn: psycopg.AsyncConnection[Any]) -> None:
        await ship.enqueue_many_async(items, conn=conn)
        await conn.commit()

    in_transaction(committed)
    assert app.store.job_count(JobFilter()) == 2500


def test_a_conflict_undoes_only_the_enqueue_and_the_callers_transaction_goes_on(app: App, pg: Pg) -> None:
    ship = declare(app)
    ship.enqueue("o-1", key="ship:o-1")

    async def test(conn: psycopg.AsyncConnection[Any]) -> Job:
        await conn.execute(f"INSERT INTO {ORDERS} VALUES (%s)", ("o-2",))
        with pytest.raises(IdempotencyConflict, match="ship:o-1"):
            await ship.enqueue_many_async([{"args": ["o-2"], "key": "ship:o-2"},
                                           {"args": ["other"], "key": "ship:o-1"}], conn=conn)
        await conn.execute(f"INSERT INTO {ORDERS} VALUES (%s)", ("o-3",))  # still usable
        same = await ship.enqueue_async("o-1", key="ship:o-1", conn=conn)
        await conn.commit()
        return same

    same = in_transaction(test)
    assert not same.created and same.id == app.get("ship:o-1").id
    assert pg.scalar(f"SELECT count(*) FROM {ORDERS}") == 2
    assert app.store.job_get("ship:o-2") is None


def test_listening_workers_are_woken_by_the_commit_not_before(app: App) -> None:
    ship = declare(app)
    store = app.store
    assert isinstance(store, PostgresStore)
    woke = threading.Event()
    listener = store.listen(["default"], woke.set)

    async def test(conn: psycopg.AsyncConnection[Any]) -> None:
        await ship.enqueue_async("o-1", key="outbox", conn=conn)
        await asyncio.sleep(0.3)  # a wake-up would have come by now; none may come before the commit
        assert not woke.is_set()
        await conn.commit()

    try:
        assert listener.ready(10) and woke.wait(5)
        woke.clear()
        in_transaction(test)
        assert woke.wait(5)
    finally:
        listener.close()


CASES = ["autocommit", "failed transaction", "closed", "the other kind"]


def refusal(app: App, ship: Any, case: str, *, use_async: bool) -> str:
    """What enqueue (or enqueue_async) says of a connection that cannot carry the enqueue."""
    def sync_call() -> None:
        conn = psycopg.connect(PG_URL, autocommit=(case == "autocommit"))
        with conn:
            if case == "failed transaction":
                with pytest.raises(psycopg.errors.DivisionByZero):
                    conn.execute("SELECT 1 / 0")
            elif case == "closed":
                conn.close()
            target: Any = object() if case == "the other kind" else conn
            ship.enqueue("o-1", key="ship:o-1", conn=target)

    async def async_call() -> None:
        conn = await psycopg.AsyncConnection.connect(PG_URL, autocommit=(case == "autocommit"))
        async with conn:
            if case == "failed transaction":
                with pytest.raises(psycopg.errors.DivisionByZero):
                    await conn.execute("SELECT 1 / 0")
            elif case == "closed":
                await conn.close()
            target: Any = object() if case == "the other kind" else conn
            await ship.enqueue_async("o-1", key="ship:o-1", conn=target)

    with pytest.raises(InvalidInput) as refused:
        asyncio.run(async_call()) if use_async else sync_call()
    assert app.store.job_get("ship:o-1") is None
    return str(refused.value)


@pytest.mark.parametrize("case", CASES)
def test_a_connection_that_cannot_carry_the_enqueue_is_refused_in_the_sync_calls_words(app: App, case: str) -> None:
    ship = declare(app)
    said = refusal(app, ship, case, use_async=True)
    sync = refusal(app, ship, case, use_async=False)
    if case == "the other kind":  # each names the connection it takes
        assert said == "enqueue_async(conn=...) takes a psycopg 3 AsyncConnection, not object"
        assert sync == "enqueue(conn=...) takes a psycopg 3 Connection (sync), not object"
        return
    assert said == sync.replace("enqueue(conn=...)", "enqueue_async(conn=...)").replace("`with ", "`async with ")
    if case == "autocommit":
        assert said.endswith("none open (autocommit): wrap the work in `async with conn.transaction():`")


def test_a_sync_connection_is_pointed_to_enqueue(app: App) -> None:
    ship = declare(app)
    with psycopg.connect(PG_URL) as conn, pytest.raises(InvalidInput, match=r"not Connection \(use `job.enqueue"):
        asyncio.run(ship.enqueue_async("o-1", key="ship:o-1", conn=conn))


def test_a_connection_to_a_database_without_the_stores_tables_is_explained(pg: Pg) -> None:
    """Given a store whose schema this connection cannot see, then both calls say so, and where the
    store is, in the same words."""
    app = App(pg.url, auto_migrate=False)  # never migrated: the schema does not exist
    try:
        ship = declare(app)
        with psycopg.connect(PG_URL) as conn, pytest.raises(StoreError) as sync:
            ship.enqueue("o-1", key="ship:o-1", conn=conn)

        async def test(conn: psycopg.AsyncConnection[Any]) -> None:
            with pytest.raises(StoreError) as said:
                await ship.enqueue_async("o-1", key="ship:o-1", conn=conn)
            assert str(said.value) == str(sync.value).replace("enqueue(conn=...)", "enqueue_async(conn=...)")
            await conn.execute("SELECT 1")  # the savepoint was rolled back: the transaction goes on

        in_transaction(test)
        assert f"sees no firesafe tables in schema {pg.schema!r}" in str(sync.value)
    finally:
        app.close()
