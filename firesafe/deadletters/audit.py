"""Who did what and why: the actor and reason of every action that changes jobs or settings.

Actions on jobs (replay, discard, cancel, rerun) are recorded in each job's events, with the actor
and, in the event's detail, the reason. Actions that no job's events can hold (a purge deletes its
jobs and their events; pausing a schedule touches no job) are recorded in the audit log,
``firesafe_audit``, through the store methods of :class:`AuditSQLite` / :class:`AuditPostgres`.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from firesafe.clock import to_datetime
from firesafe.errors import InvalidInput
from firesafe.sanitize import for_store, safe_str
from firesafe.store import queries
from firesafe.store.driver import PostgresPart, SQLitePart

#: The longest actor and reason kept (longer ones are cut): a name and a sentence or two, not a file.
MAX_ACTOR = 200
MAX_REASON = 1000


def default_actor() -> str:
    """Who acts when nobody says: ``$FIRESAFE_ACTOR``, else ``user@host`` of this process."""
    named = os.environ.get("FIRESAFE_ACTOR", "").strip()
    if named:
        return named
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _text(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string, not {type(value).__name__}")
    text = for_store(safe_str(value).strip())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def actor_of(actor: str | None) -> str:
    """The actor to record: ``actor`` as a store holds it (control characters escaped, cut at
    :data:`MAX_ACTOR`), or :func:`default_actor` when it is None or blank.

    >>> actor_of("alice\\x1b[31m"), actor_of("  bob  ")
    ('alice\\\\x1b[31m', 'bob')
    """
    if actor is None or (isinstance(actor, str) and not actor.strip()):
        actor = default_actor()
    return _text(actor, "actor", MAX_ACTOR)


def reason_of(reason: str | None) -> str | None:
    """The reason to record: as a store holds it, cut at :data:`MAX_REASON`; None when none or blank.

    >>> reason_of("provider fixed\\x00"), reason_of("  ")
    ('provider fixed\\\\x00', None)
    """
    if reason is None or (isinstance(reason, str) and not reason.strip()):
        return None
    return _text(reason, "reason", MAX_REASON)


@dataclass(frozen=True)
class AuditEntry:
    """One recorded action: what (``action``, on ``subject``), who, when and why."""

    id: int
    at: datetime
    action: str
    subject: str | None
    actor: str
    reason: str | None
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "at": self.at.isoformat(), "action": self.action, "subject": self.subject,
                "actor": self.actor, "reason": self.reason, "detail": self.detail}


def entry_from_row(r: Any) -> AuditEntry:
    try:
        detail = json.loads(r["detail"])
    except (TypeError, ValueError):
        detail = {}
    return AuditEntry(int(r["id"]), to_datetime(float(r["at"])), r["action"], r["subject"], r["actor"], r["reason"],
                      detail if isinstance(detail, dict) else {})


def _params(action: str, subject: str | None, actor: str, reason: str | None, detail: dict[str, Any] | None,
            now: float | None) -> dict[str, Any]:
    return {"now": now, "action": action, "subject": subject, "actor": actor_of(actor), "reason": reason_of(reason),
            "detail": json.dumps(detail or {}, default=safe_str)}


class AuditSQLite(SQLitePart):
    """The audit log's store methods on SQLite (queries in store/sql/sqlite/audit.sql); a mixin of the
    store class (its driver: ``_tx``, ``_read`` and ``now``)."""

    def _audit(self, c: Any, action: str, subject: str | None, actor: str, reason: str | None,
               detail: dict[str, Any] | None, now: float) -> int:
        """Inside the caller's transaction: one entry (with the change it records, invariant 4)."""
        q = queries.load("sqlite")
        return int(c.execute(q["audit_insert"], _params(action, subject, actor, reason, detail, now)).fetchone()[0])

    def audit_record(self, action: str, subject: str | None, actor: str, reason: str | None = None,
                     detail: dict[str, Any] | None = None, *, conn: Any = None) -> int:
        """Record one action; returns its id. With ``conn`` (the connection of the caller's open
        ``_tx()``), in the caller's transaction."""
        if conn is not None:
            if not isinstance(conn, sqlite3.Connection) or not conn.in_transaction:
                raise InvalidInput("audit_record(conn=...) takes the connection of an open store transaction")
            return self._audit(conn, action, subject, actor, reason, detail, self.now())
        with self._tx() as c:
            return self._audit(c, action, subject, actor, reason, detail, self.now())

    def audit_list(self, limit: int = 50, action: str | None = None, subject: str | None = None) -> list[AuditEntry]:
        """The latest entries, newest first."""
        rows = self._read("audit_list", {"action": action, "subject": subject, "limit": limit})
        return [entry_from_row(r) for r in rows]


class AuditPostgres(PostgresPart):
    """The audit log's store methods on PostgreSQL (queries in store/sql/postgres/audit.sql); a mixin of
    the store class (its driver: ``_conn``, ``_read``, ``_now`` and ``q``)."""

    def _audit(self, c: Any, action: str, subject: str | None, actor: str, reason: str | None,
               detail: dict[str, Any] | None, now: float | None) -> int:
        """Inside the caller's transaction: one entry (with the change it records, invariant 4)."""
        row = c.execute(self.q["audit_insert"], _params(action, subject, actor, reason, detail, now)).fetchone()
        return int(row["id"])

    def audit_record(self, action: str, subject: str | None, actor: str, reason: str | None = None,
                     detail: dict[str, Any] | None = None, *, conn: Any = None) -> int:
        """Record one action; returns its id. With ``conn`` (a psycopg connection inside the caller's
        ``transaction()`` on this store's database), in the caller's transaction."""
        if conn is not None:
            import psycopg  # only the PostgreSQL store gets here: importing firesafe does not load psycopg

            if not isinstance(conn, psycopg.Connection) or conn.closed:
                raise InvalidInput("audit_record(conn=...) takes an open psycopg 3 Connection")
            try:
                return self._audit(conn, action, subject, actor, reason, detail, self._now())
            except psycopg.Error as exc:
                raise self._explain(exc) from exc
        with self._conn() as c, c.transaction():
            return self._audit(c, action, subject, actor, reason, detail, self._now())

    def audit_list(self, limit: int = 50, action: str | None = None, subject: str | None = None) -> list[AuditEntry]:
        """The latest entries, newest first."""
        rows = self._read("audit_list", {"action": action, "subject": subject, "limit": limit})
        return [entry_from_row(r) for r in rows]
