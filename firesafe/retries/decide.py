"""What one attempt leads to: a pure function of how it ended and the job's budget (invariant 6).

The executor runs the attempt and calls :func:`decide`; the store saves the returned
:class:`Decision`. Nothing here reads a clock, a store or a random source of its own; waits are
returned as delays, which the store adds to its own clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from firesafe.errors import Cancelled, Permanent, RetryAfter, WaitingForChildren
from firesafe.retries.backoff import Backoff
from firesafe.states import Outcome, State

#: How often a job may defer itself (``RetryAfter``, a limiter) before a deferral counts as a failure.
DEFAULT_MAX_DEFERRALS = 100
#: The reason of a job parked until its children end: the store wakes it when their count reaches 0.
CHILDREN = "children"
#: How many times a job may lose its worker (killed mid-attempt) before it goes dead as ``worker_lost``.
DEFAULT_MAX_LOST = 3


@dataclass(slots=True)  # read-only by convention: built once an attempt, and a frozen one costs more
class Decision:
    """The job's next state and how the attempt is recorded."""

    state: State
    outcome: Outcome
    delay: float | None = None  # seconds from now until the job may run again
    reason: str | None = None
    deferred: bool = False  # the attempt is given back to the budget


@dataclass(slots=True)  # read-only by convention: built once an attempt, and a frozen one costs more
class Budget:
    attempt: int  # the attempt that just ended, 1-based, deferrals not counted
    max_attempts: int
    deferrals: int = 0
    max_deferrals: int = DEFAULT_MAX_DEFERRALS


def _retry_or_die(budget: Budget, outcome: Outcome, backoff: Backoff, draw: float) -> Decision:
    if budget.attempt >= budget.max_attempts:
        return Decision(State.DEAD, outcome, reason="exhausted")
    return Decision(State.SCHEDULED, outcome, delay=backoff.delay(budget.attempt, draw))


def decide(
    error: BaseException | None,
    budget: Budget,
    backoff: Backoff,
    draw: float,
    *,
    timed_out: bool = False,
    give_up_on: tuple[type[BaseException], ...] = (),
) -> Decision:
    """Decide the job's next state after an attempt that raised ``error`` (``None``: it returned).

    >>> b = Backoff(base=2.0, jitter="none")
    >>> decide(None, Budget(1, 3), b, 0.5).state
    <State.SUCCEEDED: 'succeeded'>
    >>> decide(OSError("reset"), Budget(1, 3), b, 0.5).delay
    2.0
    >>> decide(OSError("reset"), Budget(3, 3), b, 0.5).reason
    'exhausted'
    >>> decide(Permanent("card declined"), Budget(1, 3), b, 0.5).reason
    'permanent'
    >>> d = decide(RetryAfter(30), Budget(1, 3), b, 0.5)
    >>> d.state, d.delay, d.deferred
    (<State.SCHEDULED: 'scheduled'>, 30.0, True)
    """
    if timed_out:
        return _retry_or_die(budget, Outcome.TIMED_OUT, backoff, draw)
    if error is None:
        return Decision(State.SUCCEEDED, Outcome.SUCCEEDED)
    if isinstance(error, Cancelled):
        return Decision(State.CANCELLED, Outcome.CANCELLED, reason="cancelled")
    if isinstance(error, RetryAfter) and budget.deferrals < budget.max_deferrals:
        # A job that waits for its children parks with reason "children": the store wakes it early.
        return Decision(State.SCHEDULED, Outcome.DEFERRED, delay=error.seconds, deferred=True,
                        reason=CHILDREN if isinstance(error, WaitingForChildren) else None)
    if isinstance(error, Permanent) or (give_up_on and isinstance(error, give_up_on)):
        return Decision(State.DEAD, Outcome.FAILED, reason="permanent")
    return _retry_or_die(budget, Outcome.FAILED, backoff, draw)


def decide_lost(budget: Budget, lost: int, max_lost: int, backoff: Backoff, draw: float) -> Decision:
    """Decide what a job whose lease expired (its worker died or hung) leads to.

    ``lost`` counts this loss too.

    >>> decide_lost(Budget(1, 5), 3, 3, Backoff(), 0.0).reason
    'worker_lost'
    >>> decide_lost(Budget(1, 5), 1, 3, Backoff(jitter="none"), 0.0).delay
    1.0
    """
    if lost >= max_lost:
        return Decision(State.DEAD, Outcome.LOST, reason="worker_lost")
    return _retry_or_die(budget, Outcome.LOST, backoff, draw)
