"""What the schedules part needs of a store; both stores implement it in their schedules mixin.

Three tables (migration 0004): the scheduler's state per schedule (its cursor: every window ending
at or before it is decided), the missed windows keyed ``(schedule, window_start)``, and the
schedule events (missed windows, backfill started / finished) that the CLI shows. The same
transaction that records missed windows or a backfill event also puts an alert event in the alerts
outbox (kinds ``schedule_missed``, ``backfill_started``, ``backfill_finished``; invariant 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

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


class ScheduleStore(Protocol):
    """Store methods of the schedules part (Noun+Verb, as the core contract)."""

    def schedule_state_init(self, name: str, expression: str, tz: str) -> ScheduleState:
        """The state of a schedule, created with its cursor at the store's ``now`` if it had none."""
        ...

    def schedule_state_list(self) -> list[ScheduleState]:
        """Every schedule the store knows, by name."""
        ...

    def schedule_advance(self, params: AdvanceParams) -> bool:
        """Compare-and-set the cursor; False (nothing written) if another scheduler moved it first,
        or the schedule is paused. Missed windows are recorded at most once per (schedule, start)."""
        ...

    def schedule_pause(self, name: str, expression: str, tz: str, paused: bool, *, actor: str | None = None,
                       reason: str | None = None) -> ScheduleState:
        """Pause or resume. Resuming moves the cursor to ``now``: windows that ended while paused are
        not run (backfill them on purpose). With ``actor``, the change is recorded in the audit log
        (``schedule_pause`` / ``schedule_resume``, subject the schedule) in the same transaction."""
        ...

    def schedule_missed_list(self, name: str, limit: int = 100, open_only: bool = False) -> list[MissedWindow]:
        """Missed windows of a schedule, newest first (``open_only``: not backfilled since)."""
        ...

    def schedule_missed_count(self) -> dict[str, int]:
        """Missed windows not backfilled since, per schedule."""
        ...

    def schedule_missed_resolve(self, name: str, starts: Sequence[float]) -> int:
        """Mark missed windows as backfilled."""
        ...

    def schedule_event_record(self, name: str, event: NewEvent) -> int:
        """Record an event (and its alert, in the same transaction); returns its id."""
        ...

    def schedule_event_list(self, after_id: int = 0, limit: int = 100, name: str | None = None
                            ) -> list[ScheduleEvent]:
        """Events with an id above ``after_id``, oldest first: a feed to follow with a cursor."""
        ...

    def schedule_window_states(self, keys: Sequence[str]) -> dict[str, tuple[int, str]]:
        """``{key: (job id, state)}`` for the window jobs that exist among ``keys``."""
        ...

    def schedule_backfill_last(self, name: str) -> tuple[float, float] | None:
        """``(start, end)`` of the latest window a backfill of this schedule enqueued or re-ran."""
        ...

    def schedule_job_counts(self, name: str) -> dict[str, int]:
        """How many jobs of this name are in each state."""
        ...
