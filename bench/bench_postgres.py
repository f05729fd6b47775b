"""Throughput and wake-up latency of the PostgreSQL store, with the server's durable defaults.

In one run, in a fresh schema of one server:

1. enqueue N no-op jobs one at a time (one statement, one commit each);
2. enqueue N more in bulk: one ``enqueue_many`` of all N (the median of three such runs, two of
   them on scratch schemas), and N more in calls of ``--chunk``;
3. drain everything with ONE worker process, then 2N more jobs with TWO worker processes, timed from
   the first claim to the last finish as the store recorded them (the database's clock);
4. a bare psycopg loop on the same schema that claims (``FOR UPDATE SKIP LOCKED``) and completes one
   job per transaction;
5. enqueue-to-start latency on an idle worker (polling every ``--poll`` seconds; LISTEN/NOTIFY wakes
   it): p50 and p99 over ``--samples`` jobs, each enqueued once the previous one has run.

Targets (issue 3): one worker process drains at least 3x the bare loop; bulk enqueue reaches 40,000
jobs/s; latency p50 under 10 ms and p99 under 50 ms.

    python bench/bench_postgres.py                   # N = 20,000
    python bench/bench_postgres.py --jobs 5000       # a quicker run
    FIRESAFE_BENCH_PG=postgresql://... python bench/bench_postgres.py

``run_postgres(n)`` runs it from ``bench/throughput.py --postgres`` and returns the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from firesafe import App  # noqa: E402

PG_URL = os.environ.get("FIRESAFE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
DRAIN_TARGET = 3.0
BULK_TARGET = 40_000.0
P50_TARGET_MS = 10.0
P99_TARGET_MS = 50.0


def queries(schema: str) -> dict[str, str]:
    """The named queries of bench_postgres.sql, with the schema quoted in."""
    ident = sql.Identifier(schema).as_string(None)
    out: dict[str, str] = {}
    name = None
    for line in (HERE / "bench_postgres.sql").read_text().splitlines():
        if line.startswith("-- name:"):
            name = line.split(":", 1)[1].strip()
            out[name] = ""
        elif name and not line.startswith("--"):
            out[name] += line.replace("{schema}", ident) + "\n"
    return out


def url_for(schema: str, app_name: str = "firesafe-bench") -> str:
    sep = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{sep}schema={schema}&application_name={app_name}"


def build_app(url: str) -> App:
    """The benchmark's app: one no-op job."""
    app = App(url)

    @app.job(max_attempts=5)
    def noop(ctx: Any, i: int) -> None:
        return None

    return app


# -- the parts of a run ----------------------------------------------------------------------
def enqueue_one_by_one(app: App, n: int, prefix: str) -> float:
    noop = app.jobs["noop"]
    start = time.perf_counter()
    for i in range(n):
        noop.enqueue(i, key=f"{prefix}{i}")
    return n / (time.perf_counter() - start)


def enqueue_bulk(app: App, n: int, chunk: int, prefix: str) -> float:
    noop = app.jobs["noop"]
    start = time.perf_counter()
    for lo in range(0, n, chunk):
        jobs = noop.enqueue_many([{"args": [i], "key": f"{prefix}{i}"} for i in range(lo, min(n, lo + chunk))])
        assert all(j.created for j in jobs)
    return n / (time.perf_counter() - start)


def scratch_bulk(n: int) -> float:
    """One ``enqueue_many`` of ``n`` jobs into a fresh schema of its own (dropped afterwards)."""
    schema = f"fs_bench_{uuid.uuid4().hex[:10]}"
    app = build_app(url_for(schema))
    try:
        app.store.migrate()
        return enqueue_bulk(app, n, n, "scratch:")
    finally:
        app.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def worker(url: str, *, burst: bool, concurrency: int, poll: float = 0.5) -> subprocess.Popen[bytes]:
    args = [sys.executable, str(Path(__file__).resolve()), "--work", url, "--concurrency", str(concurrency),
            "--poll", str(poll)]
    if burst:
        args.append("--burst")
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def drain(url: str, q: dict[str, str], processes: int, concurrency: int, patterns: list[str],
          expected: int) -> dict[str, float]:
    """Drain every waiting job with ``processes`` worker processes; the window runs from the first claim
    to the last finish of the jobs whose keys match ``patterns``."""
    start = time.perf_counter()
    procs = [worker(url, burst=True, concurrency=concurrency) for _ in range(processes)]
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"a worker process failed ({p.returncode}):\n{err.decode()[-4000:]}")
    wall = time.perf_counter() - start
    with psycopg.connect(PG_URL, row_factory=dict_row) as conn:
        row = conn.execute(q["drain_window"], {"patterns": patterns}).fetchone()
    assert row is not None
    if row["succeeded"] != expected or row["total"] != expected:
        raise SystemExit(f"the workers did not finish every job: {dict(row)}, expected {expected}")
    window = row["last_finish"] - row["first_claim"]
    return {"rate": expected / window, "window": window, "wall": wall}


