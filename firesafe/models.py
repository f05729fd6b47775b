"""The values users read back: a job, its attempts (the trace) and its events."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from firesafe.clock import to_datetime
from firesafe.idempotency.keys import MAX_DEPTH, nested_deeper
from firesafe.masking import mask_arguments
from firesafe.sanitize import safe_str
from firesafe.states import State

#: Outcomes of a trace entry that is a failed attempt. A wait (``deferred``), an ``interrupted``
#: attempt (given back at shutdown) and a ``cancelled`` one are not failures.
FAILED_OUTCOMES = frozenset({"failed", "timed_out", "lost"})

#: A job's priority (docs/priorities.md): a whole number from PRIORITY_MIN to PRIORITY_MAX, higher
#: first, PRIORITY_DEFAULT when none is given. Not part of the job's identity (its fingerprint).
PRIORITY_MIN, PRIORITY_MAX, PRIORITY_DEFAULT = -100, 100, 0
#: How much waiting a point of priority is worth (seconds): see :func:`claim_rank`. The migration
#: 0016 and both dialects' job_claim write these numbers (60, and 60 x 100 for the claim's bound).
PRIORITY_STEP = 60.0
#: A pruned job's result is kept in its reserved key's record up to this many bytes of JSON; a
#: longer one is kept as its SHA-256 (``Job.result_digest``).
RESERVED_RESULT_MAX = 256


def claim_rank(run_at: float, priority: int) -> float:
    """Where a runnable job stands in its queue: claims take the lowest rank first (then run_at, then
    id). A point of priority counts as :data:`PRIORITY_STEP` seconds of waiting, so among jobs that
    became due within a minute a point of each other the higher priority runs first, equal priorities
    keep their order, and a job is never passed by one that became due more than
    ``(its priority - this one's) x PRIORITY_STEP`` after it: nothing is starved for ever. (Priority
    that grows with the wait, as ``priority + waited / PRIORITY_STEP``, orders jobs exactly so; the
    rank leaves the clock out, so an index holds it.)

    >>> claim_rank(1000.0, 0), claim_rank(1000.0, 2), claim_rank(1000.0, -1)
    (1000.0, 880.0, 1060.0)
    >>> claim_rank(1100.0, 2) < claim_rank(1000.0, 0)  # due 100 s later, 2 points higher: first
    True
    >>> claim_rank(1200.0, 2) < claim_rank(1000.0, 0)  # due 200 s later: the older one goes first
    False
    """
    return run_at - PRIORITY_STEP * priority


@dataclass(frozen=True)
class Attempt:
    """One entry in a job's trace: an attempt, or a wait (see :attr:`is_wait`)."""

    seq: int  # 1-based position in the trace, counting every claim
    attempt: int  # the attempt number within the retry budget
    worker: str | None
    started_at: datetime | None
    ended_at: datetime | None
    outcome: str | None  # None while the attempt runs
    error_type: str | None = None
    message: str | None = None
    traceback: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def is_wait(self) -> bool:
        """A wait (a limiter or ``RetryAfter`` gave the claim back): not an attempt, not a failure."""
        return self.outcome == "deferred"

    @property
    def is_failure(self) -> bool:
        """An attempt that used its attempt and failed (raised, timed out, or lost its worker)."""
        return self.outcome in FAILED_OUTCOMES

    def as_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "attempt": self.attempt,
            "worker": self.worker,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
            "outcome": self.outcome,
            "error_type": self.error_type,
            "message": self.message,
            "traceback": self.traceback,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Wait:
    """One wait of a job: a limiter held it back (its rate, a pause, an open breaker, its
    concurrency) or the job deferred itself with ``RetryAfter``. A wait uses no attempt and is no
    failure; the trace records it with outcome ``deferred``."""

    entry: Attempt
    #: From the give-back to the job's next claim; for a job still waiting, to its planned turn.
    seconds: float

    @property
    def limiter(self) -> str | None:
        """The limiter that held the job back, or None (the job deferred itself)."""
        value = self.entry.detail.get("limiter")
        if isinstance(value, dict):
            value = value.get("name")
        return value if isinstance(value, str) else None

    @property
    def why(self) -> str:
        """``rate``, ``paused``, ``breaker``, ``concurrency``... for a limiter; ``retry_after`` for
        a job that deferred itself.

        >>> t = datetime(2024, 5, 1, tzinfo=UTC)
        >>> Wait(Attempt(1, 1, None, t, t, "deferred", detail={"limiter": "psp", "why": "paused"}), 2.0).why
        'paused'
        >>> Wait(Attempt(1, 1, None, t, t, "deferred", "HTTPStatusError"), 2.0).why
        'retry_after'
        """
        d = self.entry.detail
        inner = d.get("limiter")
        why = inner.get("why") if isinstance(inner, dict) else d.get("why")
        if isinstance(why, str) and why:
            return why
        return "limit" if self.limiter else "retry_after"

    def describe(self) -> str:
        """What held the job back, in a few words: ``limiter 'psp' (paused)`` or ``RetryAfter``."""
        if self.limiter:
            return f"limiter {self.limiter!r} ({self.why})"
        kind = self.entry.error_type
        return "RetryAfter" if kind in (None, "RetryAfter") else f"RetryAfter ({kind})"

    def as_dict(self) -> dict[str, Any]:
        return {**self.entry.as_dict(), "seconds": round(self.seconds, 3), "limiter": self.limiter, "why": self.why}


