"""A worker process of ``firesafe drill``: the user's app, on the scratch store, with faults injected.

Run by the drill itself as ``python -m firesafe.drill.worker MODULE:APP --store URL --dir DIR ...``.
The app's own store is never opened here: the app's store is replaced by the scratch store before any
job runs, its alert sinks and background duties (alert delivery, schedules) are switched off, and
every job of the drill is wrapped so faults strike at its start, before a step, after a step's effect
(before the step is recorded) and after it returns (before its completion is saved). What happens is
appended, one JSON object per line, to ``DIR/events.jsonl``: each fault, and each call of a step's
function twice, when it starts (``step_start``, written before the function runs, so a call the
process dies in is still on record) and when it returns or raises (``step``, with ``ok``), each
saying whether the attempt asked for the step's idempotency key (``step_key`` when it asks during
the call) and whether the step's function was declared safe to repeat (``repeatable``, see
:func:`firesafe.steps.repeatable`).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from firesafe.drill.faults import FaultyStore
from firesafe.errors import FiresafeError
from firesafe.steps.steps import is_repeatable

log = logging.getLogger("firesafe.drill")

#: The faults a user may ask for.
FAULTS = ("exception", "timeout", "kill", "store")


class InjectedFault(Exception):
    """An exception a drill raised inside a job on purpose."""


class Injector:
    """Decides, at each point of an attempt, whether a fault strikes (at most one per attempt)."""

    def __init__(self, faults: set[str], rate: float, seed: int, folder: Path) -> None:
        self.faults = faults
        self.rate = rate
        self.random = random.Random(seed)
        self.calm_file = folder / "calm"
        self._fd = os.open(folder / "events.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        self._calm_checked = 0.0
        self._calm = False
        self._local = threading.local()

    # -- the record --------------------------------------------------------------------------------
    def record(self, **event: Any) -> None:
        """Append one event (one write: lines of concurrent processes never interleave)."""
        os.write(self._fd, (json.dumps(event, sort_keys=True) + "\n").encode())

    # -- deciding ----------------------------------------------------------------------------------
    def calm(self) -> bool:
        """True once the drill's fault window has closed (the drill creates DIR/calm)."""
        now = time.monotonic()
        if not self._calm and now - self._calm_checked > 0.1:
            self._calm_checked = now
            self._calm = self.calm_file.exists()
        return self._calm

    def draw(self, kinds: tuple[str, ...]) -> str | None:
        """A fault among ``kinds`` (those asked for), with probability ``rate``; None most times."""
        allowed = [k for k in kinds if k in self.faults]
        if not allowed or self.calm() or getattr(self._local, "struck", False):
            return None
        with self._lock:
            if self.random.random() >= self.rate:
                return None
            kind = self.random.choice(allowed)
        self._local.struck = True
        return kind

    def store_fault(self, method: str) -> str | None:
        if "store" not in self.faults or self.calm():
            return None
        with self._lock:
            if self.random.random() >= self.rate / 4:
                return None
            when = self.random.choice(("before", "after"))
        self.record(e="fault", kind="store", at=method, when=when)
        return when

    # -- striking ----------------------------------------------------------------------------------
    def strike(self, kind: str, at: str, ctx: Any, jobdef: Any, step: str | None = None) -> None:
        """Make fault ``kind`` happen here, in this attempt (sync code)."""
        self.record(e="fault", kind=kind, at=at, job=ctx.job.key, name=ctx.job.name, run=ctx.job.run, step=step)
        if kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if kind == "exception":
            raise InjectedFault(f"drill: injected exception at {at}")
        if kind == "timeout":
            time.sleep(float(jobdef.timeout) + 0.3)

    # -- wrapping the user's jobs ------------------------------------------------------------------
    def wrap(self, jobdef: Any) -> None:
        """Instrument one job: faults at its points, and a record of its steps."""
        original = jobdef.fn
        timeout: tuple[str, ...] = ("timeout",) if jobdef.timeout else ()
        injector = self

        def begin(ctx: Any) -> None:
            injector._local.struck = False
            injector._instrument(ctx, jobdef, timeout)

        if jobdef.is_async:
            @functools.wraps(original)
            async def run_async(ctx: Any, *args: Any, **kwargs: Any) -> Any:
                begin(ctx)
                kind = injector.draw(("exception", "kill", *timeout))
                if kind == "timeout":
                    injector.record(e="fault", kind=kind, at="start", job=ctx.job.key, name=ctx.job.name,
                                    run=ctx.job.run, step=None)
                    await asyncio.sleep(float(jobdef.timeout) + 0.3)
                elif kind:
                    injector.strike(kind, "start", ctx, jobdef)
                value = await original(ctx, *args, **kwargs)
                if (kind := injector.draw(("kill",))) is not None:
                    injector.strike(kind, "before_complete", ctx, jobdef)
                return value

            jobdef.fn = run_async
            return

        @functools.wraps(original)
        def run(ctx: Any, *args: Any, **kwargs: Any) -> Any:
            begin(ctx)
            if (kind := injector.draw(("exception", "kill", *timeout))) is not None:
                injector.strike(kind, "start", ctx, jobdef)
            value = original(ctx, *args, **kwargs)
            if (kind := injector.draw(("kill",))) is not None:
                injector.strike(kind, "before_complete", ctx, jobdef)
            return value

        jobdef.fn = run

    def _instrument(self, ctx: Any, jobdef: Any, timeout: tuple[str, ...]) -> None:
        """Shadow ``ctx.step`` and ``ctx.idempotency_key`` on this attempt's ctx."""
        injector = self
        keyed: set[str] = set()
        calling: set[str] = set()  # steps whose function started and has not returned yet
        real_step, real_key = ctx.step, ctx.idempotency_key
        in_async = jobdef.is_async
        job = {"job": ctx.job.key, "name": ctx.job.name, "run": ctx.job.run}

        def idempotency_key(name: str) -> str:
            if name not in keyed and name in calling:  # asked inside the call, after its start was written
                injector.record(e="step_key", step=name, **job)
            keyed.add(name)
            return real_key(name)

        def step(name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            kind = injector.draw(("exception", "kill") + (() if in_async else timeout))
            if kind is not None:
                injector.strike(kind, "before_step", ctx, jobdef, name)
            repeatable = is_repeatable(fn)

            def done(ok: bool) -> None:
                calling.discard(name)
                injector.record(e="step", step=name, ok=ok, keyed=name in keyed, repeatable=repeatable, **job)
                if ok and (kind := injector.draw(("kill", "exception") + (() if in_async else timeout))):
                    injector.strike(kind, "after_effect", ctx, jobdef, name)

            def call(*a: Any, **kw: Any) -> Any:
                # Written (one write, to the kernel) before the function runs: a process killed during
                # the call, by a fault of another attempt or by the drill's end, leaves its start on record.
                injector.record(e="step_start", step=name, keyed=name in keyed, repeatable=repeatable, **job)
                calling.add(name)
                try:
                    value = fn(*a, **kw)
                except Exception:
                    done(False)
                    raise
                if asyncio.iscoroutine(value) or hasattr(value, "__await__"):
                    async def later() -> Any:
                        try:
                            result = await value
                        except Exception:
                            done(False)
                            raise
                        done(True)
                        return result

                    return later()
                done(True)
                return value

            return real_step(name, call, *args, **kwargs)

        ctx.step = step
        ctx.idempotency_key = idempotency_key


def prepare(app: Any, store_url: str, injector: Injector, jobs: list[str]) -> None:
    """Point the app at the scratch store (faulty), silence what reaches people, wrap the jobs."""
    from firesafe.stores import open_store

    store = open_store(store_url)
    app._store = FaultyStore(store, injector.store_fault)
    app.store_url = store_url
    app.alerts.sinks = []  # a drill never pages anyone: dead-letter alerts stay in the scratch outbox
    app.alerts._rules_set = False
    for start in app.hooks.start_duty:  # no alert delivery, no schedules enqueuing windows into the scratch store
        app.hooks.remove(start.__self__)
    for name in jobs:
        injector.wrap(app.jobs[name])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m firesafe.drill.worker")
    parser.add_argument("target")
    parser.add_argument("--store", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--jobs", required=True)
    parser.add_argument("--faults", default="")
    parser.add_argument("--rate", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--lease", type=float, default=3.0)
    opts = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    os.environ["FIRESAFE_STORE"] = opts.store  # an App() without a URL in the user's module gets the scratch store
    from firesafe.loader import load_app

    try:
        app = load_app(opts.target)
    except Exception as exc:  # the loader's error: one line
        print(f"drill worker: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 2
    jobs = [j for j in opts.jobs.split(",") if j]
    injector = Injector({f for f in opts.faults.split(",") if f}, opts.rate, opts.seed, Path(opts.dir))
    try:
        prepare(app, opts.store, injector, jobs)
        queues = sorted({app.jobs[j].queue for j in jobs})
        worker = app.worker(queues, concurrency=opts.concurrency, lease=opts.lease, poll_interval=0.1, grace=2.0)
    except FiresafeError as exc:
        print(f"drill worker: {exc}", file=sys.stderr)
        return 2
    worker.install_signal_handlers()
    parent = os.getppid()

    def watch() -> None:  # the drill is gone (killed): stop rather than run on a scratch store forever
        while not worker.wait_stopped(1.0):
            if os.getppid() != parent:
                worker.stop()
                return

    threading.Thread(target=watch, name="firesafe-drill-parent", daemon=True).start()
    worker.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
