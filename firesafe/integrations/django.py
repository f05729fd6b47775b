"""Enqueue in Django's ``transaction.atomic()``: ``job.enqueue(..., conn=conn_of())``.

The job is written by Django's own database connection inside the atomic block's transaction, so it
exists if and only if the block commits: an exception that leaves the block rolls back the job
with your rows, and no worker sees the job before the commit. An inner ``atomic()`` is a savepoint:
a job enqueued in it is rolled back with it.

Why not ``transaction.on_commit(lambda: job.enqueue(...))``: that runs after the commit, in the
same process; if the process dies (or the enqueue fails) between the commit and the callback, the
order exists and its job never will. Written inside the transaction there is no such window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from firesafe.errors import InvalidInput

if TYPE_CHECKING:
    import psycopg

__all__ = ["conn_of"]


def conn_of(using: str = "default") -> psycopg.Connection[Any]:
    """The psycopg 3 connection of Django's database ``using``, for ``enqueue(conn=...)``, inside
    ``transaction.atomic(using=...)``.

    Outside an atomic block Django commits every statement on its own, so there is no transaction to
    join: that raises :class:`~firesafe.errors.InvalidInput`, as do another database than PostgreSQL
    and the psycopg2 driver. A block already marked for rollback (an error caught inside it) raises
    Django's ``TransactionManagementError``, as any query there would.
    """
    from django.db import connections  # type: ignore[import-untyped]  # Django ships no type hints

    wrapper = connections[using]
    if wrapper.vendor != "postgresql":
        raise InvalidInput(f"firesafe joins PostgreSQL transactions only; Django's database {using!r} is "
                           f"{wrapper.vendor}")
    if not wrapper.in_atomic_block:
        raise InvalidInput("enqueue(conn=conn_of()) joins the transaction of transaction.atomic(); call it "
                           "inside `with transaction.atomic():` (outside one, Django commits each statement)")
    wrapper.validate_no_broken_transaction()
    wrapper.ensure_connection()
    import psycopg

    raw = wrapper.connection
    if not isinstance(raw, psycopg.Connection):
        raise InvalidInput(f"Django's database {using!r} uses {type(raw).__module__} underneath; firesafe needs "
                           "psycopg 3 (pip install 'psycopg[binary]' and remove psycopg2)")
    return raw
