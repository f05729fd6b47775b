"""``with ctx.limit("openai"):``: a limiter for one part of a job, shared with every worker.

Entering takes a token (and a concurrency slot) of the limiter, waiting in place up to ``wait``
seconds; if its turn is further away, :class:`~firesafe.limits.api.Throttled` gives the job back
(no attempt used) to come back at its turn. Leaving frees the slot and tells the limiter how the
block ended: a Retry-After (``RetryAfter``, or an HTTP 429/503 error carrying one) pauses the
limiter for every worker and gives the job back; transient errors count toward its breaker.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import TYPE_CHECKING, Any

from firesafe.errors import Cancelled, ConfigError, Permanent, StoreError
from firesafe.limits.api import Throttled
from firesafe.limits.gate import Tag, retry_after_seconds
from firesafe.limits.http import retry_after_of
from firesafe.limits.store import Acquire, Report

if TYPE_CHECKING:
    from firesafe.context import Context

log = logging.getLogger("firesafe.limits")

#: How long ``ctx.limit`` waits in place for its turn before giving the job back (seconds).
DEFAULT_WAIT = 2.0


def _outcome(exc: BaseException | None) -> str:
    if exc is None:
        return "ok"
    if isinstance(exc, (Permanent, Cancelled)) or not isinstance(exc, Exception):
        return "neutral"
    return "failure"


class Limit:
    """The context manager ``ctx.limit(name)`` returns; use ``with`` (or ``async with`` in async jobs)."""

    def __init__(self, ctx: Context, name: str, wait: float = DEFAULT_WAIT, *, app: Any = None,
                 store: Any = None) -> None:
        if app is None or store is None:
            raise RuntimeError("ctx.limit works inside a worker (this ctx has no app or store)")
        limiter = app.limiters.get(name)
        if limiter is None:
            declared = ", ".join(sorted(app.limiters)) or "none"
            raise ConfigError(f"ctx.limit({name!r}): no limiter with this name is declared (declared: {declared})")
        if not isinstance(wait, (int, float)) or wait < 0:
            raise ConfigError(f"ctx.limit({name!r}): wait must be a number of seconds >= 0")
        self.ctx = ctx
        self.store = store  # the worker's store, which ctx was given
        self.name = name
        self.spec = limiter.spec
        self.wait = float(wait)
        jobdef = app.jobs.get(ctx.job.name)
        # The job runs under this limiter already (limiter= on the job): it holds it for the whole attempt.
        self.passthrough = name in getattr(jobdef, "limiters", ())
        self._quiet = False
        self._probe = False
        self._random = random.Random()

    # -- steps shared by the sync and async forms -------------------------------------------------
    def _ask(self) -> Any:
        job = self.ctx.job
        item = Acquire(job.id, job.token, job.run, (self.name,), self._random.random(), defer=False, key=job.key)
        return self.store.limiter_acquire_many({self.name: self.spec}, [item])[0]

    def _refused(self, grant: Any, deadline: float) -> float:
        """Seconds to sleep before asking again; raises if the turn is beyond ``wait``."""
        if self.ctx.cancelled:
            raise Cancelled(f"cancel requested while waiting for limiter {self.name!r}")
        if grant.delay > deadline - time.monotonic():
            raise Throttled(self.name, grant.delay, grant.why)
        return float(grant.delay)

    def _granted(self, grant: Any) -> None:
        self._quiet, self._probe = grant.quiet, grant.probe

    def _leave(self, exc: BaseException | None) -> None:
        outcome = _outcome(exc)
        pause_for = None
        if exc is not None and outcome != "neutral":
            pause_for = retry_after_seconds(exc, retry_after_of(exc, time.time()))
        if (pause_for is None and outcome == "ok" and self._quiet and not self._probe
                and self.spec.concurrency is None):
            return
        job = self.ctx.job
        report = Report(job.id, job.token, job.run, (self.name,), outcome, pause_for=pause_for,
                        draw=self._random.random(), release=self.spec.concurrency is not None, key=job.key)
        try:
            verdict = self.store.limiter_report_many({self.name: self.spec}, [report])[0]
        except StoreError as store_exc:  # the block's own outcome matters more; its slot ends with the attempt
            log.warning("could not tell limiter %s how the block of %s ended: %s", self.name, job.key, store_exc)
            return
        if exc is not None and verdict.waits:
            try:
                exc._firesafe_limit = Tag(self.name, verdict.delay)  # type: ignore[attr-defined]  # a tag the worker reads
            except AttributeError:  # an exception type without a __dict__: it is retried as usual
                pass

    # -- with -----------------------------------------------------------------------------------
    def __enter__(self) -> Limit:
        if self.passthrough:
            return self
        deadline = time.monotonic() + self.wait
        while True:
            grant = self._ask()
            if grant.granted:
                self._granted(grant)
                return self
            time.sleep(self._refused(grant, deadline))

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if not self.passthrough:
            self._leave(exc)

    # -- async with -------------------------------------------------------------------------------
    async def __aenter__(self) -> Limit:
        if self.passthrough:
            return self
        deadline = time.monotonic() + self.wait
        while True:
            grant = await asyncio.to_thread(self._ask)
            if grant.granted:
                self._granted(grant)
                return self
            await asyncio.sleep(self._refused(grant, deadline))

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if not self.passthrough:
            await asyncio.to_thread(self._leave, exc)
