"""The arithmetic of a limiter: token bucket, waiting line, pause and outage breaker (invariant 6).

A limiter's shared state is one :class:`LimiterState` value (one row of the store). Each function
takes that state, the time and what the store counted (slots in use, whether the probe still runs)
and returns a verdict and the next state. Nothing here reads a clock, a store or a random source:
times and random draws are arguments, so every rule is tested without a database or a clock.

The rules:

- **Rate.** A bucket of ``burst`` tokens refills at ``rate`` tokens per second; a job needs one
  whole token to start. In any window of ``w`` seconds at most ``burst + rate * w`` jobs are granted
  a token. A grant is good for :func:`fresh_for` seconds: a job that would start later takes a
  new token first, so the starts (what the provider sees) keep the bound within one.
- **Concurrency.** At most ``concurrency`` jobs hold a slot at once (the store counts the slots
  whose job still holds its lease).
- **Pause.** Until ``paused_until`` nothing starts. A pause empties the bucket, so work resumes at
  the limiter's rate, not with a burst.
- **Breaker.** ``breaker_after`` transient failures in a row open it for ``cooldown`` seconds;
  then one job (the probe) may start. Its success closes the breaker, its failure opens it again.
- **The waiting line.** A job that may not start is given a turn: the later of the time it could
  pass and the end of the line, plus a random part of one spacing. The line then grows by one
  spacing (``1 / rate``, else :data:`DEFAULT_SPACING`), so waiting jobs come back one by one at
  the limiter's pace instead of all at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from firesafe.errors import MAX_DELAY

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"

#: How far apart waiting jobs are released when the limiter has no rate (seconds).
DEFAULT_SPACING = 0.05
#: While a probe runs, how long other jobs wait before asking again, at most (seconds).
PROBE_WAIT = 1.0
#: Tolerance of float arithmetic on tokens.
EPSILON = 1e-9
#: Bounds of how long a grant stays good for the job it was given to (see :func:`fresh_for`, seconds).
MIN_FRESH = 0.005
MAX_FRESH = 0.02


@dataclass(frozen=True)
class LimiterSpec:
    """A limiter as declared: ``rate`` in tokens per second (None: no rate limit)."""

    name: str
    rate: float | None = None
    burst: float = 1.0
    concurrency: int | None = None
    breaker_after: int | None = 5
    cooldown: float = 30.0

    @property
    def spacing(self) -> float:
        """How far apart waiting jobs are given turns.

        >>> LimiterSpec("x", rate=50).spacing
        0.02
        >>> LimiterSpec("x", concurrency=3).spacing
        0.05
        """
        return 1.0 / self.rate if self.rate else DEFAULT_SPACING


@dataclass(frozen=True)
class LimiterState:
    """The shared state of one limiter (one row in the store)."""

    tokens: float
    tokens_at: float
    line_at: float
    paused_until: float | None = None
    pause_reason: str | None = None
    breaker: str = CLOSED
    failures: int = 0
    opened_at: float | None = None
    retry_at: float | None = None
    probe_job: int | None = None
    probe_token: str | None = None

    @classmethod
    def fresh(cls, spec: LimiterSpec, now: float) -> LimiterState:
        """A limiter nobody used yet: a full bucket, nobody waiting, breaker closed."""
        return cls(tokens=float(spec.burst), tokens_at=now, line_at=now)


@dataclass(frozen=True)
class Check:
    """Whether a job may start now under one limiter."""

    ok: bool
    why: str | None = None  # paused, open, probing, concurrency, rate
    earliest: float = 0.0  # a time before which asking again is pointless
    probe: bool = False  # starting makes this job the breaker's probe


@dataclass(frozen=True)
class Reported:
    """What an attempt's end did to a limiter."""

    state: LimiterState
    events: tuple[tuple[str, dict[str, Any]], ...] = ()
    wait_until: float | None = None  # not None: the attempt should be given back and wait until then


def tokens_now(spec: LimiterSpec, st: LimiterState, now: float) -> float:
    """Tokens in the bucket at ``now`` (a clock that went back refills nothing).

    >>> spec = LimiterSpec("x", rate=10, burst=5)
    >>> round(tokens_now(spec, LimiterState(0.0, 100.0, 100.0), 100.2), 9)
    2.0
    >>> tokens_now(spec, LimiterState(0.0, 100.0, 100.0), 200.0)
    5.0
    >>> tokens_now(spec, LimiterState(1.0, 100.0, 100.0), 50.0)
    1.0
    """
    if spec.rate is None:
        return float(spec.burst)
    elapsed = max(0.0, now - st.tokens_at)
    return min(float(spec.burst), st.tokens + elapsed * spec.rate)


