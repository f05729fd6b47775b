"""Public hooks: what a worker, an attempt and a review did, told to code that plugs in.

A :class:`Hook` is a class of no-op methods; override the ones you need and register an instance
with ``App(hooks=[...])`` or :meth:`firesafe.App.add_hook`::

    class Timings(firesafe.Hook):
        def attempt_ended(self, attempt: firesafe.AttemptEnded) -> None:
            histogram.observe(attempt.duration, {"job": attempt.name, "outcome": attempt.outcome})

Guarantees every hook gets:

- **Told after the fact.** ``attempt_ended`` and ``job_dead`` run after the store committed the
  outcome (never for a result that was dropped because the attempt's lease was lost);
  ``job_replayed`` after the jobs moved.
- **Never in the way.** An exception a hook raises is logged (logger ``firesafe.hooks``) and
  swallowed: it never stops a worker, never changes an outcome and never keeps the other hooks
  from being called. A hook is called on a worker's own threads (each method says which one), so a
  slow hook slows that worker: hand slow work to a thread or a queue of your own.
- **Nothing when nobody listens.** Only the methods a hook overrides are called, and the values
  they receive are built only when some hook overrides that method.

The values a hook receives are frozen dataclasses of plain values (strings, numbers): they hold no
job arguments and no result, only names, keys and the error's type and message as the trace keeps
them (bounded, masked by :func:`firesafe.masking.mask_text` and the job's secret arguments, valid
for a store). A message is still text a job wrote: write it to a terminal or a log line through
:func:`firesafe.sanitize.for_terminal` or :func:`firesafe.sanitize.for_log`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from firesafe.sanitize import for_log, safe_str

if TYPE_CHECKING:
    from firesafe.models import Job
    from firesafe.store.base import Expired, FinishParams, RescueParams
    from firesafe.worker import Worker

log = logging.getLogger("firesafe.hooks")

#: The longest ``Hook.job_context`` text kept with a job (a W3C ``traceparent`` is 55 characters,
#: with a ``tracestate`` a few hundred).
MAX_CONTEXT = 512


@dataclass(frozen=True, slots=True)
class AttemptStarted:
    """An attempt about to run: its job, which attempt it is, and the worker running it."""

    job_id: int
    key: str
    name: str
    queue: str
    attempt: int  # within the retry budget, 1-based
    max_attempts: int
    run: int  # every claim counts (deferrals and rescues too): (job_id, run) names this attempt
    worker: str  # the worker's id
    #: What :meth:`Hook.job_context` returned when the job was enqueued (None: nothing was recorded).
    context: str | None = None

    @classmethod
    def of(cls, job: Job, worker: str) -> AttemptStarted:
        return cls(job.id, job.key, job.name, job.queue, job.attempt, job.max_attempts, job.runs, worker,
                   job.trace_context)


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    """An attempt whose outcome the store has recorded.

    ``outcome`` is how the attempt ended (:class:`firesafe.Outcome`: succeeded, failed, timed_out,
    deferred, interrupted, cancelled) and ``state`` the job's state after it (:class:`firesafe.State`):
    ``scheduled`` with ``retry_in`` seconds for a retry, ``dead`` when it is a dead letter (then
    :meth:`Hook.job_dead` follows). ``duration`` is how long the job's function ran (0.0 if it never
    started: a job given back, or one that could not run here).
    """

    job_id: int
    key: str
    name: str
    queue: str
    attempt: int
    run: int
    worker: str
    outcome: str
    state: str
    duration: float
    error_type: str | None = None
    message: str | None = None
    reason: str | None = None  # why the job is where it is: exhausted, permanent, timed_out, limiter, ...
    retry_in: float | None = None
    context: str | None = None

    @property
    def failed(self) -> bool:
        """Whether the attempt failed (raised, or timed out); a deferral, an interruption or a cancel
        is not a failure."""
        return self.outcome in ("failed", "timed_out")

    @classmethod
    def of(cls, job: Job, fin: FinishParams, worker: str, duration: float) -> AttemptEnded:
        return cls(job.id, job.key, job.name, job.queue, job.attempt, job.runs, worker, str(fin.outcome),
                   str(fin.state), duration, fin.error_type, fin.message, fin.reason, fin.delay, job.trace_context)


@dataclass(frozen=True, slots=True)
class JobDead:
    """A job that became a dead letter (``app.dlq``), after the store recorded it."""

    job_id: int
    key: str
    name: str
    queue: str
    attempt: int
    reason: str  # exhausted, permanent, unknown_job, undecodable_payload, worker_lost, ...
    error_type: str | None = None
    message: str | None = None
    worker: str | None = None  # the worker that recorded it

    @classmethod
    def of(cls, job: Job, fin: FinishParams, worker: str) -> JobDead:
        return cls(job.id, job.key, job.name, job.queue, job.attempt, fin.reason or "", fin.error_type, fin.message,
                   worker)

    @classmethod
    def rescued(cls, job: Expired, rescue: RescueParams, worker: str) -> JobDead:
        """A job made dead by the rescue of its attempt (its worker died too often), by ``worker``."""
        return cls(job.id, job.key, job.name, job.queue, job.attempt, rescue.reason or "", "WorkerLost",
                   rescue.message, worker)


@dataclass(frozen=True, slots=True)
class JobsReplayed:
    """Jobs put back in their queue by a person or a script: ``app.dlq.replay`` (``how="replay"``)
    or ``app.rerun`` (``how="rerun"``). ``keys`` are the jobs that moved (not those skipped)."""

    keys: tuple[str, ...]
    actor: str
    reason: str | None
    how: str


class Hook:
    """Override what you need; every method is a no-op here. See the module's docstring for the
    guarantees, and docs/extending.md for examples."""

    def worker_started(self, worker: Worker) -> None:
        """A worker's loop starts (on the thread that calls ``worker.run()``), before its first claim.
        With ``lanes`` each claim loop is a worker of its own."""

    def worker_stopped(self, worker: Worker) -> None:
        """A worker's loop ended, its outcomes saved (on the same thread as :meth:`worker_started`)."""

    def start_duty(self, worker: Worker) -> Callable[[], None] | None:
        """Start a background duty for a worker (threads of your own: alert dispatch, a scheduler);
        return the function that stops it, or None. Called once per process's leading worker, after
        :meth:`worker_started`; the stop function runs when the worker stops."""
        return None

    def attempt_started(self, attempt: AttemptStarted) -> None:
        """An attempt starts: called on the thread that runs the job's function, just before it."""

    def attempt_ended(self, attempt: AttemptEnded) -> None:
        """An attempt's outcome was committed: called on the worker's loop thread (or a lane's)."""

    def job_dead(self, job: JobDead) -> None:
        """A job became a dead letter: after :meth:`attempt_ended`, on the same thread. Jobs that
        never ran (an undeclared name, unreadable arguments) are told too, after their
        ``attempt_ended`` (duration 0.0); a job whose worker died too often is declared dead by the
        worker that rescues it, on that worker's loop thread (no ``attempt_ended`` before: the
        attempt's worker is gone), with ``reason="worker_lost"`` (or ``exhausted``) and
        ``error_type="WorkerLost"``."""

    def job_replayed(self, replayed: JobsReplayed) -> None:
        """Jobs were replayed or rerun: on the thread that called ``app.dlq.replay`` or ``app.rerun``."""

    def job_context(self) -> str | None:
        """Text to record with each job enqueued now, on the enqueuing thread (for instance the
        current trace's W3C ``traceparent``); the job's attempts get it back as ``context``. At most
        :data:`MAX_CONTEXT` characters; the first hook returning text wins."""
        return None


