"""The scheduler: enqueues each schedule's windows as they come due, inside workers.

Guarantees: every window is enqueued at most once (its job key is ``<schedule>@<start>``, a unique
constraint), and each window that came due is either enqueued or recorded as missed, once. One
scheduler is active per store and queue at a time (the leader lease ``firesafe.scheduler:<queue>``);
when its worker dies another worker serving that queue takes over within one lease period. A worker
runs the scheduler only for the schedules whose queue it serves (none with ``scheduler=False``), so
windows are enqueued where a worker takes them. What a scheduler decided is remembered in the store
(a cursor per schedule), so a restart enqueues nothing that was already decided.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from firesafe.errors import IdempotencyConflict, StoreError
from firesafe.hooks import Hook
from firesafe.retries.duty import Duty
from firesafe.schedules.plan import Plan, decide
from firesafe.schedules.store import AdvanceParams, MissedWindow, NewEvent, ScheduleState

if TYPE_CHECKING:
    from firesafe.app import App
    from firesafe.models import Job
    from firesafe.schedules.schedule import Schedule

log = logging.getLogger("firesafe.schedules")

#: Windows per enqueue transaction.
CHUNK = 1000


@dataclass(frozen=True)
class TickResult:
    """What one tick did for one schedule."""

    enqueued: int = 0  # windows enqueued now (new jobs)
    missed: int = 0  # windows recorded as missed
    recorded: bool = True  # False when another scheduler had already moved the cursor


class Scheduler:
    """One worker's scheduler, for the schedules of ``queues`` (None: every schedule). Call
    :meth:`tick` about every :attr:`interval` seconds."""

    LEADER = "firesafe.scheduler"
    #: Seconds between ticks.
    INTERVAL = 1.0
    #: Seconds the leader lease lasts without renewal: the longest a dead scheduler is not replaced.
    LEASE = 10.0

    def __init__(self, app: App, holder: str, *, queues: Sequence[str] | None = None, interval: float | None = None,
                 lease: float | None = None) -> None:
        self.app = app
        self.holder = holder
        self.queues = None if queues is None else frozenset(queues)
        self.interval = interval or self.INTERVAL
        self.lease = lease or self.LEASE
        self.leading = False  # active for at least one queue
        self._led: set[str] = set()  # the queues whose scheduler lease this one holds

    @classmethod
    def lease_name(cls, queue: str) -> str:
        """The leader lease of the schedules of one queue."""
        return f"{cls.LEADER}:{queue}"

    def schedules(self) -> list[Schedule]:
        """The declared schedules this scheduler runs: those whose queue it serves."""
        return [s for s in self.app.schedules.values() if self.queues is None or s.queue in self.queues]

    def tick(self) -> dict[str, TickResult] | None:
        """Renew or take the lease of each queue served, then decide the due windows of the schedules
        of the queues led; None if this scheduler leads no queue."""
        store = self.app.store
        schedules = self.schedules()
        led = {q for q in sorted({s.queue for s in schedules})
               if store.leader_acquire(self.lease_name(q), self.holder, self.lease)}
        for queue in sorted(self._led - led):
            log.warning("scheduler %s lost the scheduler lease of queue %s", self.holder, queue)
        for queue in sorted(led - self._led):
            log.info("scheduler %s is the active scheduler for queue %s", self.holder, queue)
        self._led = led
        self.leading = bool(led)
        if not led:
            return None
        return self.run([s for s in schedules if s.queue in led])

    def run(self, schedules: Sequence[Schedule] | None = None) -> dict[str, TickResult]:
        """Decide the due windows of ``schedules`` (default: every schedule this scheduler runs),
        without the lease (keys and the cursor's compare-and-set keep schedulers that race from
        enqueuing or recording a window twice)."""
        store = self.app.store
        schedules = self.schedules() if schedules is None else list(schedules)
        if not schedules:
            return {}
        now = store.now()
        states = {s.name: s for s in store.schedule_state_list()}
        results: dict[str, TickResult] = {}
        for schedule in schedules:
            try:
                results[schedule.name] = self.run_schedule(schedule, states.get(schedule.name), now)
            except StoreError:
                raise
            except Exception:  # a bug must not stop the worker or the other schedules
                log.exception("schedule %s: the scheduler tick failed", schedule.name)
        return results

    def run_schedule(self, schedule: Schedule, state: ScheduleState | None, now: float) -> TickResult:
        store = self.app.store
        if state is None:  # first sight: windows that ended before now are not this schedule's
            state = store.schedule_state_init(schedule.name, schedule.expression, schedule.tz)
        if state.paused:
            return TickResult()
        plan = decide(schedule.cron, cursor=state.cursor, now=now, catchup=schedule.catchup,
                      catchup_window=schedule.catchup_window, grace=schedule.grace)
        if plan.cursor == state.cursor and not plan.changed:
            return TickResult()
        created = enqueue_windows(self.app, schedule, plan.enqueue)
        last = plan.enqueue[-1] if plan.enqueue else None
        params = AdvanceParams(
            name=schedule.name, expected=state.cursor, cursor=plan.cursor, expression=schedule.expression,
            tz=schedule.tz, last_start=last[0] if last else None, last_end=last[1] if last else None,
            missed=[MissedWindow(schedule.name, s, e, schedule.key(s), reason) for (s, e), reason in plan.missed],
            events=missed_events(schedule, plan))
        recorded = store.schedule_advance(params)
        if plan.missed and recorded:
            log.warning("schedule %s: %d window(s) missed (catch-up policy %s)", schedule.name, len(plan.missed),
                        schedule.catchup)
        if created:
            log.info("schedule %s: enqueued %d window(s)", schedule.name, created)
        return TickResult(created, len(plan.missed) if recorded else 0, recorded)

    def stop(self) -> None:
        """Give the leases up, so other workers' schedulers take over at once."""
        led, self._led = sorted(self._led), set()
        self.leading = False
        for queue in led:
            try:
                self.app.store.leader_release(self.lease_name(queue), self.holder)
            except StoreError as exc:
                log.warning("could not release the scheduler lease of queue %s (%s); it expires in %.0fs",
                            queue, exc, self.lease)


