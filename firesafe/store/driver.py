"""The small driver each part's storage is written against: what a part may use of the store it is
part of (connections and transactions, named queries, the clock), on each dialect.

A part's mixin (``AlertsSQLite``, ``SchedulesPostgres``, ...) derives from :data:`SQLitePart` or
:data:`PostgresPart` (code that is the same on both dialects: :data:`StorePart`). To the type
checker these are the driver Protocols below, so each mixin is checked against them and each
concrete store is checked to provide them (it cannot be built otherwise); at run time they are
plain ``object``, so they add nothing to a store's classes. A part
that needs another part calls that part's public method (declared in :mod:`firesafe.store.contract`)
with its open transaction's connection, e.g. ``alert_record(..., conn=c)``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import psycopg

    from firesafe.clock import Clock
    from firesafe.errors import StoreError


class StoreDriver(Protocol):
    """What every part may use, on either dialect."""

    dialect: str
    q: Mapping[str, str]  # the named queries of this store's dialect

    def now(self) -> float:
        """The store's clock, in seconds since the epoch."""
        ...

    def _now(self) -> float | None:
        """The ``now`` parameter of a query: the store's clock, or None for the database's own
        (PostgreSQL without an injected clock: the query reads it, so no round trip is spent on it)."""
        ...

    def _read(self, name: str, params: dict[str, Any] | None = None) -> Any:
        """Run a named read query outside any transaction; its rows, each readable by column name."""
        ...

    def _tx(self) -> AbstractContextManager[Any]:
        """A connection inside one write transaction: committed when the block ends, rolled back if it
        raises. ``c.execute(self.q[name], params)`` runs a named query on it and returns a cursor
        (``fetchone``, ``fetchall``, ``rowcount``); its rows are readable by column name."""
        ...

    def _execute(self, name: str, params: dict[str, Any]) -> int:
        """Run one named write statement, committed on its own; its row count. (PostgreSQL: one
        autocommit statement, one round trip; SQLite: a ``_tx`` of one statement.)"""
        ...

    def _exec_many(self, c: Any, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run a named write once per row on ``c`` (a ``_tx`` connection), batched as the dialect can."""
        ...

    def _recount(self, c: Any, query: str, moved: Sequence[int], now: float | None) -> None:
        """After a move of jobs in transaction ``c`` (``job_replay``: back to queued; ``job_cancel_waiting``:
        ended), keep their parents' counts of children (firesafe/store/children.py)."""
        ...

    def _list(self, values: Iterable[Any]) -> Any:
        """A list as one query parameter: JSON text on SQLite (its queries read it with ``json_each``),
        an array on PostgreSQL."""
        ...


class SQLiteDriver(StoreDriver, Protocol):
    """The SQLite store's driver: one writer at a time, transactions on a thread's connection."""

    path: str
    clock: Clock

    def _now(self) -> float:
        ...

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``) on this thread's connection: committed when the
        block ends, rolled back if it raises; SQLite's errors come out as StoreError."""
        ...

    def _read(self, name: str, params: dict[str, Any] | None = None) -> list[sqlite3.Row]:
        ...

    def _group_write(self, name: str, params: dict[str, Any]) -> int:
        """Run one named write, committed together with those other threads issue meanwhile (group
        commit: one fsync for many); its row count, once durably committed."""
        ...


class PostgresDriver(StoreDriver, Protocol):
    """The PostgreSQL store's driver: pooled autocommit connections, queries rendered for its schema."""

    channel: str
    clock: Clock | None

    def _conn(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A pooled autocommit connection (``with c.transaction():`` for a transaction); database
        errors come out as StoreError."""
        ...

    def _tx(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A pooled connection inside ``transaction()``."""
        ...

    def _read(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        ...

    def _write(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Run one named write statement on its own (atomic); the rows it returns."""
        ...

    def _explain(self, exc: psycopg.Error) -> StoreError:
        """The StoreError to raise for a database error met on a connection the store does not own."""
        ...


if TYPE_CHECKING:
    StorePart = StoreDriver
    SQLitePart = SQLiteDriver
    PostgresPart = PostgresDriver
else:  # at run time a part's mixin derives from nothing more than object
    StorePart = SQLitePart = PostgresPart = object

__all__ = ["PostgresDriver", "PostgresPart", "SQLiteDriver", "SQLitePart", "StoreDriver", "StorePart"]
