"""Pruning a year of history at volume, on PostgreSQL (docs/scaling.md, "History and reserved keys").

Each cycle (``--cycles``, default 3), in one schema kept across the cycles:

1. ``--history`` finished no-op jobs (default 1,000,000), written straight into firesafe's tables as a
   worker leaves them (the job's row and its attempt), finished a minute ago (young to the worker's
   own prune: only the bench's prune, on a clock two days ahead, takes them);
2. waiting no-op jobs (enough for the cycle, or ``--backlog``), and ONE worker process (concurrency
   64) draining them;
3. the drain's rate over ``--window`` seconds with nothing else running (idle), then while
   ``App.prune()`` (Retention: history 1 day, keys 7 days, on a clock two days ahead, so the jobs the
   worker finished are history too; at a worker's pace, ``App(prune_pace)``, or ``--pace``) records
   the keys of all the finished jobs and deletes their rows and trace, then idle again. The ratio
   is the rate while pruning over the mean of the two idle rates; the drain rates come from the
   jobs' own finish times;
4. a burst worker drains what is left and it is pruned too, so that every cycle ends with the same
   rows (only the reserved keys' records); ``VACUUM`` runs (as autovacuum would) and the size of the
   jobs and attempts tables is read: if pruning left bloat, it grows cycle after cycle. The reserved
   keys' table is read too: its bytes per key.

    python bench/bench_prune.py                              # 1,000,000 per cycle, 3 cycles
    python bench/bench_prune.py --history 200000 --cycles 2   # a quicker run
    python bench/bench_prune.py --json

The bars (issue "PostgreSQL in production", section 3): the drain while pruning at 0.8x or better of
idle, no growth of the jobs and attempts tables from cycle to cycle, at most 300 bytes per reserved key.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
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

from bench_postgres import PG_URL, build_app, url_for, worker  # noqa: E402
from bench_scale import enqueue  # noqa: E402

from firesafe import App, Retention  # noqa: E402
from firesafe.app import RESERVE_SETTLE  # noqa: E402

DAY = 86400.0
RATIO_BAR = 0.8
BYTES_BAR = 300.0

#: Finished jobs as a worker leaves them: the job's row (result 'null', the attempt's worker and
#: times) and its one attempt. Keys look like an order's ("hist:<cycle>:order-<n>", 20-odd bytes).
FILL = """
WITH made AS (
    INSERT INTO {s}.firesafe_jobs (key, name, queue, fingerprint, payload, arg_names, state, attempt,
                                   max_attempts, runs, run_at, created_at, updated_at, started_at,
                                   finished_at, result, worker)
    SELECT 'hist:' || %(cycle)s::text || ':order-' || lpad(g::text, 8, '0'), 'noop', 'default',
           md5(g::text) || md5((g + 1)::text), '{{"args":[' || g || '],"kwargs":{{}}}}', '["i"]',
           'succeeded', 1, 5, 1, %(at)s, %(at)s, %(at)s + g * 1e-4, %(at)s, %(at)s + g * 1e-4, 'null',
           'bench:1:fill.0'
    FROM generate_series(1, %(n)s::int) AS g
    RETURNING id, started_at, finished_at)
INSERT INTO {s}.firesafe_attempts (job_id, seq, attempt, worker, started_at, ended_at, outcome)
SELECT id, 1, 1, 'bench:1:fill.0', started_at, finished_at, 'succeeded' FROM made
"""


class Offset:
    """The pruner's clock: the real time plus an offset that the bench moves on (the settle wait)."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset

    def now(self) -> float:
        return time.time() + self.offset


