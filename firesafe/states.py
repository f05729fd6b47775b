"""The one job state machine (invariant 2).

Each state says what it means and what moves a job out of it:

``queued``
    Waiting to run now. A worker's claim moves it to ``running``; cancel moves it to ``cancelled``.
``scheduled``
    Waiting for a time (a delay, a backoff or a deferral). Once ``run_at`` has passed it is claimed
    exactly like ``queued``; cancel moves it to ``cancelled``.
``running``
    An attempt holds the lease. The attempt's end moves it to ``succeeded``, ``scheduled`` (retry or
    deferral), ``dead`` or ``cancelled``; an expired lease is rescued to ``scheduled`` or ``dead``.
``succeeded``
    Done; the result is kept until the retention prunes the row (its key stays reserved by a
    compact record until ``Retention.keys``). Only a
    deliberate rerun (``firesafe rerun``, a backfill with ``--rerun all``) moves it to ``queued``.
``dead``
    In the dead-letter queue: retries exhausted, a permanent error, lost too often or unknown job.
    Replay moves it to ``queued``; discard moves it to ``cancelled``.
``cancelled``
    Stopped on purpose. Replay moves it to ``queued``.
"""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    QUEUED = "queued"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"


TRANSITIONS: dict[State, frozenset[State]] = {
    State.QUEUED: frozenset({State.RUNNING, State.CANCELLED}),
    State.SCHEDULED: frozenset({State.RUNNING, State.CANCELLED}),
    State.RUNNING: frozenset(
        {State.SUCCEEDED, State.SCHEDULED, State.DEAD, State.CANCELLED}
    ),
    State.SUCCEEDED: frozenset({State.QUEUED}),
    State.DEAD: frozenset({State.QUEUED, State.CANCELLED}),
    State.CANCELLED: frozenset({State.QUEUED}),
}

WAITING = (State.QUEUED, State.SCHEDULED)
FINISHED = (State.SUCCEEDED, State.DEAD, State.CANCELLED)


def can_move(src: State | str, dst: State | str) -> bool:
    """Whether the state machine allows ``src -> dst``.

    >>> can_move("running", "succeeded")
    True
    >>> can_move("succeeded", "running")
    False
    """
    return State(dst) in TRANSITIONS[State(src)]


class Outcome(StrEnum):
    """How one attempt ended, as recorded in the trace."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    LOST = "lost"
    INTERRUPTED = "interrupted"
    DEFERRED = "deferred"
    CANCELLED = "cancelled"
