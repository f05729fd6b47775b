"""The records of the alerts part of the store; its methods are declared in
:class:`firesafe.store.contract.AlertStore` (implemented by ``AlertsSQLite`` and ``AlertsPostgres``).

The outbox (invariant 4): an alert event is written in the same transaction as the event that
raised it. The stores call ``_outbox_dead`` inside the transaction that moves jobs to ``dead``;
other parts call ``alert_record`` with their own open transaction (``conn``).
Dispatchers then group pending events into alerts (fenced: each event joins exactly one alert)
and deliver each alert to each sink under a lease (a dead dispatcher's deliveries are retried).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from firesafe.alerts.grouping import KINDS, SEVERITIES
from firesafe.errors import InvalidInput
from firesafe.store.driver import StorePart

#: At most this many keys are stored with one alert event.
MAX_EVENT_KEYS = 100
#: The largest payload of one alert event, in bytes of JSON.
MAX_EVENT_PAYLOAD = 64 * 1024


@dataclass(frozen=True)
class OutboxEvent:
    """One alert event, waiting in the outbox or grouped into an alert."""

    id: int
    kind: str
    severity: str
    job_name: str | None
    job_id: int | None
    keys: list[str]
    payload: dict[str, Any]
    created_at: float


@dataclass(frozen=True)
class NewAlert:
    """An alert to create from grouped events, with a delivery row per sink."""

    kind: str
    severity: str
    status: str
    job_name: str | None
    count: int
    first_at: float
    last_at: float
    title: str
    document: str  # JSON
    event_ids: Sequence[int]
    sinks: Sequence[str]


@dataclass(frozen=True)
class Delivery:
    """The delivery of one alert to one sink."""

    alert_id: int
    sink: str
    state: str  # pending, delivered, failed
    attempts: int
    next_at: float
    last_error: str | None
    delivered_at: float | None
    leased: bool = False


@dataclass(frozen=True)
class ClaimedDelivery:
    """A delivery taken under a lease; only the holder of ``token`` may record its outcome."""

    alert_id: int
    sink: str
    token: str
    attempts: int  # attempts made before this one
    created_at: float  # the alert's
    document: dict[str, Any]


@dataclass(frozen=True)
class AlertRecord:
    """An alert as stored, with its delivery to each sink."""

    id: int
    kind: str
    severity: str
    status: str
    job_name: str | None
    count: int
    first_at: float
    last_at: float
    title: str
    created_at: float
    document: dict[str, Any]
    deliveries: list[Delivery] = field(default_factory=list)


@dataclass(frozen=True)
class QueueBacklog:
    queue: str
    oldest_run_at: float
    runnable: int


def event_params(kind: str, severity: str | None, job_name: str | None, keys: Sequence[str],
                 payload: dict[str, Any] | None, dedupe: str | None) -> dict[str, Any]:
    """Check an alert event and turn it into the outbox row's parameters (without ``now``).

    >>> event_params("dead_letter", None, "refund", ["k"], {"a": 1}, None)["severity"]
    'critical'
    >>> event_params("dead_lettr", None, None, [], None, None)
    Traceback (most recent call last):
    ...
    firesafe.errors.InvalidInput: unknown alert kind 'dead_lettr' ...
    """
    if kind not in KINDS:
        raise InvalidInput(f"unknown alert kind {kind!r}: use one of {', '.join(sorted(KINDS))}")
    severity = severity or KINDS[kind].severity
    if severity not in SEVERITIES:
        raise InvalidInput(f"unknown alert severity {severity!r}: use one of {', '.join(SEVERITIES)}")
    if isinstance(keys, str):
        raise InvalidInput("alert keys must be a list of job keys, not one string")
    keys = [str(k) for k in keys][:MAX_EVENT_KEYS]
    try:
        text = json.dumps(payload or {}, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"alert payload is not JSON-serialisable: {exc}") from None
    if len(text) > MAX_EVENT_PAYLOAD:
        raise InvalidInput(f"alert payload is {len(text)} bytes of JSON; the limit is {MAX_EVENT_PAYLOAD}")
    return {"kind": kind, "severity": severity, "job_name": job_name, "job_id": None,
            "keys": json.dumps(keys), "payload": text, "dedupe": dedupe}


def json_column(value: Any) -> Any:
    """A JSON column's value: text on SQLite, already decoded by psycopg from PostgreSQL's ``jsonb``."""
    return json.loads(value) if isinstance(value, str) else value


def _event(r: Any) -> OutboxEvent:
    return OutboxEvent(r["id"], r["kind"], r["severity"], r["job_name"], r["job_id"], json_column(r["keys"]),
                       json_column(r["payload"]), r["created_at"])


class AlertsPart(StorePart):
    """Store methods of the alerts part that are the same on both dialects (written against the driver);
    ``AlertsSQLite`` and ``AlertsPostgres`` add those that differ: recording an event in a caller's
    transaction (each checks its own kind of connection), creating an alert and claiming deliveries
    (one statement on PostgreSQL, a read first on SQLite so an idle dispatcher takes no write lock), pruning."""

    # -- the outbox: written in the caller's transaction ---------------------------------------
    def _outbox_dead(self, conn: Any, job_ids: Sequence[int], now: float | None) -> None:
        """Inside the transaction that moved jobs to ``dead``: one dead_letter event per job."""
        if job_ids:
            conn.execute(self.q["alert_outbox_dead"], {"ids": self._list(job_ids), "now": now})

    # -- grouping ------------------------------------------------------------------------------
    def alert_pending(self, limit: int) -> list[OutboxEvent]:
        return [_event(r) for r in self._read("alert_pending", {"limit": limit})]

    def alert_waiting(self) -> int:
        return int(self._read("alert_waiting")[0]["n"])

    def alert_last_sent(self, since: float) -> dict[tuple[str, str | None, str, bool], float]:
        return {(r["kind"], r["job_name"], r["severity"], bool(r["muted"])): r["at"]
                for r in self._read("alert_last_sent", {"since": since})}

    # -- delivery ------------------------------------------------------------------------------
    def alert_delivery_finish(self, alert_id: int, sink: str, token: str, state: str, tried: int,
                              delay: float | None, error: str | None) -> bool:
        return self._execute("alert_delivery_finish", {
            "alert_id": alert_id, "sink": sink, "token": token, "state": state, "tried": tried,
            "delay": delay, "error": error, "now": self._now()}) == 1

    # -- reading -------------------------------------------------------------------------------
    def alert_list(self, limit: int = 50, kind: str | None = None) -> list[AlertRecord]:
        rows = self._read("alert_list", {"limit": limit, "kind": kind})
        if not rows:
            return []
        deliveries: dict[int, list[Delivery]] = {}
        for d in self._read("alert_deliveries_of", {"ids": self._list(r["id"] for r in rows), "now": self._now()}):
            deliveries.setdefault(d["alert_id"], []).append(
                Delivery(d["alert_id"], d["sink"], d["state"], d["attempts"], d["next_at"], d["last_error"],
                         d["delivered_at"], bool(d["leased"])))
        return [AlertRecord(r["id"], r["kind"], r["severity"], r["status"], r["job_name"], r["count"], r["first_at"],
                            r["last_at"], r["title"], r["created_at"], json_column(r["document"]),
                            deliveries.get(r["id"], [])) for r in rows]

    # -- rules ---------------------------------------------------------------------------------
    def alert_conditions(self, kind: str) -> dict[str, bool]:
        return {r["subject"]: bool(r["firing"]) for r in self._read("alert_conditions", {"kind": kind})}

    def alert_condition_set(self, kind: str, subject: str, firing: bool, event_kind: str,
                            job_name: str | None, keys: Sequence[str], payload: dict[str, Any]) -> bool:
        params = {**event_params(event_kind, None, job_name, keys, payload, None), "now": self._now()}
        with self._tx() as c:
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
