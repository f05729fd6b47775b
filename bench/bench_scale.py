"""The figures a team sizes a PostgreSQL deployment with (docs/scaling.md), measured in one run.

For each backlog depth D (``--depths``, default 0, 100,000 and 1,000,000 waiting jobs), in a fresh
schema of its own:

1. enqueue D + N no-op jobs (``enqueue_many``, in calls of 10,000);
2. ONE worker process (concurrency 64) drains the first N of them while the rest wait; its rate runs
   from the first claim to the N-th finish (the database's clock). The CPU time of every PostgreSQL
   server process and of the worker process, from its first finished job to the N-th (start-up
   left out), is read from /proc, and the connections the worker holds are counted in
   ``pg_stat_activity``;
3. the cost of one claim with D jobs waiting: ``job_claim`` of 1 job and of 64 jobs, timed
   ``--samples`` times each from this process (p50 and p99, in milliseconds; at depths of 65 x
   samples or more);
4. the bytes the schema's tables (with their indexes and TOAST) take, per waiting job before the
   drain and, at the smallest depth, per finished job once all N have run.

    python bench/bench_scale.py                          # D = 0, 100,000, 1,000,000; N = 20,000
    python bench/bench_scale.py --depths 0,100000 --jobs 5000 --samples 100   # a quicker run
    python bench/bench_scale.py --json                   # the figures as JSON too

It reads /proc, so it runs on Linux, with the PostgreSQL server on the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_postgres import PG_URL, build_app, percentile, url_for, worker  # noqa: E402

from firesafe.store.base import ClaimParams  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pids: list[int]) -> dict[int, int]:
    """User plus system CPU time of each of ``pids`` still alive, in clock ticks."""
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = int(fields[11]) + int(fields[12])  # utime, stime
    return out


def server_pids() -> list[int]:
    """Every PostgreSQL server process on this machine (postmaster, backends, background workers)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def cpu_since(before: dict[int, int], pids: list[int]) -> float:
    """CPU seconds ``pids`` used since ``before`` (a process started since counts from zero)."""
    return sum(t - before.get(pid, 0) for pid, t in cpu_ticks(pids).items()) / TICK


def schema_bytes(conn: psycopg.Connection[Any], schema: str) -> int:
    row = conn.execute(
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) AS n FROM pg_class c "
        "JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = %s AND c.relkind = 'r'",
        [schema]).fetchone()
    assert row is not None
    return int(row["n"])


def enqueue(app: Any, n: int, prefix: str) -> float:
    noop = app.jobs["noop"]
    start = time.perf_counter()
    for lo in range(0, n, 10_000):
        noop.enqueue_many([{"args": [i], "key": f"{prefix}{i}"} for i in range(lo, min(n, lo + 10_000))])
    return n / (time.perf_counter() - start)


def claim_times(app: Any, limit: int, samples: int) -> list[float]:
    """Milliseconds per ``job_claim`` of ``limit`` jobs (each claimed job stays running)."""
    params = ClaimParams(queues=("default",), limit=limit, worker=f"bench-{uuid.uuid4().hex[:6]}", lease=600.0)
    out = []
    for _ in range(samples):
        start = time.perf_counter()
        claimed = app.store.job_claim(params)
        out.append((time.perf_counter() - start) * 1000)
        assert len(claimed) == limit, (len(claimed), limit)
    return out


def drain_first(url: str, schema: str, app_name: str, n: int, concurrency: int) -> dict[str, float]:
    """One worker process runs until ``n`` jobs have finished; its rate, CPU and connections."""
    t = sql.Identifier(schema)
    count = sql.SQL("SELECT count(*) AS n FROM {}.firesafe_attempts").format(t)
    window = sql.SQL(
        "SELECT (SELECT min(started_at) FROM {s}.firesafe_attempts) AS first, "
        "(SELECT finished_at FROM {s}.firesafe_jobs WHERE state = 'succeeded' AND finished_at IS NOT NULL "
        " ORDER BY finished_at OFFSET %s LIMIT 1) AS nth").format(s=t)
    with psycopg.connect(PG_URL, autocommit=True, row_factory=dict_row) as conn:
        proc = worker(url, burst=False, concurrency=concurrency)
        conns, started = 0, None  # started: CPU times once the first job has run (start-up excluded)
        try:
            deadline = time.monotonic() + 600
            while True:
                done = conn.execute(count).fetchone()["n"]  # type: ignore[index]
                if started is None and done:
                    started = cpu_ticks([*server_pids(), proc.pid]), done
                row = conn.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = %s",
                                   [app_name]).fetchone()
                conns = max(conns, row["n"])  # type: ignore[index]
                if done >= n:
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the worker stopped or stalled after {done} of {n} jobs")
                time.sleep(0.05)
            assert started is not None
            ticks, first_done = started
            pg_cpu = cpu_since(ticks, server_pids())
            worker_cpu = cpu_since(ticks, [proc.pid])
        finally:
            proc.terminate()
            proc.wait(60)
        row = conn.execute(window, [n - 1]).fetchone()
    assert row is not None and row["first"] is not None and row["nth"] is not None
    seconds = row["nth"] - row["first"]
    return {"rate": n / seconds, "seconds": seconds, "pg_cpu_s": pg_cpu, "worker_cpu_s": worker_cpu,
            "cpu_jobs": done - first_done, "connections": conns}


