"""The parameter and record types of the core store contract, and helpers both stores share.

The contract itself (every method a store offers) is declared in :mod:`firesafe.store.contract`.
"""

from __future__ import annotations

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
    #: The enqueue's trace context (firesafe/hooks.py, ``Hook.job_context``), handed to its attempts.
    trace_context: str | None = field(default=None, compare=False)
    #: Higher runs first within its queue (models.claim_rank); not part of the fingerprint.
    priority: int = 0


@dataclass(frozen=True)
class ClaimParams:
    queues: tuple[str, ...]
    limit: int
    worker: str
    lease: float
    # Quarantine: False claims only jobs never lost; True only jobs that lost a worker before
    # (suspects of killing it), which a worker runs alone so they cannot take others down with them.
    suspects: bool = False


@dataclass(slots=True)  # read-only by convention: built once an attempt, and a frozen one costs more
class Claimed:
    job: Job
    token: str


@dataclass(slots=True)  # read-only by convention: built once an attempt, and a frozen one costs more
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
    #: The job's parent (``Job.parent_id``): a finish that ends a child counts it off its parent's
    #: children, in the same transaction. None for a job without one (no extra work).
    parent_id: int | None = None


def released(claimed: Claimed, why: str) -> FinishParams:
    """The outcome that gives a claimed job back without using an attempt: it is runnable again at
    once (a worker shutting down, a job that waited too long for a thread, a limiter the store could
    not be asked about)."""
    job = claimed.job
    return FinishParams(job_id=job.id, token=claimed.token, seq=job.runs, state=State.SCHEDULED,
                        outcome=Outcome.INTERRUPTED, delay=0.0, given_back=1,
                        error_type="Interrupted", message=why)


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
    key: str = ""
    queue: str = ""


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


#: How far down a tree of children a cancel or a replay reaches.
_MAX_DEPTH = 32

#: A cursor past every dead job: the first page of ``Store.dead_list``.
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
    moved, and returns those ids. The moves are the same queries (by name) in every dialect."""

    def _move_many(self, query: str, kind: str, ids: Sequence[int], actor: str, detail: str | None) -> list[int]:
        raise NotImplementedError

    def _children_ids(self, ids: Sequence[int], states: Sequence[State]) -> list[int]:
        """The children of ``ids`` in one of ``states`` (the children part: firesafe/store/children.py)."""
        raise NotImplementedError

    def _cascade(self, moves: Sequence[tuple[str, str, tuple[State, ...]]], parents: Sequence[int], actor: str,
                 reason: str | None) -> None:
        """Apply ``moves`` (query, event kind, the states it moves children from) to the children of
        ``parents``, then to theirs, down the tree (a parent's move reaches its whole family)."""
        detail = event_detail(reason, cascade=True)
        for _ in range(_MAX_DEPTH):
            moved: list[int] = []
            for query, kind, states in moves:
                kids = self._children_ids(parents, states)
                moved += self._move_many(query, kind, kids, actor, detail) if kids else []
            if not moved:
                return
            parents = moved

    def job_replay_many(self, ids: Sequence[int], actor: str, reason: str | None = None) -> list[int]:
        moved = self._move_many("job_replay", "replayed", ids, actor, event_detail(reason))
        # A replayed parent's children that succeeded are reused; those that died or were cancelled
        # run again (its wait then finds them waiting).
        self._cascade([("job_replay", "replayed", (State.DEAD, State.CANCELLED))], moved, actor, reason)
        return moved

    def job_discard_many(self, ids: Sequence[int], actor: str, reason: str | None = None) -> list[int]:
        return self._move_many("job_discard", "discarded", ids, actor, event_detail(reason))

    def job_cancel(self, job_id: int, actor: str, reason: str | None = None) -> str:
        detail = event_detail(reason)
        if self._move_many("job_cancel_waiting", "cancelled", [job_id], actor, detail):
            outcome = "cancelled"
        elif self._move_many("job_cancel_running", "cancel_requested", [job_id], actor, detail):
            outcome = "requested"
        else:
            outcome = "finished"
        # Its children that have not ended are cancelled too (asked to stop, if running), whatever
        # the parent's own state: cancelling it again finishes a cascade that was interrupted.
        self._cascade([("job_cancel_waiting", "cancelled", (State.QUEUED, State.SCHEDULED)),
                       ("job_cancel_running", "cancel_requested", (State.RUNNING,))], [job_id], actor, reason)
        return outcome