@dataclass(frozen=True)
class Waits:
    """A job's waits, apart from its attempts: how many and how long in all."""

    items: tuple[Wait, ...] = ()

    @property
    def count(self) -> int:
        return len(self.items)

    @property
    def seconds(self) -> float:
        return sum(w.seconds for w in self.items)

    def as_dict(self) -> dict[str, Any]:
        return {"count": self.count, "seconds": round(self.seconds, 3), "items": [w.as_dict() for w in self.items]}


@dataclass(frozen=True)
class Event:
    """Something that happened to a job outside an attempt (replayed, discarded, cancelled, ...)."""

    at: datetime
    kind: str
    actor: str | None
    detail: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"at": self.at.isoformat(), "kind": self.kind, "actor": self.actor, "detail": self.detail}


@dataclass(slots=True)
class Job:
    """A job as stored. ``created`` tells whether the enqueue that returned it created it."""

    id: int
    key: str
    name: str
    queue: str
    state: State
    args: list[Any]
    kwargs: dict[str, Any]
    arg_names: list[str]
    attempt: int
    max_attempts: int
    runs: int
    deferrals: int
    lost: int
    run_at: datetime | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    result: Any = None
    error_type: str | None = None
    error_message: str | None = None
    reason: str | None = None
    worker: str | None = None
    cancel_requested: bool = False
    fingerprint: str = ""
    created: bool = False
    trace: list[Attempt] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    #: Why part of the stored row cannot be read (its arguments or its result: written by hand or
    #: by an older version), else None. What cannot be read reads as empty; a job whose arguments
    #: cannot be read is never run: a worker that claims it ends it dead (``undecodable_payload``).
    unreadable: str | None = None
    #: The enqueue's trace context, if a hook recorded one (firesafe/hooks.py, ``Hook.job_context``).
    trace_context: str | None = None
    #: Higher runs first within its queue, a point worth a minute of waiting (:func:`claim_rank`).
    priority: int = PRIORITY_DEFAULT
    #: The job's history (arguments, trace, steps) was pruned; what is left is its reserved key's
    #: record: key, name, fingerprint, final state, when it finished, and its result if that was at
    #: most ``RESERVED_RESULT_MAX`` bytes of JSON, else :attr:`result_digest` (docs/keys.md).
    pruned: bool = False
    #: The SHA-256 (hex) of a pruned job's result that was too long to keep; else None.
    result_digest: str | None = None
    #: The id of the job that spawned this one (``ctx.spawn``), else None (docs/workflows.md).
    parent_id: int | None = None
    #: How many of this job's children are not yet succeeded, dead or cancelled (kept by the store).
    children_pending: int = 0

    def __repr__(self) -> str:  # arguments may hold secrets: never in a repr
        return f"<Job {self.key!r} {self.name} state={self.state} attempt={self.attempt}/{self.max_attempts}>"

    @property
    def attempts(self) -> list[Attempt]:
        """The trace's attempts, its waits left out."""
        return [a for a in self.trace if not a.is_wait]

    def waits(self) -> Waits:
        """The trace's waits, each with how long the job waited: from the give-back to the next
        entry's start, or, for a job still waiting, to the turn it was given (``run_at``)."""
        items: list[Wait] = []
        for i, a in enumerate(self.trace):
            if not a.is_wait:
                continue
            until = self.trace[i + 1].started_at if i + 1 < len(self.trace) else (
                self.run_at if self.state in (State.QUEUED, State.SCHEDULED) else None)
            seconds = (until - a.ended_at).total_seconds() if until and a.ended_at else 0.0
            items.append(Wait(a, max(0.0, seconds)))
        return Waits(tuple(items))

    @property
    def last_failure(self) -> tuple[str, str] | None:
        """The last failed attempt's error type and message, together; None if no attempt failed.
        A wait is never a failure. Read from the trace when the job was read with it (``App.get``),
        else from the job's row (lists), which keeps the last attempt's error."""
        if self.trace:
            for a in reversed(self.trace):
                if a.is_failure:
                    return (a.error_type or str(a.outcome), a.message or "")
            return None
        if not self.error_type:
            return None
        return (self.error_type, self.error_message or "")

    @property
    def last_error(self) -> str | None:
        """:attr:`last_failure` on one line: ``HTTPStatusError: 503 Service Unavailable``."""
        failure = self.last_failure
        if failure is None:
            return None
        return f"{failure[0]}: {failure[1]}" if failure[1] else failure[0]

    @property
    def recovered_after(self) -> int:
        """For a succeeded job, how many attempts of its budget failed before the one that succeeded
        (waits and interrupted attempts use none); 0 for any other job."""
        return max(0, self.attempt - 1) if self.state == State.SUCCEEDED else 0

    @property
    def recovery(self) -> str | None:
        """``succeeded after 2 failed attempts`` for a job that recovered, else None."""
        n = self.recovered_after
        if not n:
            return None
        return f"succeeded after {n} failed attempt{'s' if n != 1 else ''}"

    def masked_arguments(self) -> dict[str, Any]:
        return mask_arguments(self.args, self.kwargs, self.arg_names)

    def as_dict(self, *, with_trace: bool = True) -> dict[str, Any]:
        """A JSON-ready view with secret-looking arguments masked. With the trace: ``attempts`` (the
        attempts only), ``waits`` (``{"count", "seconds", "items"}``) and ``trace`` (every entry in
        order, attempts and waits)."""
        d: dict[str, Any] = {
            "key": self.key,
            "name": self.name,
            "queue": self.queue,
            "state": str(self.state),
            "priority": self.priority,
            "arguments": self.masked_arguments(),
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "runs": self.runs,
            "deferrals": self.deferrals,
            "lost": self.lost,
            "run_at": self.run_at.isoformat() if self.run_at else None,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "result": self.result,
            "error_type": self.error_type,
            "error_message": self.error_message,
            "reason": self.reason,
            "last_error": None if (f := self.last_failure) is None else {"error_type": f[0], "message": f[1]},
            "recovered_after": self.recovered_after,
        }
        if self.unreadable is not None:
            d["unreadable"] = self.unreadable
        if self.pruned:
            d["pruned"], d["result_digest"] = True, self.result_digest
        if with_trace:
            d["attempts"] = [a.as_dict() for a in self.attempts]
            d["waits"] = self.waits().as_dict()
            d["trace"] = [a.as_dict() for a in self.trace]
            d["events"] = [e.as_dict() for e in self.events]
        return d

    @classmethod
    def from_row(cls, row: Any) -> Job:
        """Build from a store row (a mapping with the jobs table's columns): what a claim reads (see
        :meth:`from_claim_row`) and the job's history besides."""
        job = cls.from_claim_row(row, row["worker"])
        finished = row["finished_at"]
        job.finished_at = None if finished is None else datetime.fromtimestamp(finished, UTC)
        job.result, unreadable = _result(row["result"])
        if unreadable is not None:  # whatever else the row holds still reads
            job.unreadable = "; ".join(filter(None, [job.unreadable, unreadable]))
        job.error_type, job.error_message, job.reason = row["error_type"], row["error_message"], row["reason"]
        job.fingerprint = row["fingerprint"]
        job.children_pending = int(row["children_pending"] or 0)
        return job

    @classmethod
    def from_outcome_row(cls, row: Any) -> Job:
        """Build from a row of only the columns an outcome needs (id, key, name, state, result,
        error_type, error_message, reason, finished_at, parent_id): what a parent's wait reads of its
        children, without their arguments. The rest keeps its defaults."""
        finished = row["finished_at"]
        return cls._partial(row, _EPOCH, None if finished is None else datetime.fromtimestamp(finished, UTC),
                            error_type=row["error_type"], error_message=row["error_message"], reason=row["reason"],
                            parent_id=row["parent_id"])

    @classmethod
    def from_reserved_row(cls, row: Any) -> Job:
        """Build from a reserved key's record (the firesafe_keys table): a finished job whose
        history was pruned (:attr:`pruned`)."""
        finished = datetime.fromtimestamp(row["finished_at"], UTC)
        return cls._partial(row, finished, finished, fingerprint=row["fingerprint"], pruned=True,
                            result_digest=row["result_digest"])

    @classmethod
    def _partial(cls, row: Any, created: datetime, finished: datetime | None, **known: Any) -> Job:
        """A job from part of its row: its id, key, name, state and result (an unreadable result is
        named, the rest still reads), ``known`` fields besides; no arguments, no counts."""
        job = cls(id=row["id"], key=row["key"], name=row["name"], queue="", state=_STATES[row["state"]], args=[],
                  kwargs={}, arg_names=[], attempt=0, max_attempts=0, runs=0, deferrals=0, lost=0, run_at=None,
                  created_at=created, updated_at=created, finished_at=finished, **known)
        job.result, job.unreadable = _result(row["result"])
        return job

    @classmethod
    def from_claim_row(cls, row: Any, worker: str) -> Job:
        """Build a job just claimed by ``worker`` from the row its claim returned (a mapping with the
        columns of ``CLAIMED_COLUMNS``): what an attempt needs. What a claim leaves unread is the job's
        history, which :meth:`from_row` gives: its last result, error and reason, when it finished,
        and its fingerprint (None or empty here). A claim on the hot path of every job; fewer columns
        cost the server and the client less."""
        return cls.from_claim_values([row[c] for c in CLAIMED_COLUMNS], worker)

    @classmethod
    def from_claim_values(cls, values: Sequence[Any], worker: str) -> Job:
        """:meth:`from_claim_row` from the row's values in the order of ``CLAIMED_COLUMNS`` (the
        PostgreSQL store reads claims as tuples, the cheapest rows to build: once per job)."""
        (id_, key, name, queue, state, payload, arg_names, attempt, max_attempts, runs, deferrals, lost, run_at,
         created_at, updated_at, cancel_requested, trace_context, priority, parent_id) = values
        unreadable = None
        try:
            p = _payload(payload)
            args = p.get("args", [])
            kwargs = p.get("kwargs", {})
            names = _arg_names(arg_names)
        except Exception as exc:  # not JSON, nested past the cap or the decoder, not an object: its job's failure
            args, kwargs, names = [], {}, []
            unreadable = _why_unreadable("arguments", exc)
        job = cls(id_, key, name, queue, _STATES[state], args, kwargs, names,
                  attempt, max_attempts, runs, deferrals, lost,
                  None if run_at is None else datetime.fromtimestamp(run_at, UTC),
                  datetime.fromtimestamp(created_at, UTC), datetime.fromtimestamp(updated_at, UTC),
                  None, worker=worker, cancel_requested=bool(cancel_requested), trace_context=trace_context,
                  priority=priority, parent_id=parent_id)
        if unreadable is not None:
            job.unreadable = unreadable
        return job


