"""A declared job (:class:`JobDef`): what ``@app.job`` returns, and how a call becomes a stored job.

Its enqueue turns the arguments into one canonical payload and fingerprint, checks the key and the
timing, and inserts through the app's store; the worker reads the same definition to run an attempt.

A JobDef is generic in its function's parameters (after ``ctx``) and its result, so that a type checker
checks the arguments of ``enqueue`` as it checks a direct call. Python's typing cannot add keyword
options beside a ParamSpec's parameters in one signature (PEP 612), so the checked way to give
options is :meth:`JobDef.options`, which returns an :class:`Enqueuer` whose ``enqueue`` takes the
function's arguments alone. ``enqueue(..., key=...)`` keeps working, and is typed by an overload that
checks the options but not the arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import gc
import inspect
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from firesafe.clock import to_timestamp
from firesafe.errors import MAX_DELAY, ConfigError, IdempotencyConflict, InvalidInput
from firesafe.idempotency.keys import check_key, check_name, fingerprint, new_key, payload_json
from firesafe.models import PRIORITY_DEFAULT, PRIORITY_MAX, PRIORITY_MIN, Job
from firesafe.retries.backoff import Backoff
from firesafe.store.base import InsertParams, JobFilter

if TYPE_CHECKING:
    from firesafe.app import App

#: Reserved keyword names of ``enqueue``; a job function cannot take arguments with these names.
RESERVED = frozenset({"key", "delay", "run_at", "queue", "conn"})

#: The parameters of a job's function after ``ctx``: what ``enqueue`` takes.
P = ParamSpec("P")
#: What a job's function returns.
R = TypeVar("R")
T = TypeVar("T")


#: How many enqueues of async code run at once, each in a thread of its own (see :func:`in_thread`).
ASYNC_THREADS = 4
_executor: ThreadPoolExecutor | None = None
_executor_pid = 0  # the process that made it: a forked child has none of its threads, so makes its own
_executor_lock = threading.Lock()


async def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in one of a few threads kept for the async API, awaited.

    Like :func:`asyncio.to_thread` (the caller's context variables go along, for trace context), but
    on a small pool of its own: each thread holds the GIL while it builds a payload, and the fewer
    threads compete with the event loop's for it, the sooner the loop runs again. The stores serialize
    SQLite's writers and bound PostgreSQL's connections anyway, so more threads would only wait.
    """
    global _executor, _executor_pid
    executor = _executor
    if executor is None or _executor_pid != os.getpid():
        with _executor_lock:
            if _executor is None or _executor_pid != os.getpid():
                _executor = ThreadPoolExecutor(ASYNC_THREADS, thread_name_prefix="firesafe-async")
                _executor_pid = os.getpid()
            executor = _executor
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(executor, call)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Hold off the cyclic garbage collector for a moment (it is switched back on after, if it was).

    Building a batch of jobs creates no cycles, but its many new containers trigger collections that
    walk every live object, again and again: half the client's cost of a large ``enqueue_many``.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def check_priority(priority: Any) -> int:
    """``priority`` if it is a whole number from -100 to 100 (higher runs first), else InvalidInput.

    >>> check_priority(10)
    10
    >>> check_priority(1.5)
    Traceback (most recent call last):
    ...
    firesafe.errors.InvalidInput: priority must be a whole number from -100 to 100 (higher runs first), not 1.5
    """
    if isinstance(priority, bool) or not isinstance(priority, int) or not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise InvalidInput(f"priority must be a whole number from {PRIORITY_MIN} to {PRIORITY_MAX} "
                           f"(higher runs first), not {priority!r}")
    return priority


