"""Drill: jobs on 4 worker processes x 4 threads; a random worker is SIGKILLed every 2 seconds and
restarted, 10 times. Pass: 0 jobs lost, 0 effects applied twice, every job succeeded or dead (dead
only as ``worker_lost``, with its trace and its alert).

Full size (20,000 jobs) under ``FIRESAFE_SOAK=1``; ``make test`` runs a size that keeps the drill
under a minute per store on two cores, with the same 4 x 4 workers and the same 10 kills.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from tests.drills.conftest import SOAK, Drill, wait_until

JOBS = int(os.environ.get("FIRESAFE_DRILL_JOBS") or (20_000 if SOAK else 7_000))
PROCESSES, THREADS, KILLS, EVERY = 4, 4, 10, 2.0
#: Seconds of work per job: 16 threads then run at most 16 / WORK jobs a second on any machine, so the
#: ten kills (20 s) always land while jobs run; half of it comes after the effect (the window a kill
#: there leaves: the effect happened, its completion was not recorded).
WORK = 0.03 if SOAK else 0.06


@pytest.mark.slow
def test_sigkill_a_random_worker_every_two_seconds_ten_times(drill: Drill) -> None:
    rng = random.Random(8)
    # Given JOBS jobs: three in four apply one effect, one in four two durable steps (two effects)
    keys = [f"k{i}" for i in range(JOBS)]
    for s in range(0, JOBS, 5000):
        drill.app.jobs["pay"].enqueue_many(
            [{"key": k, "args": [i, WORK]} for i, k in enumerate(keys[s:s + 5000], s) if i % 4])
        drill.app.jobs["transfer"].enqueue_many(
            [{"key": k, "args": [i, WORK]} for i, k in enumerate(keys[s:s + 5000], s) if not i % 4])
    options = ("--concurrency", str(THREADS), "--quiet")
    workers = [drill.worker(f"w{i}", *options) for i in range(PROCESSES)]
    started = time.monotonic()

    # When a random worker is SIGKILLed every two seconds, ten times, and a new one started each time
    kills: list[dict[str, object]] = []
    next_kill = started + EVERY
    for n in range(KILLS):
        time.sleep(max(0.0, next_kill - time.monotonic()))
        next_kill += EVERY
        slot = rng.randrange(PROCESSES)
        victim = workers[slot]
        held = drill.running_on(victim.pid)
        victim.signal(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        kills.append({"at": round(time.monotonic() - started, 1), "pid": victim.pid, "held": len(held),
                      "done": drill.finished()})
        workers[slot] = drill.worker(f"w{slot}-{n + 1}", *options)
    assert drill.finished() < JOBS, f"the jobs ran out before the tenth kill: raise FIRESAFE_DRILL_JOBS ({kills})"

    # Then the workers finish every job, and stop cleanly when asked
    wait_until(lambda: drill.finished() == JOBS, 240, "every job to end", interval=0.25)
    elapsed = time.monotonic() - started
    drill.stop(workers)  # the last replacement may still be starting

    report = drill.verify(keys)
    for key in report.dead:  # the only way to die here: lost three times
        assert drill.job(key).reason == "worker_lost", key
    held_at_kills = sum(int(k["held"]) for k in kills)  # type: ignore[call-overload]
    assert held_at_kills > 0, kills  # the kills did cut attempts short
    assert report.lost_attempts >= 1
    print(f"\n{report.line('kill storm')} kills={len(kills)} held_at_kills={held_at_kills} "
          f"elapsed={elapsed:.1f}s throughput={JOBS / elapsed:.0f}/s workers={PROCESSES}x{THREADS}\n"
          f"kills: {kills}")
