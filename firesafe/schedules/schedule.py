"""Declaring a schedule: a job whose runs are the windows of a cron expression.

``@app.schedule("0 2 * * *", tz="Europe/Berlin")`` declares a job (retries, dead letters and
replays work as for any job) whose function takes ``(ctx, window)``. Each window is enqueued once,
under the key ``<schedule>@<window start>``, into the schedule's ``queue`` (``default`` unless
given); its arguments are the window's bounds as ISO text, rebuilt into a
:class:`~firesafe.schedules.Window` before the function is called. Workers that serve the queue run
its scheduler.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from firesafe.errors import ConfigError
from firesafe.idempotency.keys import check_name
from firesafe.jobs import JobDef
from firesafe.retries.backoff import Backoff
from firesafe.retries.decide import DEFAULT_MAX_DEFERRALS
from firesafe.schedules.plan import CATCHUP_POLICIES
from firesafe.schedules.windows import Cron, Window

if TYPE_CHECKING:
    from firesafe.app import App

DEFAULT_CATCHUP_WINDOW = timedelta(days=1)
#: A window found this soon after its end is on time, not late (it covers a leader change).
DEFAULT_GRACE = timedelta(seconds=60)


def _seconds(value: object, what: str, name: str) -> float:
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ConfigError(f"schedule {name!r}: {what} must be a timedelta (or seconds), not {value!r}")
    if not seconds >= 0 or seconds == float("inf"):
        raise ConfigError(f"schedule {name!r}: {what} must be a finite duration >= 0")
    return seconds


def _runner(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The function the worker calls: window bounds (JSON) in, the user's ``fn(ctx, window)`` out."""
    if inspect.iscoroutinefunction(fn):
        async def run_window_async(ctx: Any, start: str, end: str) -> Any:
            return await fn(ctx, Window(datetime.fromisoformat(start), datetime.fromisoformat(end), name))

        return run_window_async

    def run_window(ctx: Any, start: str, end: str) -> Any:
        return fn(ctx, Window(datetime.fromisoformat(start), datetime.fromisoformat(end), name))

    return run_window


class ScheduleDef(JobDef):
    """The job of a schedule. Calling it calls your function directly: ``nightly_sync(ctx, window)``."""

    def __init__(self, app: App, fn: Callable[..., Any], *, name: str, **options: Any) -> None:
        super().__init__(app, _runner(fn, name), name=name, **options)
        self.user_fn = fn
        self.__wrapped__ = fn
        self.__doc__ = fn.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.user_fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<schedule job {self.name} queue={self.queue}>"


class Schedule:
    """A declared schedule, in ``app.schedules[name]``: its cron, catch-up policy and job."""

    def __init__(self, name: str, cron: Cron, catchup: str, catchup_window: float, grace: float,
                 job: ScheduleDef) -> None:
        self.name = name
        self.cron = cron
        self.catchup = catchup
        self.catchup_window = catchup_window
        self.grace = grace
        self.job = job

    def __repr__(self) -> str:
        return (f"<schedule {self.name} {self.cron.expression!r} tz={self.cron.tz} queue={self.queue} "
                f"catchup={self.catchup}>")

    @property
    def expression(self) -> str:
        return self.cron.expression

    @property
    def tz(self) -> str:
        return self.cron.tz

    @property
    def queue(self) -> str:
        """The queue its windows are enqueued into; only workers serving it run its scheduler."""
        return self.job.queue

    def key(self, start: int | float) -> str:
        """The job key of the window starting at ``start``."""
        return f"{self.name}@{self.cron.iso(start)}"

    def window(self, bounds: tuple[int, int]) -> Window:
        return self.cron.window(bounds, self.name)

    def items(self, bounds: Iterable[tuple[int, int]]) -> list[dict[str, Any]]:
        """``enqueue_many`` items of windows: key ``<name>@<start>``, arguments ``[start, end]`` as ISO text."""
        iso = self.cron.iso
        out = []
        prev_ts: int | None = None
        prev_iso = ""
        for start, end in bounds:
            s = prev_iso if start == prev_ts else iso(start)  # consecutive windows share a bound
            e = iso(end)
            prev_ts, prev_iso = end, e
            out.append({"args": [s, e], "key": f"{self.name}@{s}"})
        return out


def declare(app: App, expression: str, *, tz: str = "UTC", catchup: str = "all",
            catchup_window: timedelta | float = DEFAULT_CATCHUP_WINDOW, grace: timedelta | float = DEFAULT_GRACE,
            name: str | None = None, queue: str = "default", max_attempts: int = 5, backoff: Backoff | None = None,
            timeout: float | None = None, give_up_on: Sequence[type[BaseException]] = (),
            max_deferrals: int = DEFAULT_MAX_DEFERRALS, limiter: str | None = None,
            limiters: Sequence[str] | None = None, alert: Any = None) -> Callable[[Callable[..., Any]], ScheduleDef]:
    """The decorator behind ``app.schedule``: bad input fails here, when the schedule is declared."""
    label = name or "<schedule>"
    cron = Cron(expression, tz)
    if catchup not in CATCHUP_POLICIES:
        raise ConfigError(f"schedule {label!r}: unknown catch-up policy {catchup!r}: use 'all', 'latest' or 'skip'")
    window_s = _seconds(catchup_window, "catchup_window", label)
    grace_s = _seconds(grace, "grace", label)

    def register(fn: Callable[..., Any]) -> ScheduleDef:
        schedule_name = check_name(name or getattr(fn, "__name__", ""), "schedule name")
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(params) < 2:
            raise ConfigError(f"schedule {schedule_name!r}: the function must take (ctx, window)")
        if schedule_name in app.jobs:
            raise ConfigError(f"a job named {schedule_name!r} is already declared")
        job = ScheduleDef(app, fn, name=schedule_name, queue=queue, max_attempts=max_attempts,
                          backoff=backoff or Backoff(), timeout=timeout, give_up_on=tuple(give_up_on),
                          max_deferrals=max_deferrals)
        if limiter is not None or limiters:  # every window's attempt runs under these limiters
            from firesafe.limits.api import job_limiters

            job.limiters = job_limiters(schedule_name, limiter, limiters)
        if alert is not None:  # who hears of a window's failures, as for @app.job(alert=...)
            from firesafe.alerts.policy import AlertPolicy

            job.alert = AlertPolicy.of(alert, schedule_name)
        app.jobs[schedule_name] = job
        app.schedules[schedule_name] = Schedule(schedule_name, cron, catchup, window_s, grace_s, job)
        from firesafe.schedules.scheduler import SchedulerHook

        if not any(isinstance(h, SchedulerHook) for h in app.hooks):
            app.add_hook(SchedulerHook(app))  # workers serving a schedule's queue run the scheduler
        return job

    return register
