"""The application object: where jobs are declared, enqueued, run and reviewed."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, Concatenate, ParamSpec, TypeVar, overload

from firesafe.clock import Clock
from firesafe.deadletters import DeadLetters
from firesafe.errors import ConfigError, InvalidInput, JobNotFound
from firesafe.hooks import Hook, Hooks, JobsReplayed
from firesafe.idempotency.keys import check_key
from firesafe.jobs import JobDef, in_thread
from firesafe.masking import Mask
from firesafe.masking import extend as extend_mask
from firesafe.models import Job
from firesafe.retries.backoff import Backoff
from firesafe.retries.decide import DEFAULT_MAX_DEFERRALS
from firesafe.signals import SignalRecord, SignalSent
from firesafe.states import State
from firesafe.steps.versions import DIVERGENCE_POLICIES
from firesafe.store import Store, check_schema, resolve_url
from firesafe.store.base import JobFilter
from firesafe.stores import open_store

log = logging.getLogger("firesafe")

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: How long a reserved key's record must have been committed before its job's row may be deleted
#: (seconds): an enqueue that began before the record existed has ended by then (see
#: store/sql/postgres.sql, job_delete_reserved).
RESERVE_SETTLE = 120.0


@dataclass(frozen=True)
class Retention:
    """How long finished jobs are kept, in seconds: their whole history (arguments, result, trace,
    steps) per final state, and their keys. A key stays reserved for the longer of its job's history
    and ``keys``: once the history is pruned, a compact record (key, fingerprint, final state, a short
    result or its digest) keeps it reserved, so a duplicate enqueue still returns the stored outcome
    and other arguments still conflict (docs/keys.md)."""

    succeeded: float = 86400
    cancelled: float = 86400
    dead: float = 30 * 86400
    keys: float = 7 * 86400


class App:
    """A firesafe application: a store plus the jobs your code declares.

    ``App()`` uses ``$FIRESAFE_STORE``, else ``sqlite:///firesafe.db``. ``mask=Mask(names=...,
    patterns=...)`` masks more secrets than firesafe's own, in every output of the process
    (docs/operations.md, "Masking secrets"). ``hooks=[...]``: :class:`firesafe.Hook` instances told
    of workers, attempts, dead letters and replays (docs/extending.md; :meth:`add_hook` adds more).
    """

    #: Rows a prune deletes (or keys it records) per statement: short transactions, however much
    #: is due.
    PRUNE_BATCH = 1000

    def __init__(self, store: str | Store | None = None, *, clock: Clock | None = None, lease: float = 30.0,
                 auto_migrate: bool = True, retention: Retention | None = None, prune_interval: float = 60.0,
                 prune_pace: float = 0.25,
                 max_payload: int | None = None, store_options: Mapping[str, Any] | None = None,
                 alerts: Sequence[Any] | None = None, mask: Mask | None = None,
                 hooks: Sequence[Hook] | None = None) -> None:
        if lease <= 0:
            raise ConfigError("lease must be > 0 seconds")
        if mask is not None and not isinstance(mask, Mask):
            raise ConfigError(f"mask must be a firesafe.Mask, not {type(mask).__name__}")
        extend_mask(mask or Mask())  # more to mask in every output of this process; checks $FIRESAFE_MASK_*
        #: The store once opened and checked (see :attr:`store`); a store given here waits in _given till then.
        self._store: Store | None = None
        self._given: Store | None = None
        if isinstance(store, Store):
            self._given = store
            self.store_url = store.url
        else:
            self.store_url = resolve_url(store)
        self._clock = clock
        self._store_options = dict(store_options or {})
        self.lease = lease
        self.auto_migrate = auto_migrate
        self.retention = retention or Retention()
        #: Per final state, when the last job whose key :meth:`prune` recorded finished.
        self._reserved_up_to: dict[State, float] = {}
        self.prune_interval = prune_interval
        if not 0.01 <= prune_pace <= 1.0:
            raise ConfigError(f"prune_pace must be from 0.01 to 1 (the share of the time a worker's pruner works), "
                              f"not {prune_pace!r}")
        #: The share of the time a worker's pruner spends working (docs/operations.md).
        self.prune_pace = prune_pace
        from firesafe.idempotency.keys import MAX_PAYLOAD_BYTES

        self.max_payload = max_payload or MAX_PAYLOAD_BYTES
        self.jobs: dict[str, JobDef] = {}
        #: Declared limiters by name (:class:`firesafe.limits.api.Limiter`).
        self.limiters: dict[str, Any] = {}
        #: Declared schedules by name (:class:`firesafe.schedules.schedule.Schedule`).
        self.schedules: dict[str, Any] = {}
        self.dlq = DeadLetters(self)
        self._store_lock = threading.Lock()
        from firesafe.alerts.manager import Alerts

        #: Alert sinks and rules (:class:`firesafe.alerts.manager.Alerts`); workers dispatch them.
        self.alerts = Alerts(self, alerts or ())
        #: Every hook of the app, firesafe's own parts first (the workers of this process to wake on an
        #: enqueue, the alert dispatcher; the scheduler once a schedule is declared), then the user's.
        self._wakeups = _Wakeups()
        self.hooks = Hooks([self._wakeups, self.alerts])
        for hook in hooks or ():
            self.add_hook(hook)

    # -- the store ---------------------------------------------------------------------------
    @property
    def store(self) -> Store:
        """The store, opened at the first use: migrated then if ``auto_migrate`` (a store given as an
        object is used as it is). Either way a store that a newer firesafe migrated is refused then,
        with :class:`~firesafe.errors.SchemaTooNew`, before anything is read or written: workers,
        enqueues and the dashboard all reach the store through here, and only the first use checks."""
        if self._store is None:
            with self._store_lock:
                if self._store is None:
                    self._store = self._open_store()
        return self._store

    def connect(self) -> Store:
        """Another store object on this app's store (its clock and options), for a part that needs
        a connection of its own (a supervisor's); not migrated nor checked. The caller closes it."""
        return open_store(self.store_url, self._clock, **self._store_options)

    def _open_store(self) -> Store:
        given = self._given
        store = given or open_store(self.store_url, self._clock, **self._store_options)
        try:
            if self.auto_migrate and given is None:
                store.migrate()  # refuses a newer schema itself
            else:
                check_schema(store)
        except BaseException:
            if given is None:
                store.close()
            raise
        return store

    def close(self) -> None:
        store = self._store if self._store is not None else self._given
        if store is not None:
            store.close()

    # -- declaring ---------------------------------------------------------------------------
    # Typed so that the JobDef keeps the function's signature: its enqueue takes the function's arguments.
    @overload
    def job(self, fn: Callable[Concatenate[Any, _P], _R], *, name: str | None = None, queue: str = "default",
            max_attempts: int = 5, backoff: Backoff | None = None, timeout: float | None = None,
            give_up_on: Iterable[type[BaseException]] = (), max_deferrals: int = DEFAULT_MAX_DEFERRALS,
            limiter: str | None = None, limiters: Sequence[str] | None = None,
            alert: Any = None, priority: int = 0, on_divergence: str = "dead") -> JobDef[_P, _R]: ...
    @overload
    def job(self, fn: None = None, *, name: str | None = None, queue: str = "default",
            max_attempts: int = 5, backoff: Backoff | None = None, timeout: float | None = None,
            give_up_on: Iterable[type[BaseException]] = (), max_deferrals: int = DEFAULT_MAX_DEFERRALS,
            limiter: str | None = None, limiters: Sequence[str] | None = None,
            alert: Any = None, priority: int = 0,
            on_divergence: str = "dead") -> Callable[[Callable[Concatenate[Any, _P], _R]], JobDef[_P, _R]]: ...

    def job(self, fn: Callable[..., Any] | None = None, *, name: str | None = None, queue: str = "default",
            max_attempts: int = 5, backoff: Backoff | None = None, timeout: float | None = None,
            give_up_on: Iterable[type[BaseException]] = (), max_deferrals: int = DEFAULT_MAX_DEFERRALS,
            limiter: str | None = None, limiters: Sequence[str] | None = None, alert: Any = None,
            priority: int = 0, on_divergence: str = "dead") -> Any:
        """Declare a job. Use as ``@app.job`` or ``@app.job(max_attempts=..., queue=...)``.

        Defaults: 5 attempts, ``Backoff()`` (1 s doubling, capped at 300 s, full jitter), no timeout.
        ``limiter``/``limiters``: every attempt runs under these limiters (see :meth:`limiter`).
        ``alert``: an ``AlertPolicy`` (or a severity, or ``"mute"``) for the job's alerts (docs/alerts.md).
        ``priority``: -100 to 100, higher first within the queue; an enqueue may give its own with
        ``options(priority=...)`` (docs/priorities.md).
        ``on_divergence``: where a run's steps differ from the recorded run's (the code changed under
        it), ``"dead"`` fails it with NonDeterminism; ``"rerun"`` forgets the recorded steps from the
        first difference on, records a ``divergence`` event and runs the new code from there
        (docs/steps.md, "Deploys that change running work").
        """

        def register(f: Callable[..., Any]) -> JobDef:
            job_name = name or f.__name__
            if not isinstance(on_divergence, str) or on_divergence not in DIVERGENCE_POLICIES:
                raise ConfigError(f"job {job_name!r}: on_divergence must be one of "
                                  f"{', '.join(map(repr, DIVERGENCE_POLICIES))}, not {on_divergence!r}")
            if job_name in self.jobs:
                raise ConfigError(f"a job named {job_name!r} is already declared")
            jd = JobDef(self, f, name=job_name, queue=queue, max_attempts=max_attempts,
                        backoff=backoff or Backoff(), timeout=timeout, give_up_on=tuple(give_up_on),
                        max_deferrals=max_deferrals, priority=priority)
            if limiter is not None or limiters:
                from firesafe.limits.api import job_limiters

                jd.limiters = job_limiters(job_name, limiter, limiters)
            jd.on_divergence = on_divergence
            if alert is not None:
                from firesafe.alerts.policy import AlertPolicy

                jd.alert = AlertPolicy.of(alert, job_name)
            self.jobs[job_name] = jd
            return jd

        return register(fn) if fn is not None else register

    def queues(self) -> tuple[str, ...]:
        return tuple(sorted({j.queue for j in self.jobs.values()} or {"default"}))

    def limiter(self, name: str, *, rate: float | None = None, per: float = 1.0, burst: float | None = None,
                concurrency: int | None = None, breaker_after: int | None = 5, cooldown: float = 30.0) -> Any:
        """Declare a limiter shared by every worker: ``rate`` jobs per ``per`` seconds (bucket of
        ``burst``, default a tenth of a second's worth), at most ``concurrency`` at once, and an outage
        breaker that opens after ``breaker_after`` transient failures in a row for ``cooldown`` seconds.

        Jobs name it with ``@app.job(limiter=...)``; a block of a job with ``with ctx.limit(...)``.
        Returns a :class:`firesafe.limits.api.Limiter` (``pause``, ``resume``, ``status``). See docs/limits.md.
        """
        from firesafe.limits.api import declare

        return declare(self, name, rate=rate, per=per, burst=burst, concurrency=concurrency,
                       breaker_after=breaker_after, cooldown=cooldown)

    # -- schedules (firesafe/schedules) --------------------------------------------------------
    def schedule(self, expression: str, **options: Any) -> Any:
        """Declare a schedule: ``@app.schedule("0 2 * * *", tz="Europe/Berlin", catchup="all",
        catchup_window=timedelta(days=7))`` over a function ``(ctx, window)``.

        Each window is a job keyed ``<name>@<window start>``, enqueued once when the window ends into
        the schedule's ``queue`` (default ``default``), by the scheduler that runs inside the workers
        serving that queue. Options: ``tz``, ``catchup`` (all, latest, skip), ``catchup_window``,
        ``grace``, ``name`` and the options of :meth:`job`. See docs/schedules.md.
        """
        from firesafe.schedules.schedule import declare

        return declare(self, expression, **options)

    def backfill(self, name: str, start: Any, end: Any, *, dry_run: bool = False, rerun: str = "none",
                 max_active: int | None = None, progress: Callable[[int, int], None] | None = None,
                 actor: str | None = None, reason: str | None = None) -> Any:
        """Enqueue the windows of schedule ``name`` that start in [start, end) and have ended; each at
        most once, so it is safe to run again. ``rerun``: none, failed (dead or cancelled windows) or
        all (finished ones too). Dates are whole days in the schedule's time zone. Its events record
        ``actor`` (default ``$FIRESAFE_ACTOR``, else user@host) and ``reason``."""
        from firesafe.schedules.backfill import backfill

        return backfill(self, name, start, end, dry_run=dry_run, rerun=rerun, max_active=max_active,
                        progress=progress, actor=actor, reason=reason)

    def schedule_pause(self, name: str, *, actor: str | None = None, reason: str | None = None) -> None:
        """Pause a schedule: windows that end while it is paused are not run. Recorded in the audit
        log with ``actor`` (default ``$FIRESAFE_ACTOR``, else user@host) and ``reason``."""
        from firesafe.schedules.status import pause

        pause(self, name, True, actor=actor, reason=reason)

    def schedule_resume(self, name: str, *, actor: str | None = None, reason: str | None = None) -> None:
        """Resume a paused schedule from now (backfill the paused range to run its windows). Recorded
        in the audit log with ``actor`` and ``reason``."""
        from firesafe.schedules.status import pause

        pause(self, name, False, actor=actor, reason=reason)

    def schedules_status(self) -> list[Any]:
        """Each schedule: expression, time zone, last and next window, counts of its windows."""
        from firesafe.schedules.status import status

        return status(self)

    # -- enqueue by name (CLI) ---------------------------------------------------------------
    def enqueue(self, name: str, *args: Any, **options: Any) -> Job:
        return self.job_named(name).enqueue(*args, **options)

    def job_named(self, name: str) -> JobDef[Any, Any]:
        """The declared job called ``name``; :class:`InvalidInput` naming the declared ones if none is."""
        jd = self.jobs.get(name)
        if jd is None:
            known = ", ".join(sorted(self.jobs)) or "none"
            raise InvalidInput(f"no job named {name!r} is declared (declared: {known})")
        return jd

    # -- reading and controlling -------------------------------------------------------------
    def get(self, key: str) -> Job:
        """The job with this key, with its trace (every attempt) and events; once its history was
        pruned, the record that keeps its key reserved (``job.pruned``: no arguments or trace)."""
        key = check_key(key)
        job = self.store.job_get(key, full=True) or self.store.reserved_get([key]).get(key)
        if job is None:
            raise JobNotFound(key)
        return job

    async def get_async(self, key: str) -> Job:
        """:meth:`get` for async code: the same answer and errors, read in a worker thread so that the
        event loop keeps running."""
        return await in_thread(self.get, key)

    def jobs_list(self, *, state: str | None = None, job: str | None = None, queue: str | None = None,
                  limit: int = 100, offset: int = 0) -> list[Job]:
        if state is not None and state not in {s.value for s in State}:
            raise InvalidInput(f"unknown state {state!r}: use one of {', '.join(s.value for s in State)}")
        return self.store.job_list(JobFilter(state=state, name=job, queue=queue, limit=limit, offset=offset))

    def cancel(self, key: str, actor: str | None = None, *, reason: str | None = None) -> str:
        """Cancel a waiting job at once, or ask a running one to stop (``ctx.cancelled``).

        Returns ``"cancelled"``, ``"requested"`` or ``"finished"`` (it had already ended). The job's
        event records ``actor`` (default ``$FIRESAFE_ACTOR``, else user@host) and ``reason``. Its
        children that have not ended are cancelled (or asked to stop) too, down the tree.
        """
        from firesafe.deadletters.audit import actor_of, reason_of

        job = self.store.job_get(check_key(key))
        if job is None:
            raise JobNotFound(key)
        return self.store.job_cancel(job.id, actor_of(actor), reason_of(reason))

    def rerun(self, key: str, *, from_step: str | None = None, from_scratch: bool = False,
              actor: str | None = None, reason: str | None = None) -> Job:
        """Run a finished job again under its key.

        By default it resumes: recorded steps are restored, not run again. ``from_step`` forgets
        that step and every later one; ``from_scratch`` forgets them all. The job's ``rerun`` event
        records ``actor`` (default ``$FIRESAFE_ACTOR``, else user@host) and ``reason``.
        """
        from firesafe.deadletters.audit import actor_of, reason_of

        if from_step is not None and from_scratch:
            raise InvalidInput("give from_step or from_scratch, not both")
        job = self.store.job_get(check_key(key))
        if job is None:
            if self.store.reserved_get([key]):
                raise InvalidInput(f"job {key!r} cannot be rerun: its history was pruned (only the record that "
                                   "keeps its key reserved is left)")
            raise JobNotFound(key)
        position: int | None = 0 if from_scratch else None
        if from_step is not None:
            steps = self.store.step_list(job.id)
            found = [s.position for s in steps if s.name == from_step]
            if not found:
                names = ", ".join(s.name for s in steps) or "none recorded"
                raise InvalidInput(f"job {key!r} has no recorded step {from_step!r} (steps: {names})")
            position = found[0]
        who, why = actor_of(actor), reason_of(reason)
        if not self.store.job_rerun(job.id, who, position, why):
            raise InvalidInput(f"job {key!r} is {job.state}; only a dead, cancelled or succeeded job can be rerun")
        self.wake_workers()
        self._replayed([job.key], who, why, "rerun")
        return self.get(key)

    def signal(self, key: str, name: str, data: Any = None, *, actor: str | None = None,
               reason: str | None = None) -> SignalSent:
        """Send signal ``name`` with JSON ``data`` to the job ``key`` (see ``ctx.wait_for_signal``).

        The signal is kept once per job and name: sent before the job waits, it answers the wait
        when it comes; sent while the job is parked waiting for it, the job is due at once. The
        same signal sent again is delivered once (the result's ``sent`` is False); with other data
        it raises :class:`~firesafe.signals.SignalConflict`. A ``signal_sent`` event records
        ``actor`` (default ``$FIRESAFE_ACTOR``, else user@host) and ``reason``. An unknown key
        raises :class:`JobNotFound`; a finished job, :class:`InvalidInput`.
        """
        from firesafe.deadletters.audit import actor_of, reason_of
        from firesafe.signals import check_signal_name, signal_data_json

        sent = self.store.signal_send(check_key(key), check_signal_name(name), signal_data_json(data),
                                      actor_of(actor), reason_of(reason))
        if sent.woke:
            self.wake_workers()
        return sent

    def signals(self, key: str) -> list[SignalRecord]:
        """The signals sent to a job, oldest first."""
        job = self.store.job_get(check_key(key))
        if job is None:
            raise JobNotFound(key)
        return self.store.signal_list(job.id)

    def steps(self, key: str) -> list[dict[str, Any]]:
        """The recorded steps of a job: name, position, result, and the run that recorded it."""
        job = self.store.job_get(check_key(key))
        if job is None:
            raise JobNotFound(key)
        return [{"name": s.name, "position": s.position, "result": json.loads(s.result) if s.result else None,
                 "run": s.run_seq} for s in self.store.step_list(job.id)]

    def prune(self, leader: str | None = None, *, pace: float = 1.0,
              stop: threading.Event | None = None) -> dict[str, int]:
        """Delete the history of finished jobs older than their retention, keeping a compact record
        of each key still within ``Retention.keys`` (its job's row goes once that record has been
        committed for ``RESERVE_SETTLE`` seconds), and free the keys older than that. Returns the
        jobs deleted per state and ``keys_freed``, the reserved keys freed.

        ``leader``: prune only while holding the ``pruner`` lease under this name (one process of the
        fleet at a time; returns ``{}`` if another holds it). ``pace``: the share of the time spent
        working, from 0.01 to 1; after each batch of ``PRUNE_BATCH`` rows it pauses so as to keep to
        it (a worker's pruner runs at ``App(prune_pace=...)``). ``stop``: an event that ends the
        prune between two batches."""
        if not 0.01 <= pace <= 1.0:
            raise InvalidInput(f"pace must be from 0.01 to 1 (the share of the time spent pruning), not {pace!r}")
        store = self.store
        ttl = max(self.prune_interval * 2, 30.0)
        if leader is not None and not store.leader_acquire("pruner", leader, ttl):
            return {}
        renewed = time.monotonic()

        def go_on(work: Callable[[], int]) -> int:
            """Run one batch, then pause to keep to the pace (and renew the lease); 0 once stopped."""
            nonlocal renewed
            if stop is not None and stop.is_set():
                return 0
            began = time.monotonic()
            done = work()
            ended = time.monotonic()
            if leader is not None and ended - renewed > ttl / 3:
                if not store.leader_acquire("pruner", leader, ttl):
                    return 0  # another process prunes now
                renewed = ended
            if pace < 1.0 and done:
                pause = (ended - began) * (1.0 / pace - 1.0)
                if stop is not None:
                    stop.wait(pause)
                else:
                    time.sleep(pause)
            return done

        keys, batch = self.retention.keys, self.PRUNE_BATCH
        removed = {}
        for state, age in ((State.SUCCEEDED, self.retention.succeeded), (State.CANCELLED, self.retention.cancelled),
                           (State.DEAD, self.retention.dead)):
            total = 0
            if keys > age:  # keep the keys reserved past the history: records first, rows later
                # From where the last prune of this process stopped: the jobs before it have their
                # records (one that finished behind it keeps its row until Retention.keys, no less).
                def reserve(state: State = state, age: float = age) -> int:
                    got = store.job_reserve_finished(state, age, keys, self._reserved_up_to.get(state), batch)
                    if got:
                        self._reserved_up_to[state] = got[-1][0]
                    return len(got)

                while go_on(reserve) == batch:
                    pass
                while (n := go_on(partial(store.job_delete_reserved, state, age, RESERVE_SETTLE, batch))) > 0:
                    total += n
            while (n := go_on(partial(store.job_delete_finished, state, max(age, keys), batch))) > 0:
                total += n
            removed[str(state)] = total
        freed = 0
        while (n := go_on(partial(store.reserved_delete_expired, keys, batch))) > 0:
            freed += n
        removed["keys_freed"] = freed
        return removed

    # -- running -----------------------------------------------------------------------------
    def worker(self, queues: Sequence[str] | None = None, **options: Any) -> Any:
        from firesafe.worker import Worker

        return Worker(self, queues, **options)

    def work(self, queues: Sequence[str] | None = None, *, burst: bool = False, concurrency: int = 8,
             lanes: int = 1, **options: Any) -> Any:
        """Run a worker in this process; with ``burst`` return once nothing is runnable.

        ``wait_scheduled=True`` (with ``burst``) also waits for jobs scheduled later (retries).
        ``lanes``: claim loops sharing the ``concurrency`` threads, each with its own store
        connection (see docs/operations.md: 2 may help one process of very short jobs on PostgreSQL).
        ``pipeline``: store transactions kept in flight (default: 2 on PostgreSQL while prefetching,
        else 1; see firesafe/worker/pipeline.py). ``scheduler=False``: this worker enqueues no schedule
        windows (by default it runs the scheduler of the schedules on its queues). Other options: see
        :class:`firesafe.worker.Worker`.
        """
        w = self.runner(queues, lanes, burst=burst, concurrency=concurrency, **options)
        if threading.current_thread() is threading.main_thread() and not burst:
            w.install_signal_handlers()
        return w.run()  # its loops register with the app while they run (see _Wakeups)

    def runner(self, queues: Sequence[str] | None, lanes: int, **options: Any) -> Any:
        """One worker, or several claim loops in this process (firesafe/worker/lanes.py), not yet
        running: ``run()`` runs it, ``stop()`` stops it. Options as for :meth:`run_worker`."""
        if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1:
            raise ConfigError(f"lanes must be a whole number >= 1, not {lanes!r}")
        if lanes == 1 or options.get("concurrency", 8) < 2:
            return self.worker(queues, **options)
        from firesafe.worker.lanes import Lanes

        return Lanes(self, queues, lanes=lanes, **options)

    # -- the event inbox ---------------------------------------------------------------------
    @property
    def inbox(self) -> Any:
        """The event inbox (:class:`firesafe.inbox.Inbox`)."""
        inbox = self.__dict__.get("_inbox")
        if inbox is None:
            from firesafe.inbox import Inbox

            inbox = self.__dict__["_inbox"] = Inbox(self)
        return inbox

    def on_event(self, source: str, type: str = "*", **job_options: Any) -> Any:
        """Declare the handler of a source's events of one type (``"*"``: any); it runs as a job
        keyed ``<source>:<event id>``, at most once per event however often it is delivered."""
        return self.inbox.on_event(source, type, **job_options)

    def event_source(self, name: str, **options: Any) -> Any:
        """Configure how webhook requests of a source are read and verified (see docs/events.md)."""
        return self.inbox.source(name, **options)

    def ingest(self, source: str, *, event_id: str, type: str, data: Any = None) -> Job | None:
        """Store an event once and enqueue its handler's job once; returns the job (None if unhandled)."""
        return self.inbox.ingest(source, event_id=event_id, type=type, data=data)

    # -- alerts ------------------------------------------------------------------------------
    def alert_rules(self, *, failure_rate: float | None = 0.5, failure_window: timedelta | float = 600.0,
                    stuck_after: timedelta | float | None = 900.0, **options: Any) -> None:
        """What raises alerts besides dead letters, and how they are grouped and delivered.

        ``failure_rate``: alert once when more than this fraction of a job name's attempts in the
        last ``failure_window`` failed, and once more when it is resolved; ``stuck_after``: alert
        when a queue's oldest runnable job waited that long (or no worker heartbeats for it).
        None turns a rule off. Other options (``min_attempts``, ``group_wait``,
        ``group_interval``, ``delivery_backoff``, ``give_up_after``, ``dispatch``, ...) are in
        docs/alerts.md.
        """
        self.alerts.configure(failure_rate=failure_rate, failure_window=failure_window, stuck_after=stuck_after,
                              **options)

    # -- hooks (firesafe/hooks.py) --------------------------------------------------------------
    def add_hook(self, hook: Hook) -> Hook:
        """Register a :class:`firesafe.Hook` (after those already there); returns it. Workers that
        are running already see it from their next event on (a duty starts only with a worker)."""
        return self.hooks.add(hook)

    def start_duties(self, worker: Any) -> list[Callable[[], None]]:
        """Start the background duties of a worker; returns their stop functions."""
        return self.hooks.start_duties(worker)

    def wake_workers(self) -> None:
        """End the idle wait of this process's workers: jobs were enqueued (or replayed) here."""
        self._wakeups.wake()

    def _replayed(self, keys: Sequence[str], actor: str, reason: str | None, how: str) -> None:
        """Tell the hooks that jobs moved back to their queue (after the store committed the move)."""
        if self.hooks.job_replayed and keys:
            self.hooks.call(self.hooks.job_replayed, JobsReplayed(tuple(keys), actor, reason, how))


def timedelta_seconds(value: timedelta | float) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


class _Wakeups(Hook):
    """The worker loops running in this process: a job enqueued here ends their idle wait at once,
    instead of at their next poll."""

    def __init__(self) -> None:
        self._wakes: dict[int, Callable[[], None]] = {}  # by id(worker)

    def worker_started(self, worker: Any) -> None:
        self._wakes[id(worker)] = worker.wake

    def worker_stopped(self, worker: Any) -> None:
        self._wakes.pop(id(worker), None)

    def wake(self) -> None:
        for wake in list(self._wakes.values()):
            wake()