#: The columns a claim returns (both dialects' job_claim), read by :meth:`Job.from_claim_row`.
CLAIMED_COLUMNS = ("id", "key", "name", "queue", "state", "payload", "arg_names", "attempt", "max_attempts", "runs",
                   "deferrals", "lost", "run_at", "created_at", "updated_at", "cancel_requested", "trace_context",
                   "priority", "parent_id")

_STATES: dict[str, State] = {s.value: s for s in State}
#: The creation time of a job built from an outcome's columns (:meth:`Job.from_outcome_row`), unread.
_EPOCH = datetime.fromtimestamp(0, UTC)


def _result(text: str | None) -> tuple[Any, str | None]:
    """A stored result's value, and why it cannot be read (RecursionError, ValueError, nested past
    the cap: written by hand or by an older version), else None."""
    if text is None:
        return None, None
    try:
        value = json.loads(text)
        _check_depth(text, value, MAX_DEPTH)
    except Exception as exc:
        return None, _why_unreadable("result", exc)
    return value, None


_scan_json = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set in __init__; typeshed omits it


def _payload(text: str) -> Any:
    """A stored payload's value. It is canonical JSON (firesafe wrote it): the C scanner reads it
    without json.loads's checks around it, a microsecond a job; anything else goes through
    json.loads, which reads it or says what is wrong. Arguments nested past the cap (written by
    hand or by an older version) are refused too: whether they decode depends on the stack they
    are decoded on, and they would break what walks them later (masking, rendering)."""
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:
        return json.loads(text)
    if end != len(text):
        value = json.loads(text)
    if len(text) > 2 * _PAYLOAD_DEPTH:  # shorter, it cannot nest that deep
        _check_depth(text, value, _PAYLOAD_DEPTH)
    return value