def check(spec: LimiterSpec, st: LimiterState, now: float, *, live: int = 0, probe_alive: bool = False) -> Check:
    """May one more job start now? ``live``: slots in use; ``probe_alive``: the probe still runs.

    >>> spec = LimiterSpec("x", rate=10, burst=1)
    >>> check(spec, LimiterState(1.0, 0.0, 0.0), 0.0).ok
    True
    >>> c = check(spec, LimiterState(0.5, 0.0, 0.0), 0.0)
    >>> c.ok, c.why, c.earliest
    (False, 'rate', 0.05)
    >>> check(spec, LimiterState(1.0, 0.0, 0.0, paused_until=9.0), 1.0).why
    'paused'
    >>> check(LimiterSpec("y", concurrency=3), LimiterState(1.0, 0.0, 0.0), 0.0, live=3).why
    'concurrency'
    """
    if st.paused_until is not None and now < st.paused_until:
        return Check(False, "paused", st.paused_until)
    probe = False
    if st.breaker == OPEN:
        if st.retry_at is not None and now < st.retry_at:
            return Check(False, "open", st.retry_at)
        probe = True
    elif st.breaker == HALF_OPEN:
        if probe_alive:
            return Check(False, "probing", now + min(spec.cooldown, PROBE_WAIT))
        probe = True
    if spec.concurrency is not None and live >= spec.concurrency:
        return Check(False, "concurrency", now)
    if spec.rate is not None:
        tokens = tokens_now(spec, st, now)
        if tokens + EPSILON < 1.0:
            return Check(False, "rate", now + (1.0 - tokens) / spec.rate)
    return Check(True, probe=probe)


def take(spec: LimiterSpec, st: LimiterState, now: float, *, probe: tuple[int, str] | None = None) -> LimiterState:
    """The state after one job started (it passed :func:`check`); ``probe`` names it if it probes.

    >>> spec = LimiterSpec("x", rate=10, burst=3)
    >>> take(spec, LimiterState(3.0, 0.0, 0.0), 0.0).tokens
    2.0
    >>> take(spec, LimiterState(0.0, 0.0, 0.0, breaker=OPEN, retry_at=5.0), 6.0, probe=(7, "t")).breaker
    'half_open'
    """
    new = st
    if spec.rate is not None:
        new = replace(new, tokens=max(0.0, tokens_now(spec, st, now) - 1.0), tokens_at=max(now, st.tokens_at))
    if probe is not None:
        new = replace(new, breaker=HALF_OPEN, probe_job=probe[0], probe_token=probe[1])
    return new


def defer(spec: LimiterSpec, st: LimiterState, now: float, earliest: float, draw: float) -> tuple[float, LimiterState]:
    """Give a job that may not start a turn in the line: ``(seconds to wait, next state)``.

    ``draw`` in [0, 1) spreads the job inside its turn (jitter).

    >>> spec = LimiterSpec("x", rate=10)
    >>> st = LimiterState(0.0, 0.0, line_at=0.0)
    >>> d1, st = defer(spec, st, 0.0, earliest=1.0, draw=0.0)
    >>> d2, st = defer(spec, st, 0.0, earliest=1.0, draw=0.5)
    >>> round(d1, 6), round(d2, 6), round(st.line_at, 6)
    (1.0, 1.15, 1.2)

    A wait is at most :data:`~firesafe.errors.MAX_DELAY` (a line millions long behind a slow limiter
    would name dates no datetime holds); a job given that much waits again in its turn when it wakes.

    >>> defer(LimiterSpec("slow", rate=1 / 86400), LimiterState(0.0, 0.0, line_at=1e15), 0.0, 0.0, 0.0)[0]
    31536000000.0
    """
    turn = max(st.line_at, now, earliest)
    return min(turn - now + draw * spec.spacing, MAX_DELAY), replace(st, line_at=turn + spec.spacing)


def pause(st: LimiterState, now: float, until: float, reason: str | None = None) -> tuple[LimiterState, bool]:
    """Pause until ``until`` (a pause only ever grows); True if it was not paused before.

    The bucket is emptied as of ``until``: afterwards jobs start at the limiter's rate.

    >>> st, new = pause(LimiterState(5.0, 0.0, 0.0), 10.0, 13.0, "retry_after")
    >>> st.paused_until, st.tokens, st.tokens_at, new
    (13.0, 0.0, 13.0, True)
    >>> pause(st, 11.0, 12.0)[0].paused_until
    13.0
    """
    was_paused = st.paused_until is not None and now < st.paused_until
    if st.paused_until is not None and st.paused_until >= until:
        return st, False
    return replace(st, paused_until=until, pause_reason=reason, tokens=0.0,
                   tokens_at=max(until, st.tokens_at)), not was_paused


def resume(st: LimiterState, now: float) -> LimiterState:
    """Lift a pause and close the breaker at once; the line starts again from ``now``.

    >>> st = resume(LimiterState(0.0, 50.0, 90.0, paused_until=60.0, breaker=OPEN, failures=7), 10.0)
    >>> st.paused_until, st.breaker, st.failures, st.tokens_at, st.line_at
    (None, 'closed', 0, 10.0, 10.0)
    """
    return replace(st, paused_until=None, pause_reason=None, tokens_at=min(st.tokens_at, now), line_at=now,
                   breaker=CLOSED, failures=0, opened_at=None, retry_at=None, probe_job=None, probe_token=None)


