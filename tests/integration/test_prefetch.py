"""Prefetch: a worker whose attempts are short claims up to ``concurrency + prefetch`` jobs at once.

Never more than ``concurrency`` attempts run at a time; no prefetch once attempts run long, with
``prefetch=0``, or for queues holding a job of ``max_attempts=1``; a prefetched job's timeout counts
from its real start; on stop, a prefetched job no thread took is given back without using an
attempt. In-process workers on a real store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from firesafe import App, State
from tests.processes import wait_until


class Probe:
    """Counts attempts running at once and records the row limit of every claim (but of suspects)."""

    def __init__(self, app: App) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.limits: list[int] = []
        store = app.store
        for name in ("job_claim", "job_finish_and_claim"):
            setattr(store, name, self._recording(getattr(store, name)))

    def _recording(self, method: Any) -> Any:
        def call(*args: Any) -> Any:
            params = args[-1]  # the ClaimParams is the last argument of both
            if not params.suspects:  # not the one-at-a-time look for suspects
                self.limits.append(params.limit)
            return method(*args)
        return call

    def enter(self) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)

    def leave(self) -> None:
        with self.lock:
            self.running -= 1


@pytest.fixture
def app(store_url: str) -> Iterator[App]:
    a = App(store_url)
    yield a
    a.close()


def declare(app: App, probe: Probe) -> Any:
    @app.job(max_attempts=3)
    def step(ctx: Any, n: int, sleep: float = 0.0) -> int:
        probe.enter()
        try:
            time.sleep(sleep)
            return n
        finally:
            probe.leave()

    return step


def test_short_jobs_are_claimed_beyond_the_threads_but_never_run_beyond_them(app: App) -> None:
    probe = Probe(app)
    step = declare(app, probe)
    step.enqueue_many([{"args": [i], "key": f"s{i}"} for i in range(300)])
    stats = app.work(burst=True, concurrency=3)
    assert stats.succeeded == 300
    assert probe.limits[0] == 3  # nothing measured yet: no prefetch on the first claim
    assert max(probe.limits) == 6  # then concurrency + prefetch (its default: the concurrency)
    assert probe.most <= 3


@pytest.mark.parametrize("how", ["long attempts", "prefetch=0", "a job of max_attempts=1"])
def test_no_prefetch_with_long_attempts_when_turned_off_or_for_single_attempt_jobs(app: App, how: str) -> None:
    probe = Probe(app)
    step = declare(app, probe)
    if how == "a job of max_attempts=1":  # in the worker's queues: it would go dead without running
        @app.job(max_attempts=1)
        def charge(ctx: Any) -> None:
            pass
    sleep = 0.03 if how == "long attempts" else 0.0  # over PREFETCH_BELOW (20 ms)
    step.enqueue_many([{"args": [i, sleep], "key": f"s{i}"} for i in range(24)])
    options = {"prefetch": 0} if how == "prefetch=0" else {}
    assert app.work(burst=True, concurrency=2, **options).succeeded == 24
    assert max(probe.limits) == 2 and probe.most <= 2


def warmed(app: App, probe: Probe, step: Any, **options: Any) -> tuple[Any, threading.Thread]:
    """A worker running in a thread whose attempts so far were short (so it prefetches)."""
    w = app.worker(poll_interval=0.02, **options)
    app._wake_hooks.append(w._wake.set)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    step.enqueue_many([{"args": [i], "key": f"warm{i}"} for i in range(4)])
    wait_until(lambda: all(app.get(f"warm{i}").state == State.SUCCEEDED for i in range(4)), 20, "warm-up jobs")
    wait_until(lambda: w._pace is not None, 5, "the worker to measure its attempts")
    return w, t


def test_a_prefetched_jobs_timeout_counts_from_its_start_not_its_claim(app: App) -> None:
    probe = Probe(app)
    step = declare(app, probe)
    gate = threading.Event()

    @app.job(timeout=0.3)
    def timed(ctx: Any, mode: str) -> str:
        if mode == "hold":
            gate.wait(10)
        return mode

    w, t = warmed(app, probe, step, concurrency=1, prefetch=1)
    # One transaction, so one claim takes both (limit 1 + 1): "quick" waits behind "hold".
    timed.enqueue_many([{"args": ["hold"], "key": "hold"}, {"args": ["quick"], "key": "quick"}])
    wait_until(lambda: app.get("quick").state == State.RUNNING, 10, "quick to be claimed with hold")
    time.sleep(0.6)  # quick has been claimed for twice its timeout, but has not started
    gate.set()
    wait_until(lambda: app.get("quick").state == State.SUCCEEDED, 10, "quick to run")
    assert [a.outcome for a in app.get("quick").trace] == ["succeeded"]
    assert app.get("hold").trace[0].outcome == "timed_out"
    w.stop()
    t.join(10)


def test_stop_gives_a_prefetched_job_back_without_using_an_attempt(app: App) -> None:
    probe = Probe(app)
    step = declare(app, probe)
    gate = threading.Event()

    @app.job()
    def gated(ctx: Any, mode: str) -> str:
        if mode == "hold":
            gate.wait(10)
        return mode

    w, t = warmed(app, probe, step, concurrency=1, prefetch=2)
    gated.enqueue_many([{"args": [m], "key": m} for m in ("hold", "waiting-1", "waiting-2")])
    wait_until(lambda: app.get("waiting-2").state == State.RUNNING, 10, "both to be prefetched behind hold")
    w.stop()
    gate.set()  # hold finishes within the grace period; the two behind it never start
    t.join(10)
    assert not t.is_alive()
    assert app.get("hold").state == State.SUCCEEDED
    for key in ("waiting-1", "waiting-2"):
        job = app.get(key)
        assert job.state in (State.QUEUED, State.SCHEDULED) and job.attempt == 0, (key, job.state, job.attempt)
        assert [a.outcome for a in job.trace] == ["interrupted"]
    assert app.work(burst=True).succeeded == 2  # and they run on the next worker
