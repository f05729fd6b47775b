"""Jobs that do what jobs should not: raise SystemExit, KeyboardInterrupt or CancelledError, block
their event loop past a timeout, ignore a cancel; and a stop that comes during a store outage. Each
attempt still ends in the store, and the worker still ends."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from firesafe import App, Backoff, State
from tests.disk_faults import chattr
from tests.integration.conftest import World, wait_until

FAST = Backoff(base=1.0, factor=2.0, cap=10.0, jitter="none")


def burst_in_thread(app: App, seconds: float = 20.0) -> None:
    """``app.work(burst=True)`` that must end by itself (a hang fails the test, it does not stall it)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            app.work(burst=True, concurrency=2)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the burst worker did not end"
    assert errors == []


@pytest.mark.parametrize("raised", [SystemExit(4), KeyboardInterrupt(), asyncio.CancelledError()],
                         ids=["SystemExit", "KeyboardInterrupt", "CancelledError"])
def test_a_job_raising_a_base_exception_fails_its_attempt_and_the_others_run(app: App, clock,
                                                                           raised: BaseException) -> None:
    @app.job(max_attempts=2, backoff=FAST)
    def rude(ctx) -> None:
        raise raised

    @app.job
    def fine(ctx, i: int) -> int:
        return i

    rude.enqueue(key="rude")
    for i in range(6):
        fine.enqueue(i, key=f"fine:{i}")
    burst_in_thread(app)
    clock.advance(60)
    burst_in_thread(app)
    assert [app.get(f"fine:{i}").state for i in range(6)] == [State.SUCCEEDED] * 6
    job = app.get("rude")
    assert job.state == State.DEAD and job.reason == "exhausted"
    assert [(a.outcome, a.error_type) for a in job.trace] == [("failed", type(raised).__name__)] * 2


def test_an_async_job_that_blocks_its_event_loop_past_its_timeout_is_timed_out(app: App, clock) -> None:
    release = threading.Event()

    @app.job(max_attempts=1, timeout=0.2)
    async def blocking(ctx) -> str:
        release.wait(10)  # blocks the event loop: asyncio cannot cancel it
        return "too late"

    blocking.enqueue(key="b")
    try:
        burst_in_thread(app)
        job = app.get("b")
        assert job.state == State.DEAD and [a.outcome for a in job.trace] == ["timed_out"]
        assert job.result is None
    finally:
        release.set()


def test_a_burst_worker_ends_though_a_timed_out_job_ignores_its_cancel(app: App) -> None:
    release = threading.Event()

    @app.job(max_attempts=1, timeout=0.2)
    def stubborn(ctx) -> None:
        while not release.is_set():  # never looks at ctx.cancelled
            time.sleep(0.02)

    @app.job
    def fine(ctx) -> str:
        return "ok"

    stubborn.enqueue(key="s")
    fine.enqueue(key="f")
    try:
        burst_in_thread(app)  # its thread keeps its slot, but nothing waits for it
        assert app.get("s").state == State.DEAD and app.get("f").state == State.SUCCEEDED
    finally:
        release.set()


def test_a_stop_during_a_store_outage_ends_after_the_grace_without_spinning(
        sqlite_url: str, make_world: Callable[[str], World]) -> None:
    probe = Path(sqlite_url.removeprefix("sqlite:///")).with_name("probe")
    probe.write_text("x")
    done = chattr("+i", probe)
    if done.returncode != 0:
        pytest.skip(f"chattr +i not permitted here ({done.stderr.strip()}): cannot make the store refuse writes")
    chattr("-i", probe)
    world = make_world(sqlite_url)
    db = Path(sqlite_url.removeprefix("sqlite:///"))
    files = [db, Path(f"{db}-wal")]
    world.app.jobs["effect"].enqueue_many([{"key": f"io:{i}", "kwargs": {"sleep": 0.1, "sleep_runs": 99}}
                                           for i in range(200)])
    worker = world.procs.worker("worker", "--concurrency", "2", "--grace", "2")
    wait_until(lambda: world.count(state="succeeded") >= 4, 30, "the first jobs to finish")
    try:
        # Given a worker whose store refuses every write
        assert chattr("+i", *files).returncode == 0
        wait_until(lambda: "store fault" in worker.stderr(), 30, "the worker to report the fault")
        # When it is asked to stop while the fault lasts
        worker.signal(signal.SIGTERM)
        # Then it ends once its grace is over, having waited between retries instead of spinning
        assert worker.wait(20) == 0, worker.stderr()[-3000:]
        log = worker.stderr()
        assert "outlasted the grace period; stopping without saving" in log
        assert log.count("store fault") < 50, log[-3000:]
    finally:
        chattr("-i", *files)
