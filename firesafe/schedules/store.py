"""The records of the schedules part of the store; its methods are declared in
:class:`firesafe.store.contract.ScheduleStore` (both stores implement them in their schedules mixin).

Three tables (migration 0004): the scheduler's state per schedule (its cursor: every window ending
at or before it is decided), the missed windows keyed ``(schedule, window_start)``, and the
schedule events (missed windows, backfill started / finished) that the CLI shows. The same
transaction that records missed windows or a backfill event also puts an alert event in the alerts
outbox (kinds ``schedule_missed``, ``backfill_started``, ``backfill_finished``; invariant 4).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: Kinds of schedule events.
EVENT_KINDS = ("missed", "backfill_started", "backfill_finished")
#: The alert kind each schedule event raises.
ALERT_KINDS = {"missed": "schedule_missed", "backfill_started": "backfill_started",
               "backfill_finished": "backfill_finished"}
#: Most window keys an alert event lists.
ALERT_KEYS = 20


@dataclass(frozen=True)
class ScheduleState:
    """What the scheduler remembers of one schedule."""

    name: str
    expression: str
    tz: str
    cursor: float  # every window that ended at or before it was enqueued or recorded missed
    last_start: float | None  # the last window the scheduler enqueued
    last_end: float | None
    paused: bool
    updated_at: float


@dataclass(frozen=True)
class MissedWindow:
    """A window that was not run (and why): recorded once per ``(schedule, start)``."""

    schedule: str
    start: float
    end: float
    key: str
    reason: str
    recorded_at: float = 0.0
    backfilled_at: float | None = None  # set when a backfill enqueued it after all


@dataclass(frozen=True)
class ScheduleEvent:
    """Something that happened to a schedule: ``missed`` windows, ``backfill_started`` / ``_finished``."""

    id: int
    schedule: str
    at: float
    kind: str
    detail: dict[str, Any]


@dataclass(frozen=True)
class NewEvent:
    """An event to record, with the alert it raises."""

    kind: str  # one of EVENT_KINDS
    detail: dict[str, Any]
    keys: Sequence[str] = ()  # window keys the alert names
    dedupe: str | None = None  # the alert event's identity


@dataclass(frozen=True)
class AdvanceParams:
    """Move a schedule's cursor from ``expected`` to ``cursor`` (only if it is still ``expected``),
    recording its missed windows and events in the same transaction."""

    name: str
    expected: float
    cursor: float
    expression: str
    tz: str
    last_start: float | None = None
    last_end: float | None = None
    missed: Sequence[MissedWindow] = ()
    events: Sequence[NewEvent] = field(default_factory=tuple)


def state_from_row(r: Any) -> ScheduleState:
    """A schedule's state from its row (either dialect's)."""
    return ScheduleState(r["name"], r["expression"], r["tz"], float(r["cursor"]), r["last_start"], r["last_end"],
                         bool(r["paused"]), float(r["updated_at"]))


def missed_from_row(r: Any) -> MissedWindow:
    return MissedWindow(r["schedule"], float(r["window_start"]), float(r["window_end"]), r["window_key"],
                        r["reason"], float(r["recorded_at"]), r["backfilled_at"])


def event_from_row(r: Any) -> ScheduleEvent:
    return ScheduleEvent(int(r["id"]), r["schedule"], float(r["at"]), r["kind"], json.loads(r["detail"]))
