"""Backfill on purpose: enqueue the windows of a range, each at most once, safe to run again.

Windows whose start is in the range and that have ended are enqueued under their usual keys, so a
window the scheduler (or an earlier backfill) enqueued is not enqueued again. What happens to
windows that already have a job is the ``rerun`` policy's choice:

- ``none``: leave them (succeeded, failed or still waiting);
- ``failed``: re-run dead and cancelled windows, resuming their recorded steps;
- ``all``: re-run every finished window: dead and cancelled ones as ``failed`` does (resuming their
  recorded steps), succeeded ones from scratch (their recorded steps run again).

Windows still waiting or running are never touched. A window whose key is stored with other bounds
(the schedule's expression changed since it was enqueued) keeps its stored job and is reported as a
conflict, as the scheduler does; the rest of the range is enqueued.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any

from firesafe.errors import InvalidInput
from firesafe.schedules.scheduler import enqueue_keeping_stored
from firesafe.schedules.store import NewEvent
from firesafe.schedules.windows import local_instant
from firesafe.states import State

if TYPE_CHECKING:
    from firesafe.app import App
    from firesafe.schedules.schedule import Schedule


RERUN_POLICIES = ("none", "failed", "all")
#: Windows per enqueue transaction.
CHUNK = 2000
#: How often a backfill limited by ``max_active`` looks whether windows finished, in seconds.
POLL = 0.2
#: Most windows past the range's last ended one that are counted as not due yet.
FUTURE_LIMIT = 100_000
#: Most window keys a result lists.
MAX_KEYS = 100_000

_ACTIVE = (State.QUEUED, State.SCHEDULED, State.RUNNING)
_FAILED = (State.DEAD, State.CANCELLED)


@dataclass
class BackfillResult:
    """What a backfill did (with ``dry_run``: would do)."""

    schedule: str
    start: datetime
    end: datetime
    dry_run: bool
    rerun: str
    windows: int = 0  # windows of the range that have ended
    enqueued: int = 0  # new jobs
    rerun_count: int = 0  # finished windows run again
    succeeded: int = 0  # skipped: succeeded already
    failed: int = 0  # skipped: dead or cancelled (rerun none)
    active: int = 0  # skipped: waiting or running
    conflicts: int = 0  # skipped: stored with other bounds (the expression changed); not in a dry run
    not_due: int = 0  # windows of the range that have not ended yet: left to the scheduler
    keys: list[str] = field(default_factory=list)  # windows enqueued or re-run (would be), the first MAX_KEYS
    conflict_keys: list[str] = field(default_factory=list)  # the conflicts' keys, the first MAX_KEYS

    @property
    def skipped(self) -> int:
        return self.succeeded + self.failed + self.active + self.conflicts

    def as_dict(self) -> dict[str, Any]:
        return {"schedule": self.schedule, "from": self.start.isoformat(), "to": self.end.isoformat(),
                "dry_run": self.dry_run, "rerun": self.rerun, "windows": self.windows, "enqueued": self.enqueued,
                "rerun_count": self.rerun_count, "skipped_succeeded": self.succeeded,
                "skipped_failed": self.failed, "skipped_active": self.active,
                "skipped_conflict": self.conflicts, "not_due": self.not_due, "keys": self.keys,
                "conflict_keys": self.conflict_keys}


def bound(value: object, schedule: Schedule, *, end: bool) -> datetime:
    """A range bound as an aware datetime: a date is local midnight in the schedule's zone (an end
    date covers its whole day); a naive datetime or ISO text is read in the schedule's zone, a wall
    time skipped by a daylight-saving change as the first instant after the gap (as the schedule's
    own fires are)."""
    zone = schedule.cron.zone
    given = value
    if isinstance(value, str):
        text = value.strip()
        try:
            value = date.fromisoformat(text) if len(text) == 10 else datetime.fromisoformat(text)
        except ValueError:
            raise InvalidInput(f"{value!r} is not a date (2026-11-01) or an ISO datetime "
                               "(2026-11-01T02:00, 2026-11-01T02:00+01:00)") from None
    if not isinstance(value, date):
        raise InvalidInput(f"a backfill bound must be a date or a datetime, not {type(value).__name__}")
    try:
        if isinstance(value, datetime):
            result = value if value.tzinfo is not None else local_instant(value, zone)
        else:
            day = value + timedelta(days=1) if end else value
            result = local_instant(datetime.combine(day, time()), zone)
        result.timestamp()  # an instant before year 1 or after 9999 in UTC fails here
    except (OverflowError, ValueError):  # before year 1 or past year 9999
        raise _out_of_range(f"{'to' if end else 'from'} {_shown(given)}", schedule) from None
    return result


def _out_of_range(what: str, schedule: Schedule) -> InvalidInput:
    return InvalidInput(f"{what} is outside what can be scheduled: the windows of {schedule.name!r} can be "
                        "computed between the years 1 and 9999 (a window near either end needs the fires "
                        "around it too)")


def _is_day(value: object) -> bool:
    """Whether a range bound is a date (a whole day), not a datetime."""
    if isinstance(value, str):
        return len(value.strip()) == 10
    return isinstance(value, date) and not isinstance(value, datetime)


def _shown(value: object) -> str:
    """A range bound as the user gave it."""
    if isinstance(value, str):
        return value.strip()
    return value.isoformat() if isinstance(value, date) else repr(value)


def backfill(app: App, name: str, start: object, end: object, *, dry_run: bool = False, rerun: str = "none",
             max_active: int | None = None, progress: Callable[[int, int], None] | None = None,
             actor: str | None = None, reason: str | None = None) -> BackfillResult:
    """Enqueue the windows of schedule ``name`` that start in [start, end) and have ended. Its
    ``backfill_started`` and ``backfill_finished`` events (and the ``rerun`` event of each window it
    re-runs) record ``actor`` (default ``$FIRESAFE_ACTOR``, else user@host) and ``reason``."""
    from firesafe.deadletters.audit import actor_of, reason_of

    schedule = app.schedules.get(name)
    if schedule is None:
        known = ", ".join(sorted(app.schedules)) or "none"
        raise InvalidInput(f"no schedule named {name!r} is declared (declared: {known})")
    if rerun not in RERUN_POLICIES:
        raise InvalidInput(f"unknown rerun policy {rerun!r}: use none, failed or all")
    if max_active is not None and (not isinstance(max_active, int) or isinstance(max_active, bool) or max_active < 1):
        raise InvalidInput(f"max_active must be a whole number >= 1 (or None), not {max_active!r}")
    lo, hi = bound(start, schedule, end=False), bound(end, schedule, end=True)
    if lo >= hi:
        hint = f" (a date as 'to' covers its whole day, up to {hi.isoformat()})" if _is_day(end) else ""
        raise InvalidInput(f"the range is empty: from {_shown(start)} is not before to {_shown(end)}{hint}")
    store = app.store
    now = store.now()
    result = BackfillResult(name, lo, hi, dry_run, rerun)
    lo_ts, hi_ts = lo.timestamp(), hi.timestamp()

    def ended() -> Iterator[tuple[int, int]]:
        for w in schedule.cron.iter_windows_starting(lo_ts, hi_ts):
            if w[1] > now:  # from here on no window of the range has ended
                return
            yield w

    total = 0  # a first pass only counts (windows are cheap to compute); the second enqueues
    try:  # the second pass computes no window this one did not, so it cannot fail where this passed
        for w in schedule.cron.iter_windows_starting(lo_ts, hi_ts):
            if w[1] <= now:
                total += 1
            else:
                result.not_due += 1
                if result.not_due >= FUTURE_LIMIT:
                    break
    except (OverflowError, ValueError):  # a fire past year 9999 or before year 1
        raise _out_of_range(f"the range from {_shown(start)} to {_shown(end)}", schedule) from None
    result.windows = total
    who, why = actor_of(actor), reason_of(reason)
    backfill_id = uuid.uuid4().hex[:12]
    has_missed = bool(store.schedule_missed_count().get(name))
    if progress:
        progress(0, total)
    if not dry_run:
        store.schedule_event_record(name, NewEvent("backfill_started", {
            "id": backfill_id, "from": lo.isoformat(), "to": hi.isoformat(), "windows": total, "rerun": rerun,
            "max_active": max_active, "actor": who, "reason": why}, dedupe=f"backfill_started:{name}:{backfill_id}"))
    done = 0
    rerun_any = False
    last: tuple[int, int] | None = None  # the latest window enqueued or re-run
    pause = threading.Event()
    windows = ended()
    while done < total:
        size = CHUNK
        if max_active is not None and not dry_run:
            size = min(size, _free_slots(app, name, max_active, pause))
        chunk = list(itertools.islice(windows, size))
        if not chunk:
            break
        items = schedule.items(chunk)
        if dry_run:
            _classify_dry(app, result, items)
        else:
            resolved = _apply(app, schedule, result, items, chunk, who, why)
            rerun_any = rerun_any or result.rerun_count > 0
            if resolved:
                last = max(last or resolved[-1], resolved[-1])
            if has_missed and resolved:
                store.schedule_missed_resolve(name, [w[0] for w in resolved])
        done += len(chunk)
        if progress:
            progress(done, total)
    if not dry_run:
        if rerun_any:
            app.wake_workers()
        store.schedule_event_record(name, NewEvent("backfill_finished", {
            "id": backfill_id, "from": lo.isoformat(), "to": hi.isoformat(), "windows": total,
            "enqueued": result.enqueued, "rerun_count": result.rerun_count, "skipped": result.skipped,
            "conflicts": result.conflicts, "actor": who, "reason": why,
            # the latest window it enqueued or re-ran: `firesafe schedules` shows it as the last window
            "last_start": last[0] if last else None, "last_end": last[1] if last else None},
            dedupe=f"backfill_finished:{name}:{backfill_id}"))
    return result


def _free_slots(app: App, name: str, max_active: int, pause: threading.Event) -> int:
    """Wait until fewer than ``max_active`` windows of the schedule wait or run; how many may start."""
    while True:
        counts = app.store.schedule_job_counts(name)
        active = sum(counts.get(str(s), 0) for s in _ACTIVE)
        if active < max_active:
            return max_active - active
        pause.wait(POLL)


def _classify_dry(app: App, result: BackfillResult, items: list[dict[str, Any]]) -> None:
    states = app.store.schedule_window_states([i["key"] for i in items])
    for item in items:
        found = states.get(item["key"])
        if found is None:
            result.enqueued += 1
            _note(result, item["key"])
        elif _wants_rerun(result.rerun, State(found[1])):
            result.rerun_count += 1
            _note(result, item["key"])
        else:
            _count_skip(result, State(found[1]))


def _apply(app: App, schedule: Schedule, result: BackfillResult, items: list[dict[str, Any]],
           chunk: list[tuple[int, int]], actor: str, reason: str | None = None) -> list[tuple[int, int]]:
    """Enqueue a chunk; re-run what the policy asks. Returns the windows now enqueued or re-run, in order."""
    jobs = enqueue_keeping_stored(schedule, items)
    resolved: list[tuple[int, int]] = []
    for job, item, window in zip(jobs, items, chunk, strict=True):
        if job is None:
            result.conflicts += 1
            if len(result.conflict_keys) < MAX_KEYS:
                result.conflict_keys.append(item["key"])
        elif job.created:
            result.enqueued += 1
            _note(result, job.key)
            resolved.append(window)
        elif _wants_rerun(result.rerun, job.state):
            # a succeeded window runs from scratch; a dead or cancelled one resumes its recorded steps
            from_position = 0 if job.state == State.SUCCEEDED else None
            if app.store.job_rerun(job.id, actor, from_position, reason):
                result.rerun_count += 1
                _note(result, job.key)
                resolved.append(window)
            else:  # it moved meanwhile (a worker replayed it, say): leave it
                result.active += 1
        else:
            _count_skip(result, job.state)
    return resolved


def _note(result: BackfillResult, key: str) -> None:
    if len(result.keys) < MAX_KEYS:
        result.keys.append(key)


def _wants_rerun(policy: str, state: State) -> bool:
    if state in _FAILED:
        return policy in ("failed", "all")
    return state == State.SUCCEEDED and policy == "all"


def _count_skip(result: BackfillResult, state: State) -> None:
    if state == State.SUCCEEDED:
        result.succeeded += 1
    elif state in _FAILED:
        result.failed += 1
    else:
        result.active += 1