class JobDef(Generic[P, R]):
    """A declared job: call ``enqueue`` to run it in a worker.

    ``JobDef[P, R]`` is typed by its function ``(ctx, *P) -> R``: ``enqueue`` and ``enqueue_async``
    take the arguments ``P``, and options go through :meth:`options`.
    """

    #: The limiters every attempt of this job runs under (``@app.job(limiter=...)``).
    limiters: tuple[str, ...] = ()
    #: What a run does where its steps differ from the recorded run's (``@app.job(on_divergence=...)``):
    #: ``dead`` (NonDeterminism) or ``rerun`` (forget the recorded steps from there, run the new code).
    on_divergence: str = "dead"
    #: Who hears of this job's failures (``@app.job(alert=...)``): None is the default policy, every
    #: dead letter a ``critical`` alert. See :class:`firesafe.alerts.policy.AlertPolicy`.
    alert: Any = None

    def __init__(self, app: App, fn: Callable[Concatenate[Any, P], R], *, name: str, queue: str, max_attempts: int,
                 backoff: Backoff, timeout: float | None, give_up_on: tuple[type[BaseException], ...],
                 max_deferrals: int, priority: int = PRIORITY_DEFAULT) -> None:
        self.app = app
        self.fn = fn
        self.name = check_name(name, "job name")
        self.queue = check_name(queue, "queue name")
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise ConfigError(f"job {name!r}: max_attempts must be a whole number >= 1")
        if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)
                                    or not 0 < timeout < float("inf")):
            raise ConfigError(f"job {name!r}: timeout must be > 0 seconds (or None), not {timeout!r}")
        if not isinstance(max_deferrals, int) or isinstance(max_deferrals, bool) or max_deferrals < 0:
            raise ConfigError(f"job {name!r}: max_deferrals must be a whole number >= 0, not {max_deferrals!r}")
        if not isinstance(backoff, Backoff):
            raise ConfigError(f"job {name!r}: backoff must be a firesafe.Backoff")
        for exc in give_up_on:
            if not (isinstance(exc, type) and issubclass(exc, BaseException)):
                raise ConfigError(f"job {name!r}: give_up_on takes exception classes, not {exc!r}")
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.timeout = timeout
        self.give_up_on = tuple(give_up_on)
        self.max_deferrals = max_deferrals
        try:
            #: The priority of this job's enqueues that give none (``options(priority=...)``).
            self.priority = check_priority(priority)
        except InvalidInput as exc:
            raise ConfigError(f"job {name!r}: {exc}") from None
        self.is_async = inspect.iscoroutinefunction(fn)
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters.values())
        if not params:
            raise ConfigError(f"job {name!r}: the function must take ctx as its first argument")
        clash = RESERVED & {p.name for p in params[1:]}
        if clash:
            raise ConfigError(f"job {name!r}: argument name(s) {sorted(clash)} are reserved by enqueue()")
        self.arg_names = [p.name for p in params[1:]
                          if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self._arg_names_json = json.dumps(self.arg_names)
        # How many arguments a plain positional call passes (-1: defaults, *args or keyword-only exist);
        # such a call needs no Signature.bind, which is a good part of the cost of an enqueue.
        plain = all(p.kind == p.POSITIONAL_OR_KEYWORD and p.default is p.empty for p in params[1:])
        self._plain_arity = len(params) - 1 if plain else -1
        functools.update_wrapper(self, fn)

    if TYPE_CHECKING:  # typed as the function; at run time any call goes through as written
        def __call__(self, ctx: Any, /, *args: P.args, **kwargs: P.kwargs) -> R: ...
    else:
        def __call__(self, *args, **kwargs):
            """Call the function directly (with your own ``ctx``), for instance in a unit test."""
            return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<job {self.name} queue={self.queue}>"

    def _params(self, args: Sequence[Any], kwargs: Mapping[str, Any], key: str | None, delay: float | None,
                run_at: datetime | None, queue: str | None, priority: int | None = None) -> InsertParams:
        args, kwargs = list(args), dict(kwargs)
        if kwargs or len(args) != self._plain_arity:
            args, kwargs = self._bound(args, kwargs)
        payload, plain = payload_json(args, kwargs, limit=self.app.max_payload)
        key = check_key(key) if key is not None else new_key(self.name)
        if delay is not None and run_at is not None:
            raise InvalidInput("give delay or run_at, not both")
        if delay is not None and (not isinstance(delay, (int, float)) or not 0 <= delay <= MAX_DELAY):
            raise InvalidInput(f"delay must be a number of seconds from 0 to {MAX_DELAY:.0f} (1,000 years), "
                               f"not {delay!r}")
        when = None
        if run_at is not None:
            if not isinstance(run_at, datetime):
                raise InvalidInput("run_at must be a timezone-aware datetime")
            try:
                when = to_timestamp(run_at)
            except ValueError as exc:
                raise InvalidInput(str(exc)) from None
        return InsertParams(
            key=key, name=self.name, queue=check_name(queue, "queue name") if queue else self.queue,
            fingerprint=fingerprint(self.name, payload), payload=payload,
            arg_names=self._arg_names_json, max_attempts=self.max_attempts, run_at=when,
            delay=float(delay or 0.0), values=(args, kwargs) if plain else None,
            trace_context=self.app.hooks.context() if self.app.hooks.job_context else None,
            priority=self.priority if priority is None else check_priority(priority),
        )

    def _bound(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """The arguments of one call as the function's signature places them, so that a call keeps one
        payload and one fingerprint however it is written (positionally, by name, from the CLI's
        ``--kwargs``): each argument that can go by position does, up to the first one left out, and
        the rest go by name. Defaults are not filled in (docs/keys.md). A call the function cannot
        take (an unknown name, a required argument missing) raises :class:`InvalidInput`.
        """
        arity = self._plain_arity
        if arity >= 0 and len(args) + len(kwargs) == arity:  # every argument required: all by position
            rest = self.arg_names[len(args):]
            if all(n in kwargs for n in rest):
                return args + [kwargs[n] for n in rest], {}
        params = self.__dict__.get("_after_ctx")
        if params is None:
            params = self.__dict__["_after_ctx"] = tuple(self.signature.parameters.values())[1:]
        try:
            given = self.signature.bind(None, *args, **kwargs).arguments
        except TypeError as exc:
            takes = str(inspect.Signature([p.replace(annotation=p.empty) for p in params]))
            if not any(p.kind is p.VAR_KEYWORD for p in params):
                unknown = sorted(set(kwargs) - {p.name for p in params if p.kind is not p.POSITIONAL_ONLY})
                if unknown:
                    raise InvalidInput(f"job {self.name!r} cannot take these arguments: no argument named "
                                       f"{', '.join(map(repr, unknown))}; it takes {takes}") from None
            raise InvalidInput(f"job {self.name!r} cannot take these arguments: {exc}; it takes {takes}") from None
        # What BoundArguments.args and .kwargs give (less ctx), without their cost.
        placed: list[Any] = []
        named: dict[str, Any] = {}
        by_name = False
        for param in params:
            if param.name not in given:
                by_name = by_name or param.kind is not param.VAR_POSITIONAL
                continue
            value = given[param.name]
            if param.kind is param.VAR_POSITIONAL:
                placed.extend(value)
            elif param.kind is param.VAR_KEYWORD:
                named.update(value)
            elif by_name or param.kind is param.KEYWORD_ONLY:
                by_name = True
                named[param.name] = value
            else:
                placed.append(value)
        return placed, named

    def _insert(self, params: list[InsertParams], conn: Any) -> list[Job]:
        """Insert; a key that an earlier firesafe stored for the same arguments written another way
        (its fingerprint was of the arguments as the call wrote them) is that job again, not a conflict."""
        try:
            return self.app.store.job_insert_many(params, conn=conn)
        except IdempotencyConflict:
            again = self._as_stored(params)
            if again is None:
                raise
        return self.app.store.job_insert_many(again, conn=conn)

    async def _insert_async(self, params: list[InsertParams], conn: Any) -> list[Job]:
        """:meth:`_insert` in the transaction of an async driver's connection, awaited on its loop."""
        try:
            return await self.app.store.job_insert_many_async(params, conn)
        except IdempotencyConflict:
            again = await in_thread(self._as_stored, params)  # a read of the store's own: off the loop
            if again is None:
                raise
        return await self.app.store.job_insert_many_async(again, conn)

    def _as_stored(self, params: list[InsertParams]) -> list[InsertParams] | None:
        """``params`` with the fingerprint of each stored job of the same key and name whose arguments,
        placed by :meth:`_bound`, are the item's own; None if there is none such."""
        keys = sorted({p.key for p in params})
        stored = {j.key: j for j in self.app.store.job_list(JobFilter(keys=keys, limit=len(keys)))}
        out, found = [], False
        for p in params:
            job = stored.get(p.key)
            if (job is not None and job.name == p.name and job.fingerprint != p.fingerprint
                    and job.unreadable is None):
                try:
                    same = payload_json(*self._bound(list(job.args), dict(job.kwargs)), limit=None)[0] == p.payload
                except InvalidInput:  # stored arguments that this function no longer takes
                    same = False
                if same:
                    p, found = replace(p, fingerprint=job.fingerprint), True
            out.append(p)
        return out if found else None

    # Typing of enqueue: the first overload checks the arguments against the function; the others
    # accept the options as keywords (each one names a required option, so that a call without
    # options meets only the first) and leave the arguments unchecked. `options(...)` checks both.
    @overload
    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job: ...
    @overload
    def enqueue(self, *args: Any, key: str | None, delay: float | None = None, run_at: datetime | None = None,
                queue: str | None = None, conn: Any = None, **kwargs: Any) -> Job: ...
    @overload
    def enqueue(self, *args: Any, delay: float | None, run_at: datetime | None = None, queue: str | None = None,
                conn: Any = None, **kwargs: Any) -> Job: ...
    @overload
    def enqueue(self, *args: Any, run_at: datetime | None, queue: str | None = None, conn: Any = None,
                **kwargs: Any) -> Job: ...
    @overload
    def enqueue(self, *args: Any, queue: str | None, conn: Any = None, **kwargs: Any) -> Job: ...
    @overload
    def enqueue(self, *args: Any, conn: Any, **kwargs: Any) -> Job: ...

    # mypy cannot know that P never holds the options' names (RESERVED: refused when a job is declared).
    def enqueue(self, *args: Any, key: str | None = None, delay: float | None = None,  # type: ignore[misc]
                run_at: datetime | None = None, queue: str | None = None, conn: Any = None,
                **kwargs: Any) -> Job:
        """Enqueue one run under ``key``; runs at most once per key.

        An existing key with the same arguments (by position or by name: one call either way) returns
        the stored job (``created`` is False) and nothing new runs; with other arguments it raises
        :class:`IdempotencyConflict`. Arguments the function cannot take raise :class:`InvalidInput`. With
        ``conn`` (PostgreSQL) the job is written inside that connection's open transaction.

        A type checker checks the arguments of a call without options; write
        ``job.options(key=...).enqueue(...)`` to have them checked with options too.
        """
        return self._enqueue_one(args, kwargs, key, delay, run_at, queue, conn)

    def _enqueue_one(self, args: Sequence[Any], kwargs: Mapping[str, Any], key: str | None, delay: float | None,
                     run_at: datetime | None, queue: str | None, conn: Any, priority: int | None = None) -> Job:
        """One enqueue with its options: :meth:`enqueue`'s, and an :class:`Enqueuer`'s (which may give a
        priority: ``priority`` is no keyword of ``enqueue``, so a job may still take an argument of that name)."""
        params = self._params(args, kwargs, key, delay, run_at, queue, priority)
        job = self._insert([params], conn)[0]
        if job.created and conn is None:
            self.app.wake_workers()
        return job

    @overload
    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> Job: ...
    @overload
    async def enqueue_async(self, *args: Any, key: str | None, delay: float | None = None,
                            run_at: datetime | None = None, queue: str | None = None, conn: Any = None,
                            **kwargs: Any) -> Job: ...
    @overload
    async def enqueue_async(self, *args: Any, delay: float | None, run_at: datetime | None = None,
                            queue: str | None = None, conn: Any = None, **kwargs: Any) -> Job: ...
    @overload
    async def enqueue_async(self, *args: Any, run_at: datetime | None, queue: str | None = None,
                            conn: Any = None, **kwargs: Any) -> Job: ...
    @overload
    async def enqueue_async(self, *args: Any, queue: str | None, conn: Any = None, **kwargs: Any) -> Job: ...
    @overload
    async def enqueue_async(self, *args: Any, conn: Any, **kwargs: Any) -> Job: ...

    async def enqueue_async(self, *args: Any, key: str | None = None,  # type: ignore[misc]  # as enqueue's
                            delay: float | None = None, run_at: datetime | None = None,
                            queue: str | None = None, conn: Any = None, **kwargs: Any) -> Job:
        """:meth:`enqueue` for async code: the same guarantees, arguments and errors, and the event
        loop keeps running meanwhile.

        Without ``conn`` the store's calls block, so the enqueue runs in a worker thread (both stores
        are safe to use from several threads). With ``conn``, a psycopg ``AsyncConnection`` in an open
        transaction (PostgreSQL; :func:`firesafe.integrations.sqlalchemy.aconn_of` gives an
        ``AsyncSession``'s), the job is written in that transaction, awaited on the connection's own
        loop, as :meth:`enqueue` writes it with a sync connection. If the awaiting task is cancelled
        the enqueue may still complete: enqueue again under the same key to learn its job.
        """
        return await self._enqueue_one_async(args, kwargs, key, delay, run_at, queue, conn)

    async def _enqueue_one_async(self, args: Sequence[Any], kwargs: Mapping[str, Any], key: str | None,
                                 delay: float | None, run_at: datetime | None, queue: str | None, conn: Any,
                                 priority: int | None = None) -> Job:
        """:meth:`_enqueue_one` for :meth:`enqueue_async` and an :class:`Enqueuer`'s."""
        if conn is None:
            return await in_thread(self._enqueue_one, args, kwargs, key, delay, run_at, queue, None, priority)
        params = self._params(args, kwargs, key, delay, run_at, queue, priority)
        return (await self._insert_async([params], conn))[0]  # workers hear of it when conn commits

    def options(self, *, key: str | None = None, delay: float | None = None, run_at: datetime | None = None,
                queue: str | None = None, conn: Any = None, priority: int | None = None) -> Enqueuer[P]:
        """This job with enqueue options set: ``job.options(key=..., delay=...).enqueue(*args)``.

        The same as passing the options to :meth:`enqueue`, except that a type checker checks the
        arguments too (typing cannot add keyword options beside a function's own parameters).
        ``priority`` (only here, so that a job may take an argument named so) overrides the job's:
        a whole number from -100 to 100, higher first (docs/priorities.md).
        """
        if priority is not None:
            check_priority(priority)  # a bad one is refused here, where it was written
        return Enqueuer(self, key=key, delay=delay, run_at=run_at, queue=queue, conn=conn, priority=priority)

    def enqueue_many(self, items: Iterable[Mapping[str, Any]], conn: Any = None) -> list[Job]:
        """Enqueue many runs in one transaction, idempotent per key; all or nothing.

        Each item is a mapping with optional ``args``, ``kwargs``, ``key``, ``delay``/``run_at``,
        ``queue`` and ``priority``.
        """
        with _gc_paused():  # a large batch allocates several containers a job: no collection midway
            return self._enqueue_many(items, conn)

    async def enqueue_many_async(self, items: Iterable[Mapping[str, Any]], conn: Any = None) -> list[Job]:
        """:meth:`enqueue_many` for async code: the same guarantees and errors, and the event loop keeps
        running meanwhile. Without ``conn`` it runs in a worker thread; with ``conn`` (a psycopg
        ``AsyncConnection``, as in :meth:`enqueue_async`) the batch is written in its transaction."""
        if conn is None:
            return await in_thread(self.enqueue_many, items)
        with _gc_paused():
            params = self._many_params(items)
        return await self._insert_async(params, conn) if params else []

    def _enqueue_many(self, items: Iterable[Mapping[str, Any]], conn: Any) -> list[Job]:
        params = self._many_params(items)
        if not params:
            return []
        jobs = self._insert(params, conn)
        if conn is None and any(j.created for j in jobs):
            self.app.wake_workers()
        return jobs

    def _many_params(self, items: Iterable[Mapping[str, Any]]) -> list[InsertParams]:
        params = []
        for n, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise InvalidInput(f"item {n} of enqueue_many must be a mapping, not {type(item).__name__}")
            unknown = set(item) - {"args", "kwargs", "key", "delay", "run_at", "queue", "priority"}
            if unknown:
                raise InvalidInput(f"item {n} of enqueue_many has unknown field(s): {sorted(unknown)}")
            args = item.get("args", [])
            if not isinstance(args, (list, tuple)):
                raise InvalidInput(f"item {n}: args must be a list")
            kwargs = item.get("kwargs", {})
            if not isinstance(kwargs, Mapping):
                raise InvalidInput(f"item {n}: kwargs must be a mapping")
            params.append(self._params(args, kwargs, item.get("key"), item.get("delay"), item.get("run_at"),
                                       item.get("queue"), item.get("priority")))
        return params


@dataclass(frozen=True)
class Enqueuer(Generic[P]):
    """A job with its enqueue options set (:meth:`JobDef.options`); its ``enqueue`` and
    ``enqueue_async`` take the job function's arguments alone, so a type checker checks them."""

    job: JobDef[P, Any]
    key: str | None = None
    delay: float | None = None
    run_at: datetime | None = None
    queue: str | None = None
    conn: Any = None
    priority: int | None = None  # None: the job's own (``@app.job(priority=...)``, else 0)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """:meth:`JobDef.enqueue` with these options."""
        return self.job._enqueue_one(args, kwargs, self.key, self.delay, self.run_at, self.queue, self.conn,
                                     self.priority)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """:meth:`JobDef.enqueue_async` with these options (``conn``: a psycopg ``AsyncConnection``)."""
        return await self.job._enqueue_one_async(args, kwargs, self.key, self.delay, self.run_at, self.queue,
                                                 self.conn, self.priority)