class SchedulerDuty(Duty):
    """The background duty of a worker that runs its scheduler (invariant 7): a tick every
    ``interval`` in a thread of its own, so a slow tick never holds up jobs; a store fault backs off
    (up to 15 s). Started by the worker for the schedules of the queues it serves; stopping it gives
    the leases up."""

    name = "scheduler"
    log = log

    def __init__(self, app: App, holder: str, queues: Sequence[str] | None = None) -> None:
        self.scheduler = Scheduler(app, holder, queues=queues)
        super().__init__()

    def round(self) -> float:
        self.scheduler.tick()
        return self.scheduler.interval

    def after_bug(self) -> float:
        return self.scheduler.lease

    def released(self) -> None:
        self.scheduler.stop()


class SchedulerHook(Hook):
    """The hook of an app with schedules (registered when the first is declared): its duty is a
    :class:`SchedulerDuty` in each worker that serves the queue of at least one schedule, unless the
    worker was made with ``scheduler=False``."""

    def __init__(self, app: App) -> None:
        self.app = app

    def start_duty(self, worker: Any) -> Callable[[], None] | None:
        app = self.app
        if not app.schedules:
            return None
        if not getattr(worker, "scheduler", True):
            log.info("scheduler off in this worker (scheduler=False / --no-scheduler): it enqueues no windows")
            return None
        queues = getattr(worker, "queues", None)
        served = Scheduler(app, "", queues=queues).schedules()
        if not served:
            elsewhere = sorted({s.queue for s in app.schedules.values()})
            log.info("no schedule is on the queue(s) this worker serves (%s); schedules are on %s: this "
                     "worker runs no scheduler", ", ".join(queues or ()), ", ".join(elsewhere))
            return None
        duty = SchedulerDuty(app, getattr(worker, "id", f"pid-{id(worker)}"), queues)
        duty.start()
        return duty.stop


def enqueue_windows(app: App, schedule: Schedule, bounds: list[tuple[int, int]]) -> int:
    """Enqueue windows (idempotent per window); returns how many were new."""
    created = 0
    for i in range(0, len(bounds), CHUNK):
        jobs = enqueue_keeping_stored(schedule, schedule.items(bounds[i:i + CHUNK]))
        created += sum(j is not None and j.created for j in jobs)
    return created


def enqueue_keeping_stored(schedule: Schedule, items: list[dict[str, Any]]) -> list[Job | None]:
    """Enqueue windows, each at most once; the job of each item, or None for a window whose key is
    stored with other bounds (the expression changed) or for another job: the stored one is kept
    and a warning logged, and the other windows are enqueued all the same."""
    try:
        return list(schedule.job.enqueue_many(items))
    except IdempotencyConflict:  # rare: take the batch one window at a time
        jobs: list[Job | None] = []
        for item in items:
            try:
                jobs.append(schedule.job.enqueue(*item["args"], key=item["key"]))
            except IdempotencyConflict:
                log.warning("schedule %s: window %s exists with other bounds (was the expression "
                            "changed?); kept the stored one", schedule.name, item["key"])
                jobs.append(None)
        return jobs


def missed_events(schedule: Schedule, plan: Plan) -> list[NewEvent]:
    """The ``missed`` event of a tick (one per tick that missed windows), with its alert."""
    if not plan.missed and not plan.unrecorded:
        return []
    reasons: dict[str, int] = {}
    for _, reason in plan.missed:
        reasons[reason] = reasons.get(reason, 0) + 1
    first = plan.missed[0][0] if plan.missed else None
    last = plan.missed[-1][0] if plan.missed else None
    detail = {
        "count": len(plan.missed), "more": plan.unrecorded, "reasons": reasons, "catchup": schedule.catchup,
        "first_window": schedule.cron.iso(first[0]) if first else None,
        "last_window": schedule.cron.iso(last[0]) if last else None,
        "enqueued": len(plan.enqueue),
    }
    keys = [schedule.key(w[0]) for w, _ in plan.missed[-20:]]
    dedupe = f"schedule_missed:{schedule.name}:{first[0] if first else ''}:{plan.cursor}"
    return [NewEvent("missed", detail, keys, dedupe)]
