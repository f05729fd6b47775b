"""Declaring limiters (``app.limiter``), naming them on jobs, and the handle to pause or resume one."""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from firesafe.clock import to_timestamp
from firesafe.errors import MAX_DELAY, ConfigError, InvalidInput, RetryAfter
from firesafe.idempotency.keys import check_name
from firesafe.limits.bucket import LimiterSpec, default_burst

if TYPE_CHECKING:
    from firesafe.app import App
    from firesafe.limits.store import LimiterStatus


class Throttled(RetryAfter):
    """A ``with ctx.limit(...)`` block could not start within its ``wait``: the job is given back
    without using an attempt and comes back at its turn."""

    def __init__(self, limiter: str, seconds: float, why: str | None = None) -> None:
        self.limiter = limiter
        self.why = why
        super().__init__(max(0.0, seconds), f"limiter {limiter!r} is {why or 'busy'}: next turn in {seconds:.3g}s")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class Limiter:
    """A declared limiter. Its state lives in the store, shared by every worker.

    ``pause``/``resume`` act for every worker at once; ``status`` reads tokens, slots in use, jobs
    waiting, pause and breaker.
    """

    def __init__(self, app: App, spec: LimiterSpec) -> None:
        self.app = app
        self.spec = spec
        # The end of the latest Retry-After pause this process stored (the store's clock): its jobs
        # granted a token before it check with the store before they start (see gate.Gate.before_start).
        self._paused_until: float | None = None

    def note_pause(self, until: float) -> None:
        """Remember a Retry-After pause this process stored, ending at ``until`` (the store's clock)."""
        if self._paused_until is None or until > self._paused_until:
            self._paused_until = until

    def paused_at(self, now: float | None) -> bool:
        """Whether a pause this process stored may still hold at ``now`` (None: unknown, so it may)."""
        until = self._paused_until
        return until is not None and (now is None or now < until)

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        s = self.spec
        parts = [f"rate={s.rate:g}/s burst={s.burst:g}" if s.rate else "no rate",
                 f"concurrency={s.concurrency}" if s.concurrency else "",
                 f"breaker_after={s.breaker_after}" if s.breaker_after else "no breaker"]
        return f"<limiter {s.name} {' '.join(p for p in parts if p)}>"

    def _sync(self) -> None:
        self.app.store.limiter_sync([self.spec])

    def pause(self, seconds: float | None = None, *, until: datetime | None = None, reason: str | None = None,
              actor: str | None = None) -> LimiterStatus:
        """Stop every worker from starting jobs of this limiter for ``seconds`` (or until ``until``).

        Jobs that come up meanwhile wait without using an attempt; after the pause they are released
        at the limiter's pace. A pause only ever grows; :meth:`resume` ends it early.
        """
        if (seconds is None) == (until is None):
            raise InvalidInput("give seconds or until, not both (and not neither)")
        if seconds is not None and (not _number(seconds) or seconds < 0):
            raise InvalidInput(f"seconds must be a number >= 0, not {seconds!r}")
        self._sync()
        when = None
        if until is not None:
            if not isinstance(until, datetime):
                raise InvalidInput("until must be a timezone-aware datetime")
            try:
                when = to_timestamp(until)
            except ValueError as exc:
                raise InvalidInput(str(exc)) from None
        return self.app.store.limiter_pause(self.name, seconds=seconds, until=when,
                                            reason=reason_of(reason), actor=actor_of(actor))

    def resume(self, actor: str | None = None, *, reason: str | None = None) -> LimiterStatus:
        """End a pause and close the breaker now; waiting jobs are released at the limiter's pace.
        The ``resumed`` event records ``actor`` (default ``$FIRESAFE_ACTOR``, else user@host) and ``reason``."""
        self._sync()
        status, _released = self.app.store.limiter_resume(
            self.name, actor=actor_of(actor), reason=reason_of(reason))
        return status

    def status(self) -> LimiterStatus:
        """Tokens now, slots in use, jobs waiting, pause and breaker, as the store holds them."""
        self._sync()
        return next(s for s in self.app.store.limiter_list() if s.name == self.name)


def actor_of(actor: str | None) -> str:
    from firesafe.deadletters.audit import actor_of as who

    return who(actor)


