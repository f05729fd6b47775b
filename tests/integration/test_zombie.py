"""A paused worker (SIGSTOP past its lease, then SIGCONT) changes nothing when it wakes up."""

from __future__ import annotations

import signal

from firesafe import State
from tests.integration.conftest import World, wait_until


def test_paused_worker_late_completion_is_rejected(world: World) -> None:
    # Given a worker running a job whose first run takes 1 s
    world.app.jobs["effect"].enqueue(sleep=1.0, sleep_runs=1, key="zombie:1")
    stale = world.procs.worker("stale")
    wait_until(lambda: world.effects.started("zombie:1", 1), 30, "the first run to start")

    # When the worker is paused past its lease, and another worker rescues and completes the job
    world.pause(stale, "zombie:1")
    rescuer = world.procs.worker("rescuer")
    wait_until(lambda: world.job("zombie:1").state == State.SUCCEEDED, 30, "the rescuer to complete the job")
    done = world.job("zombie:1")
    assert done.result == {"key": "zombie:1", "run": 2, "pid": rescuer.pid, "applied": True}

    # And the paused worker wakes up, finishes its attempt and tries to save it
    stale.signal(signal.SIGCONT)
    wait_until(lambda: len(world.effects.calls()) == 2, 30, "the stale run to reach its effect")
    wait_until(lambda: "dropped" in stale.stderr(), 30, "the stale worker to drop its result")

    # Then its late completion changed nothing: the job is the rescuer's
    stale.signal(signal.SIGTERM)
    rescuer.signal(signal.SIGTERM)
    assert stale.wait(30) == 0 and rescuer.wait(30) == 0
    job = world.job("zombie:1")
    assert job.state == State.SUCCEEDED
    assert job.result == done.result
    assert job.updated_at == done.updated_at and job.finished_at == done.finished_at
    assert (job.runs, job.lost, job.attempt) == (2, 1, 2)
    assert [a.outcome for a in job.trace] == ["lost", "succeeded"]
    assert job.trace == done.trace  # the stale attempt's entry stays "lost": nothing rewrote it
    assert job.trace[0].error_type == "WorkerLost" and f":{stale.pid}:" in (job.trace[0].worker or "")
    assert f":{rescuer.pid}:" in (job.trace[1].worker or "")
    assert "rescued 1 job(s)" in rescuer.stderr()
    log = stale.stderr()
    assert "lease of zombie:1 was lost" in log or "its result was dropped" in log
    assert "zombie:1" in next(line for line in log.splitlines() if "dropped" in line)
    assert "outcome=succeeded" not in log  # the stale worker never reported the attempt as done
    # The effect: the stale run reached it too (attempts are at least once), and the dedupe absorbed it
    assert world.effects.applied() == {"zombie:1": (2, rescuer.pid)}
    assert sorted(world.effects.calls()) == [("zombie:1", 1, stale.pid, False), ("zombie:1", 2, rescuer.pid, True)]
