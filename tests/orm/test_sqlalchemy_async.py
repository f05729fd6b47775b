"""Enqueue in an async SQLAlchemy session's transaction: the job exists iff the session commits.

Given an ``AsyncSession`` (or ``AsyncConnection``) on ``postgresql+psycopg://``, when a job is enqueued
with ``await job.enqueue_async(..., conn=await aconn_of(session))``, then it is written in the
session's transaction, on its event loop: what ``test_sqlalchemy.py`` proves of a sync session.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sqlalchemy import Column, MetaData, String, Table, create_engine, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from firesafe import App, IdempotencyConflict, InvalidInput, Job, State
from firesafe.integrations.sqlalchemy import aconn_of
from tests.conftest import drop_schema
from tests.orm.conftest import visible_jobs
from tests.orm.test_sqlalchemy import SA_URL


@pytest.fixture
def orders(store_schema: str) -> Iterator[Table]:
    """The application's own table, in a schema apart from firesafe's."""
    schema = f"fs_sa_{uuid.uuid4().hex[:8]}"
    table = Table("orders", MetaData(schema=schema), Column("id", String, primary_key=True))
    engine = create_engine(SA_URL)
    with engine.begin() as c:
        c.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        table.create(c)
    engine.dispose()
    yield table
    drop_schema(schema)


@asynccontextmanager
async def async_engine() -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(SA_URL)
    try:
        yield engine
    finally:
        await engine.dispose()


def run(test: Callable[[AsyncEngine], Awaitable[Any]]) -> Any:
    """Run ``test`` with an async engine of its own, on a loop of its own (as the stack tests do)."""
    async def main() -> Any:
        async with async_engine() as engine:
            return await test(engine)

    return asyncio.run(main())


def declare(app: App) -> Any:
    @app.job
    def ship(ctx: Any, order_id: str) -> str:
        return f"shipped {order_id}"

    return ship


def test_a_job_enqueued_in_an_async_session_exists_once_it_commits_and_not_before(
        app: App, orders: Table, store_schema: str) -> None:
    ship = declare(app)

    async def test(engine: AsyncEngine) -> Job:
        async with AsyncSession(engine) as session:
            await session.execute(insert(orders).values(id="o-1"))
            job = await ship.enqueue_async("o-1", key="ship:o-1", conn=await aconn_of(session))
            # A worker's connection sees nothing while the session's transaction is open.
            assert visible_jobs(store_schema) == 0
            assert app.work(burst=True).succeeded == 0
            await session.commit()
        return job

    job = run(test)
    assert job.created and job.state == State.QUEUED and job.key == "ship:o-1"
    assert visible_jobs(store_schema) == 1
    assert app.work(burst=True).succeeded == 1
    assert app.get("ship:o-1").result == "shipped o-1"


def test_a_rolled_back_async_session_leaves_neither_the_row_nor_the_jobs(
        app: App, orders: Table, store_schema: str) -> None:
    ship = declare(app)

    async def test(engine: AsyncEngine) -> list[Any]:
        with pytest.raises(RuntimeError):
            async with AsyncSession(engine) as session, session.begin():
                await session.execute(insert(orders).values(id="o-1"))
                jobs = await ship.enqueue_many_async([{"args": ["o-1"], "key": "ship:o-1"},
                                                      {"args": ["o-2"], "key": "ship:o-2"}],
                                                     conn=await aconn_of(session))
                assert [j.created for j in jobs] == [True, True]
                raise RuntimeError("the order failed validation")
        async with engine.connect() as c:
            return list((await c.execute(select(orders))).all())

    assert run(test) == []
    assert visible_jobs(store_schema) == 0
    assert ship.enqueue("o-1", key="ship:o-1").created  # the rolled-back enqueue reserved nothing


def test_a_job_enqueued_in_an_async_savepoint_is_rolled_back_with_it(
        app: App, orders: Table, store_schema: str) -> None:
    ship = declare(app)

    async def test(engine: AsyncEngine) -> None:
        async with AsyncSession(engine) as session:
            await session.execute(insert(orders).values(id="o-1"))
            await ship.enqueue_async("o-1", key="ship:o-1", conn=await aconn_of(session))
            nested = await session.begin_nested()
            await ship.enqueue_async("o-2", key="ship:o-2", conn=await aconn_of(session))
            await nested.rollback()  # undoes o-2's job only
            async with session.begin_nested():  # released: its job stays, to commit with the rest
                await ship.enqueue_async("o-3", key="ship:o-3", conn=await aconn_of(session))
            await session.commit()

    run(test)
    assert sorted(j.key for j in app.jobs_list()) == ["ship:o-1", "ship:o-3"]
    assert visible_jobs(store_schema) == 2


def test_an_async_core_connection_in_a_transaction_works_too(app: App, orders: Table, store_schema: str) -> None:
    ship = declare(app)

    async def test(engine: AsyncEngine) -> None:
        async with engine.connect() as c:
            async with c.begin():
                await c.execute(insert(orders).values(id="o-1"))
                await ship.options(key="ship:o-1", conn=await aconn_of(c)).enqueue_async("o-1")
                assert visible_jobs(store_schema) == 0
            assert visible_jobs(store_schema) == 1
            with pytest.raises(RuntimeError):
                async with c.begin():
                    await ship.enqueue_async("o-2", key="ship:o-2", conn=await aconn_of(c))
                    raise RuntimeError("no")

    run(test)
    assert visible_jobs(store_schema) == 1


def test_a_duplicate_is_the_stored_job_and_a_conflict_undoes_only_the_enqueue(
        app: App, orders: Table, store_schema: str) -> None:
    """Given a committed job, when the same key is enqueued again in a session, then the same arguments
    give the stored job (nothing new) and other arguments raise IdempotencyConflict, as in sync; the
    conflict undoes only the enqueue (its savepoint), and the session's transaction goes on."""
    ship = declare(app)
    stored = ship.enqueue("o-1", key="ship:o-1")

    async def test(engine: AsyncEngine) -> tuple[Job, Job]:
        async with AsyncSession(engine) as session:
            await session.execute(insert(orders).values(id="o-2"))
            conn = await aconn_of(session)
            same = await ship.enqueue_async(order_id="o-1", key="ship:o-1", conn=conn)  # by name: one call
            with pytest.raises(IdempotencyConflict, match="ship:o-1"):
                await ship.enqueue_many_async([{"args": ["o-2"], "key": "ship:o-2"},
                                               {"args": ["other"], "key": "ship:o-1"}], conn=conn)
            await session.execute(insert(orders).values(id="o-3"))  # still usable
            fresh = await ship.enqueue_async("o-2", key="ship:o-2", conn=conn)
            again = await ship.enqueue_async("o-2", key="ship:o-2", conn=conn)  # its own, not yet committed
            assert again.id == fresh.id and not again.created
            await session.commit()
            return same, fresh

    same, fresh = run(test)
    assert same.id == stored.id and not same.created and same.fingerprint == stored.fingerprint
    assert fresh.created
    assert visible_jobs(store_schema) == 2
    with pytest.raises(IdempotencyConflict):
        ship.enqueue("other", key="ship:o-1")  # the sync call agrees


