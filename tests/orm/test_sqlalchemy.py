"""Enqueue in a SQLAlchemy session's transaction: the job exists iff the session commits."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Column, Engine, MetaData, String, Table, create_engine, insert, select
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from firesafe import App, InvalidInput, State
from firesafe.integrations.sqlalchemy import conn_of
from tests.conftest import PG_URL, drop_schema
from tests.orm.conftest import visible_jobs

SA_URL = PG_URL.replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture
def orders(store_schema: str) -> Iterator[tuple[Engine, Table]]:
    """The application's engine and its own table, in a schema apart from firesafe's."""
    engine = create_engine(SA_URL)
    schema = f"fs_sa_{uuid.uuid4().hex[:8]}"
    table = Table("orders", MetaData(schema=schema), Column("id", String, primary_key=True))
    with engine.begin() as c:
        c.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        table.create(c)
    yield engine, table
    engine.dispose()
    drop_schema(schema)


def declare(app: App):
    @app.job
    def ship(ctx, order_id: str) -> str:
        return f"shipped {order_id}"

    return ship


def test_a_job_enqueued_in_a_session_exists_once_it_commits_and_not_before(
        app: App, orders: tuple[Engine, Table], store_schema: str) -> None:
    engine, table = orders
    ship = declare(app)
    with Session(engine) as session:
        session.execute(insert(table).values(id="o-1"))
        job = ship.enqueue("o-1", key="ship:o-1", conn=conn_of(session))
        assert job.created and job.state == State.QUEUED
        # A worker's connection sees nothing while the session's transaction is open.
        assert visible_jobs(store_schema) == 0
        assert app.work(burst=True).succeeded == 0
        session.commit()
    assert visible_jobs(store_schema) == 1
    assert app.work(burst=True).succeeded == 1
    assert app.get("ship:o-1").result == "shipped o-1"


def test_a_rolled_back_session_leaves_neither_the_row_nor_the_job(
        app: App, orders: tuple[Engine, Table], store_schema: str) -> None:
    engine, table = orders
    ship = declare(app)
    with pytest.raises(RuntimeError), Session(engine) as session, session.begin():
        session.execute(insert(table).values(id="o-1"))
        ship.enqueue_many([{"args": ["o-1"], "key": "ship:o-1"}, {"args": ["o-2"], "key": "ship:o-2"}],
                          conn=conn_of(session))
        raise RuntimeError("the order failed validation")
    assert visible_jobs(store_schema) == 0
    with engine.connect() as c:
        assert c.execute(select(table)).all() == []
    assert ship.enqueue("o-1", key="ship:o-1").created  # the rolled-back enqueue reserved nothing


def test_a_job_enqueued_in_a_savepoint_is_rolled_back_with_it(
        app: App, orders: tuple[Engine, Table], store_schema: str) -> None:
    engine, table = orders
    ship = declare(app)
    with Session(engine) as session:
        session.execute(insert(table).values(id="o-1"))
        ship.enqueue("o-1", key="ship:o-1", conn=conn_of(session))
        nested = session.begin_nested()
        ship.enqueue("o-2", key="ship:o-2", conn=conn_of(session))
        nested.rollback()  # undoes o-2's job only
        with session.begin_nested():  # released: its job stays, to commit with the rest
            ship.enqueue("o-3", key="ship:o-3", conn=conn_of(session))
        session.commit()
    assert sorted(j.key for j in app.jobs_list()) == ["ship:o-1", "ship:o-3"]
    assert visible_jobs(store_schema) == 2


def test_a_core_connection_in_a_transaction_works_too(
        app: App, orders: tuple[Engine, Table], store_schema: str) -> None:
    engine, table = orders
    ship = declare(app)
    with engine.connect() as c:
        with c.begin():
            c.execute(insert(table).values(id="o-1"))
            ship.enqueue("o-1", key="ship:o-1", conn=conn_of(c))
            assert visible_jobs(store_schema) == 0
        assert visible_jobs(store_schema) == 1
        with pytest.raises(RuntimeError), c.begin():
            ship.enqueue("o-2", key="ship:o-2", conn=conn_of(c))
            raise RuntimeError("no")
    assert visible_jobs(store_schema) == 1


def test_what_cannot_be_joined_is_refused_in_one_line(orders: tuple[Engine, Table]) -> None:
    engine, _ = orders
    sqlite = create_engine("sqlite://")
    with Session(sqlite) as session, pytest.raises(InvalidInput) as wrong_driver:
        conn_of(session)
    assert str(wrong_driver.value) == ("firesafe joins transactions of PostgreSQL through psycopg 3 only, and this "
                                       "engine is sqlite+pysqlite: use a postgresql+psycopg:// URL")
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c, pytest.raises(InvalidInput) as auto:
        conn_of(c)
    assert "AUTOCOMMIT" in str(auto.value)
    with pytest.raises(InvalidInput, match="not str"):
        conn_of("postgresql://")  # type: ignore[arg-type]


def test_an_async_session_is_pointed_to_aconn_of() -> None:
    async def attempt() -> None:
        engine = create_async_engine(SA_URL)
        try:
            async with AsyncSession(engine) as session:
                conn_of(session)  # type: ignore[arg-type]
        finally:
            await engine.dispose()

    with pytest.raises(InvalidInput, match=r"not AsyncSession: .*conn=await aconn_of\(session\)"):
        asyncio.run(attempt())
