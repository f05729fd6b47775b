"""The store contract: every store (SQLite, PostgreSQL) implements these methods and passes one suite.

Methods are named Noun+Verb and take small parameter values. Every method that changes a job names
the state (and, for attempts, the lease token) it expects; it reports per item whether it applied.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from firesafe.models import Job
from firesafe.states import Outcome, State


@dataclass(slots=True)  # read-only by convention: frozen would triple the cost of building one a job
class InsertParams:
    key: str
    name: str
    queue: str
    fingerprint: str
    payload: str  # canonical JSON {"args": [...], "kwargs": {...}}
    arg_names: str  # JSON list of positional parameter names, for masking
    max_attempts: int
    run_at: float | None = None
    delay: float = 0.0
    #: ``(args, kwargs)`` as Python values when the payload is plain scalars (so they equal its
    #: decoded JSON): a store may hand them back in the returned job instead of decoding ``payload``.
    values: tuple[list[Any], dict[str, Any]] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ClaimParams:
    queues: tuple[str, ...]
    limit: int
    worker: str
    lease: float
    # Quarantine: False claims only jobs never lost; True only jobs that lost a worker before
    # (suspects of killing it), which a worker runs alone so they cannot take others down with them.
    suspects: bool = False


@dataclass(slots=True)  # read-only by convention: built once an attempt, and frozen would cost 6x
class Claimed:
    job: Job
    token: str


@dataclass(slots=True)  # read-only by convention: built once an attempt, and frozen would cost 6x
class FinishParams:
    job_id: int
    token: str
    seq: int
    state: State
    outcome: Outcome
    delay: float | None = None
    given_back: int = 0  # 1 when the attempt is a deferral that does not use the budget
    result: str | None = None  # JSON
    error_type: str | None = None
    message: str | None = None
    traceback: str | None = None
    reason: str | None = None
    detail: str | None = None  # JSON, for the trace entry


@dataclass(frozen=True)
class Expired:
    id: int
    name: str
    token: str
    attempt: int
    max_attempts: int
    deferrals: int
    lost: int
    runs: int
    cancel_requested: bool


@dataclass(frozen=True)
class RescueParams:
    job_id: int
    token: str
    seq: int
    state: State
    delay: float | None
    reason: str | None
    message: str


@dataclass(frozen=True)
class JobFilter:
    state: str | None = None
    name: str | None = None
    queue: str | None = None
    error_type: str | None = None
    since: float | None = None
    until: float | None = None
    keys: Sequence[str] | None = None
    limit: int = 100
    offset: int = 0


@dataclass(frozen=True)
class DeadFilter:
    """Which dead jobs to list, the last to die first: filters, then a page that starts after
    ``after`` (the ``(finished_at, id)`` of the previous page's last job) or at ``offset``."""

    name: str | None = None
    queue: str | None = None
    error_type: str | None = None
    reason: str | None = None
    since: float | None = None  # died at or after
    until: float | None = None  # died before
    after: tuple[float, int] | None = None
    limit: int = 100
    offset: int = 0


@dataclass(frozen=True)
class DeadPage:
    """A page of dead jobs and where the next one starts (None: this page is the last)."""

    jobs: list[Job]
    next: tuple[float, int] | None


@dataclass(frozen=True)
class StepRecord:
    name: str
    position: int
    result: str | None  # JSON
    run_seq: int  # the run (trace seq) that recorded it
    recorded_at: float


@dataclass(frozen=True)
class Pending:
    runnable: int
    running: int
    next_at: float | None
    suspects: int = 0  # runnable jobs that lost a worker before (run alone)


class Store(abc.ABC):
    """One store of jobs. Implementations: :class:`SQLiteStore`, :class:`PostgresStore`."""

    url: str
    dialect: str
    #: Whether transactions from several connections run at once (PostgreSQL) or one after another
    #: (SQLite: one writer). A worker keeps several of its transactions in flight only where they do.
    concurrent_writers: bool = False

    @abc.abstractmethod
    def now(self) -> float:
        """The store's clock, in seconds since the epoch."""

    @abc.abstractmethod
    def migrate(self, *, allow_other_tables: bool = False) -> list[int]:
        """Create or upgrade the schema; returns the migration versions applied now.

        Refuses (:class:`~firesafe.errors.SchemaTooNew`, nothing written) a schema that a newer
        firesafe migrated. On SQLite it refuses (:class:`~firesafe.errors.OtherTables`) to create the
        schema in a file that holds other tables unless ``allow_other_tables``; PostgreSQL keeps
        firesafe's tables in a schema of their own and ignores the flag.
        """

    @abc.abstractmethod
    def schema_version(self) -> int:
        """The newest migration applied (0 for an empty store)."""

    @abc.abstractmethod
    def job_insert_many(self, items: Sequence[InsertParams], conn: Any = None) -> list[Job]:
        """Insert jobs, at most one per key; an existing key returns the stored job (``created`` False).

        All or nothing: a key already stored (or repeated in ``items``) with another fingerprint
        raises :class:`~firesafe.errors.IdempotencyConflict` and inserts nothing. With ``conn``
        (PostgreSQL) the rows are written in the caller's open transaction.
        """

    @abc.abstractmethod
    def job_get(self, key: str, *, full: bool = False) -> Job | None:
        """One job by key; ``full`` also loads its trace and events."""

    @abc.abstractmethod
    def job_claim(self, params: ClaimParams) -> list[Claimed]:
        """Move up to ``limit`` runnable jobs to ``running`` under a new lease, opening their attempts."""

    @abc.abstractmethod
    def job_finish_many(self, items: Sequence[FinishParams]) -> list[bool]:
        """End attempts; an item applies only if its job is still running under its token. Data the
        store cannot hold (a NUL in PostgreSQL text, text that is not UTF-8) raises
        :class:`~firesafe.errors.StoreDataError` and keeps nothing, as any other failure does."""

    @abc.abstractmethod
    def job_finish_and_claim(self, finishes: Sequence[FinishParams],
                             claim: ClaimParams) -> tuple[list[bool], list[Claimed]]:
        """``job_finish_many(finishes)`` then ``job_claim(claim)`` in one transaction: a busy worker
        saves a batch's outcomes and takes its next batch with one commit instead of two. Finishes
        are fenced as in job_finish_many; the claim sees what they wrote. All or nothing."""

    @abc.abstractmethod
    def job_heartbeat_many(self, items: Sequence[tuple[int, str]], lease: float) -> dict[int, bool]:
        """Extend leases still held; returns ``{job_id: cancel_requested}`` for those held."""

    @abc.abstractmethod
    def job_list_expired(self, limit: int) -> list[Expired]:
        """Running jobs whose lease has expired."""

    @abc.abstractmethod
    def job_rescue_many(self, items: Sequence[RescueParams]) -> list[bool]:
        """Record expired attempts as ``lost`` and move their jobs on; fenced on token and expiry."""

    @abc.abstractmethod
    def worker_process_gone(self, prefix: str, detail: dict[str, Any] | None = None) -> int:
        """A worker process has exited (its supervisor reaped it): end now the leases of the attempts
        it held, so the next rescue takes them back instead of waiting for the leases to run out, give
        up the leader leases its workers held (the isolation of suspects above all: its attempts are
        suspects now) and forget its workers. ``prefix`` is how its worker ids begin
        (``worker_id_prefix`` in firesafe/worker/worker.py). Each job whose lease ended gets an event,
        ``lease_ended`` by ``supervisor``, with ``detail`` (how the process ended). Returns how many
        leases ended. Only for a process known to be gone, with nothing it started still running
        (see firesafe/worker/supervisor.py)."""

    @abc.abstractmethod
    def job_list(self, filt: JobFilter) -> list[Job]:
        """Jobs matching a filter, newest first."""

    @abc.abstractmethod
    def job_count(self, filt: JobFilter) -> int:
        """How many jobs match a filter (limit and offset ignored)."""

    @abc.abstractmethod
    def dead_list(self, filt: DeadFilter) -> DeadPage:
        """A page of the dead jobs matching a filter, the last to die first (ties: the newest id
        first), with the exact cursor of the next page (``after``) when the page is full."""

    @abc.abstractmethod
    def dead_count(self, filt: DeadFilter) -> int:
        """How many dead jobs match a filter (cursor, limit and offset ignored)."""

    @abc.abstractmethod
    def job_replay_many(self, ids: Sequence[int], actor: str, reason: str | None = None) -> list[int]:
        """Requeue dead or cancelled jobs with a fresh budget; returns the ids that moved. Each gets a
        ``replayed`` event by ``actor``, with ``reason`` in its detail."""

    @abc.abstractmethod
    def job_discard_many(self, ids: Sequence[int], actor: str, reason: str | None = None) -> list[int]:
        """Move dead jobs to ``cancelled`` (reason ``discarded``); returns the ids that moved. Each gets
        a ``discarded`` event by ``actor``, with ``reason`` in its detail."""

    @abc.abstractmethod
    def job_cancel(self, job_id: int, actor: str, reason: str | None = None) -> str:
        """Cancel a waiting job (``"cancelled"``) or ask a running one to stop (``"requested"``);
        ``"finished"`` if it had already ended."""

    @abc.abstractmethod
    def job_delete_finished(self, state: State, older_than: float, limit: int = 1000) -> int:
        """Delete jobs in a finished state that finished more than ``older_than`` seconds ago."""

    @abc.abstractmethod
    def job_stats(self) -> list[tuple[str, str, int]]:
        """``(queue, state, count)`` rows."""

    @abc.abstractmethod
    def job_pending(self, queues: Sequence[str]) -> Pending:
        """What remains in the given queues."""

    @abc.abstractmethod
    def worker_beat(self, worker_id: str, host: str, pid: int, queues: Sequence[str]) -> None:
        """Record that a worker is alive."""

    @abc.abstractmethod
    def worker_remove(self, worker_id: str) -> None:
        """Forget a worker that stopped cleanly."""

    @abc.abstractmethod
    def worker_list(self) -> list[dict[str, Any]]:
        """Workers seen, with their last heartbeat."""

    @abc.abstractmethod
    def leader_acquire(self, name: str, holder: str, ttl: float) -> bool:
        """Take or renew the named leader lease; True if ``holder`` holds it now."""

    @abc.abstractmethod
    def leader_release(self, name: str, holder: str) -> None:
        """Give up the named leader lease if held."""

    @abc.abstractmethod
    def step_list(self, job_id: int) -> list[StepRecord]:
        """The recorded steps of a job, in order."""

    @abc.abstractmethod
    def step_record(self, job_id: int, token: str, name: str, position: int, result: str) -> bool:
        """Record a completed step; False (nothing written) if the attempt no longer holds the lease
        or the step was recorded already."""

    @abc.abstractmethod
    def job_rerun(self, job_id: int, actor: str, from_position: int | None, reason: str | None = None) -> bool:
        """Requeue a dead, cancelled or succeeded job, forgetting its steps from ``from_position``
        on (None: keep every step, so it resumes); records a ``rerun`` event. False if it is not
        in one of those states."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections."""


#: A cursor past every dead job: the first page of :meth:`Store.dead_list`.
_FIRST_PAGE = (float("inf"), 2**62)


def dead_params(f: DeadFilter) -> dict[str, Any]:
    """The parameters of the ``dead_list`` and ``dead_count`` queries (the same in both dialects)."""
    after_at, after_id = f.after if f.after is not None else _FIRST_PAGE
    return {"name": f.name, "queue": f.queue, "error_type": f.error_type, "reason": f.reason, "since": f.since,
            "until": f.until, "after_at": float(after_at), "after_id": int(after_id), "limit": f.limit,
            "offset": f.offset}


def dead_page(rows: Sequence[Any], limit: int, job: Any) -> DeadPage:
    """The page of ``dead_list`` rows: its jobs (``job`` reads a row) and, when it is full, the next
    page's cursor from the last row's stored values (a job's datetime keeps microseconds, the
    store's number may hold more: only the stored one resumes exactly after it)."""
    nxt = (float(rows[-1]["finished_at"]), int(rows[-1]["id"])) if rows and len(rows) >= limit else None
    return DeadPage([job(r) for r in rows], nxt)


def event_detail(reason: str | None, **detail: Any) -> str | None:
    """The JSON ``detail`` of an event that a person caused: why (``reason``) and what else there is
    to say; None when there is nothing."""
    import json

    if reason is not None:
        detail["reason"] = reason
    return json.dumps(detail) if detail else None


def check_worker_prefix(prefix: str) -> None:
    """A prefix naming one worker process's ids, ``"<host>:<pid>:<tag>."`` (see ``worker_id_prefix``
    in firesafe/worker/worker.py); anything shorter, ``""`` above all, would match other workers."""
    host, _, rest = prefix.partition(":")
    pid, _, tag = rest.partition(":")
    if not (host and pid.isdigit() and len(tag) > 1 and tag.endswith(".")):
        raise ValueError(f"not the id prefix of one worker process ('<host>:<pid>:<tag>.'): {prefix!r}")


def dedupe_batch(items: Sequence[InsertParams]) -> list[InsertParams]:
    """Keep the first item of each key; a repeated key with another fingerprint is a conflict."""
    from firesafe.errors import IdempotencyConflict

    seen: dict[str, InsertParams] = {}
    for item in items:
        first = seen.get(item.key)
        if first is None:
            seen[item.key] = item
        elif first.fingerprint != item.fingerprint:
            raise IdempotencyConflict(item.key, first.name, item.name)
    return list(seen.values())


def in_batch_order(items: Sequence[InsertParams], stored: dict[str, Job]) -> list[Job]:
    """The job of each item, in the batch's order; a key repeated in the batch was created (if at all)
    by its first item, so its repeats say ``created=False``."""
    if len(stored) >= len(items):  # no key repeated (the usual batch): nothing to mark
        return [stored[i.key] for i in items]
    out: list[Job] = []
    seen: set[str] = set()
    for item in items:
        job = stored[item.key]
        out.append(replace(job, created=False) if item.key in seen and job.created else job)
        seen.add(item.key)
    return out


def check_existing(items: Sequence[InsertParams], stored: dict[str, Job]) -> None:
    """Raise if a stored job has an item's key but another fingerprint."""
    from firesafe.errors import IdempotencyConflict

    for item in items:
        job = stored.get(item.key)
        if job is not None and not job.created and job.fingerprint != item.fingerprint:
            raise IdempotencyConflict(item.key, job.name, item.name)


class MovesByQuery:
    """``job_replay_many``, ``job_discard_many`` and ``job_cancel`` for a store whose ``_move_many``
    runs a named move (guarded by the state it expects) over job ids, records one event per job it
    moved, and returns those ids. Mixed in before :class:`Store`; the moves are the same queries
    (by name) in every dialect."""

    def _move_many(self, query: str, kind: str, ids: Sequence[int], actor: str, detail: str | None) -> list[int]:
        raise NotImplementedError

    def job_replay_many(self, ids: Sequence[int], actor: str, reason: str | None = None) -> list[int]:
        return self._move_many("job_replay", "replayed", ids, actor, event_detail(reason))

    def job_discard_many(self, ids: Sequence[int], actor: str, reason: str | None = None) -> list[int]:
        return self._move_many("job_discard", "discarded", ids, actor, event_detail(reason))

    def job_cancel(self, job_id: int, actor: str, reason: str | None = None) -> str:
        detail = event_detail(reason)
        if self._move_many("job_cancel_waiting", "cancelled", [job_id], actor, detail):
            return "cancelled"
        if self._move_many("job_cancel_running", "cancel_requested", [job_id], actor, detail):
            return "requested"
        return "finished"
