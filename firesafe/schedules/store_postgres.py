"""The schedules part of the postgres store: a mixin (queries in store/sql/postgres/schedules.sql)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from firesafe.schedules.store import (
    ALERT_KEYS,
    ALERT_KINDS,
    AdvanceParams,
    MissedWindow,
    NewEvent,
    ScheduleEvent,
    ScheduleState,
    event_from_row,
    missed_from_row,
    state_from_row,
)

if TYPE_CHECKING:
    from firesafe.store.contract import AlertStore, AuditStore
    from firesafe.store.driver import PostgresDriver

    class _Part(PostgresDriver, AlertStore, AuditStore, Protocol):
        """What this part uses: the driver, and the alerts and audit parts inside its transactions."""
else:
    _Part = object


class SchedulesPostgres(_Part):
    """Store methods of the schedules part; mixed into the postgres store class (its driver: ``_conn``,
    ``_read``, ``_write``, ``_now`` and the rendered queries ``q``)."""

    def schedule_state_init(self, name: str, expression: str, tz: str) -> ScheduleState:
        q = self.q
        with self._conn() as c:
            c.execute(q["schedule_state_init"], {"name": name, "expression": expression, "tz": tz,
                                                 "now": self._now()})
            return state_from_row(c.execute(q["schedule_state_get"], {"name": name}).fetchone())

    def schedule_state_list(self) -> list[ScheduleState]:
        return [state_from_row(r) for r in self._read("schedule_state_list")]

    def schedule_advance(self, params: AdvanceParams) -> bool:
        q = self.q
        now = self._now()
        with self._conn() as c, c.transaction():
            moved = c.execute(q["schedule_advance"], {
                "name": params.name, "expected": params.expected, "cursor": params.cursor,
                "expression": params.expression, "tz": params.tz, "last_start": params.last_start,
                "last_end": params.last_end, "now": now}).rowcount == 1
            if not moved:
                return False
            if params.missed:
                with c.cursor() as cur:
                    cur.executemany(q["schedule_missed_insert"], [
                        {"schedule": m.schedule, "start": m.start, "end": m.end, "key": m.key, "reason": m.reason,
                         "now": now} for m in params.missed])
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
        q = self.q
        with self._conn() as c, c.transaction():
            before = c.execute(q["schedule_state_get"], {"name": name}).fetchone()
            c.execute(q["schedule_pause" if paused else "schedule_resume"],
                      {"name": name, "expression": expression, "tz": tz, "now": self._now()})
            if actor is not None:
                self.audit_record("schedule_pause" if paused else "schedule_resume", name, actor, reason,
                                  {"was_paused": bool(before and before["paused"])}, conn=c)
            return state_from_row(c.execute(q["schedule_state_get"], {"name": name}).fetchone())

    def schedule_missed_list(self, name: str, limit: int = 100, open_only: bool = False) -> list[MissedWindow]:
        return [missed_from_row(r) for r in self._read(
            "schedule_missed_list", {"name": name, "limit": limit, "open_only": open_only})]

    def schedule_missed_count(self) -> dict[str, int]:
        return {r["schedule"]: int(r["n"]) for r in self._read("schedule_missed_count")}

    def schedule_missed_resolve(self, name: str, starts: Sequence[float]) -> int:
        if not starts:
            return 0
        with self._conn() as c:
            return c.execute(self.q["schedule_missed_resolve"], {
                "name": name, "starts": [float(s) for s in starts], "now": self._now()}).rowcount

    def schedule_event_record(self, name: str, event: NewEvent) -> int:
        with self._conn() as c, c.transaction():
            return self._schedule_event(c, name, event, self._now())

    def schedule_event_list(self, after_id: int = 0, limit: int = 100, name: str | None = None
                            ) -> list[ScheduleEvent]:
        return [event_from_row(r) for r in self._read(
            "schedule_event_list", {"after": after_id, "limit": limit, "name": name})]

    def schedule_window_states(self, keys: Sequence[str]) -> dict[str, tuple[int, str]]:
        if not keys:
            return {}
        rows = self._read("schedule_window_states", {"keys": list(keys)})
        return {r["key"]: (int(r["id"]), r["state"]) for r in rows}

    def schedule_backfill_last(self, name: str) -> tuple[float, float] | None:
        rows = self._read("schedule_backfill_last", {"name": name})
        if not rows or rows[0]["last_start"] is None or rows[0]["last_end"] is None:
            return None
        return float(rows[0]["last_start"]), float(rows[0]["last_end"])

    def schedule_job_counts(self, name: str) -> dict[str, int]:
        return {r["state"]: int(r["n"]) for r in self._read("schedule_job_counts", {"name": name})}
