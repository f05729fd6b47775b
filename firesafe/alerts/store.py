"""The store methods of the alerts part (implemented by ``AlertsSQLite`` and ``AlertsPostgres``).

The outbox (invariant 4): an alert event is written in the same transaction as the event that
raised it. The stores call ``_outbox_dead`` inside the transaction that moves jobs to ``dead``;
other parts call :meth:`AlertStore.alert_record` with their own open transaction (``conn``).
Dispatchers then group pending events into alerts (fenced: each event joins exactly one alert)
and deliver each alert to each sink under a lease (a dead dispatcher's deliveries are retried).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from firesafe.alerts.grouping import KINDS, SEVERITIES
from firesafe.errors import InvalidInput

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


class AlertStore(Protocol):
    """What the alerts part needs of a store; both stores implement it in their alerts mixin."""

    def alert_record(self, kind: str, severity: str | None = None, job_name: str | None = None,
                     keys: Sequence[str] = (), payload: dict[str, Any] | None = None, *,
                     dedupe: str | None = None, conn: Any = None) -> bool:
        """Put an alert event in the outbox; True if recorded, False if ``dedupe`` was seen before.

        With ``conn`` (the connection of a transaction the caller has open in this store: SQLite's
        ``_tx()`` connection, a psycopg connection inside ``transaction()``) the event commits or
        rolls back with the caller's writes (invariant 4); without it, in a transaction of its own.
        """
        ...

    def alert_pending(self, limit: int) -> list[OutboxEvent]:
        """Events not grouped yet, oldest first."""
        ...

    def alert_last_sent(self, since: float) -> dict[tuple[str, str | None, str, bool], float]:
        """When each (kind, job name, severity, muted) group last became an alert, for alerts made at
        or after ``since`` (an alert is muted when its status is ``muted``)."""
        ...

    def alert_create(self, new: NewAlert) -> int | None:
        """Create an alert from events not grouped yet, and its deliveries, in one transaction.

        None (nothing written) if any of the events was grouped meanwhile by another dispatcher.
        """
        ...

    def alert_delivery_claim(self, sink: str, limit: int, lease: float, alert_id: int | None = None
                             ) -> list[ClaimedDelivery]:
        """Take up to ``limit`` due deliveries to ``sink`` under a new lease."""
        ...

    def alert_delivery_finish(self, alert_id: int, sink: str, token: str, state: str, tried: int,
                              delay: float | None, error: str | None) -> bool:
        """Record a delivery's outcome (``state`` delivered, failed or pending with ``delay``);
        fenced on the lease token."""
        ...

    def alert_list(self, limit: int = 50, kind: str | None = None) -> list[AlertRecord]:
        """Alerts, newest first, with their deliveries."""
        ...

    def alert_waiting(self) -> int:
        """How many events wait in the outbox to be grouped."""
        ...

    def alert_conditions(self, kind: str) -> dict[str, bool]:
        """The subjects of a rule and whether each is firing."""
        ...

    def alert_condition_set(self, kind: str, subject: str, firing: bool, event_kind: str,
                            job_name: str | None, keys: Sequence[str], payload: dict[str, Any]) -> bool:
        """Move a rule's subject to firing (or resolved) and record the event, in one transaction;
        False (nothing written) if it already was in that state."""
        ...

    def alert_failure_counts(self, since: float) -> dict[str, tuple[int, int]]:
        """``{job name: (attempts ended, attempts failed)}`` for attempts that ended at or after ``since``."""
        ...

    def alert_failed_keys(self, job_name: str, since: float, limit: int) -> list[str]:
        """Keys of jobs of ``job_name`` whose attempts failed most recently (since ``since``)."""
        ...

    def alert_queue_backlog(self) -> list[QueueBacklog]:
        """Per queue: when its oldest runnable job became due, and how many are runnable."""
        ...

    def alert_prune(self, older_than: float) -> int:
        """Delete alerts (and their events) created more than ``older_than`` seconds ago whose
        deliveries are all over."""
        ...
