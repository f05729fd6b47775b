"""Reading and controlling schedules: status (last and next window, counts), pause and resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from firesafe.errors import InvalidInput
from firesafe.schedules.store import MissedWindow, ScheduleEvent, ScheduleState
from firesafe.schedules.windows import Window

if TYPE_CHECKING:
    from firesafe.app import App
    from firesafe.schedules.schedule import Schedule


@dataclass(frozen=True)
class ScheduleStatus:
    """One schedule as ``firesafe schedules`` shows it. Counts are of the windows still in the store
    (finished jobs are pruned after their retention)."""

    name: str
    expression: str
    tz: str
    catchup: str
    paused: bool
    last_window: Window | None  # the latest window enqueued, by the scheduler or a backfill
    last_state: str | None  # its job's state
    next_window: Window | None  # the next window it will enqueue (at the window's end)
    counts: dict[str, int] = field(default_factory=dict)  # succeeded, failed, active, missed
    queue: str = "default"  # where its windows are enqueued (workers serving it run its scheduler)

    def as_dict(self) -> dict[str, Any]:
        def win(w: Window | None) -> dict[str, str] | None:
            return None if w is None else {"start": w.start.isoformat(), "end": w.end.isoformat(), "key": w.key}

        return {"name": self.name, "expression": self.expression, "tz": self.tz, "queue": self.queue,
                "catchup": self.catchup, "paused": self.paused, "last_window": win(self.last_window),
                "last_state": self.last_state, "next_window": win(self.next_window), **self.counts}


def get(app: App, name: str) -> Schedule:
    schedule = app.schedules.get(name)
    if schedule is None:
        known = ", ".join(sorted(app.schedules)) or "none"
        raise InvalidInput(f"no schedule named {name!r} is declared (declared: {known})")
    return schedule


def status(app: App) -> list[ScheduleStatus]:
    """Every declared schedule's status, by name."""
    store = app.store
    states = {s.name: s for s in store.schedule_state_list()}
    missed = store.schedule_missed_count()
    now = store.now()
    return [_status(app, s, states.get(s.name), missed.get(s.name, 0), now)
            for s in sorted(app.schedules.values(), key=lambda s: s.name)]


def _status(app: App, schedule: Schedule, state: ScheduleState | None, missed: int, now: float) -> ScheduleStatus:
    counts = app.store.schedule_job_counts(schedule.name)
    last = last_state = None
    bounds = app.store.schedule_backfill_last(schedule.name)  # a backfill enqueues windows too
    if state is not None and state.last_start is not None and state.last_end is not None and (
            bounds is None or state.last_start >= bounds[0]):
        bounds = (state.last_start, state.last_end)
    if bounds is not None:
        last = schedule.window((int(bounds[0]), int(bounds[1])))
        job = app.store.job_get(last.key)
        last_state = str(job.state) if job else None
    cursor = max(state.cursor, now) if state is not None and state.paused else (state.cursor if state else now)
    upcoming = schedule.cron.windows_ending(cursor, float("inf"), limit=1)
    return ScheduleStatus(
        name=schedule.name, expression=schedule.expression, tz=schedule.tz, queue=schedule.queue,
        catchup=schedule.catchup,
        paused=bool(state and state.paused), last_window=last, last_state=last_state,
        next_window=schedule.window(upcoming[0]) if upcoming else None,
        counts={"succeeded": counts.get("succeeded", 0), "failed": counts.get("dead", 0),
                "cancelled": counts.get("cancelled", 0),
                "active": sum(counts.get(s, 0) for s in ("queued", "scheduled", "running")), "missed": missed})


def pause(app: App, name: str, paused: bool = True, *, actor: str | None = None,
          reason: str | None = None) -> ScheduleState:
    """Pause (or resume) a schedule. Windows that end while it is paused are not run; resuming
    starts again from now (backfill the paused range to run them). The change is recorded in the
    audit log (``schedule_pause`` / ``schedule_resume``) with ``actor`` (default ``$FIRESAFE_ACTOR``,
    else user@host) and ``reason``."""
    from firesafe.deadletters.audit import actor_of, reason_of

    schedule = get(app, name)
    return app.store.schedule_pause(schedule.name, schedule.expression, schedule.tz, paused,
                                    actor=actor_of(actor), reason=reason_of(reason))


def missed(app: App, name: str, limit: int = 100, open_only: bool = False) -> list[MissedWindow]:
    """The missed windows of a schedule, newest first."""
    return app.store.schedule_missed_list(get(app, name).name, limit, open_only)


def events(app: App, name: str | None = None, after_id: int = 0, limit: int = 100) -> list[ScheduleEvent]:
    """Schedule events (missed windows, backfills), oldest first."""
    if name is not None:
        get(app, name)
    return app.store.schedule_event_list(after_id, limit, name)
