"""What a recorded step costs, relative to a job (issue: durable steps).

Runs, in one process and on the same store: N jobs of 10 no-op steps each, N jobs of no steps (to
subtract the cost of the job around the steps), and 10*N plain no-op jobs enqueued one at a time and in
bulk. Prints the cost of one recorded step as a fraction of one job. Target: <= 0.5.

    python bench/bench_steps.py [--jobs 200] [--postgres URL] [--no-sqlite]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid

from firesafe import App


def _noop() -> None:
    return None


def _drain(app: App) -> None:
    app.work(burst=True, concurrency=8, poll_interval=0.01)


def measure(url: str, n: int) -> dict[str, float]:
    app = App(url)

    @app.job
    def plain(ctx) -> None:
        return None

    @app.job
    def ten_steps(ctx) -> None:
        for i in range(10):
            ctx.step(f"s{i}", _noop)

    run = uuid.uuid4().hex[:6]
    t = time.perf_counter()
    ten_steps.enqueue_many([{"key": f"{run}-t{i}"} for i in range(n)])
    _drain(app)
    t_steps = time.perf_counter() - t

    t = time.perf_counter()
    plain.enqueue_many([{"key": f"{run}-z{i}"} for i in range(n)])
    _drain(app)
    t_zero = time.perf_counter() - t

    t = time.perf_counter()
    for i in range(10 * n):
        plain.enqueue(key=f"{run}-s{i}")
    _drain(app)
    t_single = time.perf_counter() - t

    t = time.perf_counter()
    plain.enqueue_many([{"key": f"{run}-b{i}"} for i in range(10 * n)])
    _drain(app)
    t_bulk = time.perf_counter() - t
    app.close()

    step = max(t_steps - t_zero, 0.0) / (10 * n)
    job_single = t_single / (10 * n)
    job_bulk = t_bulk / (10 * n)
    return {"step_ms": step * 1e3, "job_single_ms": job_single * 1e3, "job_bulk_ms": job_bulk * 1e3,
            "step_vs_job_single": step / job_single, "step_vs_job_bulk": step / job_bulk}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs of 10 steps (default 200)")
    parser.add_argument("--postgres", default=os.environ.get("FIRESAFE_BENCH_PG",
                                                             "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    results = {}
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory(dir=".") as d:
            results["sqlite"] = measure(f"sqlite:///{d}/bench.db", args.jobs)
    if not args.no_postgres:
        schema = f"bench_steps_{uuid.uuid4().hex[:8]}"
        try:
            results["postgres"] = measure(f"{args.postgres}?schema={schema}", args.jobs)
        except Exception as exc:
            print(f"postgres: skipped ({exc})")
        finally:
            try:
                import psycopg

                with psycopg.connect(args.postgres, autocommit=True) as c:
                    c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            except Exception:
                pass
    print(f"{'store':<10}{'step ms':>10}{'job ms (1-by-1)':>18}{'job ms (bulk)':>16}"
          f"{'step/job 1-by-1':>18}{'step/job bulk':>16}")
    for store, r in results.items():
        print(f"{store:<10}{r['step_ms']:>10.3f}{r['job_single_ms']:>18.3f}{r['job_bulk_ms']:>16.3f}"
              f"{r['step_vs_job_single']:>18.2f}{r['step_vs_job_bulk']:>16.2f}")
    print("target: a recorded step costs <= 0.5 of a job")


if __name__ == "__main__":
    main()
