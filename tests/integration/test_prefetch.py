"""Prefetch: a worker whose attempts are short claims jobs beyond its threads (by default as many as
they run in about 20 ms, up to ``firesafe.worker.prefetch.HOLD`` held in all; ``prefetch=N`` fixes the number).

No prefetch once attempts run long, with ``prefetch=0``, for an app with a job of ``max_attempts=1``
or with limiters; a prefetched job's timeout counts from its real start; a prefetched job that waits
too long for a thread, or that no thread took when the worker stops, is given back at once without
using an attempt. In-process workers on a real store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from firesafe import App, State
from firesafe.worker.prefetch import HOLD
from tests.processes import wait_until


class Probe:
    """Records the row limit and the rows of every claim (but the one-at-a-time look for suspects)."""

    def __init__(self, app: App) -> None:
        self.limits: list[int] = []
        self.sizes: list[int] = []
        store = app.store
        store.job_claim = self._recording(store.job_claim, lambda out: out)
        store.job_finish_and_claim = self._recording(store.job_finish_and_claim, lambda out: out[1])

    def _recording(self, method: Any, rows: Any) -> Any:
        def call(*args: Any) -> Any:
            params = args[-1]  # the ClaimParams is the last argument of both
            out = method(*args)
            if not params.suspects:
                self.limits.append(params.limit)
                self.sizes.append(len(rows(out)))
            return out
        return call


@pytest.fixture
def app(store_url: str) -> Iterator[App]:
    a = App(store_url)
    yield a
    a.close()


def declare(app: App) -> Any:
    @app.job(max_attempts=3)
    def step(ctx: Any, n: int, sleep: float = 0.0) -> int:
        time.sleep(sleep)
        return n

    return step


def test_short_jobs_are_claimed_beyond_the_threads(app: App) -> None:
    probe = Probe(app)
    step = declare(app)
    step.enqueue_many([{"args": [i], "key": f"s{i}"} for i in range(300)])
    # One claim at a time (pipeline=1): with a pipeline each claim takes a share of the prefetch's
    # hold, the shares summing to it (tests/integration/test_pipeline.py).
    assert app.work(burst=True, concurrency=3, prefetch=3, lanes=1, pipeline=1).succeeded == 300
    assert probe.limits[0] == 3  # nothing measured yet: no prefetch on the first claim
    assert max(probe.limits) == 6  # then concurrency + prefetch
    assert max(probe.sizes) == 6  # and claims took twice the threads at once


def test_by_default_the_prefetch_follows_the_pace_up_to_the_hold(app: App) -> None:
    probe = Probe(app)
    step = declare(app)
    step.enqueue_many([{"args": [i], "key": f"s{i}"} for i in range(1000)])
    w = app.worker(["default"], burst=True, concurrency=3, pipeline=1)  # one claim at a time, as above
    assert w.prefetch.most == HOLD - 3  # the most it may hold beyond the threads
    w.prefetch.below = 1.0  # "short" is under 1 s here, so a busy host cannot make the no-op jobs long
    w.LINGER = 1.0  # and the outcomes of a batch are saved together (at once when all are back)
    assert w.run().succeeded == 1000
    # 3 threads run far more no-op attempts than the hold in a second, so claims reached the hold:
    # 512 jobs at once, not 6.
    assert probe.limits[0] == 3 and max(probe.limits) == HOLD
    assert max(probe.sizes) == HOLD
    # The size follows the pace: k waiting jobs wait about k x pace / concurrency for the last to
    # start, kept near PREFETCH_BELOW (20 ms).
    del w.prefetch.below
    for pace, expected in [(0.019, 3), (0.01, 6), (0.002, 30), (0.0001, HOLD - 3), (0.05, 0)]:
        w.prefetch.pace = pace
        assert w.prefetch.want() == expected, pace
    # An explicit prefetch is the number, whatever the pace; twice the concurrency for a large one.
    assert app.worker(["default"], concurrency=3, prefetch=5).prefetch.most == 5
    large = HOLD // 2 + 100  # more threads than half the hold: it holds twice the threads
    assert app.worker(["default"], concurrency=large).prefetch.most == large


@pytest.mark.parametrize("how", ["long attempts", "prefetch=0", "a job of max_attempts=1", "limiters"])
def test_no_prefetch_with_long_attempts_when_turned_off_or_for_some_apps(app: App, how: str) -> None:
    probe = Probe(app)
    step = declare(app)
    if how == "a job of max_attempts=1":  # it would go dead without running if lost while it waited
        @app.job(max_attempts=1, queue="payments")
        def charge(ctx: Any) -> None:
            pass
    if how == "limiters":  # a waiting job would hold its tokens
        app.limiter("crm", rate=10_000)
    sleep = 0.03 if how == "long attempts" else 0.0  # over PREFETCH_BELOW (20 ms)
    step.enqueue_many([{"args": [i, sleep], "key": f"s{i}"} for i in range(24)])
    options = {"prefetch": 0} if how == "prefetch=0" else {}
    w = app.worker(["default"], burst=True, concurrency=2, **options)
    assert w.run().succeeded == 24
    assert max(probe.limits) == 2 and max(probe.sizes) == 2
    assert w.prefetch.most == (HOLD - 2 if how == "long attempts" else 0)
    assert w.prefetch.want() == 0


def started(app: App, step: Any, **options: Any) -> tuple[Any, threading.Thread]:
    """A worker running in a thread, prefetching: "short" is under 1 s here, so a busy host cannot
    turn it off; warmed up, so it has measured its attempts."""
    w = app.worker(poll_interval=0.02, **options)
    w.prefetch.below = 1.0
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    step.enqueue_many([{"args": [i], "key": f"warm{i}"} for i in range(4)])
    try:
        wait_until(lambda: w.prefetch.want() > 0, 20, "the worker to measure its attempts")
        # and idle again, so that the next claim has its one thread and all its prefetch free
        wait_until(lambda: all(app.get(f"warm{i}").state == State.SUCCEEDED for i in range(4)) and not w.busy(),
                   20, "the warm-up jobs to finish")
    except BaseException:
        stop(w, t)
        raise
    return w, t


def stop(w: Any, t: threading.Thread) -> None:
    """Stop a worker a test started, also when the test fails, so it cannot outlive its test."""
    w.stop()
    t.join(15)


def behind_hold(app: App, gate: threading.Event, keys: tuple[str, ...], wait: float, lease: float | None = None,
                **job_options: Any) -> tuple[Any, threading.Thread]:
    """A prefetching worker of one thread (``PREFETCH_WAIT`` = ``wait``) whose one claim took a job
    "hold", which runs until ``gate`` is set, and ``keys``, which wait behind it."""
    @app.job(**job_options)
    def gated(ctx: Any, mode: str) -> str:
        if mode == "hold":
            gate.wait(10)
        return mode

    # pipeline=1: one claim at a time. With a pipeline each claim takes a share of the prefetch and
    # two claims are in flight at once: the second may reach the store, or come back, first, and its
    # job start on the one thread before "hold".
    w, t = started(app, declare(app), concurrency=1, prefetch=len(keys), lease=lease, pipeline=1)
    w.prefetch.wait = wait
    # However slow a busy host made the warm-up attempts, the claim prefetches every key: how many a
    # worker prefetches shrinks as its measured pace nears PREFETCH_BELOW.
    w.prefetch.below = 1000.0
    # One transaction, so one claim takes them all (limit 1 + len(keys)), "hold" first.
    gated.enqueue_many([{"args": [k], "key": k} for k in ("hold", *keys)])
    try:
        wait_until(lambda: all(app.get(k).state == State.RUNNING for k in keys), 10, "the claim to take them all")
    except BaseException:
        gate.set()
        stop(w, t)
        raise
    return w, t


def test_a_prefetched_jobs_timeout_counts_from_its_start_not_its_claim(app: App) -> None:
    gate = threading.Event()
    w, t = behind_hold(app, gate, ("quick",), 10.0, timeout=0.3)  # quick waits its turn, not given back
    time.sleep(0.6)  # quick has been claimed for twice its timeout, but has not started
    gate.set()
    wait_until(lambda: app.get("quick").state == State.SUCCEEDED, 10, "quick to run")
    assert [a.outcome for a in app.get("quick").trace] == ["succeeded"]
    assert app.get("hold").trace[0].outcome == "timed_out"
    w.stop()
    t.join(10)


def test_a_cancel_that_comes_while_a_job_waits_for_a_thread_keeps_it_from_starting(app: App) -> None:
    gate = threading.Event()
    w, t = behind_hold(app, gate, ("victim",), 10.0, lease=0.9)  # heartbeats every 0.3 s
    assert app.cancel("victim") == "requested"  # claimed, so running for the store, but not started
    wait_until(lambda: any(r.ctx.cancelled for r in list(w.running.values()) if r.claimed.job.key == "victim"),
               10, "a heartbeat to bring the cancel to the worker")
    gate.set()  # the thread frees up: victim's turn
    wait_until(lambda: app.get("victim").state == State.CANCELLED, 10, "victim to end cancelled")
    victim = app.get("victim")
    assert victim.result is None and [a.outcome for a in victim.trace] == ["cancelled"]  # its body never ran
    assert victim.trace[0].error_type == "Cancelled" and "not started" in (victim.trace[0].message or "")
    assert app.get("hold").state == State.SUCCEEDED
    w.stop()
    t.join(10)


def test_a_prefetched_job_that_waits_too_long_is_given_back_for_another_worker(app: App) -> None:
    gate = threading.Event()
    w, t = behind_hold(app, gate, ("quick",), 0.3)
    # hold keeps the one thread; after 0.3 s quick is given back, and another worker runs it
    wait_until(lambda: app.get("quick").state != State.RUNNING, 10, "quick to be given back")
    other = app.worker(["default"], burst=True, concurrency=1, prefetch=0)
    assert other.run().succeeded == 1
    quick = app.get("quick")
    assert quick.state == State.SUCCEEDED and [a.outcome for a in quick.trace] == ["interrupted", "succeeded"]
    assert quick.attempt == 1  # the attempt it waited in was given back
    assert app.get("hold").state == State.RUNNING  # still on the first worker's thread
    gate.set()
    wait_until(lambda: app.get("hold").state == State.SUCCEEDED, 10, "hold to finish")
    w.stop()
    t.join(10)


def test_stop_gives_prefetched_jobs_back_at_once_without_using_an_attempt(app: App) -> None:
    gate = threading.Event()
    keys = ("waiting-1", "waiting-2")
    w, t = behind_hold(app, gate, keys, 10.0)
    w.stop()
    # given back while hold still runs: they do not wait for the grace period
    wait_until(lambda: all(app.get(k).state != State.RUNNING for k in keys), 10, "the two to be given back")
    assert app.get("hold").state == State.RUNNING
    for key in keys:
        job = app.get(key)
        assert job.state in (State.QUEUED, State.SCHEDULED) and job.attempt == 0, (key, job.state, job.attempt)
        assert [a.outcome for a in job.trace] == ["interrupted"]
    gate.set()  # hold finishes within the grace period
    t.join(10)
    assert not t.is_alive() and app.get("hold").state == State.SUCCEEDED
    assert app.work(burst=True).succeeded == 2  # and they run on the next worker
