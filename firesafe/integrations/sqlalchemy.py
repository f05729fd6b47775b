"""Enqueue in a SQLAlchemy session's transaction: ``job.enqueue(..., conn=conn_of(session))``.

The job is written by the session's own database connection, inside its open transaction: it
exists if and only if ``session.commit()`` commits, a rollback leaves no job, and no worker sees it
before the commit. Inside ``session.begin_nested()`` it is written in that savepoint and rolled back
with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from firesafe.errors import InvalidInput

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

__all__ = ["conn_of"]


def conn_of(session: Session | Connection) -> psycopg.Connection[Any]:
    """The psycopg 3 connection under a SQLAlchemy ``Session`` or ``Connection``, for ``conn=``.

    A session with no transaction yet begins one (as any query of it would), so the job joins the
    transaction that the session's next ``commit()`` or ``rollback()`` ends. An explicit call rather
    than ``conn=session``: the store keeps taking one type, a psycopg connection, and knows no ORM;
    the call in your code says which transaction the job joins.

    Raises :class:`~firesafe.errors.InvalidInput` for anything firesafe cannot join: an engine on
    another driver than psycopg 3 (``postgresql+psycopg://``), an ``AUTOCOMMIT`` connection (no
    transaction to join), or an async session (its connection is a psycopg ``AsyncConnection``,
    which the store's synchronous insert cannot use).
    """
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

    if isinstance(session, (AsyncSession, AsyncConnection)):
        raise InvalidInput("conn_of() takes a synchronous SQLAlchemy Session or Connection, not "
                           f"{type(session).__name__}: enqueue in an async session's transaction is not "
                           "supported (see docs/guides/sqlalchemy.md)")
    if isinstance(session, Session):
        connection = session.connection()  # the session's transaction, begun if it had none
    elif isinstance(session, Connection):
        connection = session
    else:
        raise InvalidInput(f"conn_of() takes a SQLAlchemy Session or Connection, not {type(session).__name__}")
    return _psycopg_of(connection)


def _psycopg_of(connection: Connection) -> psycopg.Connection[Any]:
    dialect = connection.dialect
    if dialect.name != "postgresql" or dialect.driver != "psycopg":
        raise InvalidInput(f"firesafe joins transactions of PostgreSQL through psycopg 3 only, and this engine is "
                           f"{dialect.name}+{dialect.driver}: use a postgresql+psycopg:// URL")
    import psycopg

    driver = connection.connection.driver_connection
    if not isinstance(driver, psycopg.Connection):  # e.g. the async variant under a sync facade
        raise InvalidInput("the SQLAlchemy connection given to conn_of() is not a psycopg 3 Connection "
                           f"underneath but {type(driver).__name__}")
    if driver.autocommit:
        raise InvalidInput("this SQLAlchemy connection runs with isolation_level='AUTOCOMMIT': there is no "
                           "transaction for the job to join; use the engine's default isolation level")
    return driver
