"""A worker killed with SIGKILL mid-attempt: its job is rescued once the lease expires and completes once.

Also a run of 300 jobs on two worker processes, one of them killed three times and restarted.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

from firesafe import State
from tests.integration.conftest import World, wait_until


def test_sigkilled_worker_job_is_rescued_and_its_effect_lands_exactly_once(world: World) -> None:
    # Given a job that sleeps 30 s on its first run, then records its effect as its last act
    world.app.jobs["effect"].enqueue(sleep=30.0, sleep_runs=1, key="pay:1")
    first = world.procs.worker("w1")
    wait_until(lambda: world.effects.started("pay:1", 1), 30, "the first run to start")
    assert world.effects.started("pay:1", 1) == first.pid

    # When its worker is killed mid-attempt, and another worker starts
    first.signal(signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL
    assert world.job("pay:1").state == State.RUNNING  # nothing was recorded by the dead worker
    second = world.procs.worker("w2", "--burst")

    # Then the second worker rescues it after the lease expires and completes it
    assert second.wait(60) == 0, second.stderr()
    job = world.job("pay:1")
    assert job.state == State.SUCCEEDED
    assert [a.outcome for a in job.trace] == ["lost", "succeeded"]
    lost, done = job.trace
    assert lost.error_type == "WorkerLost" and "stopped heartbeating" in (lost.message or "")
    assert lost.worker is not None and f":{first.pid}:" in lost.worker
    assert done.worker is not None and f":{second.pid}:" in done.worker
    assert (job.runs, job.lost, job.attempt) == (2, 1, 2)
    assert job.result == {"key": "pay:1", "run": 2, "pid": second.pid, "applied": True}
    # The external effect log holds the completed effect exactly once
    assert world.effects.log_lines() == ["pay:1"]
    assert world.effects.calls() == [("pay:1", 2, second.pid, True)]
    assert "rescued 1 job(s)" in second.stderr()


def test_a_killed_workers_prefetched_job_is_rescued_as_lost_although_it_never_started(world: World) -> None:
    # Given a worker of one thread whose attempts so far were short, so it prefetches ("short"
    # is under 1 s here rather than 20 ms: the warm-up jobs' effects write to disk, slow on a busy host)
    effect = world.app.jobs["effect"]
    effect.enqueue_many([{"key": f"warm{i}"} for i in range(20)])
    first = world.procs.worker("w1", "--concurrency", "1", "--prefetch-below", "1.0")
    wait_until(lambda: world.count(state="succeeded") == 20, 30, "the warm-up jobs")
    # When one claim takes a job that sleeps 30 s on its first run and a short one behind it
    effect.enqueue_many([{"key": "long", "kwargs": {"sleep": 30.0, "sleep_runs": 1}}, {"key": "behind"}])
    wait_until(lambda: len(world.running_on(first.pid)) == 2, 30, "both to be claimed by w1")
    wait_until(lambda: world.effects.started("long", 1), 30, "the long one to start")
    # and the worker is killed while "behind" still waits for its one thread
    first.signal(signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL
    assert world.effects.started("behind", 1) is None
    second = world.procs.worker("w2", "--burst")

    # Then both are rescued as lost once the lease expires (the store cannot tell a prefetched job that
    # had not started from one that had), and complete on the second worker, each effect once
    assert second.wait(60) == 0, second.stderr()
    for key in ("long", "behind"):
        job = world.job(key)
        assert job.state == State.SUCCEEDED and [a.outcome for a in job.trace] == ["lost", "succeeded"], key
        assert (job.runs, job.lost, job.attempt) == (2, 1, 2), key  # the lost attempt counts, as documented
    assert world.effects.started("behind", 1) is None and world.effects.started("behind", 2) == second.pid
    assert sorted(world.effects.applied()) == sorted(["long", "behind"] + [f"warm{i}" for i in range(20)])
    assert "rescued 2 job(s)" in second.stderr()


def test_300_jobs_on_two_workers_one_killed_three_times_every_effect_applied_once(world: World) -> None:
    n = 3000 if os.environ.get("FIRESAFE_SOAK") == "1" else 300
    keys = [f"s{i}" for i in range(n)]
    # Given n jobs that each work 0.05 s, apply their (deduplicated) effect, then work 0.05 s more
    world.app.jobs["effect"].enqueue_many(
        [{"key": k, "kwargs": {"sleep": 0.05, "sleep_runs": 99, "after": 0.05}} for k in keys])
    # (a job may be running on the victim at two kills: allow more losses than the default 3, which
    # is the poison-job limit tested in test_poison.py, not what this test is about)
    steady = world.procs.worker("steady", "--burst", "--max-lost", "10")
    victim = world.procs.worker("victim-0", "--burst", "--max-lost", "10")

    # When one worker is SIGKILLed three times while it holds running jobs, and restarted each time
    kills: list[tuple[int, list[str]]] = []  # (pid killed, jobs it held a moment before)
    for round_ in range(1, 4):
        wait_until(lambda r=round_: world.count(state="succeeded") >= r * n // 6, 60, f"{round_}/6 of the jobs done")
        held = wait_until(lambda v=victim: world.running_on(v.pid), 30, "the victim to hold running jobs")
        victim.signal(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        kills.append((victim.pid, [j.key for j in held]))
        victim = world.procs.worker(f"victim-{round_}", "--burst", "--max-lost", "10")

    # Then both workers drain everything and stop on their own
    assert steady.wait(120) == 0, steady.stderr()[-3000:]
    assert victim.wait(60) == 0, victim.stderr()[-3000:]
    assert world.states() == {"succeeded": n}  # 0 jobs lost, every one succeeded
    lost_attempts = 0
    lost_keys = set()
    for job in world.app.jobs_list(limit=n):
        full = world.job(job.key)
        outcomes = Counter(a.outcome for a in full.trace)
        assert outcomes["succeeded"] == 1, (job.key, outcomes)  # one committed completion per job
        assert set(outcomes) <= {"succeeded", "lost"}, (job.key, outcomes)
        assert full.lost == outcomes["lost"]
        lost_attempts += outcomes["lost"]
        if full.lost:
            lost_keys.add(job.key)
    for pid, keys_held in kills:  # each kill cut attempts short, and those were rescued as lost
        ends = [a.outcome for k in keys_held for a in world.job(k).trace if a.worker and f":{pid}:" in a.worker]
        assert "lost" in ends and set(ends) <= {"lost", "succeeded"}, (pid, ends)

    # Every key's effect applied exactly once, whatever the number of attempts that reached it
    applied = world.effects.applied()
    assert sorted(applied) == sorted(keys)
    calls = world.effects.calls()
    per_key = Counter(k for k, *_ in calls)
    duplicates = [c for c in calls if not c[3]]
    assert len(calls) == n + len(duplicates)
    assert {k for k, n_ in per_key.items() if n_ > 1} <= lost_keys  # only a lost attempt can repeat an effect
    log = world.effects.log_lines()
    assert set(log) == set(keys) and len(log) <= len(calls)
    print(f"\n[crash soak] jobs={n} kills=3 lost_attempts={lost_attempts} duplicate_effect_attempts_absorbed="
          f"{len(duplicates)} raw_log_duplicates={len(log) - n}")
