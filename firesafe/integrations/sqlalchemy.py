"""Enqueue in a SQLAlchemy session's transaction: ``job.enqueue(..., conn=conn_of(session))``, or
in an async session's: ``await job.enqueue_async(..., conn=await aconn_of(session))``.

The job is written by the session's own database connection, inside its open transaction: it
exists if and only if ``session.commit()`` commits, a rollback leaves no job, and no worker sees it
before the commit. Inside ``session.begin_nested()`` it is written in that savepoint and rolled back
with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from firesafe.errors import InvalidInput

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy.engine import Connection, Dialect
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

__all__ = ["aconn_of", "conn_of"]

#: The psycopg connection that the caller gets: the sync one from conn_of, the async one from aconn_of.
D = TypeVar("D", "psycopg.Connection[Any]", "psycopg.AsyncConnection[Any]")


def conn_of(session: Session | Connection) -> psycopg.Connection[Any]:
    """The psycopg 3 connection under a SQLAlchemy ``Session`` or ``Connection``, for ``conn=``.

    A session with no transaction yet begins one (as any query of it would), so the job joins the
    transaction that the session's next ``commit()`` or ``rollback()`` ends. An explicit call rather
    than ``conn=session``: the store keeps taking one type, a psycopg connection, and knows no ORM;
    the call in your code says which transaction the job joins.

    Raises :class:`~firesafe.errors.InvalidInput` for anything firesafe cannot join: an engine on
    another driver than psycopg 3 (``postgresql+psycopg://``), an ``AUTOCOMMIT`` connection (no
    transaction to join), or an async session (take its connection with :func:`aconn_of`).
    """
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

    if isinstance(session, (AsyncSession, AsyncConnection)):
        raise InvalidInput(f"conn_of() takes a synchronous SQLAlchemy Session or Connection, not "
                           f"{type(session).__name__}: for an async session's transaction use "
                           "`await job.enqueue_async(..., conn=await aconn_of(session))`")
    if isinstance(session, Session):
        connection = session.connection()  # the session's transaction, begun if it had none
    elif isinstance(session, Connection):
        connection = session
    else:
        raise InvalidInput(f"conn_of() takes a SQLAlchemy Session or Connection, not {type(session).__name__}")
    _check_dialect(connection.dialect)
    import psycopg

    return _checked(connection.connection.driver_connection, psycopg.Connection, "conn_of()")


async def aconn_of(session: AsyncSession | AsyncConnection) -> psycopg.AsyncConnection[Any]:
    """The psycopg 3 ``AsyncConnection`` under a SQLAlchemy ``AsyncSession`` or ``AsyncConnection``,
    for ``enqueue_async(conn=...)``: :func:`conn_of` for asyncio.

    As with :func:`conn_of`, a session with no transaction yet begins one, the job joins the
    transaction that the session's next ``commit()`` or ``rollback()`` ends, and the same things
    are refused with :class:`~firesafe.errors.InvalidInput` (another driver than psycopg 3, an
    ``AUTOCOMMIT`` connection); a synchronous session is pointed to :func:`conn_of`.
    """
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

    if isinstance(session, (Session, Connection)):
        raise InvalidInput(f"aconn_of() takes a SQLAlchemy AsyncSession or AsyncConnection, not "
                           f"{type(session).__name__}: for a synchronous session's transaction use "
                           "`job.enqueue(..., conn=conn_of(session))`")
    if isinstance(session, AsyncSession):
        connection = await session.connection()  # the session's transaction, begun if it had none
    elif isinstance(session, AsyncConnection):
        connection = session
    else:
        raise InvalidInput(f"aconn_of() takes a SQLAlchemy AsyncSession or AsyncConnection, not "
                           f"{type(session).__name__}")
    _check_dialect(connection.dialect)
    import psycopg

    raw = await connection.get_raw_connection()
    return _checked(raw.driver_connection, psycopg.AsyncConnection, "aconn_of()")


def _check_dialect(dialect: Dialect) -> None:
    if dialect.name != "postgresql" or dialect.driver != "psycopg":
        raise InvalidInput(f"firesafe joins transactions of PostgreSQL through psycopg 3 only, and this engine is "
                           f"{dialect.name}+{dialect.driver}: use a postgresql+psycopg:// URL")


def _checked(driver: object, kind: type[D], fn: str) -> D:
    """``driver`` if it is a ``kind`` with a transaction to join (one check for both functions)."""
    if not isinstance(driver, kind):  # e.g. the async variant under a sync facade
        raise InvalidInput(f"the SQLAlchemy connection given to {fn} is not a psycopg 3 {kind.__name__} "
                           f"underneath but {type(driver).__name__}")
    if driver.autocommit:
        raise InvalidInput("this SQLAlchemy connection runs with isolation_level='AUTOCOMMIT': there is no "
                           "transaction for the job to join; use the engine's default isolation level")
    return driver
