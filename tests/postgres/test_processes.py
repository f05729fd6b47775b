"""Many processes on one PostgreSQL store: exactly-once draining, concurrent idempotent enqueue, and
every connection terminated mid-run. Each job appends a line to an external effect log."""

from __future__ import annotations

import collections
import os
import signal
from pathlib import Path

import pytest

from firesafe.errors import StoreError
from tests.postgres.conftest import Pg, wait_until
from tests.postgres.procs import build_app, read_effects

SOAK = os.environ.get("FIRESAFE_SOAK") == "1"


def counts(pg: Pg) -> dict[str, int]:
    with pg.admin() as conn:
        return dict(conn.execute(f'SELECT state, count(*) FROM "{pg.schema}".firesafe_jobs GROUP BY state'
                                 ).fetchall())


@pytest.mark.slow
def test_four_worker_processes_drain_every_job_exactly_once(pg: Pg, procs, tmp_path: Path) -> None:
    pids = drain_in_processes(pg, procs, tmp_path, n=100_000 if SOAK else 20_000, workers=4, concurrency=8,
                              timeout=240)
    assert len(pids) >= 2, "the work should be shared between the worker processes"


def drain_in_processes(pg: Pg, procs, tmp_path: Path, *, n: int, workers: int, concurrency: int,
                       timeout: float, ready_first: bool = False) -> set[int]:
    """Enqueue ``n`` effect jobs and drain them with ``workers`` worker processes; check that each
    job ran exactly once and all succeeded; the PIDs that ran them. By default the jobs wait for
    burst workers; ``ready_first`` starts the workers first and enqueues once each says it is ready,
    so that every one of them is there to claim (a burst worker that starts late may find none)."""
    effects = str(tmp_path / "effects.log")
    args = ["--effects", effects, "--concurrency", str(concurrency)]
    running = [procs(f"w{i}", "worker", pg.url, *args) for i in range(workers)] if ready_first else []
    for w in running:
        wait_until(lambda w=w: "ready" in w.stdout() or not w.alive(), 60, f"{w.name} to start")
        assert w.alive(), w.stderr()[-3000:]
    app = build_app(pg.url, effects)
    try:
        app.jobs["effect"].enqueue_many([{"args": [i], "key": f"e{i}"} for i in range(n)])
    finally:
        app.close()
    if ready_first:
        wait_until(lambda: counts(pg) == {"succeeded": n}, timeout, f"all {n} jobs to succeed")
        for w in running:
            w.signal(signal.SIGTERM)
    else:
        running = [procs(f"w{i}", "worker", pg.url, *args, "--burst") for i in range(workers)]
    for w in running:
        assert w.wait(timeout) == 0, w.stderr()[-3000:]
    ran = collections.Counter(key for key, _, _ in read_effects(effects))
    assert len(ran) == n and set(ran.values()) == {1}, [k for k, c in ran.items() if c > 1][:10]
    assert counts(pg) == {"succeeded": n}
    return {pid for _, pid, _ in read_effects(effects)}


@pytest.mark.slow
def test_eight_processes_enqueueing_the_same_keys_make_each_job_once(pg: Pg, procs) -> None:
    n = 2000
    app = build_app(pg.url)
    app.store.migrate()
    app.close()
    # Half enqueue one key at a time, half in batches; every process in its own shuffled order, so
    # overlapping batches meet in every order (and must neither deadlock nor duplicate).
    enqueuers = [procs(f"q{i}", "enqueue", pg.url, "--keys", str(n), "--seed", str(i),
                       "--batch", "0" if i % 2 else "250", stdin=True) for i in range(8)]
    for q in enqueuers:
        wait_until(lambda q=q: "ready" in q.stdout() or q.popen.poll() is not None, 60, f"{q.name} to be ready")
    for q in enqueuers:
        q.send("go\n")
    for q in enqueuers:
        assert q.wait(120) == 0, q.stderr()[-3000:]
    created = [int(q.stdout().split("created=")[1]) for q in enqueuers]
    assert sum(created) == n  # each key created by exactly one process; the others got the stored job
    assert counts(pg) == {"queued": n}
    assert pg.scalar(f'SELECT count(DISTINCT key) FROM "{pg.schema}".firesafe_jobs') == n


@pytest.mark.slow
def test_every_connection_terminated_mid_run_loses_nothing_and_runs_nothing_twice(
        pg: Pg, procs, tmp_path: Path) -> None:
    n = 3000
    effects = str(tmp_path / "effects.log")
    app = build_app(pg.url, effects)
    try:
        effect = app.jobs["effect"]
        effect.enqueue_many([{"args": [i], "key": f"e{i}"} for i in range(n // 2)])
        workers = [procs(f"w{i}", "worker", pg.url, "--effects", effects, "--concurrency", "4",
                         "--sleep", "0.002", "--lease", "5", "--poll", "0.2") for i in range(2)]
        terminated = 0
        for fraction in (0.15, 0.3):  # strike twice while the workers are busy
            wait_until(lambda f=fraction: len(read_effects(effects)) >= n * f, 120, f"{fraction:.0%} of the jobs")
            terminated += pg.terminate_all()
        # Jobs enqueued after the outage, through a pool whose connections were all killed too.
        for attempt in range(5):
            try:
                effect.enqueue_many([{"args": [i], "key": f"e{i}"} for i in range(n // 2, n)])
                break
            except StoreError:  # the first use of each killed pooled connection
                if attempt == 4:
                    raise
        wait_until(lambda: counts(pg).get("succeeded") == n, 180, "every job to succeed")
    finally:
        app.close()
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(60) == 0, w.stderr()[-3000:]
    assert terminated >= 4, "each strike should have cut the workers' connections"
    ran = collections.Counter(key for key, _, _ in read_effects(effects))
    assert len(ran) == n
    assert [k for k, c in ran.items() if c > 1] == []  # none twice
    assert counts(pg) == {"succeeded": n}
    logs = "".join(w.stderr() for w in workers)
    assert "store fault" in logs or "LISTEN connection" in logs, "the workers should have noticed the outage"
