"""Backfill speed: one year of 5-minute windows (105,120 windows) against plain bulk enqueue.

In one run, on each store (SQLite, and PostgreSQL when it answers), two fresh stores side by side:

1. plain bulk enqueue: ``enqueue_many`` of 105,120 jobs in chunks, with keys and two ISO-time
   arguments built before the clock starts (the strictest baseline: only the enqueue is timed);
2. ``app.backfill(...)`` of a 5-minute schedule over the same year: window arithmetic, keys, the
   enqueue of every window, the check of existing windows and the backfill's events;

   the two run month by month, alternating which goes first, so load from elsewhere on the
   machine falls on both alike (twelve backfills of a month each: their fixed costs count twelve times);
3. the same backfill over the whole year again (every window exists: nothing new is enqueued).

Target (issue 6): backfill enqueues windows at >= 0.5x the plain bulk rate.

    python bench/bench_schedules.py                  # SQLite, and PostgreSQL if reachable
    python bench/bench_schedules.py --repeat 1 --no-postgres
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from firesafe import App
from firesafe.schedules.windows import Cron

TARGET = 0.5
YEAR = 2025  # 365 days: 105,120 five-minute windows
PG_URL = os.environ.get("FIRESAFE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def build_app(url: str, tz: str) -> App:
    app = App(url)

    @app.schedule("*/5 * * * *", tz=tz)
    def every5(ctx: Any, window: Any) -> None:
        return None

    @app.job
    def bulk(ctx: Any, start: str, end: str) -> None:
        return None

    app.store.migrate()
    return app


def interleaved(bulk_app: App, fill_app: App, items: list[dict[str, Any]], tz: str, chunk: int,
                expected: int) -> tuple[float, float, float]:
    """Both measures month by month, alternating which goes first, so that load from elsewhere on
    the machine falls on both alike. Returns (bulk jobs/s, backfill windows/s, repeat windows/s)."""
    job = bulk_app.jobs["bulk"]
    zone = Cron("* * * * *", tz).zone
    bulk_time = fill_time = 0.0
    done = enqueued = 0
    for month in range(1, 13):
        lo = datetime(YEAR, month, 1, tzinfo=zone)
        hi = datetime(YEAR + month // 12, month % 12 + 1, 1, tzinfo=zone)
        part = items[done:done + _count_before(items, done, hi)]
        done += len(part)

        def run_bulk(part: list[dict[str, Any]] = part) -> float:
            start = time.perf_counter()
            for lo_i in range(0, len(part), chunk):
                job.enqueue_many(part[lo_i:lo_i + chunk])
            return time.perf_counter() - start

        def run_fill(lo: datetime = lo, hi: datetime = hi) -> float:
            nonlocal enqueued
            start = time.perf_counter()
            enqueued += fill_app.backfill("every5", lo, hi).enqueued
            return time.perf_counter() - start

        if month % 2:
            bulk_time += run_bulk()
            fill_time += run_fill()
        else:
            fill_time += run_fill()
            bulk_time += run_bulk()
    if enqueued != expected or done != expected:
        raise SystemExit(f"backfill enqueued {enqueued} windows, bulk {done}; expected {expected}")
    start = time.perf_counter()
    again = fill_app.backfill("every5", date(YEAR, 1, 1), date(YEAR, 12, 31))
    repeat = time.perf_counter() - start
    if again.enqueued != 0 or again.windows != expected:
        raise SystemExit(f"a repeated backfill enqueued {again.enqueued} windows of {again.windows}")
    return expected / bulk_time, expected / fill_time, expected / repeat


def _count_before(items: list[dict[str, Any]], start: int, hi: datetime) -> int:
    """How many items from ``start`` are windows starting before ``hi``."""
    limit = hi.timestamp()
    n = 0
    for item in items[start:]:
        if datetime.fromisoformat(item["args"][0]).timestamp() >= limit:
            break
        n += 1
    return n


@contextmanager
def sqlite_store(folder: Path) -> Iterator[str]:
    path = folder / f"{uuid.uuid4().hex[:8]}.db"
    yield f"sqlite:///{path}"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


@contextmanager
def postgres_store() -> Iterator[str]:
    import psycopg

    schema = f"fs_bench_{uuid.uuid4().hex[:10]}"
    try:
        yield f"{PG_URL}?schema={schema}"
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def postgres_reachable() -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    return None


def measure(name: str, store: Callable[[], Any], tz: str, chunk: int, repeat: int) -> dict[str, float]:
    cron = Cron("*/5 * * * *", tz)
    lo = datetime(YEAR, 1, 1, tzinfo=cron.zone).timestamp()
    hi = datetime(YEAR + 1, 1, 1, tzinfo=cron.zone).timestamp()
    windows = list(cron.iter_windows_starting(lo, hi))
    items = [{"args": [cron.iso(s), cron.iso(e)], "key": f"bulk@{cron.iso(s)}"} for s, e in windows]
    bulks, backfills, repeats = [], [], []
    for _ in range(repeat):
        with store() as bulk_url, store() as fill_url:
            bulk_app, fill_app = build_app(bulk_url, tz), build_app(fill_url, tz)
            try:
                b, f, r = interleaved(bulk_app, fill_app, items, tz, chunk, len(windows))
            finally:
                bulk_app.close()
                fill_app.close()
        bulks.append(b)
        backfills.append(f)
        repeats.append(r)
    figures = {"windows": float(len(windows)), "bulk": statistics.median(bulks),
               "backfill": statistics.median(backfills), "repeat": statistics.median(repeats)}
    figures["ratio"] = figures["backfill"] / figures["bulk"]
    ok = "meets" if figures["ratio"] >= TARGET else "MISSES"
    print(f"{name}: {len(windows):,} windows, median of {repeat} run(s)")
    print(f"  plain bulk enqueue      {figures['bulk']:>10,.0f} jobs/s")
    print(f"  backfill                {figures['backfill']:>10,.0f} windows/s")
    print(f"  backfill again (no-op)  {figures['repeat']:>10,.0f} windows/s")
    print(f"  backfill / bulk         {figures['ratio']:>10.2f}x   ({ok} the target of {TARGET}x)\n")
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3, help="runs on fresh stores; medians are reported (default 3)")
    p.add_argument("--chunk", type=int, default=2000, help="items per enqueue_many call of the baseline (2000, "
                   "as the backfill's chunks)")
    p.add_argument("--tz", default="UTC", help="the schedule's time zone (default UTC)")
    p.add_argument("--no-postgres", action="store_true", help="skip PostgreSQL")
    p.add_argument("--dir", help="where the SQLite stores live (default: the system temp folder)")
    p.add_argument("--check", action="store_true", help="exit with status 1 if a target is missed")
    args = p.parse_args(argv)

    folder = Path(tempfile.mkdtemp(prefix="firesafe-bench-schedules-", dir=args.dir))
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, year {YEAR}, time zone {args.tz}, "
          f"started {datetime.now(UTC):%Y-%m-%d %H:%M} UTC\n")
    results = {"sqlite": measure("SQLite (WAL, synchronous=FULL)", lambda: sqlite_store(folder), args.tz,
                                 args.chunk, args.repeat)}
    if not args.no_postgres:
        why = postgres_reachable()
        if why is None:
            results["postgres"] = measure("PostgreSQL", postgres_store, args.tz, args.chunk, args.repeat)
        else:
            print(f"PostgreSQL: skipped ({why})")
    folder.rmdir()
    missed = [k for k, v in results.items() if v["ratio"] < TARGET]
    return 1 if (args.check and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
