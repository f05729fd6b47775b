"""What a fan-out and fan-in costs, beside a plain drain of as many jobs (issue 31: children).

Runs, in one process and on the same store: a plain drain of N no-op jobs (enqueued in one bulk
call), then one parent that spawns N no-op children (one bulk insert, recorded as one step), waits
for them without holding a worker (woken by the store's count when the last one ends) and sums their
results. Prints both times and their ratio. Each finished child costs its parent one counted
decrement in the completer's batch, not a read of the other children, so the ratio stays near 1 at
any N (a wake-up that cost O(children) per child would make it grow with N).

    python bench/bench_children.py [--jobs 10000] [--postgres URL] [--no-sqlite] [--no-postgres] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from typing import Any

from firesafe import App


def _drain(app: App) -> None:
    app.work(burst=True, concurrency=8, poll_interval=0.01)


def measure(url: str, n: int) -> dict[str, float]:
    app = App(url)

    @app.job
    def leaf(ctx: Any, i: int) -> int:
        return i

    @app.job
    def parent(ctx: Any, count: int) -> int:
        keys = ctx.spawn_many(leaf, [[i] for i in range(count)])
        return sum(ctx.wait_children(keys))

    run = uuid.uuid4().hex[:6]
    app.store.migrate()
    t = time.perf_counter()
    leaf.enqueue_many([{"key": f"{run}-p{i}", "args": [i]} for i in range(n)])
    _drain(app)
    plain = time.perf_counter() - t

    t = time.perf_counter()
    parent.options(key=f"{run}-fan").enqueue(n)
    _drain(app)
    fan = time.perf_counter() - t
    job = app.get(f"{run}-fan")
    assert job.result == sum(range(n)), (job.state, job.error_message)
    woken = [e for e in job.events if e.kind == "woken"]
    spawn, collect = (float(a.detail.get("duration", 0.0)) for a in job.trace[:2])
    app.close()
    return {"jobs": n, "plain_s": plain, "fan_s": fan, "fan_over_plain": fan / plain, "spawn_s": spawn,
            "collect_s": collect, "woken": len(woken), "parent_runs": job.runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="plain jobs, and children of the parent")
    parser.add_argument("--postgres", default=os.environ.get("FIRESAFE_BENCH_PG",
                                                             "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory() as d:
            results["sqlite"] = measure(f"sqlite:///{d}/bench.db", args.jobs)
    if not args.no_postgres:
        schema = f"bench_children_{uuid.uuid4().hex[:8]}"
        try:
            results["postgres"] = measure(f"{args.postgres}?schema={schema}", args.jobs)
        finally:
            import psycopg

            with psycopg.connect(args.postgres, autocommit=True) as c:
                c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    print(f"{'store':<10}{'jobs':>8}{'plain drain s':>15}{'fan-out/in s':>14}{'ratio':>8}{'spawn s':>9}"
          f"{'collect s':>11}{'wake-ups':>10}{'parent runs':>13}")
    for store, r in results.items():
        print(f"{store:<10}{r['jobs']:>8}{r['plain_s']:>15.2f}{r['fan_s']:>14.2f}{r['fan_over_plain']:>8.2f}"
              f"{r['spawn_s']:>9.2f}{r['collect_s']:>11.2f}{r['woken']:>10}{r['parent_runs']:>13}")
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
