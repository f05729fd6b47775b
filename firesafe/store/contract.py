"""The store contract: every method a store offers, declared in one place, one Protocol per part.

:class:`Store` combines the parts; :class:`~firesafe.stores.sqlite.SQLiteStore` and
:class:`~firesafe.stores.postgres.PostgresStore` implement all of it, and the contract suite
(tests/contract) runs on both. A caller typed ``Store`` sees every method, and the type checker
checks each call and each store against these signatures (``open_store`` returns either store as a
``Store``). What a store can do beyond the contract is said by its capability attributes
(``dialect``, ``concurrent_writers``, ``supports_listen``), never found by probing for methods.

Methods are named Noun+Verb and take small parameter values. Every method that changes a job names
the state (and, for attempts, the lease token) it expects; it reports per item whether it applied.
The parameter and record types of the core live in :mod:`firesafe.store.base`; each part's beside
its own code (named in each Protocol's docstring).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from firesafe.models import Job
from firesafe.states import State
from firesafe.store.base import (
    Claimed,
    ClaimParams,
    DeadFilter,
    DeadPage,
    Expired,
    FinishParams,
    InsertParams,
    JobFilter,
    Pending,
    RescueParams,
    StepRecord,
)

if TYPE_CHECKING:  # the parts' record types; imported for the checker only (the parts import the store)
    from firesafe.alerts.store import AlertRecord, ClaimedDelivery, NewAlert, OutboxEvent, QueueBacklog
    from firesafe.clock import Clock
    from firesafe.deadletters.audit import AuditEntry
    from firesafe.limits.bucket import LimiterSpec
    from firesafe.limits.store import Acquire, Grant, LimiterEvent, LimiterStatus, Report, Verdict
    from firesafe.schedules.store import AdvanceParams, MissedWindow, NewEvent, ScheduleEvent, ScheduleState
    from firesafe.signals.store import SignalRecord, SignalSent
    from firesafe.store.dashboard import Bucket, DeadGroup, QueueLag


@runtime_checkable
class StoreBasics(Protocol):
    """What every store is: where it is, its clock, its schema, and what it can do (capabilities)."""

    @property
    def url(self) -> str:
        """The URL the store was opened with (it may hold a password: see :attr:`where`)."""
        ...

    @property
    def where(self) -> str:
        """Where the store is, for messages: no password (PostgreSQL: with its schema)."""
        ...

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgres"``: which named queries and migrations the store runs."""
        ...

    @property
    def clock(self) -> Clock | None:
        """The injected clock, or None when the store reads the database's (PostgreSQL)."""
        ...

    @property
    def path(self) -> str | None:
        """The store's file (SQLite), else None."""
        ...

    @property
    def schema(self) -> str | None:
        """The schema holding firesafe's tables (PostgreSQL), else None."""
        ...

    @property
    def concurrent_writers(self) -> bool:
        """Whether transactions from several connections run at once (PostgreSQL) or one after another
        (SQLite: one writer). A worker keeps several of its transactions in flight only where they do."""
        ...

    @property
    def supports_listen(self) -> bool:
        """Whether the store wakes idle workers when jobs arrive: it is then a :class:`ListenStore`."""
        ...

    def now(self) -> float:
        """The store's clock, in seconds since the epoch."""
        ...

    def migrate(self, *, allow_other_tables: bool = False) -> list[int]:
        """Create or upgrade the schema; returns the migration versions applied now.

        Refuses (:class:`~firesafe.errors.SchemaTooNew`, nothing written) a schema that a newer
        firesafe migrated. On SQLite it refuses (:class:`~firesafe.errors.OtherTables`) to create the
        schema in a file that holds other tables unless ``allow_other_tables``; PostgreSQL keeps
        firesafe's tables in a schema of their own and ignores the flag.
        """
        ...

    def schema_version(self) -> int:
        """The newest migration applied (0 for an empty store)."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


@runtime_checkable
class JobStore(Protocol):
    """Jobs and their attempts: enqueue, claim, finish, heartbeat, rescue, read."""

    def job_insert_many(self, items: Sequence[InsertParams], conn: Any = None) -> list[Job]:
        """Insert jobs, at most one per key; an existing key returns the stored job (``created`` False).

        All or nothing: a key already stored (or repeated in ``items``) with another fingerprint
        raises :class:`~firesafe.errors.IdempotencyConflict` and inserts nothing. With ``conn``
        (PostgreSQL) the rows are written in the caller's open transaction.
        """
        ...

    async def job_insert_many_async(self, items: Sequence[InsertParams], conn: Any) -> list[Job]:
        """:meth:`job_insert_many` in the open transaction of an async driver's connection ``conn``
        (PostgreSQL: a psycopg ``AsyncConnection``), awaited on its event loop: the same checks of
        ``conn``, the same savepoint and the same answers and errors. SQLite has no transaction to
        join and refuses, as it refuses ``conn`` in :meth:`job_insert_many`.
        """
        ...

    def job_get(self, key: str, *, full: bool = False) -> Job | None:
        """One job by key; ``full`` also loads its trace and events."""
        ...

    def job_claim(self, params: ClaimParams) -> list[Claimed]:
        """Move up to ``limit`` runnable jobs to ``running`` under a new lease, opening their attempts."""
        ...

    def job_finish_many(self, items: Sequence[FinishParams]) -> list[bool]:
        """End attempts; an item applies only if its job is still running under its token. Data the
        store cannot hold (a NUL in PostgreSQL text, text that is not UTF-8) raises
        :class:`~firesafe.errors.StoreDataError` and keeps nothing, as any other failure does."""
        ...

    def job_finish_and_claim(self, finishes: Sequence[FinishParams],
                             claim: ClaimParams) -> tuple[list[bool], list[Claimed]]:
        """``job_finish_many(finishes)`` then ``job_claim(claim)`` in one transaction: a busy worker
        saves a batch's outcomes and takes its next batch with one commit instead of two. Finishes
        are fenced as in job_finish_many; the claim sees what they wrote. All or nothing."""
        ...

    def job_heartbeat_many(self, items: Sequence[tuple[int, str]], lease: float) -> dict[int, bool]:
        """Extend leases still held; returns ``{job_id: cancel_requested}`` for those held."""
        ...

    def job_list_expired(self, limit: int) -> list[Expired]:
        """Running jobs whose lease has expired."""
        ...

    def job_rescue_many(self, items: Sequence[RescueParams]) -> list[bool]:
        """Record expired attempts as ``lost`` and move their jobs on; fenced on token and expiry."""
        ...

    def job_list(self, filt: JobFilter) -> list[Job]:
        """Jobs matching a filter, newest first."""
        ...

    def job_count(self, filt: JobFilter) -> int:
        """How many jobs match a filter (limit and offset ignored)."""
        ...

    def job_delete_finished(self, state: State, older_than: float, limit: int = 1000) -> int:
        """Delete jobs in a finished state that finished more than ``older_than`` seconds ago
        (their keys become free)."""
        ...

    def job_reserve_finished(self, state: State, older_than: float, keep_for: float,
                             after: float | None = None, limit: int = 1000) -> list[tuple[float, int]]:
        """Write the reserved-key record (key, fingerprint, final state, short result or its
        digest) of up to ``limit`` jobs in ``state`` that finished more than ``older_than`` and at
        most ``keep_for`` seconds ago and have no record of that finish yet, in the order they
        finished, from ``after`` (a finish time) on. Returns the ``(finished_at, id)`` of each job
        recorded, in order: the last finish time is where the next batch starts; fewer than
        ``limit`` means none are left."""
        ...

    def job_delete_reserved(self, state: State, older_than: float, settle: float, limit: int = 1000) -> int:
        """Delete up to ``limit`` jobs in ``state`` that finished more than ``older_than`` seconds
        ago and whose reserved-key record was written more than ``settle`` seconds ago, with their
        history; their keys stay reserved by the records."""
        ...

    def reserved_delete_expired(self, older_than: float, limit: int = 1000) -> int:
        """Delete up to ``limit`` reserved-key records of jobs that finished more than
        ``older_than`` seconds ago: their keys become free."""
        ...

    def reserved_get(self, keys: Sequence[str]) -> dict[str, Job]:
        """The reserved-key records of ``keys`` (jobs whose history was pruned), as jobs whose
        ``pruned`` is true, by key."""
        ...

    def job_stats(self) -> list[tuple[str, str, int]]:
        """``(queue, state, count)`` rows."""
        ...

    def job_pending(self, queues: Sequence[str]) -> Pending:
        """What remains in the given queues."""
        ...


@runtime_checkable
class MoveStore(Protocol):
    """Dead letters and the moves people make: list the dead, replay, discard, cancel."""

    def dead_list(self, filt: DeadFilter) -> DeadPage:
        """A page of the dead jobs matching a filter, the last to die first (ties: the newest id
        first), with the exact cursor of the next page (``after``) when the page is full."""
        ...

    def dead_count(self, filt: DeadFilter) -> int:
        """How many dead jobs match a filter (cursor, limit and offset ignored)."""
        ...

    def job_replay_many(self, ids: Sequence[int], actor: str, reason: str | None = None) -> list[int]:
        """Requeue dead or cancelled jobs with a fresh budget; returns the ids that moved. Each gets a
        ``replayed`` event by ``actor``, with ``reason`` in its detail."""
        ...

    def job_discard_many(self, ids: Sequence[int], actor: str, reason: str | None = None) -> list[int]:
        """Move dead jobs to ``cancelled`` (reason ``discarded``); returns the ids that moved. Each gets
        a ``discarded`` event by ``actor``, with ``reason`` in its detail."""
        ...

    def job_cancel(self, job_id: int, actor: str, reason: str | None = None) -> str:
        """Cancel a waiting job (``"cancelled"``) or ask a running one to stop (``"requested"``);
        ``"finished"`` if it had already ended."""
        ...


@runtime_checkable
class LeaseStore(Protocol):
    """Workers seen and leader leases (the duties that run once per cluster hold one)."""

    def worker_beat(self, worker_id: str, host: str, pid: int, queues: Sequence[str]) -> None:
        """Record that a worker is alive."""
        ...

    def worker_remove(self, worker_id: str) -> None:
        """Forget a worker that stopped cleanly."""
        ...

    def worker_list(self) -> list[dict[str, Any]]:
        """Workers seen, with their last heartbeat."""
        ...

    def worker_process_gone(self, prefix: str, detail: dict[str, Any] | None = None) -> int:
        """A worker process has exited (its supervisor reaped it): end now the leases of the attempts
        it held, so the next rescue takes them back instead of waiting for the leases to run out, give
        up the leader leases its workers held (the isolation of suspects above all: its attempts are
        suspects now) and forget its workers. ``prefix`` is how its worker ids begin
        (``worker_id_prefix`` in firesafe/worker/worker.py). Each job whose lease ended gets an event,
        ``lease_ended`` by ``supervisor``, with ``detail`` (how the process ended). Returns how many
        leases ended. Only for a process known to be gone, with nothing it started still running
        (see firesafe/worker/supervisor.py)."""
        ...

    def leader_acquire(self, name: str, holder: str, ttl: float) -> bool:
        """Take or renew the named leader lease; True if ``holder`` holds it now."""
        ...

    def leader_release(self, name: str, holder: str) -> None:
        """Give up the named leader lease if held."""
        ...


@runtime_checkable
class StepStore(Protocol):
    """Durable steps, keyed ``(job, step name)``, and reruns (records: :class:`~firesafe.store.base.StepRecord`)."""

    def step_list(self, job_id: int) -> list[StepRecord]:
        """The recorded steps of a job, in order."""
        ...

    def step_record(self, job_id: int, token: str, name: str, position: int, result: str) -> bool:
        """Record a completed step; False (nothing written) if the attempt no longer holds the lease
        or the step was recorded already."""
        ...

    def step_forget_from(self, job_id: int, token: str, position: int, detail: dict[str, Any]) -> int | None:
        """Forget a job's recorded steps at ``position`` and after, from inside its running attempt
        (the run's code differs from the recorded run there), and record a ``divergence`` event with
        ``detail`` in the same transaction. Returns how many were forgotten; None (nothing changed)
        if the attempt no longer holds the job's lease."""
        ...

    def job_rerun(self, job_id: int, actor: str, from_position: int | None, reason: str | None = None) -> bool:
        """Requeue a dead, cancelled or succeeded job, forgetting its steps from ``from_position``
        on (None: keep every step, so it resumes); records a ``rerun`` event. False if it is not
        in one of those states."""
        ...


@runtime_checkable
class SignalStore(Protocol):
    """Durable signals, kept once per ``(job, signal name)`` (records: :mod:`firesafe.signals.store`)."""

    def signal_send(self, key: str, name: str, data: str, actor: str, reason: str | None = None) -> SignalSent:
        """Keep signal ``name`` with ``data`` (canonical JSON) for the job ``key`` and, in the same
        transaction, record a ``signal_sent`` event by ``actor`` and make the job due now if it is
        parked waiting for that signal (PostgreSQL: listening workers are woken). The same signal
        sent again is kept once (``sent`` False); with other data it raises
        :class:`~firesafe.signals.SignalConflict`. An unknown key raises
        :class:`~firesafe.errors.JobNotFound`, a finished job :class:`~firesafe.errors.InvalidInput`;
        nothing is written then."""
        ...

    def signal_get(self, job_id: int, name: str) -> SignalRecord | None:
        """The signal a job was sent under ``name``, if any."""
        ...

    def signal_list(self, job_id: int) -> list[SignalRecord]:
        """Every signal a job was sent, oldest first."""
        ...


@runtime_checkable
class ChildStore(Protocol):
    """Child jobs (docs/workflows.md): a job spawns others and waits for them without holding a worker.

    A parent's row counts its children that have not ended; each finish, rescue or cancel that ends
    a child lowers it in the same transaction, and the decrement that reaches 0 wakes the parent if
    it is parked for its children (a ``WaitingForChildren`` deferral, reason ``children``). A replay
    or rerun of a child raises the count again; a replay or rerun of a parent replays its children
    that died or were cancelled; a cancel of a parent cancels its children that have not ended.
    """

    def job_spawn_many(self, parent_id: int, token: str, items: Sequence[InsertParams],
                       step: str | None = None) -> list[Job] | None:
        """Insert children of a running job, at most one per key, and count the new ones on it, in
        one transaction fenced on the parent's lease: None (nothing written) if the attempt no longer
        holds it. A key already stored as a child of this parent returns that child (a repeated
        spawn is a no-op); a key taken by any other job raises InvalidInput and inserts nothing."""
        ...

    def job_children_wait(self, parent_id: int, token: str, keys: Sequence[str], at_least: int) -> int | None:
        """A running job's wait for at least ``at_least`` of its children ``keys``, fenced on its lease
        (None if the attempt no longer holds it): how many of ``keys`` have ended, and, in the same
        transaction, the job's count of children not ended at which it is due again once parked for
        its children (its ``children_wake_at``: 0, all ended, when no more end is needed). The
        count-down that reaches it wakes the job, as reaching 0 does for a wait on all."""
        ...

    def job_children_counts(self, parent_id: int) -> dict[str, int]:
        """``{state: count}`` of a job's children."""
        ...

    def job_children(self, parent_id: int, state: State | str | None = None, after: int = 0,
                     limit: int = 100) -> list[Job]:
        """A page of a job's children in spawn order (id above ``after``), optionally of one state."""
        ...

    def job_get_by_id(self, job_id: int) -> Job | None:
        """One job by id (a child's ``parent_id``), without its trace."""
        ...

    def job_outcomes(self, keys: Sequence[str]) -> dict[str, Job]:
        """How the jobs of ``keys`` stand, by key, read for a parent's wait: jobs with only their key,
        name, state, result, error, reason and finish time (:meth:`Job.from_outcome_row`). Keys with
        no job are left out."""
        ...


@runtime_checkable
class AlertStore(Protocol):
    """The alerts outbox, grouping, deliveries and rules (records: :mod:`firesafe.alerts.store`).

    The outbox (invariant 4): an alert event is written in the same transaction as the event that
    raised it; other parts call :meth:`alert_record` with their own open transaction (``conn``).
    """

    def alert_record(self, kind: str, severity: str | None = None, job_name: str | None = None,
                     keys: Sequence[str] = (), payload: dict[str, Any] | None = None, *,
                     dedupe: str | None = None, conn: Any = None) -> bool:
        """Put an alert event in the outbox; True if recorded, False if ``dedupe`` was seen before.

        With ``conn`` (the connection of a transaction the caller has open in this store: SQLite's
        ``_tx()`` connection, a psycopg connection inside ``transaction()``) the event commits or
        rolls back with the caller's writes (invariant 4); without it, in a transaction of its own.
        """
        ...

    def alert_pending(self, limit: int) -> list[OutboxEvent]:
        """Events not grouped yet, oldest first."""
        ...

    def alert_waiting(self) -> int:
        """How many events wait in the outbox to be grouped."""
        ...

    def alert_last_sent(self, since: float) -> dict[tuple[str, str | None, str, bool], float]:
        """When each (kind, job name, severity, muted) group last became an alert, for alerts made at
        or after ``since`` (an alert is muted when its status is ``muted``)."""
        ...

    def alert_create(self, new: NewAlert) -> int | None:
        """Create an alert from events not grouped yet, and its deliveries, in one transaction.

        None (nothing written) if any of the events was grouped meanwhile by another dispatcher.
        """
        ...

    def alert_delivery_claim(self, sink: str, limit: int, lease: float, alert_id: int | None = None
                             ) -> list[ClaimedDelivery]:
        """Take up to ``limit`` due deliveries to ``sink`` under a new lease."""
        ...

    def alert_delivery_finish(self, alert_id: int, sink: str, token: str, state: str, tried: int,
                              delay: float | None, error: str | None) -> bool:
        """Record a delivery's outcome (``state`` delivered, failed or pending with ``delay``);
        fenced on the lease token."""
        ...

    def alert_list(self, limit: int = 50, kind: str | None = None) -> list[AlertRecord]:
        """Alerts, newest first, with their deliveries."""
        ...

    def alert_conditions(self, kind: str) -> dict[str, bool]:
        """The subjects of a rule and whether each is firing."""
        ...

    def alert_condition_set(self, kind: str, subject: str, firing: bool, event_kind: str,
                            job_name: str | None, keys: Sequence[str], payload: dict[str, Any]) -> bool:
        """Move a rule's subject to firing (or resolved) and record the event, in one transaction;
        False (nothing written) if it already was in that state."""
        ...

    def alert_failure_counts(self, since: float) -> dict[str, tuple[int, int]]:
        """``{job name: (attempts ended, attempts failed)}`` for attempts that ended at or after ``since``."""
        ...

    def alert_failed_keys(self, job_name: str, since: float, limit: int) -> list[str]:
        """Keys of jobs of ``job_name`` whose attempts failed most recently (since ``since``)."""
        ...

    def alert_queue_backlog(self) -> list[QueueBacklog]:
        """Per queue: when its oldest runnable job became due, and how many are runnable."""
        ...

    def alert_prune(self, older_than: float) -> int:
        """Delete alerts (and their events) created more than ``older_than`` seconds ago whose
        deliveries are all over."""
        ...


@runtime_checkable
class ScheduleStore(Protocol):
    """The schedules part: cursors, missed windows, events (records: :mod:`firesafe.schedules.store`)."""

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


@runtime_checkable
class InboxStore(Protocol):
    """Inbound events, stored once per ``(source, event id)``, and the deliveries refused."""

    def inbox_event_store(self, source: str, event_id: str, type: str, data: str, fingerprint: str,
                          body_digest: str | None = None) -> tuple[bool, dict[str, Any]]:
        """Store an event once per (source, event id), and once per (source, body digest) if a digest
        is given, not yet handled; returns (created, the stored row: this id's, else the row of the
        event stored with the same body digest under another id). A delivery of a stored event is
        counted on its row (``redeliveries``; ``changed`` too if its type or data differ)."""
        ...

    def inbox_event_store_many(self, source: str, items: list[dict[str, Any]]
                               ) -> dict[str, tuple[bool, dict[str, Any]]]:
        """Store a batch of one source's events in one transaction, not yet handled;
        ``{event_id: (created, row)}``."""
        ...

    def inbox_event_show(self, source: str, event_id: str) -> dict[str, Any] | None:
        """One stored event, with what the last changed redelivery brought; None if not stored."""
        ...

    def inbox_event_mark_handled(self, source: str, event_id: str) -> bool:
        """Note that the event's job is enqueued; False if no such event is stored."""
        ...

    def inbox_event_mark_handled_many(self, source: str, event_ids: list[str]) -> int:
        """Note that the events' jobs are enqueued; how many rows changed."""
        ...

    def inbox_event_list(self, source: str | None, unhandled: bool, limit: int,
                         offset: int = 0) -> list[dict[str, Any]]:
        """Stored events, newest first (``unhandled``: only those whose job is not enqueued yet)."""
        ...

    def inbox_reject(self, source: str, reason: str, body: str | None) -> None:
        """Record a delivery that was refused (bad signature, malformed body) and why."""
        ...

    def inbox_reject_list(self, source: str | None, limit: int) -> list[dict[str, Any]]:
        """Refused deliveries, newest first."""
        ...


@runtime_checkable
class LimiterStore(Protocol):
    """Rate, concurrency and breaker limiters shared by every worker (records: :mod:`firesafe.limits.store`,
    whose ``LimitsStore`` implements this once over two small dialect adapters)."""

    def limiter_sync(self, specs: Sequence[LimiterSpec]) -> None:
        """Record the declared limiters (their settings, for display); creates missing ones with a
        full bucket. Settings are last-writer-wins; the state (tokens, pause, breaker) is kept."""
        ...

    def limiter_acquire_many(self, specs: Mapping[str, LimiterSpec], items: Sequence[Acquire]) -> list[Grant]:
        """Decide, for claimed jobs in order, which may start under all their limiters now."""
        ...

    def limiter_report_many(self, specs: Mapping[str, LimiterSpec], items: Sequence[Report]) -> list[Verdict]:
        """Apply how attempts ended to their limiters: Retry-After pauses, breaker counts, probes."""
        ...

    def limiter_retry_after(self, specs: Mapping[str, LimiterSpec], limiters: Sequence[str], seconds: float, *,
                            job_id: int | None = None, key: str | None = None) -> float:
        """Pause ``limiters`` for every worker for ``seconds`` from now; returns when the pause ends."""
        ...

    def limiter_pause(self, name: str, *, seconds: float | None = None, until: float | None = None,
                      reason: str | None = None, actor: str | None = None) -> LimiterStatus:
        """Pause a limiter for every worker until ``until`` (or ``seconds`` from now); a pause only grows."""
        ...

    def limiter_resume(self, name: str, *, actor: str | None = None,
                       reason: str | None = None) -> tuple[LimiterStatus, int]:
        """Lift a pause and close the breaker now; returns the status and how many waiting jobs were released."""
        ...

    def limiter_list(self) -> list[LimiterStatus]:
        """Every limiter recorded in the store, with tokens now, slots in use and jobs waiting."""
        ...

    def limiter_event_list(self, after_id: int = 0, limiter: str | None = None, limit: int = 100, *,
                           newest: bool = False) -> list[LimiterEvent]:
        """Limiter events with an id above ``after_id``, oldest first (``newest``: the latest ``limit``)."""
        ...


@runtime_checkable
class DashboardStore(Protocol):
    """What the dashboard reads beyond the core (read-only; records: :mod:`firesafe.store.dashboard`)."""

    def attempt_buckets(self, since: float, until: float, width: float) -> list[Bucket]:
        """Attempts that ended in ``[since, until)``, counted per ``width``-second bucket and outcome."""
        ...

    def dead_groups(self, limit: int = 200) -> list[DeadGroup]:
        """Dead jobs grouped by job name and error type, largest group first."""
        ...

    def queue_lags(self) -> list[QueueLag]:
        """Per queue with runnable jobs: how many, and the wait of the oldest (by the store's clock)."""
        ...

    def attempt_counts(self) -> list[tuple[str, str, int]]:
        """``(job name, outcome, count)`` over the attempts the store holds (``running`` for open ones)."""
        ...


@runtime_checkable
class AuditStore(Protocol):
    """Who did what and why, for actions no job's events can hold (records: :mod:`firesafe.deadletters.audit`)."""

    def audit_record(self, action: str, subject: str | None, actor: str, reason: str | None = None,
                     detail: dict[str, Any] | None = None, *, conn: Any = None) -> int:
        """Record one action; returns its id. With ``conn`` (a transaction the caller has open in this
        store, as for :meth:`AlertStore.alert_record`) it commits or rolls back with the caller's writes."""
        ...

    def audit_list(self, limit: int = 50, action: str | None = None, subject: str | None = None) -> list[AuditEntry]:
        """The latest entries, newest first."""
        ...


@runtime_checkable
class Store(StoreBasics, JobStore, MoveStore, LeaseStore, StepStore, SignalStore, ChildStore, AlertStore,
            ScheduleStore,
            InboxStore, LimiterStore, DashboardStore, AuditStore, Protocol):
    """One store of jobs: every part above. Implementations: :class:`~firesafe.stores.sqlite.SQLiteStore`,
    :class:`~firesafe.stores.postgres.PostgresStore`."""


class Listening(Protocol):
    """A subscription to a store's wake-ups (see :meth:`ListenStore.listen`)."""

    def ready(self, timeout: float) -> bool:
        """Wait until the listener is subscribed (True) or ``timeout`` passes."""
        ...

    def wait(self, timeout: float) -> bool:
        """Wait for the next arrival (True) or ``timeout`` seconds (False); resets after returning True."""
        ...

    def close(self) -> None:
        """Stop listening."""
        ...


@runtime_checkable
class ListenStore(Store, Protocol):
    """A store whose ``supports_listen`` is True: it wakes idle workers the moment jobs arrive."""

    def listen(self, queues: Sequence[str], wake: Callable[[], None] | None = None) -> Listening:
        """Start listening for new runnable jobs in ``queues``; ``wake`` is called for each arrival."""
        ...

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Block until a job arrives in ``queues`` (True) or ``timeout`` seconds pass (False)."""
        ...


#: The parts of the contract, by name (the contract suite checks each store against each).
PARTS: dict[str, type] = {
    "basics": StoreBasics, "jobs": JobStore, "moves": MoveStore, "leases": LeaseStore, "steps": StepStore,
    "signals": SignalStore, "children": ChildStore,
    "alerts": AlertStore, "schedules": ScheduleStore, "inbox": InboxStore, "limits": LimiterStore,
    "dashboard": DashboardStore, "audit": AuditStore,
}

__all__ = ["PARTS", "AlertStore", "AuditStore", "ChildStore", "DashboardStore", "InboxStore", "JobStore",
           "LeaseStore", "LimiterStore", "ListenStore", "Listening", "MoveStore", "ScheduleStore", "SignalStore",
           "StepStore", "Store", "StoreBasics"]
