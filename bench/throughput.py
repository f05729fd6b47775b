"""Throughput of the SQLite store with its durable default (WAL, ``synchronous=FULL``).

In one run, on one disk:

1. enqueue N no-op jobs one at a time (one transaction each);
2. enqueue N more in bulk (``enqueue_many`` in chunks);
3. drain all 2N with ONE worker process (a subprocess running ``app.work(burst=True)``), timed from
   the first claim to the last finish as the store recorded them;
4. a bare ``sqlite3`` loop on a copy of the same schema that claims and completes one row per
   transaction (two statements in one ``BEGIN IMMEDIATE ... COMMIT``).

Targets (issue 2): the worker drains at least 3x the bare rate; bulk enqueue reaches 30,000 jobs/s.
Each measure runs ``--repeat`` times (3) on fresh stores and the median is reported, since a shared
machine's load moves single runs by tens of percent. Results: docs/benchmarks.md.

    python bench/throughput.py                         # or: make bench
    python bench/throughput.py --jobs 2000 --repeat 1  # a quicker run
    python bench/throughput.py --concurrency 8         # the worker's default concurrency
    python bench/throughput.py --synchronous normal    # what trading durability away buys
    python bench/throughput.py --postgres              # also run bench/bench_postgres.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from firesafe import App

HERE = Path(__file__).resolve().parent
DRAIN_TARGET = 3.0  # x the bare rate
BULK_TARGET = 30_000.0  # jobs/s


def sql() -> dict[str, str]:
    """The named queries of bench/bare_loop.sql."""
    queries: dict[str, str] = {}
    name: str | None = None
    for line in (HERE / "bare_loop.sql").read_text().splitlines():
        if line.startswith("-- name:"):
            name = line.split(":", 1)[1].strip()
            queries[name] = ""
        elif name is not None and not line.startswith("--"):
            queries[name] += line + "\n"
    return queries


Q = sql()


def build_app(url: str, synchronous: str = "FULL") -> App:
    """The benchmark's app: one no-op job."""
    app = App(url, store_options={"synchronous": synchronous})

    @app.job(max_attempts=5)
    def noop(ctx: Any, i: int) -> None:
        return None

    return app


# -- the parts of a run ----------------------------------------------------------------------
def enqueue_one_by_one(app: App, n: int) -> tuple[float, float]:
    """(jobs/s, CPU microseconds per job) of n enqueues, one transaction each."""
    noop = app.jobs["noop"]
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        noop.enqueue(i, key=f"one:{i}")
    return n / (time.perf_counter() - start), (time.process_time() - cpu) / n * 1e6


def enqueue_bulk(app: App, n: int, chunk: int) -> tuple[float, float]:
    """(jobs/s, CPU microseconds per job) of n enqueues through enqueue_many, ``chunk`` per call."""
    noop = app.jobs["noop"]
    start, cpu = time.perf_counter(), time.process_time()
    for lo in range(0, n, chunk):
        noop.enqueue_many([{"args": [i], "key": f"bulk:{i}"} for i in range(lo, min(n, lo + chunk))])
    return n / (time.perf_counter() - start), (time.process_time() - cpu) / n * 1e6


