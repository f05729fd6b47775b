"""Where the worker loop meets the limiters: admit claimed jobs, settle ended attempts.

The loop calls :meth:`Gate.admit` right after a claim (one store transaction for the batch's limited
jobs: those refused are given back there, scheduled at their turn, no attempt used and no worker
slot held) and :meth:`Gate.settle` before saving outcomes (one transaction for the batch's limited
jobs: Retry-After pauses the limiter for every worker, transient failures count toward the breaker,
and attempts that ended because of a limit are given back instead of being spent). In between, the
attempt's own thread calls :meth:`Gate.before_start` just before the job's code runs (a grant that
went stale, or a pause stored since, is checked again) and :meth:`Gate.after_failure` as soon as the
code raised (a Retry-After pauses the limiter for every worker at once, not with the batch).
"""

from __future__ import annotations

import heapq
import json
import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from firesafe.errors import Cancelled, RetryAfter, StoreError
from firesafe.limits.api import Throttled, check_app
from firesafe.limits.bucket import fresh_for
from firesafe.limits.store import Acquire, Report
from firesafe.limits.waitlog import WAITS
from firesafe.states import Outcome, State
from firesafe.store.base import Claimed, FinishParams, released

if TYPE_CHECKING:
    from firesafe.limits.bucket import LimiterSpec
    from firesafe.worker.worker import Worker

log = logging.getLogger("firesafe.limits")

#: The shortest nap of a worker that has jobs coming back from a limiter: due jobs are claimed in
#: small batches rather than one transaction per job (the bucket's burst absorbs the lateness).
TICK = 0.02
#: Reasons of an ended attempt that say nothing about the provider.
_NEUTRAL_REASONS = frozenset({"permanent", "cancelled", "unknown_job"})
#: How long a granted job that starts late may wait in place for a new token before it is given
#: back instead (seconds; a quarter of its timeout at most).
RENEW_WAIT = 0.5
#: How much later a job comes back when the store could not be asked whether it may start (seconds).
RENEW_RETRY = 1.0


@dataclass(frozen=True)
class Held:
    """A claimed job's grant: breaker state when granted, and when (the store's clock)."""

    quiet: bool
    probe: bool
    at: float


class StoreTime:
    """The store's clock as this process can read it without asking the store: the injected clock
    itself (SQLite, tests), or for the database's clock the local one plus an offset learnt from
    the grants. Each grant's time ``at`` was read after the request left, so ``at - sent`` is at
    least the offset; the smallest of the last minute is kept. It errs late, never early: a job
    looks later than it is, never fresher. Used only to tell whether a grant is still fresh; what
    a limiter decides always reads the store's own clock."""

    #: How long a learnt offset is trusted before a newer one replaces it, smaller or not (seconds).
    KEEP = 60.0

    def __init__(self, store: Any) -> None:
        self.clock = store.clock  # None: the database's clock (see Store.clock)
        self._offset: float | None = None
        self._learnt = 0.0

    def learn(self, sent: float, at: float) -> None:
        """A grant the store decided at ``at`` (its clock) for a request sent at ``sent`` (time.time())."""
        if self.clock is not None:
            return
        offset, now = at - sent, time.monotonic()
        if self._offset is None or offset <= self._offset or now - self._learnt > self.KEEP:
            self._offset, self._learnt = offset, now

    def now(self) -> float | None:
        """The store's time now, or a little after; None before the first grant (the database's clock)."""
        if self.clock is not None:
            return float(self.clock.now())
        return None if self._offset is None else time.time() + self._offset


@dataclass(frozen=True)
class Tag:
    """Put on an exception that left a ``with ctx.limit(name)`` block whose report says the job must
    wait ``delay`` seconds (the limiter was paused by it, or its breaker is open)."""

    limiter: str
    delay: float


def tag_of(error: BaseException | None) -> Tag | None:
    seen = 0
    while error is not None and seen < 4:
        tag = getattr(error, "_firesafe_limit", None)
        if isinstance(tag, Tag):
            return tag
        error = error.__cause__
        seen += 1
    return None


def retry_after_seconds(error: BaseException | None, http_seconds: float | None) -> float | None:
    """What the provider asked to wait: an HTTP Retry-After, or a ``RetryAfter`` the job raised
    (a durable ``ctx.sleep`` and a refused ``ctx.limit`` are not the provider's doing)."""
    if http_seconds is not None:
        return http_seconds
    if isinstance(error, RetryAfter) and not isinstance(error, Throttled) and not _is_sleep(error):
        return error.seconds
    return None


