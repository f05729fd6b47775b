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
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from firesafe.store.contract import AlertStore, AuditStore
    from firesafe.store.driver import StoreDriver

    class _Uses(StoreDriver, AlertStore, AuditStore, Protocol):
        """What this part uses: the driver, and the alerts and audit parts inside its transactions."""
else:
    _Uses = object

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


class SchedulesPart(_Uses):
    """Store methods of the schedules part, the same on both dialects (written against the driver:
    ``_tx``, ``_read``, ``_exec_many``, ``_list``, ``_now`` and the named queries ``q``); mixed into
    both store classes. The dialects differ only in their queries (store/sql/*/schedules.sql)."""

    def schedule_state_init(self, name: str, expression: str, tz: str) -> ScheduleState:
        with self._tx() as c:
            c.execute(self.q["schedule_state_init"], {"name": name, "expression": expression, "tz": tz,
                                                      "now": self._now()})
            return state_from_row(c.execute(self.q["schedule_state_get"], {"name": name}).fetchone())

    def schedule_state_list(self) -> list[ScheduleState]:
        return [state_from_row(r) for r in self._read("schedule_state_list")]

    def schedule_advance(self, params: AdvanceParams) -> bool:
        now = self._now()
        with self._tx() as c:
            moved = c.execute(self.q["schedule_advance"], {
                "name": params.name, "expected": params.expected, "cursor": params.cursor,
                "expression": params.expression, "tz": params.tz, "last_start": params.last_start,
                "last_end": params.last_end, "now": now}).rowcount == 1
            if not moved:
                return False
            self._exec_many(c, "schedule_missed_insert", [
                {"schedule": m.schedule, "start": m.start, "end": m.end, "key": m.key, "reason": m.reason, "now": now}
                for m in params.missed])
            for event in params.events:
                self._schedule_event(c, params.name, event, now)
        return True

    def _schedule_event(self, c: Any, name: str, event: NewEvent, now: float | None) -> int:
        """Inside the caller's transaction: the event, and the alert it raises (invariant 4)."""
        row = c.execute(self.q["schedule_event_insert"], {
            "name": name, "now": now, "kind": event.kind, "detail": json.dumps(event.detail)}).fetchone()
        self.alert_record(ALERT_KINDS[event.kind], job_name=name, keys=list(event.keys)[:ALERT_KEYS],
                          payload={"schedule": name, **event.detail}, dedupe=event.dedupe, conn=c)
        return int(row["id"])

    def schedule_pause(self, name: str, expression: str, tz: str, paused: bool, *, actor: str | None = None,
                       reason: str | None = None) -> ScheduleState:
        with self._tx() as c:
            before = c.execute(self.q["schedule_state_get"], {"name": name}).fetchone()
            c.execute(self.q["schedule_pause" if paused else "schedule_resume"],
                      {"name": name, "expression": expression, "tz": tz, "now": self._now()})
            if actor is not None:
                self.audit_record("schedule_pause" if paused else "schedule_resume", name, actor, reason,
                                  {"was_paused": bool(before and before["paused"])}, conn=c)
            return state_from_row(c.execute(self.q["schedule_state_get"], {"name": name}).fetchone())

    def schedule_missed_list(self, name: str, limit: int = 100, open_only: bool = False) -> list[MissedWindow]:
        return [missed_from_row(r) for r in self._read(
            "schedule_missed_list", {"name": name, "limit": limit, "open_only": bool(open_only)})]

    def schedule_missed_count(self) -> dict[str, int]:
        return {r["schedule"]: int(r["n"]) for r in self._read("schedule_missed_count")}

    def schedule_missed_resolve(self, name: str, starts: Sequence[float]) -> int:
        if not starts:
            return 0
        return self._execute("schedule_missed_resolve", {
            "name": name, "starts": self._list(float(s) for s in starts), "now": self._now()})

    def schedule_event_record(self, name: str, event: NewEvent) -> int:
        with self._tx() as c:
            return self._schedule_event(c, name, event, self._now())

    def schedule_event_list(self, after_id: int = 0, limit: int = 100, name: str | None = None
                            ) -> list[ScheduleEvent]:
        return [event_from_row(r) for r in self._read(
            "schedule_event_list", {"after": after_id, "limit": limit, "name": name})]

    def schedule_window_states(self, keys: Sequence[str]) -> dict[str, tuple[int, str]]:
        if not keys:
            return {}
        rows = self._read("schedule_window_states", {"keys": self._list(keys)})
        return {r["key"]: (int(r["id"]), r["state"]) for r in rows}

    def schedule_backfill_last(self, name: str) -> tuple[float, float] | None:
        rows = self._read("schedule_backfill_last", {"name": name})
        if not rows or rows[0]["last_start"] is None or rows[0]["last_end"] is None:
            return None
        return float(rows[0]["last_start"]), float(rows[0]["last_end"])

    def schedule_job_counts(self, name: str) -> dict[str, int]:
        return {r["state"]: int(r["n"]) for r in self._read("schedule_job_counts", {"name": name})}