def report(spec: LimiterSpec, st: LimiterState, now: float, outcome: str, *, job: tuple[int, str] | None = None,
           pause_until: float | None = None) -> Reported:
    """What an attempt's end does to the limiter.

    ``outcome``: ``"ok"`` (the provider answered), ``"failure"`` (a transient failure: an error
    that will be retried, a timeout) or ``"neutral"`` (a permanent error, a cancel). ``pause_until``:
    the provider asked to wait until then (Retry-After). ``wait_until`` in the result tells that the
    attempt must be given back (no attempt used) and wait: the limiter was paused by it, or the
    breaker was already open (or opened again by this probe).

    >>> spec = LimiterSpec("x", breaker_after=2, cooldown=10)
    >>> st = LimiterState(1.0, 0.0, 0.0)
    >>> r = report(spec, st, 1.0, "failure")
    >>> r.state.failures, r.state.breaker, r.wait_until
    (1, 'closed', None)
    >>> r = report(spec, r.state, 2.0, "failure")
    >>> r.state.breaker, r.state.retry_at, [kind for kind, _ in r.events], r.wait_until
    ('open', 12.0, ['breaker_opened'], None)
    >>> report(spec, r.state, 3.0, "failure").wait_until
    12.0
    >>> probing = take(spec, r.state, 12.0, probe=(1, "t"))
    >>> [k for k, _ in report(spec, probing, 12.5, "ok", job=(1, "t")).events]
    ['breaker_closed']
    >>> again = report(spec, probing, 12.5, "failure", job=(1, "t"))
    >>> again.state.breaker, again.state.retry_at, again.wait_until
    ('open', 22.5, 22.5)
    """
    events: list[tuple[str, dict[str, Any]]] = []
    wait_until: float | None = None
    is_probe = job is not None and st.probe_job == job[0] and st.probe_token == job[1]
    if pause_until is not None:
        st, started = pause(st, now, pause_until, "retry_after")
        if started:
            events.append(("paused", {"until": st.paused_until, "reason": "retry_after",
                                      "seconds": round(pause_until - now, 3)}))
        wait_until = st.paused_until
        outcome = "ok"  # the provider answered: it is up, only busy
    if outcome == "ok":
        if st.breaker != CLOSED:
            events.append(("breaker_closed", {"open_seconds": round(now - (st.opened_at or now), 3),
                                              "failures": st.failures}))
        return Reported(replace(st, failures=0, breaker=CLOSED, opened_at=None, retry_at=None, probe_job=None,
                                probe_token=None), tuple(events), wait_until)
    if outcome != "failure":
        if is_probe:  # the probe proved nothing: the next job probes
            st = replace(st, probe_job=None, probe_token=None)
        return Reported(st, tuple(events), wait_until)
    failures = st.failures + 1
    if st.breaker == CLOSED:
        if spec.breaker_after is not None and failures >= spec.breaker_after:
            st = replace(st, breaker=OPEN, failures=failures, opened_at=now, retry_at=now + spec.cooldown,
                         probe_job=None, probe_token=None)
            events.append(("breaker_opened", {"failures": failures, "cooldown": spec.cooldown,
                                              "retry_at": st.retry_at}))
        else:
            st = replace(st, failures=failures)
        return Reported(st, tuple(events), wait_until)
    # Open or half-open: the outage is known, so this attempt does not count against the job.
    if is_probe or (st.breaker == HALF_OPEN and st.probe_job is None):
        st = replace(st, breaker=OPEN, failures=failures, retry_at=now + spec.cooldown, probe_job=None,
                     probe_token=None)
        events.append(("breaker_opened", {"failures": failures, "cooldown": spec.cooldown,
                                          "retry_at": st.retry_at, "probe": True}))
    else:
        st = replace(st, failures=failures)
    until = st.retry_at if st.retry_at is not None else now
    return Reported(st, tuple(events), max(until, wait_until or until))


def fresh_for(spec: LimiterSpec) -> float:
    """How long after its grant a job may still start on it (seconds); one that would start later
    asks the limiter again. Half a token's worth of time at the limiter's rate, between
    :data:`MIN_FRESH` and :data:`MAX_FRESH`: a late start then adds at most one request to any window
    the provider counts, and a pause stored meanwhile reaches the job before it starts.

    >>> fresh_for(LimiterSpec("x", rate=20)), fresh_for(LimiterSpec("x", rate=50))
    (0.02, 0.01)
    >>> fresh_for(LimiterSpec("x", rate=1000)), fresh_for(LimiterSpec("x", concurrency=2))
    (0.005, 0.02)
    """
    if spec.rate is None:
        return MAX_FRESH
    return min(MAX_FRESH, max(MIN_FRESH, 0.5 / spec.rate))


def default_burst(rate_per_second: float) -> float:
    """A tenth of a second's worth of tokens, at least one.

    >>> default_burst(200.0), default_burst(50.0), default_burst(2.0)
    (20.0, 5.0, 1.0)
    """
    return float(max(1, math.ceil(rate_per_second / 10 - EPSILON)))
