"""The alerts part of the sqlite store: a mixin of the store class (queries in store/sql/sqlite/alerts.sql)."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from typing import Any

from firesafe.alerts.store import (
    AlertRecord,
    ClaimedDelivery,
    Delivery,
    NewAlert,
    OutboxEvent,
    QueueBacklog,
    event_params,
)
from firesafe.errors import InvalidInput
from firesafe.store import queries
from firesafe.store.driver import SQLitePart

Q = queries.load("sqlite")


def _event(r: Any) -> OutboxEvent:
    return OutboxEvent(r["id"], r["kind"], r["severity"], r["job_name"], r["job_id"], json.loads(r["keys"]),
                       json.loads(r["payload"]), r["created_at"])


class AlertsSQLite(SQLitePart):
    """Store methods of the alerts part; mixed into the sqlite store class (its driver: ``_tx``,
    ``_read`` and ``now``)."""

    # -- the outbox: written in the caller's transaction ---------------------------------------
    def _outbox_dead(self, conn: sqlite3.Connection, job_ids: Sequence[int], now: float) -> None:
        """Inside the transaction that moved jobs to ``dead``: one dead_letter event per job."""
        if job_ids:
            conn.execute(Q["alert_outbox_dead"], {"ids": json.dumps(list(job_ids)), "now": now})

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
    def alert_pending(self, limit: int) -> list[OutboxEvent]:
        return [_event(r) for r in self._read("alert_pending", {"limit": limit})]

    def alert_waiting(self) -> int:
        return int(self._read("alert_waiting")[0]["n"])

    def alert_last_sent(self, since: float) -> dict[tuple[str, str | None, str, bool], float]:
        return {(r["kind"], r["job_name"], r["severity"], bool(r["muted"])): r["at"]
                for r in self._read("alert_last_sent", {"since": since})}

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

    def alert_delivery_finish(self, alert_id: int, sink: str, token: str, state: str, tried: int,
                              delay: float | None, error: str | None) -> bool:
        with self._tx() as c:
            return c.execute(Q["alert_delivery_finish"], {
                "alert_id": alert_id, "sink": sink, "token": token, "state": state, "tried": tried,
                "delay": delay, "error": error, "now": self.now()}).rowcount == 1

    # -- reading -------------------------------------------------------------------------------
    def alert_list(self, limit: int = 50, kind: str | None = None) -> list[AlertRecord]:
        rows = self._read("alert_list", {"limit": limit, "kind": kind})
        if not rows:
            return []
        deliveries: dict[int, list[Delivery]] = {}
        for d in self._read("alert_deliveries_of", {"ids": json.dumps([r["id"] for r in rows]), "now": self.now()}):
            deliveries.setdefault(d["alert_id"], []).append(
                Delivery(d["alert_id"], d["sink"], d["state"], d["attempts"], d["next_at"], d["last_error"],
                         d["delivered_at"], bool(d["leased"])))
        return [AlertRecord(r["id"], r["kind"], r["severity"], r["status"], r["job_name"], r["count"], r["first_at"],
                            r["last_at"], r["title"], r["created_at"], json.loads(r["document"]),
                            deliveries.get(r["id"], [])) for r in rows]

    # -- rules ---------------------------------------------------------------------------------
    def alert_conditions(self, kind: str) -> dict[str, bool]:
        return {r["subject"]: bool(r["firing"]) for r in self._read("alert_conditions", {"kind": kind})}

    def alert_condition_set(self, kind: str, subject: str, firing: bool, event_kind: str,
                            job_name: str | None, keys: Sequence[str], payload: dict[str, Any]) -> bool:
        params = event_params(event_kind, None, job_name, keys, payload, None)
        now = self.now()
        with self._tx() as c:
            moved = c.execute(Q["alert_condition_fire" if firing else "alert_condition_resolve"],
                              {"kind": kind, "subject": subject, "now": now}).fetchone()
            if moved is None:
                return False
            c.execute(Q["alert_outbox_insert"], {**params, "now": now})
        return True

    def alert_failure_counts(self, since: float) -> dict[str, tuple[int, int]]:
        return {r["name"]: (r["total"], r["failures"]) for r in self._read("alert_failure_counts", {"since": since})}

    def alert_failed_keys(self, job_name: str, since: float, limit: int) -> list[str]:
        return [r["key"] for r in self._read("alert_failed_keys", {"name": job_name, "since": since,
                                                                   "limit": limit})]

    def alert_queue_backlog(self) -> list[QueueBacklog]:
        return [QueueBacklog(r["queue"], r["oldest_run_at"], r["runnable"])
                for r in self._read("alert_queue_backlog", {"now": self.now()})]

    def alert_prune(self, older_than: float) -> int:
        before = self.now() - older_than
        with self._tx() as c:
            n = c.execute(Q["alert_prune"], {"before": before}).rowcount
            c.execute(Q["alert_prune_events"], {"before": before})
        return n


class _Fenced(Exception):
    """Raised inside a transaction to roll it back: another dispatcher grouped an event first."""


__all__ = ["AlertsSQLite"]
