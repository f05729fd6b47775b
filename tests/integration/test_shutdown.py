"""SIGTERM during long jobs: running attempts finish within the grace period, the rest are released."""

from __future__ import annotations

import signal
import time

from firesafe import State
from tests.integration.conftest import World, wait_until

KEYS = [f"long:{i}" for i in range(4)]


def start_four_long_jobs(world: World, sleep: float, *options: str):
    world.app.jobs["effect"].enqueue_many([{"key": k, "kwargs": {"sleep": sleep, "sleep_runs": 1}} for k in KEYS])
    worker = world.procs.worker("worker", "--concurrency", "4", *options)
    wait_until(lambda: all(world.effects.started(k, 1) for k in KEYS), 30, "the four jobs to start")
    return worker


def test_sigterm_with_a_long_grace_lets_running_jobs_finish(world: World) -> None:
    # Given a worker running four jobs that take 2 s each
    worker = start_four_long_jobs(world, 2.0, "--grace", "15")

    # When it gets SIGTERM
    worker.signal(signal.SIGTERM)

    # Then it claims no more, lets the four attempts finish, records them, and exits cleanly
    assert worker.wait(30) == 0, worker.stderr()
    assert world.states() == {"succeeded": 4}
    for key in KEYS:
        job = world.job(key)
        assert [a.outcome for a in job.trace] == ["succeeded"]
        assert job.result == {"key": key, "run": 1, "pid": worker.pid, "applied": True}
    assert sorted(world.effects.applied()) == KEYS
    log = worker.stderr()
    assert "signal 15: finishing running jobs" in log
    assert "releasing" not in log


def test_sigterm_with_a_short_grace_releases_running_jobs_for_a_later_worker(world: World) -> None:
    # Given a worker with a 0.5 s grace period running four jobs that take 3 s each
    worker = start_four_long_jobs(world, 3.0, "--grace", "0.5")

    # When it gets SIGTERM
    sent = time.monotonic()
    worker.signal(signal.SIGTERM)

    # Then it stops after the grace period and gives the four jobs back, none left running
    assert worker.wait(30) == 0, worker.stderr()
    assert time.monotonic() - sent < 2.5  # it did not wait for the jobs
    assert "releasing 4 running job(s)" in worker.stderr()
    assert world.count(state="running") == 0
    for key in KEYS:
        job = world.job(key)
        assert job.state in (State.QUEUED, State.SCHEDULED)
        assert [a.outcome for a in job.trace] == ["interrupted"]
        assert job.trace[0].error_type == "Interrupted"
        assert (job.attempt, job.runs, job.deferrals, job.lost) == (0, 1, 1, 0)  # the budget is untouched
    assert world.effects.calls() == []  # no released run reached its effect

    # And a later worker completes them
    later = world.procs.worker("later", "--burst")
    assert later.wait(30) == 0, later.stderr()
    assert world.states() == {"succeeded": 4}
    for key in KEYS:
        job = world.job(key)
        assert [a.outcome for a in job.trace] == ["interrupted", "succeeded"]
        assert [a.attempt for a in job.trace] == [1, 1]  # the released attempt was given back
        assert job.result == {"key": key, "run": 2, "pid": later.pid, "applied": True}
    assert world.effects.applied() == {k: (2, later.pid) for k in KEYS}
