"""What the optional parts (limiters, schedules, alerts) show on the dashboard.

Each reader returns ``None`` when its part is absent or not configured for this app (the page
then says "not configured"); a part that fails to answer is shown with its error, and the rest of
the page still renders. Nothing here writes to the store.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("firesafe.dashboard")

#: Windows shown per schedule in its grid (the newest ones that have ended).
GRID_WINDOWS = 48


@dataclass
class PartView:
    """Rows of a part, or the error met reading it."""

    rows: list[Any] = field(default_factory=list)
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _failed(what: str, exc: Exception) -> PartView:
    log.warning("dashboard: reading %s failed: %s", what, exc)
    return PartView([], f"{type(exc).__name__}: {exc}")


# -- limiters ------------------------------------------------------------------------------------
def limiters(app: Any) -> PartView | None:
    """Each declared limiter's settings and state (tokens, in flight, waiting, pause, breaker)."""
    declared = getattr(app, "limiters", None)
    if not declared:
        return None
    try:
        stored = {s.name: s for s in app.store.limiter_list()}
    except Exception as exc:
        return _failed("limiters", exc)
    rows = []
    for name in sorted(declared):
        s = stored.get(name)
        spec = getattr(declared[name], "spec", None)
        if s is not None:
            rows.append({"name": name, "rate": s.rate, "burst": s.burst, "concurrency": s.concurrency,
                         "tokens": s.tokens, "in_flight": s.in_flight, "waiting": s.waiting,
                         "paused_until": s.paused_until, "pause_reason": s.pause_reason, "breaker": s.breaker,
                         "failures": s.failures, "retry_at": s.retry_at, "used": True})
        else:  # declared, but no worker has recorded it yet
            rows.append({"name": name, "rate": getattr(spec, "rate", None), "burst": getattr(spec, "burst", None),
                         "concurrency": getattr(spec, "concurrency", None), "tokens": None, "in_flight": 0,
                         "waiting": 0, "paused_until": None, "pause_reason": None, "breaker": "closed",
                         "failures": 0, "retry_at": None, "used": False})
    return PartView(rows)


# -- schedules -----------------------------------------------------------------------------------
@dataclass
class ScheduleView:
    status: Any  # firesafe.schedules.status.ScheduleStatus
    cells: list[dict[str, Any]]  # oldest first: {"key", "start", "end", "state"}


def cell_state(job_state: str | None, missed: bool) -> str:
    """What a window's cell shows.

    >>> [cell_state(s, False) for s in ("succeeded", "dead", "cancelled", "running", "queued", None)]
    ['succeeded', 'failed', 'cancelled', 'running', 'waiting', 'none']
    >>> cell_state(None, True), cell_state("succeeded", True)
    ('missed', 'succeeded')
    """
    if job_state is None:
        return "missed" if missed else "none"
    return {"dead": "failed", "queued": "waiting", "scheduled": "waiting"}.get(job_state, job_state)


def _recent_windows(cron: Any, now: float, count: int) -> list[tuple[int, int]]:
    """The newest ``count`` windows that ended by ``now`` (looking back at most ~2 years)."""
    span = 86400.0
    found: list[tuple[int, int]] = []
    while True:
        found = cron.windows_ending(now - span, now)
        if len(found) >= count or span > 730 * 86400:
            return found[-count:]
        span *= 4


def schedules(app: Any) -> PartView | None:
    """Each declared schedule's status and a grid of its newest windows."""
    declared = getattr(app, "schedules", None)
    status_of = getattr(app, "schedules_status", None)
    if not declared or status_of is None:
        return None
    store = app.store
    try:
        statuses = status_of()
        now = store.now()
        views = []
        for st in statuses:
            schedule = declared[st.name]
            windows = [schedule.window(b) for b in _recent_windows(schedule.cron, now, GRID_WINDOWS)]
            states = store.schedule_window_states([w.key for w in windows]) if windows else {}
            missed = {m.key for m in store.schedule_missed_list(st.name, limit=500) if m.backfilled_at is None}
            cells = [{"key": w.key, "start": w.start, "end": w.end,
                      "state": cell_state(states[w.key][1] if w.key in states else None, w.key in missed)}
                     for w in windows]
            views.append(ScheduleView(st, cells))
    except Exception as exc:
        return _failed("schedules", exc)
    return PartView(views)


def backfill(app: Any, name: str, start: Any, end: Any, *, rerun: str, dry_run: bool, actor: str,
             reason: str | None = None) -> Any:
    """Run (or preview) a backfill, recorded with ``actor`` and ``reason``."""
    try:
        from firesafe.schedules.backfill import backfill as run
    except ImportError:  # pragma: no cover - only without the schedules part
        return app.backfill(name, start, end, rerun=rerun, dry_run=dry_run)
    return run(app, name, start, end, rerun=rerun, dry_run=dry_run, actor=actor, reason=reason)


# -- alerts --------------------------------------------------------------------------------------
def alerts(app: Any, limit: int = 100) -> PartView | None:
    """Recent alerts with the delivery to each sink, newest first."""
    manager = getattr(app, "alerts", None)
    if manager is None or not hasattr(manager, "list"):
        return None
    sinks = [getattr(s, "name", str(s)) for s in getattr(manager, "sinks", [])]
    if not sinks and not getattr(manager, "active", False):
        return None
    try:
        records = manager.list(limit=limit)
        waiting = app.store.alert_waiting()
    except Exception as exc:
        return _failed("alerts", exc)
    return PartView(records, extra={"sinks": sinks, "waiting": waiting, "now": time.time()})