def run_depth(depth: int, n: int, samples: int, concurrency: int, say: Any) -> dict[str, Any]:
    schema = f"fs_scale_{uuid.uuid4().hex[:10]}"
    app_name = f"firesafe-scale-{uuid.uuid4().hex[:6]}"
    url = url_for(schema, app_name)
    app = build_app(url_for(schema, "firesafe-scale-enqueue"))
    out: dict[str, Any] = {"depth": depth, "jobs": n}
    try:
        app.store.migrate()
        out["enqueue_rate"] = enqueue(app, depth + n, "b:")
        with psycopg.connect(PG_URL, autocommit=True, row_factory=dict_row) as conn:
            conn.execute(sql.SQL("VACUUM ANALYZE {}.firesafe_jobs").format(sql.Identifier(schema)))
            out["bytes_per_waiting_job"] = schema_bytes(conn, schema) / (depth + n)
        drained = drain_first(url, schema, app_name, n, concurrency)
        out.update({f"drain_{k}": v for k, v in drained.items()})
        out["jobs_per_pg_cpu_second"] = drained["cpu_jobs"] / drained["pg_cpu_s"]
        out["jobs_per_worker_cpu_second"] = drained["cpu_jobs"] / drained["worker_cpu_s"]
        if depth >= 65 * samples:  # D jobs still wait: enough for every timed claim to take its jobs
            one, many = claim_times(app, 1, samples), claim_times(app, 64, samples)
            out["claim_1_p50_ms"], out["claim_1_p99_ms"] = percentile(one, 50), percentile(one, 99)
            out["claim_64_p50_ms"], out["claim_64_p99_ms"] = percentile(many, 50), percentile(many, 99)
        if depth == 0:
            with psycopg.connect(PG_URL, autocommit=True, row_factory=dict_row) as conn:
                for table in ("firesafe_jobs", "firesafe_attempts"):
                    conn.execute(sql.SQL("VACUUM ANALYZE {}.{}").format(sql.Identifier(schema), sql.Identifier(table)))
                left = conn.execute(sql.SQL("SELECT count(*) AS n FROM {}.firesafe_jobs WHERE state <> 'succeeded'")
                                    .format(sql.Identifier(schema))).fetchone()["n"]  # type: ignore[index]
                if left == 0:
                    out["bytes_per_finished_job"] = schema_bytes(conn, schema) / n
        line = (f"  {depth:>9,} waiting: drain {out['drain_rate']:,.0f} jobs/s "
                f"({out['jobs_per_pg_cpu_second']:,.0f} per server CPU-second, "
                f"{out['jobs_per_worker_cpu_second']:,.0f} per worker CPU-second, "
                f"{out['drain_connections']} connections); {out['bytes_per_waiting_job']:,.0f} bytes per waiting job")
        if "bytes_per_finished_job" in out:
            line += f", {out['bytes_per_finished_job']:,.0f} per finished job"
        if "claim_1_p50_ms" in out:
            line += (f"; claim of 1: p50 {out['claim_1_p50_ms']:.2f} ms, p99 {out['claim_1_p99_ms']:.2f} ms; "
                     f"of 64: p50 {out['claim_64_p50_ms']:.2f} ms, p99 {out['claim_64_p99_ms']:.2f} ms")
        say(line)
    finally:
        app.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--depths", default="0,100000,1000000", help="waiting jobs to measure at (default 0,100000,1000000)")
    p.add_argument("--jobs", type=int, default=20_000, help="jobs the worker drains at each depth (default 20000)")
    p.add_argument("--samples", type=int, default=200, help="claims timed at each depth and size (default 200)")
    p.add_argument("--concurrency", type=int, default=64, help="the worker's concurrency (default 64)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = p.parse_args(argv)
    depths = sorted(int(d) for d in args.depths.split(","))
    print(f"{os.cpu_count()} CPUs; one worker process, concurrency {args.concurrency}; N = {args.jobs:,}", flush=True)
    runs = [run_depth(d, args.jobs, args.samples, args.concurrency, lambda *a: print(*a, flush=True))
            for d in depths]
    if len(runs) > 1:
        base = runs[0]["drain_rate"]
        print("  drain rate relative to an empty queue: "
              + ", ".join(f"{r['depth']:,}: {r['drain_rate'] / base:.2f}x" for r in runs))
    if args.json:
        print(json.dumps({"cpus": os.cpu_count(), "median_drain": statistics.median(r["drain_rate"] for r in runs),
                          "runs": runs}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
