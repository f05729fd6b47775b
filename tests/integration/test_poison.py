"""A job that kills its worker process every time goes dead as ``worker_lost``; other jobs keep flowing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from firesafe import State
from tests.integration.conftest import World

OTHERS = [f"fine:{i}" for i in range(30)]


def test_poison_job_that_exits_the_process_dies_as_worker_lost_after_three_losses(world: World) -> None:
    # Given a poison job enqueued ahead of 30 ordinary ones
    world.app.jobs["poison"].enqueue(key="poison:1")
    world.app.jobs["effect"].enqueue_many([{"key": k, "kwargs": {"sleep": 0.02, "sleep_runs": 99}} for k in OTHERS])

    # When a supervisor restarts the worker each time it dies, until it exits on its own
    # (one job at a time, so each death takes only the poison job with it)
    exits = []
    for n in range(10):
        worker = world.procs.worker(f"worker-{n}", "--burst", "--concurrency", "1")
        exits.append((worker.wait(60), worker.pid))
        if exits[-1][0] == 0:
            break

    # Then the poison job killed exactly three workers and went dead as worker_lost
    assert [rc for rc, _ in exits] == [1, 1, 1, 0]
    job = world.job("poison:1")
    assert job.state == State.DEAD and job.reason == "worker_lost"
    assert (job.lost, job.runs) == (3, 3)
    assert [a.outcome for a in job.trace] == ["lost", "lost", "lost"]
    assert all(a.error_type == "WorkerLost" for a in job.trace)
    assert [a.worker and int(a.worker.split(":")[1]) for a in job.trace] == [pid for _, pid in exits[:3]]
    assert job.last_error and job.last_error.startswith("WorkerLost")
    assert [j.key for j in world.app.dlq.list()] == ["poison:1"]
    # And every other job succeeded, once, without losing an attempt
    assert world.states() == {"dead": 1, "succeeded": len(OTHERS)}
    for key in OTHERS:
        assert [a.outcome for a in world.job(key).trace] == ["succeeded"]
    assert Counter(k for k, *_ in world.effects.calls()) == Counter(OTHERS)


def test_jobs_running_beside_a_poison_job_do_not_die_with_it(
        sqlite_url: str, make_world: Callable[[str], World]) -> None:
    world = make_world(sqlite_url)
    world.app.jobs["poison"].enqueue(key="poison:1")
    world.app.jobs["effect"].enqueue_many([{"key": k, "kwargs": {"sleep": 0.02, "sleep_runs": 99}} for k in OTHERS])
    for n in range(10):  # four jobs at a time: the poison job is claimed together with three others
        if world.procs.worker(f"worker-{n}", "--burst", "--concurrency", "4").wait(60) == 0:
            break
    assert world.job("poison:1").reason == "worker_lost"
    assert world.states() == {"dead": 1, "succeeded": len(OTHERS)}
