"""What a running job sees as its first argument: ``ctx``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from firesafe.clock import to_timestamp
from firesafe.errors import InvalidInput, check_wait
from firesafe.masking import mask
from firesafe.signals.signals import DEFAULT_SIGNAL_TIMEOUT, check_signal_name
from firesafe.steps.steps import NO_DEFAULT, Steps, step_key

log = logging.getLogger("firesafe.job")


@dataclass(frozen=True)
class JobInfo:
    key: str
    name: str
    queue: str
    attempt: int  # within the retry budget, 1-based
    max_attempts: int
    run: int  # every claim counts, deferrals and rescues too
    id: int
    token: str = ""  # this attempt's lease token: what the store checks on every write of the attempt


class Attempt:
    """The worker's side of one attempt's ``ctx``: the worker asks the job to stop through it and
    reads back the steps the job recorded, without reaching into the ``ctx``."""

    __slots__ = ("cancelled", "steps_log")

    def __init__(self) -> None:
        self.cancelled = False  # set once by the worker loop; nothing waits on it, so a flag is enough
        self.steps_log: list[dict[str, Any]] | None = None  # the job's steps, once it has some

    def request_cancel(self) -> None:
        self.cancelled = True

    def detail(self) -> dict[str, Any]:
        """The attempt's detail for its trace: the steps it ran or restored."""
        return {"steps": list(self.steps_log)} if self.steps_log else {}


