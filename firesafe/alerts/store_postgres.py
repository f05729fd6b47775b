"""The alerts part of the postgres store: a mixin of the store class (queries in store/sql/postgres/alerts.sql).

What is the same on both dialects is written once in :class:`firesafe.alerts.store.AlertsPart`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from firesafe.alerts.store import AlertsPart, ClaimedDelivery, NewAlert, event_params, json_column
from firesafe.errors import InvalidInput
from firesafe.store.driver import PostgresPart


class AlertsPostgres(AlertsPart, PostgresPart):
    """Store methods of the alerts part that differ on PostgreSQL; mixed into the postgres store class."""

    # -- the outbox: written in the transaction of the event -----------------------------------
    def _write_with_outbox(self, name: str, params: dict[str, Any], dead_ids: Sequence[int]) -> list[dict[str, Any]]:
        """Run the batch statement ``name`` (job_finish, job_rescue: it returns the ids it moved);
        when it may move jobs to ``dead``, run it in a transaction that also records a dead_letter
        event for each of them (invariant 4). Otherwise it is one statement, as before."""
        if not dead_ids:
            return self._write(name, params)
        with self._conn() as c:
            # One round trip: BEGIN, the batch, the events, COMMIT. The events need not wait for the
            # batch's result: alert_outbox_dead writes one only for a job that is dead at its current
            # run, once (its identity is (job, run)), so an item the batch did not apply adds nothing.
            with c.pipeline(), c.transaction():
                cur = c.execute(self.q[name], params)
                self._outbox_dead(c, dead_ids, params.get("now"))
            return cur.fetchall()

    def alert_record(self, kind: str, severity: str | None = None, job_name: str | None = None,
                     keys: Sequence[str] = (), payload: dict[str, Any] | None = None, *,
                     dedupe: str | None = None, conn: Any = None) -> bool:
        params = {**event_params(kind, severity, job_name, keys, payload, dedupe), "now": self._now()}
        if conn is not None:
            if not isinstance(conn, psycopg.Connection) or conn.closed:
                raise InvalidInput("alert_record(conn=...) takes an open psycopg 3 Connection")
            if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
                raise InvalidInput("alert_record(conn=...) joins the caller's transaction, but this connection "
                                   "has none open: wrap the work in `with conn.transaction():`")
            try:
                return conn.execute(self.q["alert_outbox_insert"], params).fetchone() is not None
            except psycopg.Error as exc:
                raise self._explain(exc) from exc
        return bool(self._write("alert_outbox_insert", params))

    # -- grouping ------------------------------------------------------------------------------
    def alert_create(self, new: NewAlert) -> int | None:
        with self._conn() as c:
            try:
                with c.transaction():
                    row = c.execute(self.q["alert_insert"], {
                        "kind": new.kind, "severity": new.severity, "status": new.status,
                        "job_name": new.job_name, "count": new.count, "first_at": new.first_at,
                        "last_at": new.last_at, "title": new.title, "document": new.document,
                        "now": self._now()}).fetchall()[0]  # INSERT ... RETURNING: one row
                    alert_id, created = row["id"], row["created_at"]
                    grouped = c.execute(self.q["alert_group_events"], {"alert_id": alert_id,
                                                                        "ids": list(new.event_ids)}).rowcount
                    if grouped != len(new.event_ids):
                        raise _Fenced
                    with c.cursor() as cur:
                        cur.executemany(self.q["alert_delivery_insert"],
                                        [{"alert_id": alert_id, "sink": s, "now": created} for s in new.sinks])
            except _Fenced:
                return None
        return alert_id

    # -- delivery ------------------------------------------------------------------------------
    def alert_delivery_claim(self, sink: str, limit: int, lease: float, alert_id: int | None = None
                             ) -> list[ClaimedDelivery]:
        token = uuid.uuid4().hex
        rows = self._write("alert_delivery_claim", {"token": token, "now": self._now(), "lease": lease,
                                                    "sink": sink, "limit": limit, "alert_id": alert_id})
        return [ClaimedDelivery(r["alert_id"], r["sink"], token, r["attempts"], r["created_at"],
                                json_column(r["document"])) for r in rows]

    # -- pruning: the queries read the database's clock when no clock is injected ---------------
    def alert_prune(self, older_than: float) -> int:
        with self._conn() as c, c.transaction():
            params = {"older_than": older_than, "now": self._now()}
            n = c.execute(self.q["alert_prune"], params).rowcount
            c.execute(self.q["alert_prune_events"], params)
        return n


class _Fenced(Exception):
    """Raised inside a transaction to roll it back: another dispatcher grouped an event first."""


__all__ = ["AlertsPostgres"]