#: The methods of a hook that report an event, in the order of a job's life.
EVENTS = ("worker_started", "worker_stopped", "start_duty", "attempt_started", "attempt_ended", "job_dead",
          "job_replayed", "job_context")


def _overrides(hook: Hook, name: str) -> bool:
    return getattr(type(hook), name, None) is not getattr(Hook, name)


class Hooks:
    """The hooks of one app, in the order they were added. For each event it keeps the bound methods
    of the hooks that override it (a tuple, empty when none does), which is what callers test before
    building an event's value: ``if hooks.attempt_ended: hooks.call(hooks.attempt_ended, value)``."""

    def __init__(self, hooks: Sequence[Hook] = ()) -> None:
        self._lock = threading.Lock()
        self._hooks: tuple[Hook, ...] = ()
        self.worker_started: tuple[Callable[..., Any], ...] = ()
        self.worker_stopped: tuple[Callable[..., Any], ...] = ()
        self.start_duty: tuple[Callable[..., Any], ...] = ()
        self.attempt_started: tuple[Callable[..., Any], ...] = ()
        self.attempt_ended: tuple[Callable[..., Any], ...] = ()
        self.job_dead: tuple[Callable[..., Any], ...] = ()
        self.job_replayed: tuple[Callable[..., Any], ...] = ()
        self.job_context: tuple[Callable[..., Any], ...] = ()
        for hook in hooks:
            self.add(hook)

    def add(self, hook: Hook) -> Hook:
        """Register ``hook`` (after those already there); returns it."""
        if not isinstance(hook, Hook):
            from firesafe.errors import ConfigError

            raise ConfigError(f"hooks take firesafe.Hook instances, not {type(hook).__name__}")
        with self._lock:
            if not any(h is hook for h in self._hooks):
                self._set((*self._hooks, hook))
        return hook

    def remove(self, hook: Hook) -> None:
        """Unregister ``hook`` (nothing happens if it is not registered)."""
        with self._lock:
            self._set(tuple(h for h in self._hooks if h is not hook))

    def _set(self, hooks: tuple[Hook, ...]) -> None:
        # Each event's tuple is replaced whole: a thread calling hooks meanwhile sees the old or the new.
        self._hooks = hooks
        for name in EVENTS:
            setattr(self, name, tuple(getattr(h, name) for h in hooks if _overrides(h, name)))

    def __iter__(self) -> Iterator[Hook]:
        return iter(self._hooks)

    def __len__(self) -> int:
        return len(self._hooks)

    def __contains__(self, hook: object) -> bool:
        return any(h is hook for h in self._hooks)

    @staticmethod
    def call(methods: tuple[Callable[..., Any], ...], *args: Any) -> None:
        """Call each method with ``args``; one that raises is logged and the others still run."""
        for method in methods:
            try:
                method(*args)
            except Exception:  # a hook's bug must not stop a worker or change an outcome
                failed(method)

    def start_duties(self, worker: Worker) -> list[Callable[[], None]]:
        """Start every hook's duty for ``worker``; their stop functions, as the hooks returned them
        (call them through :meth:`call`, which logs one that raises)."""
        stops: list[Callable[[], None]] = []
        for start in self.start_duty:
            try:
                stop = start(worker)
            except Exception:
                failed(start)
                continue
            if stop is not None:
                stops.append(stop)
        return stops

    def context(self) -> str | None:
        """The text the first hook's :meth:`Hook.job_context` gives for a job enqueued now, or None."""
        for method in self.job_context:
            try:
                text = method()
            except Exception:
                failed(method)
                continue
            if text:
                return safe_str(text)[:MAX_CONTEXT]
        return None


def failed(method: Callable[..., Any]) -> None:
    """Log the exception being handled as the failure of the hook ``method`` (one line of its name,
    then the traceback)."""
    name = getattr(method, "__qualname__", None) or type(method).__qualname__
    log.exception("hook %s raised; ignored (the worker and the outcome are unaffected)", for_log(safe_str(name)))