#: How deep a payload may nest: its object, its list of arguments, and each argument's cap.
_PAYLOAD_DEPTH = MAX_DEPTH + 2


def _check_depth(text: str, value: Any, levels: int) -> None:
    """ValueError if ``value`` (decoded from ``text``) nests more than ``levels`` deep. Only a
    long text with that many brackets can: the usual one is let through by a length test."""
    if len(text) > 2 * levels and text.count("[") + text.count("{") > levels and nested_deeper(value, levels):
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")


def _why_unreadable(what: str, exc: Exception) -> str:
    """Why a stored value cannot be read, on one line of at most some 200 characters.

    >>> _why_unreadable("arguments", ValueError("Expecting value: line 1 column 1 (char 0)"))
    'arguments: ValueError: Expecting value: line 1 column 1 (char 0)'
    """
    return f"{what}: {type(exc).__name__}: {safe_str(exc)[:200]}"


def _arg_names(text: str | None) -> list[str]:
    """The positional parameter names stored with a job (a JSON list), parsed once per distinct text."""
    return list(_parse_names(text)) if text else []


@functools.lru_cache(maxsize=1024)
def _parse_names(text: str) -> tuple[str, ...]:
    return tuple(json.loads(text))


def attempt_from_row(row: Any) -> Attempt:
    return Attempt(
        seq=row["seq"],
        attempt=row["attempt"],
        worker=row["worker"],
        started_at=to_datetime(row["started_at"]),
        ended_at=to_datetime(row["ended_at"]),
        outcome=row["outcome"],
        error_type=row["error_type"],
        message=row["message"],
        traceback=row["traceback"],
        detail=_detail(row["detail"]),
    )


def event_from_row(row: Any) -> Event:
    return Event(
        at=to_datetime(row["at"]),
        kind=row["kind"],
        actor=row["actor"],
        detail=_detail(row["detail"]),
    )


def _detail(text: str | None) -> dict[str, Any]:
    """A stored detail (JSON written by firesafe); one that does not decode reads as what it was.

    >>> _detail('{"duration": 0.5}'), _detail(None), _detail("[[[")
    ({'duration': 0.5}, {}, {'unreadable': '[[['})
    """
    if not text:
        return {}
    try:
        value = json.loads(text)
    except Exception:  # written by hand or damaged: shown, not decoded
        return {"unreadable": text[:2000]}
    return value if isinstance(value, dict) else {"value": value}
