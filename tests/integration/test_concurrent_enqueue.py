"""Eight processes enqueue the same 1,000 keys at once: the key constraint, not a lookup, decides."""

from __future__ import annotations

import json

from tests.integration.conftest import World, wait_until

PROCESSES = 8
KEYS = 1000


def test_eight_processes_enqueueing_the_same_keys_make_each_job_once(world: World) -> None:
    folder = world.procs.folder
    barrier = folder / "go"
    # Given 8 processes, connected and waiting behind a barrier, each holding the same keys in its own order.
    # Each pauses 5 ms after each chunk: on SQLite, a process that writes back to back keeps the write
    # lock from the others (their busy handler sleeps up to 100 ms between tries), and under load one
    # process alone created every key (2 runs in 10 beside four CPU-bound processes) and the race the
    # test is about never happened.
    enqueuers = [world.procs.enqueuer(f"enq{i}", "--keys", str(KEYS), "--seed", str(i), "--batch", "50",
                                      "--pause", "0.005",
                                      "--ready", str(folder / f"ready{i}"), "--barrier", str(barrier),
                                      "--out", str(folder / f"out{i}.json"))
                 for i in range(PROCESSES)]
    wait_until(lambda: all((folder / f"ready{i}").exists() for i in range(PROCESSES)), 60, "every enqueuer ready")

    # When the barrier opens and they all enqueue at once
    barrier.touch()
    for p in enqueuers:
        assert p.wait(120) == 0, p.stderr()[-3000:]

    # Then there is exactly one job per key, and each process saw created=True only for its own winners
    assert world.count() == KEYS
    results = [json.loads((folder / f"out{i}.json").read_text()) for i in range(PROCESSES)]
    assert all(r["seen"] == KEYS for r in results)
    created = [k for r in results for k in r["created"]]
    assert len(created) == KEYS  # the sum of created=True across processes
    assert sorted(created) == sorted(f"k{i}" for i in range(KEYS))  # each key won by exactly one process
    winners = sum(1 for r in results if r["created"])
    assert winners >= 2, "the race never happened: one process created every key"
    assert {j.key for j in world.app.jobs_list(limit=KEYS + 1)} == {f"k{i}" for i in range(KEYS)}
    print(f"\n[concurrent enqueue] {PROCESSES} processes, {KEYS} keys: created per process "
          f"{[len(r['created']) for r in results]}")