def _is_sleep(error: BaseException) -> bool:
    from firesafe.errors import WaitingForChildren
    from firesafe.steps.steps import DurableSleep

    return isinstance(error, DurableSleep | WaitingForChildren)


def outcome_of(fin: FinishParams) -> str:
    """``ok``, ``failure`` (transient: retried, timed out, or retries exhausted) or ``neutral``.

    >>> from firesafe.states import Outcome, State
    >>> outcome_of(FinishParams(1, "t", 1, State.SCHEDULED, Outcome.FAILED, delay=1.0))
    'failure'
    >>> outcome_of(FinishParams(1, "t", 1, State.DEAD, Outcome.FAILED, reason="permanent"))
    'neutral'
    """
    if fin.outcome == Outcome.SUCCEEDED:
        return "ok"
    if fin.outcome in (Outcome.FAILED, Outcome.TIMED_OUT) and fin.reason not in _NEUTRAL_REASONS:
        return "failure"
    return "neutral"


def waited(fin: FinishParams, delay: float) -> FinishParams:
    """How a given-back attempt reads in the worker's log and counters."""
    return FinishParams(job_id=fin.job_id, token=fin.token, seq=fin.seq, state=State.SCHEDULED,
                        outcome=Outcome.DEFERRED, delay=delay, given_back=1, error_type=fin.error_type,
                        message=fin.message, reason="limiter")


def admitted(fin: FinishParams, limiters: tuple[str, ...], at: float) -> FinishParams:
    """``fin`` with ``{"admitted": {"limiters": [...], "at": T}}`` added to its trace detail.

    >>> from firesafe.states import Outcome, State
    >>> f = FinishParams(1, "t", 1, State.SUCCEEDED, Outcome.SUCCEEDED, detail='{"duration": 0.5}')
    >>> admitted(f, ("stripe",), 12.5).detail
    '{"duration": 0.5, "admitted": {"limiters": ["stripe"], "at": 12.5}}'
    """
    detail = json.loads(fin.detail) if fin.detail else {}
    detail["admitted"] = {"limiters": list(limiters), "at": at}
    return replace(fin, detail=json.dumps(detail))


@dataclass(frozen=True, slots=True)
class Admission:
    """What :meth:`Gate.admit` made of a claim: the jobs that may start now, how many others were
    given back to wait for their limiters, and how many of those had lost their lease already."""

    start: list[Claimed]
    deferred: int = 0
    fenced: int = 0