def test_what_cannot_be_joined_is_refused_in_one_line(app: App) -> None:
    ship = declare(app)

    async def test(engine: AsyncEngine) -> None:
        async with engine.connect() as c:
            auto = await c.execution_options(isolation_level="AUTOCOMMIT")
            with pytest.raises(InvalidInput) as autocommit:
                await aconn_of(auto)
            assert str(autocommit.value) == (
                "this SQLAlchemy connection runs with isolation_level='AUTOCOMMIT': there is no transaction "
                "for the job to join; use the engine's default isolation level")  # conn_of's own words
        async with AsyncSession(engine) as session:
            conn = await aconn_of(session)
            with pytest.raises(InvalidInput, match=r"takes a psycopg 3 Connection \(sync\), not AsyncConnection "
                                                   r"\(use `await job.enqueue_async"):
                ship.enqueue("o-1", key="ship:o-1", conn=conn)
        with pytest.raises(InvalidInput, match=r"not Session: .*conn=conn_of\(session\)"):
            await aconn_of(Session(create_engine(SA_URL)))  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="not str"):
            await aconn_of("postgresql://")  # type: ignore[arg-type]

    run(test)
    assert app.jobs_list() == []


def test_an_async_engine_on_another_driver_is_refused_as_a_sync_one_is() -> None:
    """The same check as conn_of's (test_sqlalchemy.py), on an async driver: aiosqlite, when installed
    (asyncpg would do as well; neither is a dependency of firesafe's tests)."""
    pytest.importorskip("aiosqlite")

    async def test() -> None:
        engine = create_async_engine("sqlite+aiosqlite://")
        try:
            async with AsyncSession(engine) as session:
                with pytest.raises(InvalidInput) as wrong_driver:
                    await aconn_of(session)
        finally:
            await engine.dispose()
        assert str(wrong_driver.value) == ("firesafe joins transactions of PostgreSQL through psycopg 3 only, and "
                                           "this engine is sqlite+aiosqlite: use a postgresql+psycopg:// URL")

    asyncio.run(test())
