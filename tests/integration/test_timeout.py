"""An attempt past its timeout is recorded as ``timed_out`` and retried; its late return changes nothing."""

from __future__ import annotations

import signal

from firesafe import State
from tests.integration.conftest import World, wait_until


def test_timed_out_attempt_is_retried_and_its_late_return_cannot_overwrite_the_job(world: World) -> None:
    # Given a sync job with timeout=0.5 whose first run sleeps 3 s and whose second returns at once
    world.app.jobs["timed"].enqueue(sleep=3.0, sleep_runs=1, key="slow:1")
    worker = world.procs.worker("worker", "--concurrency", "2")  # not --burst: that would not wait for the late run

    # When the first attempt passes its timeout, the job is retried and completes on the second run
    wait_until(lambda: world.job("slow:1").state == State.SUCCEEDED, 30, "the retry to succeed")
    done = world.job("slow:1")
    assert done.result == {"key": "slow:1", "run": 2, "pid": worker.pid, "applied": True}
    assert [a.outcome for a in done.trace] == ["timed_out", "succeeded"]
    timed_out = done.trace[0]
    assert timed_out.error_type == "TimedOut" and "timeout of 0.5s" in (timed_out.message or "")
    assert timed_out.ended_at and timed_out.started_at
    assert 0.4 < (timed_out.ended_at - timed_out.started_at).total_seconds() < 2.5
    assert [a.attempt for a in done.trace] == [1, 2]  # a timeout uses an attempt

    # Then the first run's late return (3 s in) is dropped, and the job stays as the second run left it
    wait_until(lambda: "late result of slow:1 dropped" in worker.stderr(), 30, "the late return to be dropped")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.stderr()
    job = world.job("slow:1")
    assert job.state == State.SUCCEEDED and job.result == done.result
    assert job.trace == done.trace and job.updated_at == done.updated_at
    # The late run did reach its effect after the second run had applied it: the dedupe absorbed it
    assert world.effects.applied() == {"slow:1": (2, worker.pid)}
    assert sorted(world.effects.calls()) == [("slow:1", 1, worker.pid, False), ("slow:1", 2, worker.pid, True)]