def db_now(conn: psycopg.Connection[Any]) -> float:
    return float(conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8 AS t").fetchone()["t"])  # type: ignore[index]


def finished_between(conn: psycopg.Connection[Any], schema: str, lo: float, hi: float) -> int:
    """Drained jobs that finished in [lo, hi): those still kept, and those already pruned (their
    reserved keys' records keep when they finished)."""
    q = sql.SQL("SELECT count(*) AS n FROM ("
                " SELECT key FROM {s}.firesafe_jobs WHERE state = 'succeeded' AND key LIKE 'live:%%'"
                "  AND finished_at >= %(lo)s AND finished_at < %(hi)s"
                " UNION SELECT key FROM {s}.firesafe_keys WHERE key LIKE 'live:%%'"
                "  AND finished_at >= %(lo)s AND finished_at < %(hi)s) AS done").format(s=sql.Identifier(schema))
    return int(conn.execute(q, {"lo": lo, "hi": hi}).fetchone()["n"])  # type: ignore[index]


def waiting(conn: psycopg.Connection[Any], schema: str) -> int:
    q = sql.SQL("SELECT count(*) AS n FROM {}.firesafe_jobs WHERE state IN ('queued', 'scheduled')").format(
        sql.Identifier(schema))
    return int(conn.execute(q).fetchone()["n"])  # type: ignore[index]


def sizes(conn: psycopg.Connection[Any], schema: str) -> dict[str, int]:
    """Bytes of each table with its indexes and TOAST, and of its indexes alone (``<table>_indexes``)."""
    out = {}
    for table in ("firesafe_jobs", "firesafe_attempts", "firesafe_keys"):
        row = conn.execute("SELECT pg_total_relation_size(%s::regclass) AS n, pg_indexes_size(%s::regclass) AS i",
                           [f'"{schema}".{table}'] * 2).fetchone()
        out[table], out[f"{table}_indexes"] = int(row["n"]), int(row["i"])  # type: ignore[index]
    return out


def start_worker(conn: psycopg.Connection[Any], schema: str, url: str) -> subprocess.Popen[bytes]:
    """A worker process draining the backlog, once it has finished its first job."""
    begun_at = db_now(conn)
    proc = worker(url, burst=False, concurrency=64)
    deadline = time.monotonic() + 120
    while finished_between(conn, schema, begun_at, 1e12) == 0:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("the worker did not start")
        time.sleep(0.1)
    return proc


def stop_worker(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.wait(60)


def drained(conn: psycopg.Connection[Any], schema: str, lo: float, hi: float) -> float:
    """The drain's rate over [lo, hi) of the database's clock."""
    return finished_between(conn, schema, lo, hi) / (hi - lo)


def run_cycle(cycle: int, schema: str, url: str, app: App, args: argparse.Namespace, estimate: dict[str, float],
              say: Any) -> dict[str, Any]:
    s = sql.Identifier(schema)
    out: dict[str, Any] = {"cycle": cycle}
    w = args.window
    with psycopg.connect(PG_URL, autocommit=True, row_factory=dict_row) as conn:
        start = time.perf_counter()
        conn.execute(sql.SQL(FILL).format(s=s), {"cycle": cycle, "n": args.history, "at": time.time() - 60})
        conn.execute(sql.SQL("ANALYZE {}.firesafe_jobs").format(s))
        out["fill_s"] = time.perf_counter() - start
        # Enough waiting jobs for the worker to stay busy through the four windows, with room.
        need = int(1.5 * estimate.get("rate", 12_000.0) * (4 * w + 12)) if args.backlog is None else args.backlog
        out["enqueued"] = max(0, need - waiting(conn, schema))
        enqueue(app, out["enqueued"], f"live:{cycle}:")

        clock = Offset(2 * DAY)  # every finished job is history to this pruner, the worker's too
        pruner = App(url_for(schema, "firesafe-prune"), clock=clock,
                     retention=Retention(succeeded=DAY, cancelled=DAY, dead=30 * DAY, keys=7 * DAY))
        result: dict[str, Any] = {}
        records_done, go_rows = threading.Event(), threading.Event()

        def prune() -> None:
            began = time.perf_counter()
            result["first"] = pruner.prune(pace=args.pace)  # the records
            result["record_s"] = time.perf_counter() - began
            records_done.set()
            go_rows.wait()
            clock.offset += RESERVE_SETTLE + 1  # then, once they have settled, the rows
            began = time.perf_counter()
            result["second"] = pruner.prune(pace=args.pace)
            result["delete_s"] = time.perf_counter() - began

        thread = threading.Thread(target=prune)
        windows: dict[str, tuple[float, float]] = {}
        proc: subprocess.Popen[bytes] | None = None
        try:
            proc = start_worker(conn, schema, url)
            t0 = db_now(conn)
            time.sleep(w)
            windows["idle_before"] = (t0, db_now(conn))
            thread.start()  # the records, while the worker drains (their first `w` seconds)
            time.sleep(0.5)
            t0 = db_now(conn)
            records_done.wait(w)
            windows["while_recording"] = (t0, db_now(conn))
            stop_worker(proc)
            records_done.wait()
            proc = start_worker(conn, schema, url)
            go_rows.set()  # the rows, while the worker drains (their first `w` seconds)
            time.sleep(0.5)
            t0 = db_now(conn)
            thread.join(w)
            windows["while_deleting"] = (t0, db_now(conn))
            stop_worker(proc)
            thread.join()  # the rest of the prune, alone
            proc = start_worker(conn, schema, url)
            t0 = db_now(conn)
            time.sleep(w)
            windows["idle_after"] = (t0, db_now(conn))
            left = waiting(conn, schema)
        finally:
            go_rows.set()
            if proc is not None:
                stop_worker(proc)
            thread.join()
            pruner.close()
        if left == 0:
            raise SystemExit(f"the backlog ran out before the last window: give --backlog above {need}")
        deleted = result["second"]["succeeded"] + result["first"]["succeeded"]
        if deleted < args.history:
            raise SystemExit(f"the prune deleted {deleted} jobs, fewer than the {args.history} filled: {result}")
        rates = {name: drained(conn, schema, lo, hi) for name, (lo, hi) in windows.items()}
        idle = statistics.mean([rates["idle_before"], rates["idle_after"]])
        estimate["rate"] = max(rates.values())
        out.update(rates)
        out.update({"pruned": deleted, "record_s": result["record_s"], "delete_s": result["delete_s"],
                    "ratio_recording": rates["while_recording"] / idle,
                    "ratio_deleting": rates["while_deleting"] / idle,
                    "pruned_per_s": deleted / (result["record_s"] + result["delete_s"])})
        out["ratio"] = min(out["ratio_recording"], out["ratio_deleting"])
        # The cycle's end: the backlog left is drained and pruned too (flat out), so every cycle ends
        # with the same rows (none waiting, none finished: only the records), and what the tables
        # hold beyond that after VACUUM is space that pruning left; if that grew cycle after cycle,
        # pruning would leave bloat.
        drain = worker(url, burst=True, concurrency=64)
        if drain.wait(1800) != 0:
            raise SystemExit("the burst worker that drains the rest failed")
        later = Offset(2 * DAY)
        rest = App(url_for(schema, "firesafe-prune"), clock=later,
                   retention=Retention(succeeded=DAY, cancelled=DAY, dead=30 * DAY, keys=7 * DAY))
        try:
            rest.prune()
            later.offset += RESERVE_SETTLE + 1
            rest.prune()
        finally:
            rest.close()
        out["rows_left"] = waiting(conn, schema) + int(conn.execute(sql.SQL(
            "SELECT count(*) AS n FROM {}.firesafe_jobs").format(s)).fetchone()["n"])  # type: ignore[index]
        for table in ("firesafe_jobs", "firesafe_attempts", "firesafe_keys"):
            conn.execute(sql.SQL("VACUUM {}.{}").format(s, sql.Identifier(table)))
        out["bytes"] = sizes(conn, schema)
        keys = int(conn.execute(sql.SQL("SELECT count(*) AS n FROM {}.firesafe_keys").format(s))
                   .fetchone()["n"])  # type: ignore[index]
        out["reserved_keys"] = keys
        out["bytes_per_reserved_key"] = out["bytes"]["firesafe_keys"] / keys
    say(f"  cycle {cycle}: pruned {out['pruned']:,} jobs at pace {args.pace} (records {out['record_s']:.1f} s, "
        f"rows {out['delete_s']:.1f} s: {out['pruned_per_s']:,.0f}/s); drain {out['idle_before']:,.0f} jobs/s idle, "
        f"{out['while_recording']:,.0f} while recording ({out['ratio_recording']:.2f}x), "
        f"{out['while_deleting']:,.0f} while deleting ({out['ratio_deleting']:.2f}x), {out['idle_after']:,.0f} idle "
        f"after; jobs {out['bytes']['firesafe_jobs'] / 2**20:,.1f} MiB "
        f"({out['bytes']['firesafe_jobs_indexes'] / 2**20:,.1f} of it indexes), attempts "
        f"{out['bytes']['firesafe_attempts'] / 2**20:,.1f} MiB after VACUUM ({out['rows_left']} rows left); "
        f"{out['reserved_keys']:,} reserved keys, "
        f"{out['bytes_per_reserved_key']:,.0f} bytes each")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--history", type=int, default=1_000_000, help="finished jobs to prune per cycle")
    ap.add_argument("--backlog", type=int, help="waiting jobs for the worker to drain meanwhile (default: "
                    "enough, from the rates of the cycle before)")
    ap.add_argument("--cycles", type=int, default=3, help="cycles (bloat shows as growth between them)")
    ap.add_argument("--window", type=float, default=8.0, help="seconds of each idle measurement")
    ap.add_argument("--pace", type=float, default=App.__init__.__kwdefaults__["prune_pace"],
                    help="the prune's pace, the share of the time it works (default: a worker's, App(prune_pace))")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = ap.parse_args(argv)
    schema = f"fs_prune_{uuid.uuid4().hex[:10]}"
    url = url_for(schema, "firesafe-prune-worker")
    app = build_app(url_for(schema, "firesafe-prune-enqueue"))
    say = print if not args.json else (lambda *a: print(*a, file=sys.stderr))
    cycles: list[dict[str, Any]] = []
    estimate: dict[str, float] = {}
    try:
        app.store.migrate()
        say(f"pruning {args.history:,} finished jobs per cycle while one worker drains, {args.cycles} cycles, "
            f"pace {args.pace}")
        for cycle in range(1, args.cycles + 1):
            cycles.append(run_cycle(cycle, schema, url, app, args, estimate, say))
    finally:
        app.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    worst = min(c["ratio"] for c in cycles)
    first = cycles[0]["bytes"]
    growth = {t: cycles[-1]["bytes"][t] - first[t] for t in ("firesafe_jobs", "firesafe_attempts")}
    per_key = max(c["bytes_per_reserved_key"] for c in cycles)
    say(f"worst ratio {worst:.2f}x (bar {RATIO_BAR}x); growth of jobs + attempts from cycle 1 to "
        f"{len(cycles)}: {sum(growth.values()) / 2**20:+.1f} MiB; {per_key:,.0f} bytes per reserved key "
        f"(bar {BYTES_BAR:.0f})")
    if args.json:
        print(json.dumps({"cycles": cycles, "worst_ratio": worst, "growth_bytes": growth,
                          "bytes_per_reserved_key": per_key}, indent=2))
    ok = worst >= RATIO_BAR and per_key <= BYTES_BAR
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