class Gate:
    """The limiters of one worker's app. It plugs into the worker through its public parts only: the
    worker's ``app``, ``store``, ``random``, ``concurrency`` and :meth:`Worker.leases`,
    and its completer, which books the attempts the gate gives back (:meth:`Completer.give_back`)
    and keeps what a store fault stopped it from writing (:meth:`Completer.keep`)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.app = worker.app
        self.store: Any = worker.store
        self.job_limiters = check_app(self.app)
        self.specs: dict[str, LimiterSpec] = {n: lim.spec for n, lim in self.app.limiters.items()}
        if self.specs:
            self.store.limiter_sync(list(self.specs.values()))
        self._held: dict[tuple[int, str], Held] = {}  # (job id, lease token) -> its grant
        self.clock = StoreTime(self.store)
        self._due: list[float] = []  # monotonic times at which jobs this worker gave back come up

    # -- after a claim ---------------------------------------------------------------------------
    def admit(self, claimed: list[Claimed]) -> Admission:
        """The claimed jobs that may start now (the others were given back in the store), and how
        many of those were given back to wait, or found their lease gone (the worker counts them)."""
        items = [Acquire(c.job.id, c.token, c.job.runs, self.job_limiters[c.job.name], self.worker.random.random(),
                         key=c.job.key)
                 for c in claimed if c.job.name in self.job_limiters]
        if not items:
            return Admission(claimed)
        try:
            sent = time.time()
            grants = self.store.limiter_acquire_many(self.specs, items)
        except StoreError:
            limited = {it.job_id for it in items}
            back = [released(c, "the store failed before the job's limiters were checked")
                    for c in claimed if c.job.id in limited]
            self.worker.completer.keep(back)  # given back once the store answers
            raise
        refused: set[int] = set()
        deferred = fenced = 0
        now = time.monotonic()
        if grants:
            self.clock.learn(sent, grants[0].at)
        for g, it in zip(grants, items, strict=True):
            if g.granted:
                self._held[(it.job_id, it.token)] = Held(g.quiet, g.probe, g.at)
                continue
            refused.add(g.job_id)
            if g.applied:
                deferred += 1
                heapq.heappush(self._due, now + g.delay)
                log.debug("%s waits %.3fs for limiter %s (%s)", it.key, g.delay, g.limiter, g.why)
                WAITS.note(g.limiter, g.why, g.delay)  # at INFO: a summary per limiter, once a minute
            else:
                fenced += 1
        if refused:
            log.debug("%d job(s) wait for limiters; %d may start", len(refused), len(claimed) - len(refused))
        return Admission([c for c in claimed if c.job.id not in refused], deferred, fenced)

    def sleep_time(self, wait: float) -> float:
        """The loop's nap, shortened to wake when jobs it gave back come up."""
        now = time.monotonic()
        while self._due and self._due[0] <= now - TICK:
            heapq.heappop(self._due)
        if self._due:
            return min(wait, max(self._due[0] - now, TICK))
        return wait

    # -- in the attempt's thread -------------------------------------------------------------------
    def before_start(self, ctx: Any, timeout: float | None) -> BaseException | None:
        """Just before the job's code runs: None if it may start on its grant, else the error that
        ends the attempt unrun (a ``Throttled`` gives the job back without using an attempt).

        A grant is good for :func:`~firesafe.limits.bucket.fresh_for` seconds. A job that starts
        later (its process stalled, say), or after this process stored a pause, asks again: the
        pause and the breaker are checked anew and a fresh token taken, waiting in place up to
        ``RENEW_WAIT``. So a job granted before a pause never starts in it, and late starts never
        pile onto the starts of other workers (the provider sees the limiter's bound)."""
        key = (ctx.job.id, ctx.job.token)
        held = self._held.get(key)
        names = self.job_limiters.get(ctx.job.name)
        if held is None or not names:
            return None
        now = self.clock.now()
        late = now is None or now - held.at > min(fresh_for(self.specs[n]) for n in names)
        if not late and not any(self.app.limiters[n].paused_at(now) for n in names):
            return None
        budget = min(RENEW_WAIT, timeout / 4) if timeout else RENEW_WAIT
        return self._renew(ctx, key, names, time.monotonic() + budget)

    def _renew(self, ctx: Any, key: tuple[int, str], names: tuple[str, ...], deadline: float) -> BaseException | None:
        job = ctx.job
        specs = {n: self.specs[n] for n in names}
        while True:
            if ctx.cancelled:
                return Cancelled("cancel requested while the job waited for its limiter; not started")
            item = Acquire(job.id, key[1], job.run, names, self.worker.random.random(), defer=False, key=job.key,
                           renew=True)
            try:
                sent = time.time()
                [grant] = self.store.limiter_acquire_many(specs, [item])
            except StoreError as exc:  # not known to be allowed: not started, and given back
                log.warning("%s could not check limiter(s) %s before it started (%s); it comes back later",
                            job.key, ",".join(names), exc)
                return Throttled(names[0], RENEW_RETRY, "unreachable")
            self.clock.learn(sent, grant.at)
            if grant.granted:
                self._held[key] = Held(grant.quiet, grant.probe, grant.at)
                return None
            if grant.delay > deadline - time.monotonic():
                log.debug("%s started late and waits %.3fs for limiter %s (%s)", job.key, grant.delay,
                          grant.limiter, grant.why)
                return Throttled(grant.limiter or names[0], grant.delay, grant.why)
            time.sleep(grant.delay)

    def after_failure(self, ctx: Any, error: BaseException | None, http_seconds: float | None) -> float | None:
        """The job's code raised ``error``: if it is the provider's Retry-After, pause the job's
        limiters for every worker now, in this thread, rather than when the attempt's outcome is
        saved with its batch. Returns when the pause ends (the store's clock), or None."""
        names = self.job_limiters.get(ctx.job.name)
        if not names or ctx.cancelled or isinstance(error, Throttled) or tag_of(error) is not None:
            return None
        seconds = retry_after_seconds(error, http_seconds)
        if seconds is None:
            return None
        try:
            until = self.store.limiter_retry_after(self.specs, names, seconds, job_id=ctx.job.id, key=ctx.job.key)
        except StoreError as exc:  # the outcome's report pauses it instead, with the batch
            log.warning("could not pause limiter(s) %s at once for %s (%s)", ",".join(names), ctx.job.key, exc)
            return None
        for n in names:
            self.app.limiters[n].note_pause(until)
        return until

    # -- before saving outcomes ----------------------------------------------------------------
    def settle(self, finishes: list[FinishParams], meta: list[tuple[Any, Any]] | None,
               keep_slots: bool = False) -> tuple[list[FinishParams], list[tuple[Any, Any]] | None]:
        """Report limited attempts to their limiters; return what is left to save as usual.

        Attempts given back (a pause or an open breaker, a refused ``ctx.limit``) are written by the
        report's transaction and booked through the worker's completer (:meth:`Completer.give_back`).
        """
        reports: list[Report] = []
        index: list[int] = []
        for i, fin in enumerate(finishes):
            running, res = meta[i] if meta else (None, None)
            if running is None:
                continue
            job = running.claimed.job
            held = self._held.pop((job.id, running.claimed.token), None)
            if held is not None:  # the trace keeps when the attempt got its tokens (the store's clock)
                fin = finishes[i] = admitted(fin, self.job_limiters[job.name], held.at)
            report = self._report_for(fin, job, running.claimed.token, res, held)
            if report is not None:
                reports.append(report)
                index.append(i)
        if len(self._held) > 4 * self.worker.concurrency + 100:  # attempts whose result was dropped
            live = self.worker.leases()
            self._held = {k: v for k, v in self._held.items() if k in live}
        if not reports:
            return finishes, meta
        try:
            verdicts = self.store.limiter_report_many(self.specs, reports)
        except StoreError:
            self.worker.completer.keep(finishes, meta, keep_slots=keep_slots)  # saved plainly once the store answers
            raise
        taken: set[int] = set()
        booked: list[FinishParams] = []
        booked_meta: list[tuple[Any, Any]] = []
        applied: list[bool] = []
        for i, report, v in zip(index, reports, verdicts, strict=True):
            if not (v.waits and report.finish is not None):
                continue
            taken.add(i)
            booked.append(waited(finishes[i], v.delay))
            booked_meta.append(meta[i] if meta else (None, None))
            applied.append(v.applied)
            if v.applied:
                heapq.heappush(self._due, time.monotonic() + v.delay)
                WAITS.note(v.limiter, "paused" if report.pause_for is not None else "limit", v.delay)
        if booked:
            self.worker.completer.give_back(booked, booked_meta, applied, keep_slots=keep_slots)
        if not taken:
            return finishes, meta
        rest = [f for i, f in enumerate(finishes) if i not in taken]
        rest_meta = [m for i, m in enumerate(meta) if i not in taken] if meta else None
        return rest, rest_meta

    def _report_for(self, fin: FinishParams, job: Any, token: str, res: Any,
                    held: Held | None) -> Report | None:
        error = getattr(res, "error", None)
        draw = self.worker.random.random()
        base = {"job_id": job.id, "token": token, "seq": fin.seq, "draw": draw, "key": job.key}
        if isinstance(error, Throttled) and error.limiter in self.specs:
            return Report(limiters=(error.limiter,), outcome="neutral", wait_for=error.seconds, finish=fin, **base)
        tag = tag_of(error)
        if tag is not None and tag.limiter in self.specs and fin.outcome != Outcome.CANCELLED:
            return Report(limiters=(tag.limiter,), outcome="neutral", wait_for=tag.delay, finish=fin, **base)
        limiters = self.job_limiters.get(job.name)
        if not limiters:
            return None
        quiet, probe = (held.quiet, held.probe) if held is not None else (False, False)
        outcome = outcome_of(fin)
        pause_for = None
        if fin.outcome != Outcome.CANCELLED:
            pause_for = retry_after_seconds(error, getattr(res, "retry_after", None))
        if pause_for is None and outcome == "ok" and quiet and not probe:
            return None  # the usual case: nothing to tell the limiter
        if pause_for is None and outcome == "neutral" and not probe and quiet:
            return None
        give_back = pause_for is not None or outcome == "failure"
        until = getattr(res, "paused_until", None) if pause_for is not None else None  # stored when it was met
        return Report(limiters=limiters, outcome=outcome, pause_for=pause_for, pause_until=until,
                      finish=fin if give_back else None, **base)

