"""The processes the PostgreSQL tests start. Run from the repository root as::

    python -m tests.postgres.procs worker STORE_URL --effects FILE [--concurrency N] [--burst]
                                   [--poll S] [--lease S] [--sleep S]
    python -m tests.postgres.procs enqueue STORE_URL --keys N --seed S [--batch B]

Every job appends one line ``KEY PID START`` to the effects file (``O_APPEND``, one ``write`` per
line, so lines from concurrent processes never interleave): the external record of what ran. A
worker prints ``ready`` once its loop has started.
``enqueue`` reads one line from stdin before it starts (the test's "go"), enqueues keys ``k0 ..
k{N-1}`` in a seeded random order and prints ``created=<how many it created>``.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time
from typing import Any

from firesafe import App, Backoff, Hook

#: Quick retries: a job that failed for a store fault is soon tried again.
FAST = Backoff(base=0.05, factor=2.0, cap=0.5, jitter="full")


def build_app(url: str, effects: str | None = None, sleep: float = 0.0) -> App:
    """The app every test process shares: ``effect`` records each run, ``noop`` does nothing."""
    app = App(url)

    @app.job(max_attempts=10, backoff=FAST)
    def effect(ctx: Any, n: int) -> int:
        started = time.time()
        if sleep:
            time.sleep(sleep)
        if effects is not None:
            line = f"{ctx.job.key} {os.getpid()} {started:.6f}\n".encode()
            fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        return n

    @app.job
    def noop(ctx: Any, n: int) -> None:
        return None

    return app


def read_effects(path: str) -> list[tuple[str, int, float]]:
    """The lines jobs appended: ``(key, pid, start time)``."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            key, pid, started = line.split()
            out.append((key, int(pid), float(started)))
    return out


class _SaysReady(Hook):
    """Prints ``ready`` once the worker's loop has started (the test may enqueue then)."""

    def worker_started(self, worker: Any) -> None:
        print("ready", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.postgres.procs")
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("url")
    w.add_argument("--effects", required=True)
    w.add_argument("--concurrency", type=int, default=8)
    w.add_argument("--burst", action="store_true")
    w.add_argument("--poll", type=float, default=0.5)
    w.add_argument("--lease", type=float, default=30.0)
    w.add_argument("--sleep", type=float, default=0.0)
    e = sub.add_parser("enqueue")
    e.add_argument("url")
    e.add_argument("--keys", type=int, required=True)
    e.add_argument("--seed", type=int, required=True)
    e.add_argument("--batch", type=int, default=0, help="0: one enqueue per key")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")

    if args.cmd == "worker":
        app = build_app(args.url, args.effects, args.sleep)
        app.add_hook(_SaysReady())
        stats = app.work(burst=args.burst, concurrency=args.concurrency, poll_interval=args.poll,
                         lease=args.lease)
        print(f"succeeded={stats.succeeded} fenced={stats.fenced}", flush=True)
        app.close()
        return 0

    app = build_app(args.url)
    app.store.migrate()  # connect before the "go", so every process starts at once
    print("ready", flush=True)
    sys.stdin.readline()
    keys = [f"k{i}" for i in range(args.keys)]
    random.Random(args.seed).shuffle(keys)
    noop = app.jobs["noop"]
    created = 0
    if args.batch:
        for s in range(0, len(keys), args.batch):
            jobs = noop.enqueue_many([{"args": [int(k[1:])], "key": k} for k in keys[s:s + args.batch]])
            created += sum(j.created for j in jobs)
    else:
        for k in keys:
            created += noop.enqueue(int(k[1:]), key=k).created
    print(f"created={created}", flush=True)
    app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
