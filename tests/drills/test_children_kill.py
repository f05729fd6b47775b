"""Drill: parents fan out to children on 3 worker processes x 4 threads while a worker (one running a
parent whenever one is) is SIGKILLed six times, about every 1.5 seconds, and restarted. Pass: every
parent and every child succeeded, each child's effect and each parent's own effect applied exactly
once (the provider's log, outside the store), each parent spawned its children once (one ``spawned``
event, exactly its children, none twice) and got every child's result."""

from __future__ import annotations

import random
import signal
import time

import pytest

from tests.drills.conftest import Drill, wait_until

PARENTS, CHILDREN = 12, 60
PROCESSES, THREADS, KILLS, EVERY = 3, 4, 6, 1.5
#: Seconds of work per child: 12 threads run at most 12 / WORK children a second, so the kills land
#: while parents spawn, children run and parents wait.
WORK = 0.03


@pytest.mark.slow
def test_sigkill_workers_mid_fan_out_loses_nothing_and_repeats_no_effect(drill: Drill) -> None:
    rng = random.Random(31)
    # Given parents, each fanning out to CHILDREN children, enqueued two at a time as workers run
    parents = [f"fan{i}" for i in range(PARENTS)]
    options = ("--concurrency", str(THREADS), "--quiet")
    workers = [drill.worker(f"w{i}", *options) for i in range(PROCESSES)]
    started = time.monotonic()
    # When, six times, a worker is SIGKILLed (one running a parent if there is one within 1.5 s: a
    # parent is killed mid-spawn or mid-announce; else a random one) and a new one started in its place
    kills: list[dict[str, object]] = []
    for n in range(KILLS):
        for key in parents[n * PARENTS // KILLS:(n + 1) * PARENTS // KILLS]:  # parents arrive as workers die
            drill.app.jobs["fanout"].options(key=key).enqueue(CHILDREN, WORK)
        deadline = time.monotonic() + EVERY
        slot, held = rng.randrange(PROCESSES), []
        while time.monotonic() < deadline:
            running = [(i, drill.running_on(w.pid)) for i, w in enumerate(workers)]
            found = [(i, h) for i, h in running if any(j.name == "fanout" for j in h)]
            if found:
                slot, held = found[0]
                break
            time.sleep(0.005)
        victim = workers[slot]
        held = held or drill.running_on(victim.pid)
        victim.signal(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        kills.append({"at": round(time.monotonic() - started, 1), "held": len(held),
                      "kinds": sorted({j.name for j in held})})
        workers[slot] = drill.worker(f"w{slot}-{n + 1}", *options)

    # Then every parent and child ends, and the workers stop cleanly when asked
    every = PARENTS * (CHILDREN + 1)
    wait_until(lambda: drill.finished() == every, 240, "every parent and child to end", interval=0.25)
    drill.stop(workers)

    children = [f"{p}/spawn-0/{i}" for p in parents for i in range(CHILDREN)]
    report = drill.verify(parents + children, allow_dead=False)  # each effect applied, exactly once
    assert drill.count() == every  # no child spawned twice, none spawned under another key
    for p in parents:
        job = drill.job(p)
        assert job.result == sum(range(CHILDREN)), (p, job.result)
        assert [e.kind for e in job.events].count("spawned") == 1, (p, job.events)
        assert drill.app.store.job_children_counts(job.id) == {"succeeded": CHILDREN}
        assert job.children_pending == 0
    assert sum(int(k["held"]) for k in kills) > 0, kills  # type: ignore[call-overload]  # kills cut attempts
    assert sum(drill.job(p).lost for p in parents) > 0, kills  # and some of them were parents' attempts
    print(f"\n{report.line('children kill')} kills={kills}")