def drain(url: str, path: Path, expected: int, concurrency: int, synchronous: str) -> dict[str, float]:
    """Drain the store with one worker process; the rate runs from the first claim to the last finish."""
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--work", url,
                           "--concurrency", str(concurrency), "--synchronous", synchronous],
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / expected * 1e6
    if proc.returncode != 0:
        raise SystemExit(f"the worker process failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    with sqlite3.connect(path) as conn:
        conn.row_factory = sqlite3.Row
        row = conn.execute(Q["drain_window"]).fetchone()
        states = {r["state"]: r["n"] for r in conn.execute(Q["jobs_by_state"])}
    if row["succeeded"] != expected or states.get("succeeded") != expected:
        raise SystemExit(f"the worker did not finish every job: {dict(row)} states={states}")
    window = row["last_finish"] - row["first_claim"]
    return {"rate": expected / window, "window": window, "wall": wall, "process_rate": expected / wall,
            "cpu_us": cpu}


def bare_loop(path: Path, n: int, synchronous: str) -> tuple[float, float]:
    """A bare sqlite3 loop: claim and complete one row per transaction, as durable as the store."""
    app = App(f"sqlite:///{path}")
    app.store.migrate()  # the very schema firesafe uses
    app.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(Q[f"synchronous_{synchronous.lower()}"])
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(Q["seed"], [
        {"key": f"bare:{i}", "fingerprint": hashlib.sha256(str(i).encode()).hexdigest(),
         "payload": json.dumps({"args": [i], "kwargs": {}}), "now": now - 1} for i in range(n)])
    conn.execute("COMMIT")
    done = 0
    start, cpu = time.perf_counter(), time.process_time()
    while True:
        token = uuid.uuid4().hex
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute(Q["claim_one"], {"token": token, "now": time.time()}).fetchone()
        if row is None:
            conn.execute("COMMIT")
            break
        conn.execute(Q["complete_one"], {"id": row[0], "token": token, "now": time.time()})
        conn.execute("COMMIT")
        done += 1
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    conn.close()
    assert done == n, (done, n)
    return n / elapsed, cpu / n * 1e6


# -- the machine -----------------------------------------------------------------------------
def machine(folder: Path) -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        df = subprocess.run(["df", "-hT", str(folder)], capture_output=True, text=True, check=False).stdout
        disk = " ".join(df.splitlines()[-1].split()[:3])
    except (OSError, IndexError):
        disk = "unknown"
    return {"cpus": str(os.cpu_count()), "cpu": cpu, "disk": disk, "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version, "folder": str(folder)}


def table(rows: list[tuple[str, str, str, str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    out = []
    for n, r in enumerate(rows):
        out.append(f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:<{widths[3]}}".rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=10_000, help="jobs per enqueue mode (default 10000)")
    p.add_argument("--bare", type=int, default=3_000, help="rows for the bare loop (default 3000)")
    p.add_argument("--chunk", type=int, default=1_000, help="items per enqueue_many call (default 1000)")
    p.add_argument("--concurrency", type=int, default=64, help="the worker's concurrency (default 64)")
    p.add_argument("--synchronous", type=str.upper, choices=["FULL", "NORMAL"], default="FULL",
                   help="SQLite synchronous mode for firesafe and the bare loop (default FULL, firesafe's own)")
    p.add_argument("--dir", help="where the temporary store lives (default: the system temp folder)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON too")
    p.add_argument("--postgres", action="store_true", help="also run the PostgreSQL benchmark")
    p.add_argument("--check", action="store_true", help="exit with status 1 if a target is missed")
    p.add_argument("--repeat", type=int, default=3, help="runs on fresh stores; medians are reported (default 3)")
    p.add_argument("--work", metavar="URL", help=argparse.SUPPRESS)  # the worker subprocess
    args = p.parse_args(argv)

    if args.work:  # one worker process, until nothing is runnable
        app = build_app(args.work, args.synchronous)
        app.work(burst=True, concurrency=args.concurrency)
        app.close()
        return 0

    folder = Path(tempfile.mkdtemp(prefix="firesafe-bench-", dir=args.dir))
    try:
        info = machine(folder)
        print(f"machine: {info['cpus']} CPUs ({info['cpu']}), disk {info['disk']}, "
              f"Python {info['python']}, SQLite {info['sqlite']}")
        print(f"store: {folder} (WAL, synchronous={args.synchronous}); "
              f"{args.repeat} run(s), the median of each measure is reported\n")
        runs = [one_run(folder / f"run{r}", args) for r in range(args.repeat)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    one, bulk, bare = (statistics.median(r[k] for r in runs) for k in ("one", "bulk", "bare"))
    rate = statistics.median(r["drain"]["rate"] for r in runs)
    d = min((r["drain"] for r in runs), key=lambda x: abs(x["rate"] - rate))  # the median run's details
    ratio = statistics.median(r["drain"]["rate"] / r["bare"] for r in runs)
    cpu = {k: statistics.median(r["cpu_us"][k] for r in runs) for k in ("one", "bulk", "drain", "bare")}
    rows = [
        ("measure", "jobs/s", "CPU/job", "note"),
        (f"enqueue one at a time ({args.jobs:,})", f"{one:,.0f}", f"{cpu['one']:.0f} us", "one transaction per job"),
        (f"enqueue_many ({args.jobs:,}, chunks of {args.chunk:,})", f"{bulk:,.0f}", f"{cpu['bulk']:.0f} us",
         f"target >= {BULK_TARGET:,.0f}: {'met' if bulk >= BULK_TARGET else 'MISSED'}"),
        (f"drain, 1 worker process ({2 * args.jobs:,}, concurrency {args.concurrency})", f"{rate:,.0f}",
         f"{cpu['drain']:.0f} us", f"first claim to last finish ({d['window']:.2f} s); "
         f"{d['process_rate']:,.0f}/s with process start-up"),
        (f"bare sqlite3, 1 row per transaction ({args.bare:,})", f"{bare:,.0f}", f"{cpu['bare']:.0f} us",
         "claim + complete, 2 statements"),
        ("drain / bare", f"{ratio:.1f}x", "",
         f"target >= {DRAIN_TARGET:g}x: {'met' if ratio >= DRAIN_TARGET else 'MISSED'}"),
        ("bulk / one at a time", f"{bulk / one:.1f}x", "", ""),
    ]
    print()
    print(table(rows))
    figures: dict[str, Any] = {"machine": info, "synchronous": args.synchronous, "concurrency": args.concurrency,
                               "enqueue_one": one, "enqueue_bulk": bulk, "drain": rate, "bare": bare,
                               "drain_over_bare": ratio, "cpu_us_per_job": cpu, "runs": runs}
    if args.postgres:
        figures["postgres"] = run_postgres(2 * args.jobs)  # issue 3 measures 20,000 jobs
    if args.json:
        print(json.dumps(figures, indent=2))
    met = ratio >= DRAIN_TARGET and bulk >= BULK_TARGET
    return 1 if (args.check and not met) else 0


def one_run(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Every measure once, on fresh stores in ``folder``."""
    folder.mkdir()
    path = folder / "bench.db"
    url = f"sqlite:///{path}"
    app = build_app(url, args.synchronous)
    app.store.migrate()
    one, one_cpu = enqueue_one_by_one(app, args.jobs)
    bulk, bulk_cpu = enqueue_bulk(app, args.jobs, args.chunk)
    app.close()
    d = drain(url, path, 2 * args.jobs, args.concurrency, args.synchronous)
    bare, bare_cpu = bare_loop(folder / "bare.db", args.bare, args.synchronous)
    print(f"  enqueue one at a time {one:7,.0f}/s   enqueue_many {bulk:7,.0f}/s   drain {d['rate']:7,.0f}/s   "
          f"bare {bare:6,.0f}/s   drain/bare {d['rate'] / bare:4.1f}x   (load {os.getloadavg()[0]:.1f})", flush=True)
    return {"one": one, "bulk": bulk, "drain": d, "bare": bare,
            "cpu_us": {"one": one_cpu, "bulk": bulk_cpu, "drain": d["cpu_us"], "bare": bare_cpu}}


def run_postgres(n: int) -> dict[str, Any]:
    """Run bench/bench_postgres.py's ``run_postgres(n)`` (written with the PostgreSQL store); it prints
    its own figures and targets."""
    if not (HERE / "bench_postgres.py").exists():
        print("\n--postgres: bench/bench_postgres.py is not there yet; skipped")
        return {}
    sys.path.insert(0, str(HERE))
    from bench_postgres import run_postgres as pg  # type: ignore[import-not-found]

    print(f"\nPostgreSQL ({n:,} jobs per enqueue mode):")
    return pg(n)


if __name__ == "__main__":
    sys.exit(main())
