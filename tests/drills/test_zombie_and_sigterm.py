"""Drills: a zombie worker (SIGSTOP for three lease periods, then SIGCONT) whose late writes change
nothing; SIGTERM during long jobs, where in-flight work is finished or released and none is lost."""

from __future__ import annotations

import signal
import time

from firesafe import State
from tests.drills.conftest import Drill, wait_until

#: The zombie's lease: it is stopped for three of them.
ZOMBIE_LEASE = 3.0


def test_zombie_stopped_for_three_lease_periods_changes_nothing_when_it_wakes(drill: Drill) -> None:
    # Given a worker (lease 3 s) running two two-step jobs that work 1 s between their steps
    keys = [f"zombie:{i}" for i in range(2)]
    drill.app.jobs["transfer"].enqueue_many([{"key": k, "args": [i, 1.0]} for i, k in enumerate(keys)])
    options = ("--concurrency", "2", "--lease", str(ZOMBIE_LEASE))
    zombie = drill.worker("zombie", *options)
    wait_until(lambda: all(drill.provider.started(k, 1) for k in keys), 30, "the two jobs to start")

    # When it is stopped for three lease periods while another worker runs (the rescuer waits for the
    # leases to expire, then runs each rescued job alone: a job that lost its worker is a suspect)
    drill.pause(zombie)
    stopped = time.monotonic()
    rescuer = drill.worker("rescuer", *options)
    wait_until(lambda: drill.count(state="succeeded") == len(keys), 3 * ZOMBIE_LEASE, "the rescuer to finish them")
    done = {k: drill.job(k) for k in keys}
    steps = {k: drill.app.steps(k) for k in keys}
    assert time.monotonic() - stopped < 3 * ZOMBIE_LEASE, "the rescue outlasted the stop"
    time.sleep(max(0.0, stopped + 3 * ZOMBIE_LEASE - time.monotonic()))  # the stop lasts three lease periods
    zombie.signal(signal.SIGCONT)

    # Then it finishes its stale attempts, and every write it tries is dropped
    wait_until(lambda: all(f"{k} dropped" in zombie.stderr() or f"{k} ended after its lease was lost" in zombie.stderr()
                           for k in keys), 30, "the zombie to try and drop its results")
    for p in (zombie, rescuer):
        p.signal(signal.SIGTERM)
    for p in (zombie, rescuer):
        assert p.wait(30) == 0, p.stderr()[-3000:]
    for k in keys:
        job = drill.job(k)
        assert job.as_dict() == done[k].as_dict()  # state, result, trace, times: all as the rescuer left them
        assert drill.app.steps(k) == steps[k]  # and the step records too
        assert [a.outcome for a in job.trace] == ["lost", "succeeded"]
        assert f":{zombie.pid}:" in (job.trace[0].worker or "") and f":{rescuer.pid}:" in (job.trace[1].worker or "")
    assert "outcome=succeeded" not in zombie.stderr()  # it never reported an attempt as done
    report = drill.verify(keys, allow_dead=False)
    late = [c for c in drill.provider.calls() if c[3] == zombie.pid and c[2] == 1 and not c[4]]
    print(f"\n{report.line('zombie')} stopped={3 * ZOMBIE_LEASE:g}s late_calls_absorbed={len(late)}")


def test_sigterm_during_long_jobs_finishes_or_releases_them_and_loses_none(drill: Drill) -> None:
    # Given a worker (grace 3 s) running two 1 s jobs and two 30 s jobs, with eight more waiting
    short, long_, waiting = ["short:0", "short:1"], ["long:0", "long:1"], [f"wait:{i}" for i in range(8)]
    drill.app.jobs["long"].enqueue_many([{"key": k, "args": [1.0]} for k in short]
                                        + [{"key": k, "args": [30.0, 0.2]} for k in long_])
    drill.app.jobs["pay"].enqueue_many([{"key": k, "args": [i]} for i, k in enumerate(waiting)])
    first = drill.worker("first", "--concurrency", "4", "--grace", "3")
    wait_until(lambda: all(drill.provider.started(k, 1) for k in short + long_), 30, "the four long jobs to start")

    # When it gets SIGTERM
    sent = time.monotonic()
    first.signal(signal.SIGTERM)

    # Then the short ones finish, the long ones are released after the grace, nothing else is claimed
    assert first.wait(30) == 0, first.stderr()
    assert time.monotonic() - sent < 3 + 2.5
    log = first.stderr()
    assert "signal 15: finishing running jobs" in log and "releasing 2 running job(s)" in log
    assert drill.count(state="running") == 0
    for k in short:
        assert [a.outcome for a in drill.job(k).trace] == ["succeeded"]
    for k in long_:
        job = drill.job(k)
        assert job.state in (State.QUEUED, State.SCHEDULED) and [a.outcome for a in job.trace] == ["interrupted"]
        assert (job.attempt, job.deferrals, job.lost) == (0, 1, 0)  # released: the budget is untouched
    for k in waiting:
        assert drill.job(k).runs == 0

    # And a later worker completes every one of them
    later = drill.worker("later", "--concurrency", "4", "--burst")
    assert later.wait(60) == 0, later.stderr()
    report = drill.verify(short + long_ + waiting, allow_dead=False)
    for k in long_:
        assert [a.outcome for a in drill.job(k).trace] == ["interrupted", "succeeded"]
    print(f"\n{report.line('sigterm')} finished_in_grace={len(short)} released={len(long_)}")
