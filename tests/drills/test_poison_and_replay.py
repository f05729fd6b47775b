"""Drills: a poison job that kills its worker process every time, and 1,000 dead jobs replayed by two
concurrent callers.

Poison: dead-lettered as ``worker_lost`` after the documented count (3 losses, DEFAULT_MAX_LOST),
while the other jobs keep at least 80% of their normal throughput. "Normal" is measured in the same
test, at the same moment: two identical groups of workers (4 processes x 2 threads each) drain two
identical queues side by side, and a poison job is put in one of them only. Both groups meet the same
machine load, so the ratio measures what the poison job costs, not what the neighbours' CPU costs.
Replay: two processes replay the same 1,000 dead jobs at once, while workers run; each job moves once
and executes once.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from firesafe.retries.decide import DEFAULT_MAX_LOST
from firesafe.store.base import JobFilter
from tests.drills.conftest import Drill, Proc, wait_until

PROCESSES, THREADS = 4, 2
OTHERS = 400
#: Seconds each job works (sleeps): each group runs at most 80 jobs a second, so the measure is about
#: what a poison job takes away (processes, slots, leases), not about CPU.
WORK = 0.1
LEASE = "2.0"
GROUPS = ("control", "poisoned")


@dataclass
class Group:
    queue: str
    workers: list[Proc]
    samples: list[tuple[float, int]] = field(default_factory=list)  # (seconds since start, jobs ended)
    deaths: list[float] = field(default_factory=list)  # when one of its worker processes died

    def when(self, n: int) -> float:
        """When ``n`` of its jobs had ended."""
        return next(t for t, done in self.samples if done >= n)

    def at(self, t: float) -> int:
        """How many of its jobs had ended at ``t``."""
        return max((done for s, done in self.samples if s <= t), default=0)


def stop(drill: Drill, workers: list[Proc]) -> None:
    """SIGTERM each worker once its handlers are in; a worker may exit 1 (a poison job it ran)."""
    drill.stop(workers, codes=(0, 1))


@pytest.mark.alone  # a throughput ratio: measured with no other test beside it
def test_poison_job_dies_as_worker_lost_and_the_others_keep_80_percent_of_their_throughput(drill: Drill) -> None:
    def options(queue: str) -> tuple[str, ...]:
        return ("--queues", queue, "--concurrency", str(THREADS), "--lease", LEASE, "--poll", "0.05", "--quiet")

    # Given two identical groups of workers on two queues
    groups = {q: Group(q, [drill.worker(f"{q}-w{i}", *options(q)) for i in range(PROCESSES)]) for q in GROUPS}
    wait_until(lambda: len(drill.app.store.worker_list()) >= 2 * PROCESSES, 30, "the workers to start")

    # When both queues get the same ordinary jobs, and the poisoned one a poison job first
    drill.app.jobs["poison"].enqueue(key="poison:1", queue="poisoned")
    for q in GROUPS:
        drill.app.jobs["pay"].enqueue_many([{"key": f"{q}:{i}", "args": [i, WORK], "queue": q} for i in range(OTHERS)])
    started = time.monotonic()
    poison_dead = None
    while True:
        now = time.monotonic() - started
        assert now < 120, "the jobs did not end within 120 s"
        ended: Counter[str] = Counter()
        for queue, state, n in drill.app.store.job_stats():  # one query a poll
            if state in ("succeeded", "dead"):
                ended[queue] += n
        if poison_dead is None and drill.job("poison:1").state == "dead":
            poison_dead = now
        for g in groups.values():  # ordinary jobs ended (the poison job, once dead, is not one)
            g.samples.append((now, ended[g.queue] - (g.queue == "poisoned" and poison_dead is not None)))
        if all(g.samples[-1][1] == OTHERS for g in groups.values()) and poison_dead is not None:
            break
        for g in groups.values():  # a supervisor's job: restart a worker process that died, at once
            for i, w in enumerate(g.workers):
                if not w.alive():
                    assert w.popen.returncode == 1, w.stderr()[-2000:]  # only the poison's os._exit(1)
                    g.deaths.append(now)
                    g.workers[i] = drill.worker(f"{g.queue}-w{i}-{len(g.deaths)}", *options(g.queue))
        time.sleep(0.05)
    for g in groups.values():
        stop(drill, g.workers)

    # Then the poison job went dead as worker_lost after exactly the documented number of losses,
    # killing a worker of its own group each time and none of the other
    poisoned, control = groups["poisoned"], groups["control"]
    poison = drill.job("poison:1")
    assert poison.state == "dead" and poison.reason == "worker_lost"
    assert (poison.lost, poison.runs, len(poisoned.deaths), len(control.deaths)) == (DEFAULT_MAX_LOST,) * 3 + (0,)
    assert [a.outcome for a in poison.trace] == ["lost"] * DEFAULT_MAX_LOST
    keys = [f"{q}:{i}" for q in GROUPS for i in range(OTHERS)]
    report = drill.verify([*keys, "poison:1"])
    assert report.dead == ["poison:1"]  # it ran alone each time (quarantine): no job beside it died

    # And while it killed workers, the others kept at least 80% of the throughput of the control group:
    # both groups started together, so the jobs each had ended by the same moment compare their rates
    # (the span covers the poison job's whole life, and at least a quarter of the control's jobs)
    span = max(poison_dead, control.when(OTHERS // 4))
    ratio = poisoned.at(span) / control.at(span)
    drained = control.when(OTHERS) / poisoned.when(OTHERS)  # and over the whole run
    beside = sum(1 for j in drill.app.store.job_list(JobFilter(queue="poisoned", limit=OTHERS + 1)) if j.lost) - 1
    print(f"\n{report.line('poison')} over the first {span:.1f}s: control={control.at(span) / span:.0f}/s "
          f"poisoned={poisoned.at(span) / span:.0f}/s ratio={ratio:.2f}; whole run: control "
          f"{control.when(OTHERS):.1f}s, poisoned {poisoned.when(OTHERS):.1f}s (ratio {drained:.2f}); worker deaths "
          f"at {[round(t, 1) for t in poisoned.deaths]}s, poison dead at {poison_dead:.1f}s; other jobs that lost an "
          f"attempt beside it: {beside}")
    assert all(t <= span for t in poisoned.deaths)
    assert ratio >= 0.8, f"{ratio:.2f} of the control group's throughput while the poison job lived"
    assert drained >= 0.8, f"{drained:.2f} of the control group's throughput over the whole run"


def test_a_thousand_dead_jobs_replayed_by_two_concurrent_callers_run_once_each(drill: Drill) -> None:
    keys = [f"broken:{i}" for i in range(1000)]
    # Given 1,000 jobs that died (a permanent error from a broken downstream), each with its alert
    drill.app.jobs["broken"].enqueue_many([{"key": k, "args": [i]} for i, k in enumerate(keys)])
    killer = drill.worker("first", "--concurrency", "4", "--burst", "--quiet")
    assert killer.wait(120) == 0, killer.stderr()[-3000:]
    assert drill.states() == {"dead": 1000}
    drill.verify(keys)  # dead with trace, reason and alert

    # When the downstream is fixed and two callers replay all of them at once, while workers run
    (drill.folder / "fixed").write_text("yes")
    workers = [drill.worker(f"w{i}", "--concurrency", "4", "--quiet") for i in range(2)]
    callers = [drill.replayer(f"replayer{i}", seed=i) for i in range(2)]
    wait_until(lambda: all((drill.folder / f"{c.name}.ready").exists() for c in callers), 60, "the callers")
    (drill.folder / "go").write_text("go")
    for c in callers:
        assert c.wait(120) == 0, c.stderr()[-3000:]
    moved = [set(json.loads(Path(drill.folder / f"{c.name}.json").read_text())["moved"]) for c in callers]

    # Then each job was moved by exactly one of them, and executed exactly once
    assert not moved[0] & moved[1] and moved[0] | moved[1] == set(keys)
    wait_until(lambda: drill.count(state="succeeded") == 1000, 120, "the replayed jobs to run")
    stop(drill, workers)
    report = drill.verify(keys, allow_dead=False)
    assert report.calls == 1000 and report.duplicates_absorbed == 0  # executed once each after the replay
    for key in keys[::50]:
        job = drill.job(key)
        assert [e.kind for e in job.events].count("replayed") == 1
        assert [a.outcome for a in job.trace] == ["failed", "succeeded"]
    alerts = drill.dead_letter_alerts()
    assert Counter(alerts.values()) == Counter({1: 1000})  # one alert per death, none for the replay
    print(f"\n{report.line('replay')} moved_by_caller={[len(m) for m in moved]}")