def reason_of(reason: str | None) -> str | None:
    from firesafe.deadletters.audit import reason_of as why

    return why(reason)


def declare(app: App, name: str, *, rate: float | None = None, per: float = 1.0, burst: float | None = None,
            concurrency: int | None = None, breaker_after: int | None = 5, cooldown: float = 30.0) -> Limiter:
    """Validate and register a limiter on ``app`` (see :meth:`firesafe.App.limiter`)."""
    check = check_name(name, "limiter name")
    if check in app.limiters:
        raise ConfigError(f"a limiter named {name!r} is already declared")
    where = f"limiter {name!r}"
    if rate is not None and (not _number(rate) or rate <= 0):
        raise ConfigError(f"{where}: rate must be a number > 0 (got {rate!r}); leave it out for no rate limit")
    if not _number(per) or per <= 0:
        raise ConfigError(f"{where}: per must be a number of seconds > 0 (got {per!r})")
    per_second = float(rate) / float(per) if rate is not None else None
    if per_second is not None and not 1 / per_second <= MAX_DELAY:
        raise ConfigError(f"{where}: rate={rate!r} per={per!r} is one turn every {1 / per_second:.3g} s; "
                          f"the longest wait firesafe keeps is {MAX_DELAY:.0f} s (1,000 years)")
    if burst is not None:
        if per_second is None:
            raise ConfigError(f"{where}: burst needs a rate")
        if not _number(burst) or burst < 1:
            raise ConfigError(f"{where}: burst must be a number >= 1 (got {burst!r})")
    if concurrency is not None and (not isinstance(concurrency, int) or isinstance(concurrency, bool)
                                    or concurrency < 1):
        raise ConfigError(f"{where}: concurrency must be a whole number >= 1 (got {concurrency!r})")
    if breaker_after is not None and (not isinstance(breaker_after, int) or isinstance(breaker_after, bool)
                                      or breaker_after < 1):
        raise ConfigError(f"{where}: breaker_after must be a whole number >= 1, or None (got {breaker_after!r})")
    if not _number(cooldown) or cooldown <= 0:
        raise ConfigError(f"{where}: cooldown must be a number of seconds > 0 (got {cooldown!r})")
    spec = LimiterSpec(
        name=check, rate=per_second,
        burst=float(burst) if burst is not None else (default_burst(per_second) if per_second else 1.0),
        concurrency=concurrency, breaker_after=breaker_after, cooldown=float(cooldown))
    limiter = Limiter(app, spec)
    app.limiters[check] = limiter
    return limiter


def job_limiters(job: str, limiter: str | None, limiters: Iterable[str] | None) -> tuple[str, ...]:
    """The limiter names a job declares (``limiter=`` or ``limiters=``), checked for shape only:
    whether each is declared is checked when a worker starts (:func:`check_app`)."""
    if limiter is not None and limiters:
        raise ConfigError(f"job {job!r}: give limiter= or limiters=, not both")
    if isinstance(limiters, str):
        raise ConfigError(f"job {job!r}: limiters= takes a list of names; for one, write limiter={limiters!r}")
    names = [limiter] if limiter is not None else list(limiters or ())
    out: list[str] = []
    for n in names:
        try:
            out.append(check_name(n, "limiter name"))
        except InvalidInput as exc:
            raise ConfigError(f"job {job!r}: {exc}") from None
        if out.count(n) > 1:
            raise ConfigError(f"job {job!r} names limiter {n!r} twice")
    return tuple(out)


def check_app(app: App) -> dict[str, tuple[str, ...]]:
    """The limiters of each job that has some; a job naming an undeclared limiter is a ConfigError."""
    out: dict[str, tuple[str, ...]] = {}
    for jd in app.jobs.values():
        names = getattr(jd, "limiters", ())
        unknown = [n for n in names if n not in app.limiters]
        if unknown:
            declared = ", ".join(sorted(app.limiters)) or "none"
            raise ConfigError(f"job {jd.name!r} uses limiter {unknown[0]!r}, which is not declared "
                              f"(declared: {declared}); add app.limiter({unknown[0]!r}, ...)")
        if names:
            out[jd.name] = tuple(names)
    return out
