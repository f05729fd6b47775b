"""The processes the integration tests start: workers and enqueuers on a real store.

Run from the repository root as::

    python -m tests.integration.procs worker STORE_URL --dir DIR [--concurrency N] [--grace S] [--burst]
                                             [--lease S] [--poll S] [--max-lost N]
    python -m tests.integration.procs enqueue STORE_URL --dir DIR --keys N --ready F --barrier F --out F

Every job records what it does outside the job store, in DIR:

- ``markers/KEY.RUN``: written when a run starts (holds the pid), so a test knows when to strike;
- ``effects.db``: the external effect, applied idempotently the way a careful user would: a table
  ``applied`` with the job key as primary key (at most one effect per key, whatever the number of
  attempts), and a table ``calls`` with one row per attempt that reached the effect (``applied`` 0
  when the key was already there: a duplicate attempt the dedupe absorbed);
- ``effects.log``: one line ``KEY`` per attempt that reached the end of the handler (O_APPEND + fsync):
  the raw at-least-once record.
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
from contextlib import closing
from pathlib import Path
from typing import Any

from firesafe import App, Backoff

#: Short lease so rescues happen within seconds.
LEASE = 2.0
#: Quick retries, so a rescued or timed-out job runs again at once.
FAST = Backoff(base=0.1, factor=2.0, cap=0.5, jitter="full")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS applied (key TEXT PRIMARY KEY, run INTEGER NOT NULL, pid INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS calls (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL,"
    " run INTEGER NOT NULL, pid INTEGER NOT NULL, applied INTEGER NOT NULL)",
)


class Effects:
    """The world outside the job store, where the jobs' side effects land."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.db = self.folder / "effects.db"
        self.log = self.folder / "effects.log"
        self.markers = self.folder / "markers"

    def create(self) -> None:
        self.markers.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as conn:
            conn.execute("PRAGMA journal_mode = WAL")
            for statement in _SCHEMA:
                conn.execute(statement)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.db, timeout=60, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 60000")
        return conn

    # -- written by jobs ---------------------------------------------------------------------
    def mark(self, key: str, run: int) -> None:
        """Say that run ``run`` of ``key`` has started."""
        (self.markers / f"{key}.{run}").write_text(str(os.getpid()))

    def apply(self, key: str, run: int) -> bool:
        """Apply the effect of ``key`` at most once; True if this call applied it."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            applied = conn.execute("INSERT INTO applied (key, run, pid) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING",
                                   (key, run, os.getpid())).rowcount == 1
            conn.execute("INSERT INTO calls (key, run, pid, applied) VALUES (?, ?, ?, ?)",
                         (key, run, os.getpid(), int(applied)))
            conn.execute("COMMIT")
        finally:
            conn.close()
        return applied

    def append(self, key: str) -> None:
        """Append ``key`` to the raw effect log, durably."""
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{key}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- read by tests -----------------------------------------------------------------------
    def started(self, key: str, run: int) -> int | None:
        """The pid that started run ``run`` of ``key``, or None if it has not started."""
        path = self.markers / f"{key}.{run}"
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        return int(text) if text else None

    def applied(self) -> dict[str, tuple[int, int]]:
        """``{key: (run, pid)}`` of every effect applied."""
        with closing(self._connect()) as conn:
            return {k: (r, p) for k, r, p in conn.execute("SELECT key, run, pid FROM applied")}

    def calls(self) -> list[tuple[str, int, int, bool]]:
        """Every attempt that reached the effect: ``(key, run, pid, applied)``."""
        with closing(self._connect()) as conn:
            return [(k, r, p, bool(a)) for k, r, p, a in conn.execute("SELECT key, run, pid, applied FROM calls")]

    def log_lines(self) -> list[str]:
        try:
            return self.log.read_text().splitlines()
        except FileNotFoundError:
            return []


def build_app(store_url: str, folder: str | Path, *, lease: float = LEASE) -> App:
    """The app every process of a test shares: same jobs, same store, same effect folder."""
    app = App(store_url, lease=lease)
    effects = Effects(folder)

    def body(ctx: Any, sleep: float, sleep_runs: int, after: float = 0.0) -> dict[str, Any]:
        key, run = ctx.job.key, ctx.job.run
        effects.mark(key, run)
        if run <= sleep_runs:
            time.sleep(sleep)
        applied = effects.apply(key, run)
        effects.append(key)
        if after:
            time.sleep(after)  # more work after the effect: a kill here repeats the effect on the next run
        return {"key": key, "run": run, "pid": os.getpid(), "applied": applied}

    @app.job(name="effect", max_attempts=5, backoff=FAST)
    def effect(ctx: Any, sleep: float = 0.0, sleep_runs: int = 0, after: float = 0.0) -> dict[str, Any]:
        """Sleep ``sleep`` seconds on runs 1..``sleep_runs``, apply the key's effect, sleep ``after``."""
        return body(ctx, sleep, sleep_runs, after)

    @app.job(name="timed", max_attempts=5, backoff=FAST, timeout=0.5)
    def timed(ctx: Any, sleep: float = 0.0, sleep_runs: int = 0) -> dict[str, Any]:
        """The same, under a 0.5 s timeout."""
        return body(ctx, sleep, sleep_runs)

    @app.job(name="poison", max_attempts=5, backoff=FAST)
    def poison(ctx: Any) -> None:
        """Kill the worker process running it, every time."""
        effects.mark(ctx.job.key, ctx.job.run)
        os._exit(1)

    return app


