"""Render time of the dashboard's jobs and dead-letter pages with 100,000 jobs in the store.

On each store (SQLite and PostgreSQL), in one run:

1. enqueue N jobs of three job names (bulk), run them with a worker: about a fifth end dead with
   several error types, the rest succeed (so the attempts table holds ~N rows), plus a backlog of
   scheduled jobs;
2. serve the dashboard with uvicorn on 127.0.0.1 and time each page over real HTTP (httpx, one
   warm-up then ``--repeat`` requests; median and p90);
3. as the baseline, time the bare store calls the jobs page makes (``job_list`` of 50 + ``job_count``)
   in the same process, and print each page's median as a ratio to it.

Target (issue 9): the jobs and dead-letter pages render in under 200 ms.

    python bench/bench_dashboard.py                       # 100,000 jobs, both stores
    python bench/bench_dashboard.py --jobs 20000 --sqlite-only
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from firesafe import App, Backoff, Permanent
from firesafe.dashboard import create_app
from firesafe.dashboard.server import BackgroundServer
from firesafe.store.base import JobFilter

TARGET_MS = 200.0
PG_URL = os.environ.get("FIRESAFE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
#: (page, path, has a target): the jobs and dead-letter pages carry the 200 ms target.
PAGES = [
    ("jobs, first page", "/jobs", True),
    ("jobs, state filter", "/jobs?state=succeeded", True),
    ("jobs, name + error filter", "/jobs?job=email&error=TimeoutError", True),
    ("jobs, since 1h, page 200", "/jobs?since=1h&page=200", True),
    ("jobs, 200 per page", "/jobs?size=200", True),
    ("dead letters", "/dead", True),
    ("dead letters, group filter p.20", "/dead?job=charge&error=Permanent&page=20", True),
    ("job detail", "/job?key=charge%3A15", False),
    ("overview", "/", False),
    ("metrics", "/metrics", False),
]


def declare(app: App) -> None:
    once = Backoff(base=0.0, cap=0.0, jitter="none")

    @app.job(queue="payments", max_attempts=1)
    def charge(ctx: Any, n: int, api_key: str) -> int:
        if n % 5 == 0:
            raise Permanent(f"card declined for order {n}")
        return n

    @app.job(queue="sync", max_attempts=2, backoff=once, give_up_on=(KeyError,))
    def sync(ctx: Any, n: int) -> int:
        if (n // 3) % 9 == 0:
            raise KeyError(f"sku-{n}")
        return n

    @app.job(queue="mail", max_attempts=1)
    def email(ctx: Any, n: int) -> int:
        if n % 11 == 0:
            raise TimeoutError(f"smtp timed out for message {n}")
        return n


def populate(app: App, jobs: int) -> float:
    started = time.perf_counter()
    names = ["charge", "sync", "email"]
    chunk = 5000
    for start in range(0, jobs, chunk):
        by_name: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        for n in range(start, min(start + chunk, jobs)):
            name = names[n % 3]
            args: list[Any] = [n, "sk_live_secret"] if name == "charge" else [n]
            by_name[name].append({"args": args, "key": f"{name}:{n}"})
        for name, items in by_name.items():
            app.jobs[name].enqueue_many(items)
    app.work(burst=True, concurrency=16, wait_scheduled=True)
    backlog = [{"args": [n], "key": f"email:later-{n}", "delay": 3600} for n in range(jobs // 20)]
    app.jobs["email"].enqueue_many(backlog)
    return time.perf_counter() - started


def timed(fn: Any, repeat: int) -> tuple[float, float]:
    fn()  # warm-up
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.9))]


def run(label: str, url: str, jobs: int, repeat: int) -> list[tuple[str, str, float, float, bool]]:
    app = App(url)
    declare(app)
    took = populate(app, jobs)
    store = app.store
    counts: dict[str, int] = {}
    for _, state, n in store.job_stats():
        counts[state] = counts.get(state, 0) + n
    total = sum(counts.values())
    print(f"\n== {label}: {total:,} jobs ({', '.join(f'{k} {v:,}' for k, v in sorted(counts.items()))}); "
          f"made in {took:.1f}s")

    def bare() -> None:
        store.job_list(JobFilter(limit=50))
        store.job_count(JobFilter())

    base_med, base_p90 = timed(bare, repeat)
    print(f"   baseline: store.job_list(50) + job_count   median {base_med:7.1f} ms  p90 {base_p90:7.1f} ms")
    rows = []
    with BackgroundServer(create_app(app)) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        for name, path, has_target in PAGES:
            def get(path: str = path) -> None:
                r = client.get(path)
                if r.status_code != 200:
                    raise SystemExit(f"{path} answered {r.status_code}: {r.text[:300]}")

            med, p90 = timed(get, repeat)
            verdict = ("ok" if med < TARGET_MS else "OVER TARGET") if has_target else "-"
            print(f"   {name:34} {path:44} median {med:7.1f} ms  p90 {p90:7.1f} ms  "
                  f"x{med / base_med:5.1f} baseline  {verdict}")
            rows.append((label, name, med, p90, has_target))
    app.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--sqlite-only", action="store_true")
    args = parser.parse_args()
    print(f"dashboard render times, {args.jobs:,} jobs; {platform.node()} ({os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {platform.machine()})")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows += run("SQLite", f"sqlite:///{tmp}/bench.db", args.jobs, args.repeat)
    if not args.sqlite_only:
        schema = f"fs_bench_dash_{uuid.uuid4().hex[:8]}"
        try:
            rows += run("PostgreSQL", f"{PG_URL}?schema={schema}", args.jobs, args.repeat)
        finally:
            import psycopg

            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    over = [(store, name, med) for store, name, med, _, target in rows if target and med >= TARGET_MS]
    worst = max((med for _, _, med, _, target in rows if target), default=0.0)
    print(f"\nslowest jobs/dead-letter page: {worst:.1f} ms (target < {TARGET_MS:.0f} ms): "
          f"{'met' if not over else 'MISSED by ' + ', '.join(f'{s} {n} ({m:.0f} ms)' for s, n, m in over)}")


if __name__ == "__main__":
    main()
