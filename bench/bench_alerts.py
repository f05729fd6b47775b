"""What alerts cost the job path, measured against baselines in the same run (SQLite, durable default).

1. Drain N no-op jobs with one in-process worker, on a store with the failure-rate rule's index on
   ``attempts(ended_at)`` (migration 0005) and on one where it was dropped: the index's cost.
2. Drain N jobs that all fail for good (each writes a dead_letter event in its finish transaction)
   against the same with the store's outbox hook switched off (``_outbox_dead`` a no-op): the
   outbox's cost per dead letter; and against N that fail but are retried later, for scale.
3. Group a storm of N pending dead_letter events into alerts, rendered with their traces.
4. Evaluate the failure-rate and stuck-queue rules over a window holding 2N attempts.

    python bench/bench_alerts.py               # N = 5000
    python bench/bench_alerts.py --jobs 20000 --postgres postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from firesafe import App, Backoff


def build(url: str) -> App:
    app = App(url)
    app.alert_rules(dispatch=False, failure_rate=0.2, stuck_after=900)

    @app.job(max_attempts=1)
    def ok(ctx, n: int) -> int:
        return n

    @app.job(max_attempts=1)
    def bad(ctx, n: int) -> None:
        raise RuntimeError(f"poison {n}")

    @app.job(max_attempts=2, backoff=Backoff(base=3600, cap=3600, jitter="none"))
    def retried(ctx, n: int) -> None:
        raise RuntimeError(f"poison {n}")

    return app


def drain(app: App, name: str, n: int, tag: str) -> float:
    app.jobs[name].enqueue_many([{"args": [i], "key": f"{tag}:{i}"} for i in range(n)])
    started = time.perf_counter()
    app.work(burst=True, concurrency=64)
    return n / (time.perf_counter() - started)


def sqlite_url(folder: Path) -> str:
    return f"sqlite:///{folder}/{uuid.uuid4().hex}.db"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--postgres", metavar="URL", help="also run parts 2-4 on this PostgreSQL database")
    args = p.parse_args()
    n = args.jobs
    folder = Path(tempfile.mkdtemp(prefix="bench-alerts-"))

    with_index, without_index, good, dead, bare = [], [], [], [], []
    for r in range(args.repeat):
        a = build(sqlite_url(folder))
        with_index.append(drain(a, "ok", n, f"i{r}"))
        b = build(sqlite_url(folder))
        b.store.migrate()
        with sqlite3.connect(b.store.path) as c:  # type: ignore[attr-defined]
            c.execute("DROP INDEX firesafe_attempts_ended")
        without_index.append(drain(b, "ok", n, f"n{r}"))
        good.append(drain(a, "retried", n, f"g{r}"))
        dead.append(drain(a, "bad", n, f"d{r}"))
        b.store._outbox_dead = lambda *args: None  # type: ignore[attr-defined]
        bare.append(drain(b, "bad", n, f"b{r}"))
        a.close()
        b.close()
    wi, wo = statistics.median(with_index), statistics.median(without_index)
    g, d, o = statistics.median(good), statistics.median(dead), statistics.median(bare)
    print(f"SQLite, {n} jobs per run, median of {args.repeat}:")
    print(f"  drain with the attempts(ended_at) index {wi:,.0f} jobs/s, without {wo:,.0f}: ratio {wi / wo:.3f}")
    print(f"  drain all dead: with their outbox events {d:,.0f} jobs/s, with the hook off {o:,.0f}: "
          f"ratio {d / o:.3f} (failing and retried later: {g:,.0f} jobs/s)")

    stores = [("SQLite", sqlite_url(folder))]
    if args.postgres:
        sep = "&" if "?" in args.postgres else "?"
        stores.append(("PostgreSQL", f"{args.postgres}{sep}schema=bench_alerts_{uuid.uuid4().hex[:8]}"))
    for label, url in stores:
        app = build(url)
        try:
            if label == "PostgreSQL":
                d = drain(app, "bad", n, "pg-d")
                hook = app.store._outbox_dead  # type: ignore[attr-defined]
                app.store._outbox_dead = lambda *args: None  # type: ignore[attr-defined]
                o = drain(app, "bad", n, "pg-o")
                app.store._outbox_dead = hook  # type: ignore[attr-defined]
                print(f"PostgreSQL: drain all dead: with their outbox events {d:,.0f} jobs/s, with the hook off "
                      f"{o:,.0f}: ratio {d / o:.3f}")
            else:
                drain(app, "ok", n, "e-g")
                drain(app, "bad", n, "e-d")
            waiting = app.store.alert_waiting()  # type: ignore[attr-defined]
            started = time.perf_counter()
            made = app.alerts.group(force=True)
            took = time.perf_counter() - started
            print(f"{label}: grouped {waiting:,} pending events into {len(made)} alert(s) in {took * 1000:.0f} ms "
                  f"({waiting / took:,.0f} events/s)")
            started = time.perf_counter()
            app.alerts.evaluate()
            took = time.perf_counter() - started
            print(f"{label}: evaluated the rules over {2 * n:,} attempts in the window in {took * 1000:.1f} ms")
        finally:
            if label == "PostgreSQL":
                import psycopg

                with psycopg.connect(args.postgres, autocommit=True) as c:
                    c.execute(f'DROP SCHEMA IF EXISTS "{url.rsplit("schema=", 1)[1]}" CASCADE')
            app.close()


if __name__ == "__main__":
    main()
