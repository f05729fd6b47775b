"""The processes the drills start, and the world outside the job store that their jobs touch.

Run from the repository root as::

    python -m tests.drills.procs worker STORE_URL --dir DIR [--concurrency N] [--lease S] [--grace S]
                                        [--poll S] [--burst] [--max-lost N]
    python -m tests.drills.procs replay STORE_URL --dir DIR --name NAME [--seed S]

The provider (``DIR/provider.db``, a SQLite file of its own) is where every job's side effect lands,
made idempotent the way a careful user does it: each call names an idempotency key
(``ctx.idempotency_key(step)``, the same on every attempt of a job), the table ``applied`` has that
key as its primary key, so an effect is applied at most once per key however many attempts reach
it, and the table ``calls`` keeps one row per call (``applied`` 0 when the key was there already: a
duplicate the provider absorbed). ``DIR/markers/KEY.RUN`` holds the pid of the process that started
run RUN of job KEY, so a test knows when to strike. ``DIR/fixed`` is the switch that makes the
``broken`` job work: the downstream was repaired.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from firesafe import App, Backoff, Permanent

#: Short leases, so a killed or stopped worker's jobs are rescued within seconds.
LEASE = 2.0
#: Quick retries, so a rescued job runs again soon.
FAST = Backoff(base=0.05, factor=2.0, cap=0.5, jitter="full")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS applied (idem_key TEXT PRIMARY KEY, job_key TEXT NOT NULL, run INTEGER NOT NULL,"
    " pid INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS calls (id INTEGER PRIMARY KEY AUTOINCREMENT, idem_key TEXT NOT NULL,"
    " job_key TEXT NOT NULL, run INTEGER NOT NULL, pid INTEGER NOT NULL, applied INTEGER NOT NULL)",
)


class Provider:
    """The outside world: applies each effect at most once per idempotency key, and logs every call."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.db = self.folder / "provider.db"
        self.markers = self.folder / "markers"
        self._conns: dict[int, sqlite3.Connection] = {}

    def create(self) -> None:
        self.markers.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.db, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            for statement in _SCHEMA:
                conn.execute(statement)
        finally:
            conn.close()

    def _conn(self) -> sqlite3.Connection:
        import threading

        ident = threading.get_ident()
        conn = self._conns.get(ident)
        if conn is None:
            conn = sqlite3.connect(self.db, timeout=60, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 60000")
            # A killed process loses nothing it committed in WAL mode with NORMAL (only a power cut could).
            conn.execute("PRAGMA synchronous = NORMAL")
            self._conns[ident] = conn
        return conn

    def mark(self, key: str, run: int) -> None:
        """Say that run ``run`` of job ``key`` has started (in this process)."""
        (self.markers / f"{key}.{run}").write_text(str(os.getpid()))

    def apply(self, idem_key: str, job_key: str, run: int) -> bool:
        """Apply the effect named ``idem_key`` at most once; True if this call applied it."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            applied = conn.execute(
                "INSERT INTO applied (idem_key, job_key, run, pid) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (idem_key, job_key, run, os.getpid())).rowcount == 1
            conn.execute("INSERT INTO calls (idem_key, job_key, run, pid, applied) VALUES (?, ?, ?, ?, ?)",
                         (idem_key, job_key, run, os.getpid(), int(applied)))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return applied

    # -- read by tests -----------------------------------------------------------------------
    def started(self, key: str, run: int) -> int | None:
        try:
            text = (self.markers / f"{key}.{run}").read_text()
        except FileNotFoundError:
            return None
        return int(text) if text else None

    def _query(self, sql: str) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.db, timeout=60)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    def applied(self) -> dict[str, tuple[str, int, int]]:
        """``{idempotency key: (job key, run, pid)}`` of every effect applied."""
        return {k: (j, r, p) for k, j, r, p in self._query("SELECT idem_key, job_key, run, pid FROM applied")}

    def calls(self) -> list[tuple[str, str, int, int, bool]]:
        """Every call: ``(idempotency key, job key, run, pid, applied)``."""
        return [(k, j, r, p, bool(a)) for k, j, r, p, a in
                self._query("SELECT idem_key, job_key, run, pid, applied FROM calls ORDER BY id")]


def build_app(store_url: str, folder: str | Path, *, lease: float = LEASE) -> App:
    """The app every process of a drill shares: same jobs, same store, same provider."""
    app = App(store_url, lease=lease)
    provider = Provider(folder)
    fixed = Path(folder) / "fixed"

    @app.job(max_attempts=5, backoff=FAST)
    def pay(ctx: Any, n: int, work: float = 0.0) -> int:
        """Work a little, apply one effect keyed by the job's idempotency key, work a little more."""
        if work:
            time.sleep(work / 2)
        provider.apply(ctx.idempotency_key("pay"), ctx.job.key, ctx.job.run)
        if work:
            time.sleep(work / 2)
        return n

    @app.job(max_attempts=5, backoff=FAST)
    def transfer(ctx: Any, n: int, work: float = 0.0) -> dict[str, int]:
        """Two durable steps, each an effect keyed by its step's idempotency key."""
        provider.mark(ctx.job.key, ctx.job.run)
        debit = ctx.step("debit", provider.apply, ctx.idempotency_key("debit"), ctx.job.key, ctx.job.run)
        if work:
            time.sleep(work)
        credit = ctx.step("credit", provider.apply, ctx.idempotency_key("credit"), ctx.job.key, ctx.job.run)
        return {"n": n, "debit_applied": int(debit), "credit_applied": int(credit)}

    @app.job(max_attempts=5, backoff=FAST)
    def fanout(ctx: Any, n: int, work: float = 0.0) -> int:
        """Spawn ``n`` ``pay`` children in one step, wait for them without a worker, then apply one
        effect of its own (a durable step) with the sum of their results."""
        keys = ctx.spawn_many(pay, [[i, work] for i in range(n)])
        total = sum(ctx.wait_children(keys))
        ctx.step("announce", provider.apply, ctx.idempotency_key("announce"), ctx.job.key, ctx.job.run)
        return total

    @app.job(max_attempts=5, backoff=FAST)
    def long(ctx: Any, seconds: float, later: float | None = None) -> float:
        """A long job (``later`` seconds on runs after the first) that does not look at ctx.cancelled;
        its effect is its last act."""
        provider.mark(ctx.job.key, ctx.job.run)
        time.sleep(seconds if ctx.job.run == 1 or later is None else later)
        provider.apply(ctx.idempotency_key("long"), ctx.job.key, ctx.job.run)
        return seconds

    @app.job(max_attempts=5, backoff=FAST)
    def poison(ctx: Any) -> None:
        """Kill the worker process running it, every time."""
        provider.mark(ctx.job.key, ctx.job.run)
        os._exit(1)

    @app.job(max_attempts=2, backoff=FAST)
    def broken(ctx: Any, n: int) -> int:
        """Fails for good until the downstream is fixed (the file ``fixed`` exists); then applies once."""
        if not fixed.exists():
            raise Permanent(f"downstream rejects record {n}")
        provider.apply(ctx.idempotency_key("broken"), ctx.job.key, ctx.job.run)
        return n

    return app


# -- roles ---------------------------------------------------------------------------------------
def run_worker(opts: argparse.Namespace) -> int:
    app = build_app(opts.store, opts.dir, lease=opts.lease)
    queues = opts.queues.split(",") if opts.queues else None
    worker = app.worker(queues, concurrency=opts.concurrency, burst=opts.burst, wait_scheduled=opts.burst,
                        grace=opts.grace, poll_interval=opts.poll, max_lost=opts.max_lost)
    worker.install_signal_handlers()
    Path(opts.dir, f"worker-{os.getpid()}.ready").write_text("")  # SIGTERM stops it gracefully from here on
    stats = worker.run()
    app.close()
    print(json.dumps(stats.__dict__), flush=True)
    return 0


def run_replay(opts: argparse.Namespace) -> int:
    """Wait for the go file, then replay every dead ``broken`` job in chunks of a seeded order."""
    app = build_app(opts.store, opts.dir)
    keys = sorted(j.key for j in _all_dead(app))
    random.Random(opts.seed).shuffle(keys)
    folder = Path(opts.dir)
    (folder / f"{opts.name}.ready").write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not (folder / "go").exists():
        if time.monotonic() > deadline:
            print("never told to go", file=sys.stderr)
            return 3
        time.sleep(0.001)
    moved: list[str] = []
    skipped: list[str] = []
    for i in range(0, len(keys), 100):
        result = app.dlq.replay(keys[i:i + 100], actor=opts.name)
        moved += result.keys
        skipped += result.skipped
    app.close()
    (folder / f"{opts.name}.json").write_text(json.dumps({"moved": moved, "skipped": skipped}))
    return 0


def _all_dead(app: App) -> list[Any]:
    out: list[Any] = []
    while True:
        page = app.dlq.list(job="broken", limit=500, offset=len(out))
        out += page
        if len(page) < 500:
            return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.drills.procs")
    parser.add_argument("role", choices=["worker", "replay"])
    parser.add_argument("store")
    parser.add_argument("--dir", required=True)
    parser.add_argument("--lease", type=float, default=LEASE)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--grace", type=float, default=30.0)
    parser.add_argument("--poll", type=float, default=0.1)
    parser.add_argument("--max-lost", type=int, default=3)
    parser.add_argument("--queues", default=None, help="comma-separated queues (default: every queue of the app)")
    parser.add_argument("--burst", action="store_true")
    parser.add_argument("--name", default="replayer")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="log warnings only (not one line per attempt)")
    opts = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if opts.role == "worker" else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    if opts.quiet:
        logging.getLogger("firesafe.worker").setLevel(logging.WARNING)
    return run_worker(opts) if opts.role == "worker" else run_replay(opts)


if __name__ == "__main__":
    sys.exit(main())
