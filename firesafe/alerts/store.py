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
