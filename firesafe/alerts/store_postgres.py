"""The alerts part of the postgres store: a mixin of the store class (queries in store/sql/postgres/alerts.sql)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

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
from firesafe.store.driver import PostgresPart


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _event(r: dict[str, Any]) -> OutboxEvent:
    return OutboxEvent(r["id"], r["kind"], r["severity"], r["job_name"], r["job_id"], _json(r["keys"]),
                       _json(r["payload"]), r["created_at"])


class AlertsPostgres(PostgresPart):
    """Store methods of the alerts part; mixed into the postgres store class (its driver: ``_conn``,
    ``_read``, ``_write``, ``_now`` and the rendered queries ``q``)."""

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

    def _outbox_dead(self, conn: psycopg.Connection[Any], job_ids: Sequence[int], now: float | None) -> None:
        """Inside the transaction that moved jobs to ``dead``: one dead_letter event per job."""
        if job_ids:
            conn.execute(self.q["alert_outbox_dead"], {"ids": list(job_ids), "now": now})

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
    def alert_pending(self, limit: int) -> list[OutboxEvent]:
        return [_event(r) for r in self._read("alert_pending", {"limit": limit})]

    def alert_waiting(self) -> int:
        return int(self._read("alert_waiting")[0]["n"])

    def alert_last_sent(self, since: float) -> dict[tuple[str, str | None, str, bool], float]:
        return {(r["kind"], r["job_name"], r["severity"], bool(r["muted"])): r["at"]
                for r in self._read("alert_last_sent", {"since": since})}

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
        return [ClaimedDelivery(r["alert_id"], r["sink"], token, r["attempts"], r["created_at"], _json(r["document"]))
                for r in rows]

    def alert_delivery_finish(self, alert_id: int, sink: str, token: str, state: str, tried: int,
                              delay: float | None, error: str | None) -> bool:
        with self._conn() as c:
            return c.execute(self.q["alert_delivery_finish"], {
                "alert_id": alert_id, "sink": sink, "token": token, "state": state, "tried": tried,
                "delay": delay, "error": error, "now": self._now()}).rowcount == 1

    # -- reading -------------------------------------------------------------------------------
    def alert_list(self, limit: int = 50, kind: str | None = None) -> list[AlertRecord]:
        rows = self._read("alert_list", {"limit": limit, "kind": kind})
        if not rows:
            return []
        deliveries: dict[int, list[Delivery]] = {}
        for d in self._read("alert_deliveries_of", {"ids": [r["id"] for r in rows], "now": self._now()}):
            deliveries.setdefault(d["alert_id"], []).append(
                Delivery(d["alert_id"], d["sink"], d["state"], d["attempts"], d["next_at"], d["last_error"],
                         d["delivered_at"], bool(d["leased"])))
        return [AlertRecord(r["id"], r["kind"], r["severity"], r["status"], r["job_name"], r["count"], r["first_at"],
                            r["last_at"], r["title"], r["created_at"], _json(r["document"]),
                            deliveries.get(r["id"], [])) for r in rows]

    # -- rules ---------------------------------------------------------------------------------
    def alert_conditions(self, kind: str) -> dict[str, bool]:
        return {r["subject"]: bool(r["firing"]) for r in self._read("alert_conditions", {"kind": kind})}

    def alert_condition_set(self, kind: str, subject: str, firing: bool, event_kind: str,
                            job_name: str | None, keys: Sequence[str], payload: dict[str, Any]) -> bool:
        params = {**event_params(event_kind, None, job_name, keys, payload, None), "now": self._now()}
        with self._conn() as c, c.transaction():
            moved = c.execute(self.q["alert_condition_fire" if firing else "alert_condition_resolve"],
                              {"kind": kind, "subject": subject, "now": params["now"]}).fetchone()
            if moved is None:
                return False
            c.execute(self.q["alert_outbox_insert"], params)
        return True

    def alert_failure_counts(self, since: float) -> dict[str, tuple[int, int]]:
        return {r["name"]: (int(r["total"]), int(r["failures"]))
                for r in self._read("alert_failure_counts", {"since": since})}

    def alert_failed_keys(self, job_name: str, since: float, limit: int) -> list[str]:
        return [r["key"] for r in self._read("alert_failed_keys", {"name": job_name, "since": since,
                                                                   "limit": limit})]

    def alert_queue_backlog(self) -> list[QueueBacklog]:
        return [QueueBacklog(r["queue"], r["oldest_run_at"], int(r["runnable"]))
                for r in self._read("alert_queue_backlog", {"now": self._now()})]

    def alert_prune(self, older_than: float) -> int:
        with self._conn() as c, c.transaction():
            params = {"older_than": older_than, "now": self._now()}
            n = c.execute(self.q["alert_prune"], params).rowcount
            c.execute(self.q["alert_prune_events"], params)
        return n


class _Fenced(Exception):
    """Raised inside a transaction to roll it back: another dispatcher grouped an event first."""


__all__ = ["AlertsPostgres"]