class Context:
    """Passed to every job function as ``ctx``."""

    def __init__(self, job: JobInfo, store: Any = None, app: Any = None, is_async: bool = False,
                 attempt: Attempt | None = None, on_divergence: str = "dead") -> None:
        self.job = job
        self._on_divergence = on_divergence  # the job's policy where its steps differ from the recorded run
        self._store = store
        self._app = app
        self._attempt = attempt if attempt is not None else Attempt()
        self._is_async = is_async
        self._steps: Steps | None = None  # made on first use: most jobs have no steps
        self._sleeps = 0
        self._spawns = 0
        self._waits = 0

    # -- durable steps -----------------------------------------------------------------------
    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` at most once per job and step name; later attempts get the
        recorded (JSON) result back. In an ``async def`` job, ``await`` it."""
        steps = self._need_steps()
        if self._is_async:
            return steps.arun(name, fn, args, kwargs)
        return steps.run(name, fn, args, kwargs)

    def patched(self, change_id: str) -> bool:
        """Whether this run takes the new path of a code change: ``if ctx.patched("v2-refund"):``
        new steps ``else:`` old steps. New runs take the new path; a run recorded before the change
        keeps the old one where it had already gone past this point, so its recorded steps still line
        up. The answer is recorded (as the step ``patch:CHANGE_ID``) and is the same on every later
        attempt. A plain method, also in ``async def`` jobs (no ``await``). See docs/steps.md."""
        return self._need_steps().patched(change_id)

    def idempotency_key(self, name: str) -> str:
        """A key for step ``name`` that is the same on every attempt of this job (<= 255 chars),
        to pass to a provider (for example as its ``Idempotency-Key`` header)."""
        return step_key(self.job.key, name)

    def limit(self, name: str, wait: float = 2.0) -> Any:
        """``with ctx.limit("openai"):`` runs the block under a declared limiter, shared by every
        worker (``async with`` in async jobs). Waits in place up to ``wait`` seconds for a turn, else
        gives the job back without using an attempt. See docs/limits.md."""
        from firesafe.limits.scope import Limit

        return Limit(self, name, wait, app=self._app, store=self._store)

    def sleep(self, seconds: float, name: str | None = None) -> Any:
        """Durable sleep: the job is put back and resumes here after ``seconds``, surviving restarts;
        no worker is held meanwhile. Counts as a deferral, not an attempt. ``await`` it in async jobs."""
        self._need_steps()
        return self._sleep(self._store.now() + check_wait(seconds, "ctx.sleep"), name)

    def sleep_until(self, when: datetime, name: str | None = None) -> Any:
        """Durable sleep until an aware datetime (see :meth:`sleep`)."""
        self._need_steps()
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise InvalidInput(f"ctx.sleep_until needs a timezone-aware datetime, not {when!r}")
        until = to_timestamp(when)
        check_wait(max(0.0, until - self._store.now()), "ctx.sleep_until")
        return self._sleep(until, name)

    def wait_for_signal(self, name: str, timeout: float | None = None, default: Any = NO_DEFAULT) -> Any:
        """Wait, durably and without holding a worker, for signal ``name`` sent to this job
        (``app.signal(key, name, data)``, ``firesafe signal``, the dashboard), and return its JSON
        data. A signal sent before the job waits is kept and returned at once. Until it comes the
        job is parked and resumes here when it is sent; after ``timeout`` seconds (default 30 days)
        it returns ``default`` if given, else raises :class:`~firesafe.signals.SignalTimeout`
        (permanent). Recorded like a step named ``signal:NAME``: a later run gets the same answer.
        ``await`` it in async jobs."""
        steps = self._need_steps()
        name = check_signal_name(name)
        wait = DEFAULT_SIGNAL_TIMEOUT if timeout is None else check_wait(timeout, "ctx.wait_for_signal's timeout")
        return self._now_or_awaited(lambda: steps.wait_for_signal(name, wait, default))

    def _sleep(self, until: float, name: str | None) -> Any:
        steps = self._need_steps()
        label = name or f"sleep-{self._sleeps}"
        self._sleeps += 1
        return self._now_or_awaited(lambda: steps.sleep_until(label, until))

    # -- children ----------------------------------------------------------------------------
    def spawn(self, job: Any, *args: Any, key: str | None = None, name: str | None = None, **kwargs: Any) -> Any:
        """Spawn one child job (a declared job, or its name) with these arguments, recorded like a
        step: a retry, rescue, rerun or replay of this job never spawns it twice. Its key is
        ``key``, else derived from this job's key and the step's name. Returns the child's key (a
        one-key list is what :meth:`wait_children` takes; a str works too). ``await`` it in async jobs."""
        return self._spawn(job, [{"args": list(args), "kwargs": kwargs, "key": key}], name, one=True)

    def spawn_many(self, job: Any, items: Any, name: str | None = None) -> Any:
        """Spawn many children of one job in one bulk insert, recorded as one step (see :meth:`spawn`).
        Each item is a list of positional arguments, or a mapping with ``args``, ``kwargs``, ``key``,
        ``delay``, ``queue`` and ``priority`` (as ``enqueue_many``). Returns their keys in order."""
        if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
            raise InvalidInput(f"spawn_many takes a list of items, not {type(items).__name__}")
        entries = []
        for n, item in enumerate(items):
            if isinstance(item, (list, tuple)):
                entries.append({"args": list(item)})
            elif isinstance(item, dict):
                entries.append(dict(item))
            else:
                raise InvalidInput(f"item {n} of spawn_many must be a list of arguments or a mapping, "
                                   f"not {type(item).__name__}")
        return self._spawn(job, entries, name, one=False)

    def wait_children(self, keys: Any, *, timeout: float | None = None, on_dead: str = "fail",
                      name: str | None = None) -> Any:
        """Wait for children (keys from :meth:`spawn` / :meth:`spawn_many`) without holding a worker:
        the job is parked and the store wakes it when the last of its children ends. Returns their
        results in order. ``on_dead="fail"``: a child that died or was cancelled makes this job dead
        (``ChildrenFailed`` names them); ``"collect"``: returns ``{"key", "state", "result", "error"}``
        for each instead. ``timeout`` (seconds, counted from the first wait) ends the wait with
        ``ChildrenTimedOut``. Recorded like a step. ``await`` it in async jobs."""
        from firesafe.steps import children

        steps = self._need_steps()
        wanted = [keys] if isinstance(keys, str) else list(keys) if isinstance(keys, (list, tuple)) else None
        if wanted is None or not all(isinstance(k, str) for k in wanted):
            raise InvalidInput("wait_children takes the keys spawn or spawn_many returned")
        if timeout is not None:
            timeout = check_wait(timeout, "wait_children's timeout")
        policy = children.check_on_dead(on_dead)
        label = children.WAIT_PREFIX + (name or str(self._waits))
        self._waits += 1
        return self._now_or_awaited(lambda: children.wait(steps, label, wanted, timeout, policy))

    def wait_any(self, keys: Any, *, at_least: int = 1, timeout: float | None = None, on_dead: str = "fail",
                 name: str | None = None) -> Any:
        """Wait until at least ``at_least`` of the children ``keys`` have ended (as they finish), without
        holding a worker: parked, the job is woken by the store when enough of its children ended.
        Returns ``{key: result}`` of every one of ``keys`` that had ended by then (``on_dead="collect"``:
        ``{key: {"state", "result", "error"}}``; ``"fail"``: one that died or was cancelled makes this
        job dead, ``ChildrenFailed``). Wait again for the rest (``[k for k in keys if k not in got]``)
        under another name. Which children had ended is recorded like a step: every later run of
        this job gets the same answer. ``await`` it in async jobs."""
        from firesafe.steps import children

        steps = self._need_steps()
        wanted = [keys] if isinstance(keys, str) else list(keys) if isinstance(keys, (list, tuple)) else None
        if not wanted or not all(isinstance(k, str) for k in wanted):
            raise InvalidInput("wait_any takes the keys spawn or spawn_many returned (at least one)")
        wanted = list(dict.fromkeys(wanted))
        if isinstance(at_least, bool) or not isinstance(at_least, int) or not 1 <= at_least <= len(wanted):
            raise InvalidInput(f"wait_any's at_least must be a whole number from 1 to {len(wanted)} "
                               f"(the children waited for), not {at_least!r}")
        if timeout is not None:
            timeout = check_wait(timeout, "wait_any's timeout")
        policy = children.check_on_dead(on_dead)
        label = children.WAIT_PREFIX + (name or str(self._waits))
        self._waits += 1
        return self._now_or_awaited(lambda: children.wait_some(steps, label, wanted, at_least, timeout, policy))

    def _spawn(self, job: Any, entries: list[dict[str, Any]], name: str | None, one: bool) -> Any:
        from firesafe.steps import children

        steps = self._need_steps()
        if self._app is None:
            raise RuntimeError("this ctx has no app: children are spawned only inside a worker")
        jobdef = self._app.job_named(job) if isinstance(job, str) else job
        if getattr(jobdef, "app", None) is not self._app:
            raise InvalidInput(f"spawn takes a job declared on this app (or its name), not {job!r}")
        label = name or f"spawn-{self._spawns}"
        self._spawns += 1

        def build(default_key: Any) -> list[Any]:
            return jobdef._many_params([{**entry, "key": entry.get("key") or default_key(i)}
                                        for i, entry in enumerate(entries)])

        def run() -> Any:
            keys = children.spawn(steps, label, self.job.key, build)
            return keys[0] if one else keys

        return self._now_or_awaited(run)

    def _now_or_awaited(self, run: Callable[[], Any]) -> Any:
        """``run()`` now or, in an ``async def`` job, a coroutine that runs it when awaited (what
        the job awaits: a wait raises there, when the job reaches it)."""
        if self._is_async:
            async def later() -> Any:
                return run()

            return later()
        return run()

    def _need_steps(self) -> Steps:
        if self._steps is None:
            if self._store is None:
                raise RuntimeError("this ctx has no store: steps only work inside a worker")
            from firesafe.worker.pool import run_coroutine  # the worker package imports this module

            self._steps = Steps(self._store, self.job.id, self.job.token, lambda coro: run_coroutine(coro, None),
                                on_divergence=self._on_divergence)
            self._attempt.steps_log = self._steps.log
        return self._steps

    @property
    def cancelled(self) -> bool:
        """True once someone asked this job to stop (cancel, shutdown, timeout or a lost lease)."""
        return self._attempt.cancelled

    def log(self, message: str, **fields: Any) -> None:
        """Log a line tagged with this job's key and attempt (fields with secret names are masked)."""
        extra = {"job_key": self.job.key, "job_name": self.job.name, "attempt": self.job.attempt}
        extra.update({f"f_{k}": v for k, v in mask(fields).items()})
        suffix = " ".join(f"{k}={v}" for k, v in mask(fields).items())
        log.info("%s [%s #%d] %s", message, self.job.key, self.job.attempt, suffix, extra=extra)
