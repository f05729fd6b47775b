"""The alerts part of the sqlite store: a mixin of the store class (queries in store/sql/sqlite/alerts.sql).

What is the same on both dialects is written once in :class:`firesafe.alerts.store.AlertsPart`."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from typing import Any

from firesafe.alerts.store import AlertsPart, ClaimedDelivery, NewAlert, event_params
from firesafe.errors import InvalidInput
from firesafe.store import queries
from firesafe.store.driver import SQLitePart

Q = queries.load("sqlite")


class AlertsSQLite(AlertsPart, SQLitePart):
    """Store methods of the alerts part that differ on SQLite; mixed into the sqlite store class."""

    # -- the outbox: written in the caller's transaction ---------------------------------------
    def alert_record(self, kind: str, severity: str | None = None, job_name: str | None = None,
                     keys: Sequence[str] = (), payload: dict[str, Any] | None = None, *,
                     dedupe: str | None = None, conn: Any = None) -> bool:
        params = event_params(kind, severity, job_name, keys, payload, dedupe)
        if conn is not None:
            if not isinstance(conn, sqlite3.Connection) or not conn.in_transaction:
                raise InvalidInput("alert_record(conn=...) takes the connection of an open store "
                                   "transaction (inside `with store._tx() as conn:`)")
            return conn.execute(Q["alert_outbox_insert"], {**params, "now": self.now()}).fetchone() is not None
        with self._tx() as c:
            return c.execute(Q["alert_outbox_insert"], {**params, "now": self.now()}).fetchone() is not None

    # -- grouping ------------------------------------------------------------------------------
    def alert_create(self, new: NewAlert) -> int | None:
        now = self.now()
        try:
            return self._alert_create(new, now)
        except _Fenced:
            return None

    def _alert_create(self, new: NewAlert, now: float) -> int:
        with self._tx() as c:
            alert_id = c.execute(Q["alert_insert"], {
                "kind": new.kind, "severity": new.severity, "status": new.status, "job_name": new.job_name,
                "count": new.count, "first_at": new.first_at, "last_at": new.last_at, "title": new.title,
                "document": new.document, "now": now}).fetchone()[0]
            grouped = c.execute(Q["alert_group_events"], {"alert_id": alert_id,
                                                          "ids": json.dumps(list(new.event_ids))}).rowcount
            if grouped != len(new.event_ids):
                raise _Fenced
            c.executemany(Q["alert_delivery_insert"], [{"alert_id": alert_id, "sink": s, "now": now}
                                                       for s in new.sinks])
        return alert_id

    # -- delivery ------------------------------------------------------------------------------
    def alert_delivery_claim(self, sink: str, limit: int, lease: float, alert_id: int | None = None
                             ) -> list[ClaimedDelivery]:
        token = uuid.uuid4().hex
        params = {"token": token, "now": self.now(), "lease": lease, "sink": sink, "limit": limit,
                  "alert_id": alert_id}
        if not self._read("alert_delivery_due", params):  # a read first: no write lock taken when idle
            return []
        with self._tx() as c:
            rows = c.execute(Q["alert_delivery_claim"], params).fetchall()
            if not rows:
                return []
            docs = {r["id"]: r for r in c.execute(Q["alert_documents"],
                                                  {"ids": json.dumps([r["alert_id"] for r in rows])})}
        return [ClaimedDelivery(r["alert_id"], r["sink"], token, r["attempts"], docs[r["alert_id"]]["created_at"],
                                json.loads(docs[r["alert_id"]]["document"]))
                for r in sorted(rows, key=lambda r: r["alert_id"])]

    # -- pruning: SQLite's queries take the cut-off time (no clock of their own) ------------------
    def alert_prune(self, older_than: float) -> int:
        before = self.now() - older_than
        with self._tx() as c:
            n = c.execute(Q["alert_prune"], {"before": before}).rowcount
            c.execute(Q["alert_prune_events"], {"before": before})
        return n


class _Fenced(Exception):
    """Raised inside a transaction to roll it back: another dispatcher grouped an event first."""


__all__ = ["AlertsSQLite"]