# -- roles ---------------------------------------------------------------------------------------
def run_worker(opts: argparse.Namespace) -> int:
    app = build_app(opts.store, opts.dir, lease=opts.lease)
    worker = app.worker(concurrency=opts.concurrency, burst=opts.burst, wait_scheduled=opts.burst,
                        grace=opts.grace, poll_interval=opts.poll, max_lost=opts.max_lost)
    if opts.prefetch_below is not None:  # what counts as short, so a test does not hang on the disk's speed
        worker.prefetch.below = opts.prefetch_below
    worker.install_signal_handlers()
    stats = worker.run()
    app.close()
    print(json.dumps(stats.__dict__), flush=True)
    return 0


def run_enqueue(opts: argparse.Namespace) -> int:
    """Enqueue keys ``k0..k{N-1}`` in a shuffled order, alternating single enqueues and batches."""
    app = build_app(opts.store, opts.dir)
    job = app.jobs["effect"]
    app.store.schema_version()  # connect before the barrier, so the race is on the inserts alone
    keys = [f"k{i}" for i in range(opts.keys)]
    random.Random(opts.seed).shuffle(keys)
    Path(opts.ready).write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not os.path.exists(opts.barrier):
        if time.monotonic() > deadline:
            print("the barrier never opened", file=sys.stderr)
            return 3
        time.sleep(0.001)
    created: list[str] = []
    seen = 0
    i = 0
    while i < len(keys):
        if (i // opts.batch) % 5 == 0:  # one chunk in five goes one key at a time
            for key in keys[i:i + opts.batch]:
                j = job.enqueue(key=key)
                seen += 1
                if j.created:
                    created.append(j.key)
        else:
            jobs = job.enqueue_many([{"key": key} for key in keys[i:i + opts.batch]])
            seen += len(jobs)
            created.extend(j.key for j in jobs if j.created)
        i += opts.batch
        time.sleep(opts.pause)
    app.close()
    Path(opts.out).write_text(json.dumps({"pid": os.getpid(), "seen": seen, "created": created}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.integration.procs")
    parser.add_argument("role", choices=["worker", "enqueue"])
    parser.add_argument("store")
    parser.add_argument("--dir", required=True)
    parser.add_argument("--lease", type=float, default=LEASE)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--grace", type=float, default=30.0)
    parser.add_argument("--poll", type=float, default=0.1)
    parser.add_argument("--max-lost", type=int, default=3, help="losses before a job goes dead as worker_lost")
    parser.add_argument("--prefetch-below", type=float, help="the worker prefetches while attempts average less")
    parser.add_argument("--burst", action="store_true", help="exit once nothing is left (waits for retries)")
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds an enqueuer waits after each chunk")
    parser.add_argument("--ready")
    parser.add_argument("--barrier")
    parser.add_argument("--out")
    opts = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    return run_worker(opts) if opts.role == "worker" else run_enqueue(opts)


if __name__ == "__main__":
    sys.exit(main())