def bare_loop(q: dict[str, str], n: int) -> float:
    """Claim (SKIP LOCKED) and complete one job per transaction: 2 statements + commit per job."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(q["seed"], {"n": n})
        # Statistics taken before the seed say the queue is empty, and the planner then sorts every
        # seeded row on each claim instead of reading the runnable index in order: not the storage's limit.
        conn.execute(q["analyze"])
    done = 0
    with psycopg.connect(PG_URL) as conn:
        start = time.perf_counter()
        while True:
            token = uuid.uuid4().hex
            row = conn.execute(q["claim_one"], {"token": token}).fetchone()
            if row is None:
                conn.commit()
                break
            conn.execute(q["complete_one"], {"id": row[0], "token": token})
            conn.commit()
            done += 1
        elapsed = time.perf_counter() - start
    assert done == n, (done, n)
    return n / elapsed


def latency(app: App, url: str, app_name: str, q: dict[str, str], samples: int, poll: float,
            concurrency: int) -> list[float]:
    """Enqueue-to-start of ``samples`` jobs on an idle worker process, in milliseconds."""
    proc = worker(url, burst=False, concurrency=concurrency, poll=poll)
    out = []
    try:
        with psycopg.connect(PG_URL, autocommit=True, row_factory=dict_row) as conn:
            deadline = time.monotonic() + 30
            while conn.execute(q["listening"], {"app": app_name}).fetchone()["n"] == 0:  # type: ignore[index]
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("the latency worker never started listening")
                time.sleep(0.01)
            noop = app.jobs["noop"]
            for i in range(samples):
                time.sleep(0.02)  # let the worker go back to its idle wait
                key = f"lat:{i}"
                sent = time.time()
                noop.enqueue(i, key=key)
                deadline = time.monotonic() + 10
                while True:
                    started = conn.execute(q["started_at"], {"key": key}).fetchone()["started"]  # type: ignore[index]
                    if started is not None:
                        break
                    if time.monotonic() > deadline:
                        raise SystemExit(f"job {key} did not start within 10 s")
                    time.sleep(0.0005)
                out.append((started - sent) * 1000)
    finally:
        proc.terminate()
        proc.wait(30)
    return out


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


# -- the whole run ---------------------------------------------------------------------------
def run_postgres(n: int = 20_000, *, chunk: int = 1_000, bare: int = 3_000, concurrency: int = 64,
                 samples: int = 200, poll: float = 0.5, quiet: bool = False) -> dict[str, Any]:
    """Run every measure on a fresh schema (dropped afterwards); returns the figures."""
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    schema = f"fs_bench_{uuid.uuid4().hex[:10]}"
    app_name = f"firesafe-bench-{uuid.uuid4().hex[:6]}"
    url = url_for(schema, app_name)
    q = queries(schema)
    app = build_app(url)
    figures: dict[str, Any] = {}
    try:
        app.store.migrate()
        with psycopg.connect(PG_URL, row_factory=dict_row) as conn:
            server = conn.execute(q["server"]).fetchone()
        figures["server"] = dict(server or {})
        figures["cpus"] = os.cpu_count()
        figures["python"] = platform.python_version()
        say(f"PostgreSQL {figures['server'].get('version')} (synchronous_commit="
            f"{figures['server'].get('synchronous_commit')}, fsync={figures['server'].get('fsync')}), "
            f"{figures['cpus']} CPUs, Python {figures['python']}; schema {schema}\n")

        figures["enqueue_one"] = enqueue_one_by_one(app, n, "one:")
        say(f"  enqueue one at a time:        {figures['enqueue_one']:,.0f} jobs/s")
        # The bulk figure is the median of three runs (this one and two on scratch schemas), as the
        # SQLite benchmark does: one run on a shared machine says little.
        runs = [enqueue_bulk(app, n, n, "bulk:"), *(scratch_bulk(n) for _ in range(2))]
        figures["enqueue_bulk"] = statistics.median(runs)
        figures["enqueue_bulk_runs"] = runs
        say(f"  enqueue_many of {n:,}:      {figures['enqueue_bulk']:,.0f} jobs/s (median of "
            f"{', '.join(f'{r:,.0f}' for r in runs)})")
        figures["enqueue_bulk_chunked"] = enqueue_bulk(app, n, chunk, "chunk:")
        say(f"  enqueue_many, {chunk:,} per call: {figures['enqueue_bulk_chunked']:,.0f} jobs/s")

        d1 = drain(url, q, 1, concurrency, ["one:%", "bulk:%", "chunk:%"], 3 * n)
        figures["drain_1"] = d1["rate"]
        say(f"  drain, 1 process:             {d1['rate']:,.0f} jobs/s ({3 * n:,} jobs, "
            f"{d1['window']:.2f} s first claim to last finish, {d1['wall']:.2f} s with start-up)")
        enqueue_bulk(app, 3 * n, n, "two:")
        d2 = drain(url, q, 2, concurrency, ["two:%"], 3 * n)
        figures["drain_2"] = d2["rate"]
        say(f"  drain, 2 processes:           {d2['rate']:,.0f} jobs/s ({3 * n:,} jobs, "
            f"{d2['window']:.2f} s first claim to last finish, {d2['wall']:.2f} s with start-up)")

        figures["bare"] = bare_loop(q, bare)
        say(f"  bare psycopg loop:            {figures['bare']:,.0f} jobs/s ({bare:,} jobs, 1 per transaction)")

        lat = latency(app, url, app_name, q, samples, poll, concurrency=8)
        figures["latency_p50_ms"] = percentile(lat, 50)
        figures["latency_p99_ms"] = percentile(lat, 99)
        figures["latency_max_ms"] = max(lat)
        say(f"  enqueue-to-start, idle worker (poll {poll:g} s, {samples} jobs): p50 "
            f"{figures['latency_p50_ms']:.1f} ms, p99 {figures['latency_p99_ms']:.1f} ms, "
            f"max {figures['latency_max_ms']:.1f} ms")

        figures["drain_1_over_bare"] = figures["drain_1"] / figures["bare"]
        figures["drain_2_over_1"] = figures["drain_2"] / figures["drain_1"]
        figures["bulk_over_one"] = figures["enqueue_bulk"] / figures["enqueue_one"]
        met = {
            "drain >= 3x bare": figures["drain_1_over_bare"] >= DRAIN_TARGET,
            "bulk >= 40,000/s": figures["enqueue_bulk"] >= BULK_TARGET,
            "p50 < 10 ms": figures["latency_p50_ms"] < P50_TARGET_MS,
            "p99 < 50 ms": figures["latency_p99_ms"] < P99_TARGET_MS,
        }
        figures["targets"] = met
        say(f"\n  drain (1 process) / bare: {figures['drain_1_over_bare']:.1f}x;  2 processes / 1: "
            f"{figures['drain_2_over_1']:.2f}x;  bulk / one at a time: {figures['bulk_over_one']:.1f}x")
        say("  targets: " + ", ".join(f"{k}: {'met' if v else 'MISSED'}" for k, v in met.items()))
    finally:
        app.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=20_000, help="jobs per enqueue mode (default 20000)")
    p.add_argument("--chunk", type=int, default=1_000, help="items per enqueue_many call in the chunked run")
    p.add_argument("--bare", type=int, default=3_000, help="jobs for the bare loop (default 3000)")
    p.add_argument("--concurrency", type=int, default=64, help="each drain worker's concurrency (default 64)")
    p.add_argument("--samples", type=int, default=200, help="latency samples (default 200)")
    p.add_argument("--poll", type=float, default=0.5, help="the idle worker's poll interval (default 0.5 s)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON too")
    p.add_argument("--work", metavar="URL", help=argparse.SUPPRESS)  # a worker subprocess
    p.add_argument("--burst", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.work:
        app = build_app(args.work)
        app.work(burst=args.burst, concurrency=args.concurrency, poll_interval=args.poll)
        app.close()
        return 0

    figures = run_postgres(args.jobs, chunk=args.chunk, bare=args.bare, concurrency=args.concurrency,
                           samples=args.samples, poll=args.poll)
    if args.json:
        print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
