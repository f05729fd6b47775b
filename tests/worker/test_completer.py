"""The completer (firesafe/worker/completer.py) is the one path of outcomes to the store: every route
(a batch with the next claim, the pipeline, a job that cannot run, a timeout, a release at shutdown)
writes through ``pipeline.transact`` and is booked like any other outcome."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from typing import Any

import pytest

from firesafe import App, State
from firesafe.clock import FakeClock
from tests.processes import wait_until


def spy_on_outcome_writes(app: App, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count the store's outcome writes by the function that made them."""
    callers: Counter[str] = Counter()
    for name in ("job_finish_many", "job_finish_and_claim"):
        real = getattr(app.store, name)

        def spied(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            callers[sys._getframe(1).f_code.co_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(app.store, name, spied)
    return callers


@pytest.mark.parametrize("pipeline", [1, 2])
def test_every_route_of_an_outcome_goes_through_the_completer(
        app: App, store_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, pipeline: int) -> None:
    # Given jobs for every route: quick ones, one whose name this app does not know, one past its
    # timeout, and one still running when the worker stops
    release, blocking = threading.Event(), threading.Event()

    @app.job
    def quick(ctx: Any, i: int) -> int:
        return i

    @app.job(timeout=0.2, max_attempts=1)
    def stuck(ctx: Any) -> None:
        release.wait(30)

    @app.job
    def long(ctx: Any) -> None:
        blocking.set()
        release.wait(30)

    other = App(store_url, clock=clock)
    other.job(lambda ctx: None, name="ghost").enqueue(key="ghost")
    other.close()
    quick.enqueue_many([{"args": [i], "key": f"q{i}"} for i in range(20)])
    stuck.enqueue(key="stuck")
    callers = spy_on_outcome_writes(app, monkeypatch)
    worker = app.worker(concurrency=4, grace=0.2, pipeline=pipeline, poll_interval=0.05)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: app.get("stuck").state == State.DEAD and app.get("ghost").state == State.DEAD
                   and worker.stats.succeeded == 20, 30, "the quick, stuck and unknown jobs to end")
        long.enqueue(key="long")
        worker.wake()
        assert blocking.wait(30)
        # When the worker stops before the long attempt ends (its grace is short)
        worker.stop()
        thread.join(30)
        assert not thread.is_alive()
    finally:
        release.set()
        worker.stop()
    # Then every outcome was written by the completer's one transaction function
    assert set(callers) == {"transact"}, callers
    # And each route's outcome is recorded and booked: counted, as the finish hooks see it too
    assert app.get("ghost").reason == "unknown_job"
    assert app.get("stuck").trace[0].error_type == "TimedOut"
    long_job = app.get("long")
    assert long_job.state in (State.QUEUED, State.SCHEDULED)  # runnable again at once, its attempt given back
    assert [a.outcome for a in long_job.trace] == ["interrupted"]
    assert worker.stats.by_outcome == {"succeeded": 20, "failed": 1, "timed_out": 1, "interrupted": 1}, worker.stats
    assert (worker.stats.succeeded, worker.stats.dead, worker.stats.deferred) == (20, 2, 1)


@pytest.mark.parametrize("pipeline", [1, 2])
def test_an_outcome_whose_save_committed_unseen_is_booked_once_not_dropped(
        app: App, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, pipeline: int) -> None:
    # Given a store whose first write of outcomes commits and then loses its answer (a failover, a
    # cut connection: the client cannot tell whether it committed)
    from firesafe.errors import StoreError

    @app.job
    def quick(ctx: Any, i: int) -> int:
        return i

    quick.enqueue_many([{"args": [i], "key": f"q{i}"} for i in range(6)])
    lost: list[Any] = []
    for name in ("job_finish_many", "job_finish_and_claim"):
        real = getattr(app.store, name)

        def answer_lost(finishes: Any, *rest: Any, _real: Any = real, **kwargs: Any) -> Any:
            out = _real(finishes, *rest, **kwargs)
            claimed = out[1] if isinstance(out, tuple) else []
            if finishes and not claimed and not lost:  # (a claim's answer lost too would wait for its lease)
                lost.append(finishes)
                raise StoreError("the connection was lost")
            return out

        monkeypatch.setattr(app.store, name, answer_lost)
    # When a worker drains them (keeping the outcomes the fault kept, and saving them again)
    stats = app.work(burst=True, concurrency=2, pipeline=pipeline, poll_interval=0.05)
    # Then each job succeeded once, and the worker counts each once: the outcomes saved again found
    # their attempts already ended with them, and were not taken for a late worker's
    assert lost
    assert all(app.get(f"q{i}").state == State.SUCCEEDED for i in range(6))
    assert (stats.succeeded, stats.fenced) == (6, 0), stats
    assert "its result was dropped" not in caplog.text
