"""The storages' bare limits, measured in the same run as the libraries: the least a job queue must do
on each, in the plainest client loop.

- SQLite (``sqlite3``, WAL, ``synchronous=FULL`` like firesafe and huey): enqueue = one INSERT per
  transaction; bulk = 1,000 rows per transaction; drain = claim one row (UPDATE ... RETURNING) and
  complete it, in one ``BEGIN IMMEDIATE`` transaction per job.
- PostgreSQL (psycopg, synchronous commit): enqueue = one INSERT per commit; bulk = ``executemany``
  of 1,000 rows per commit; drain = claim one row (``FOR UPDATE SKIP LOCKED``) and complete it, one
  transaction per job; latency = an INSERT + NOTIFY woken through LISTEN, then claimed.
- Redis (redis-py): enqueue = one LPUSH; bulk = pipelines of 1,000 LPUSH; drain = one BRPOP per job;
  latency = LPUSH to a client blocked in BRPOP.

Drains run in 1 and in 2 processes (each its own connection). Runs in the ``bare`` environment; prints
its figures as JSON. ``python bare.py sqlite|postgresql|redis --jobs N``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sqlite3
import sys
import time
import uuid
from importlib.metadata import version
from typing import Any

from common import PG_URL, PREFIX, REDIS_DB, REDIS_HOST, REDIS_PORT, WORKDIR, percentile, queries, schema_name

SCHEMA = schema_name("bare")
Q = queries(SCHEMA)
SQLITE = WORKDIR / "bare.db"
RKEY = f"{PREFIX}_bare:queue"
PAYLOAD = json.dumps({"args": [0, "bare", 0.0, 0.0]})


def rate(n: int, seconds: float) -> float:
    return n / max(seconds, 1e-9)


def parallel(target: Any, processes: int) -> float:
    """Run ``target(out)`` in ``processes`` forked processes; jobs/s from the first start to the last end."""
    ctx = mp.get_context("fork")
    out: Any = ctx.Queue()
    procs = [ctx.Process(target=target, args=(out,)) for _ in range(processes)]
    for p in procs:
        p.start()
    spans = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return rate(sum(s[2] for s in spans), max(s[1] for s in spans) - min(s[0] for s in spans))


# -- SQLite ---------------------------------------------------------------------------------------
def sqlite_conn() -> sqlite3.Connection:
    conn = sqlite3.connect(SQLITE, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def sqlite_drain(out: Any) -> None:
    conn = sqlite_conn()
    start = end = time.time()
    done = 0
    while True:
        token = uuid.uuid4().hex
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute(Q["sqlite_claim"], {"token": token, "now": time.time()}).fetchone()
        if row is None:
            conn.execute("COMMIT")
            break
        conn.execute(Q["sqlite_complete"], {"id": row[0], "token": token})
        conn.execute("COMMIT")
        done += 1
        end = time.time()
    out.put((start, end, done))
    conn.close()


def remove_sqlite() -> None:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{SQLITE}{suffix}"):
            os.unlink(f"{SQLITE}{suffix}")


def run_sqlite(n: int) -> dict[str, Any]:
    remove_sqlite()
    conn = sqlite_conn()
    conn.executescript(Q["sqlite_create_table"])
    res: dict[str, Any] = {"versions": {"sqlite": sqlite3.sqlite_version}}
    t = time.perf_counter()
    for _ in range(n):
        conn.execute(Q["sqlite_insert"], (PAYLOAD, time.time()))
    res["enqueue_one"] = rate(n, time.perf_counter() - t)
    res["drain_1"] = {"rate": parallel(sqlite_drain, 1), "complete": True}
    t = time.perf_counter()
    for lo in range(0, n, 1000):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(Q["sqlite_insert"], [(PAYLOAD, time.time())] * min(1000, n - lo))
        conn.execute("COMMIT")
    res["enqueue_bulk"] = rate(n, time.perf_counter() - t)
    res["drain_2"] = {"rate": parallel(sqlite_drain, 2), "complete": True}
    conn.close()
    remove_sqlite()
    return res


# -- PostgreSQL -----------------------------------------------------------------------------------
def pg_drain(out: Any) -> None:
    import psycopg

    with psycopg.connect(PG_URL) as conn:
        start = end = time.time()
        done = 0
        while True:
            token = uuid.uuid4().hex
            row = conn.execute(Q["pg_claim"], {"token": token}).fetchone()
            if row is None:
                conn.commit()
                break
            conn.execute(Q["pg_complete"], {"id": row[0], "token": token})
            conn.commit()
            done += 1
            end = time.time()
        out.put((start, end, done))


def pg_listener(ready: Any, out: Any, samples: int, channel: str) -> None:
    import psycopg
    from psycopg import sql

    lat = []
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        ready.set()
        for _ in range(samples):
            # One notification per call: the generator holds the connection while it runs.
            notes = list(conn.notifies(timeout=30, stop_after=1))
            assert notes, "no notification within 30 s"
            sent = float(notes[0].payload)
            with conn.transaction():
                row = conn.execute(Q["pg_claim"], {"token": "lat"}).fetchone()
            assert row is not None
            lat.append((time.time() - sent) * 1000)
    out.put(lat)


def run_postgresql(n: int, samples: int) -> dict[str, Any]:
    import psycopg

    res: dict[str, Any] = {"versions": {"psycopg": version("psycopg")}}
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(Q["drop_schema"])
        conn.execute(Q["create_schema"])
        conn.execute(Q["pg_create_table"])
        server = conn.execute(Q["server"]).fetchone()
        res["versions"]["postgresql"] = server[0] if server else "?"
    try:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            t = time.perf_counter()
            for _ in range(n):
                conn.execute(Q["pg_insert"], (PAYLOAD,))
            res["enqueue_one"] = rate(n, time.perf_counter() - t)
        res["drain_1"] = {"rate": parallel(pg_drain, 1), "complete": True}
        with psycopg.connect(PG_URL) as conn:
            t = time.perf_counter()
            for lo in range(0, n, 1000):
                with conn.cursor() as cur:
                    cur.executemany(Q["pg_insert"], [(PAYLOAD,)] * min(1000, n - lo))
                conn.commit()
            res["enqueue_bulk"] = rate(n, time.perf_counter() - t)
        res["drain_2"] = {"rate": parallel(pg_drain, 2), "complete": True}
        ctx = mp.get_context("fork")
        ready, out = ctx.Event(), ctx.Queue()
        channel = f"{PREFIX}_bare".lower()
        proc = ctx.Process(target=pg_listener, args=(ready, out, samples, channel))
        proc.start()
        ready.wait(30)
        with psycopg.connect(PG_URL) as conn:
            for _ in range(samples):
                time.sleep(0.02)
                conn.execute(Q["pg_insert"], (PAYLOAD,))
                conn.execute(Q["pg_notify"], (channel, repr(time.time())))
                conn.commit()
        lat = out.get(timeout=120)
        proc.join()
        res["latency"] = {"samples": len(lat), "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99)}
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(Q["drop_schema"])
    return res


# -- Redis ----------------------------------------------------------------------------------------
def redis_conn() -> Any:
    from redis import Redis

    return Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)


def redis_drain(out: Any) -> None:
    r = redis_conn()
    start = end = time.time()
    done = 0
    while r.brpop([RKEY], timeout=1) is not None:  # the last call waits out its 1 s: not counted
        done += 1
        end = time.time()
    out.put((start, end, done))


def redis_listener(ready: Any, out: Any, samples: int) -> None:
    r = redis_conn()
    ready.set()
    lat = []
    for _ in range(samples):
        item = r.brpop([RKEY], timeout=30)
        assert item is not None
        lat.append((time.time() - float(item[1])) * 1000)
    out.put(lat)


def run_redis(n: int, samples: int) -> dict[str, Any]:
    r = redis_conn()
    r.delete(RKEY)
    res: dict[str, Any] = {"versions": {"redis-py": version("redis"), "redis": r.info("server")["redis_version"]}}
    try:
        t = time.perf_counter()
        for _ in range(n):
            r.lpush(RKEY, PAYLOAD)
        res["enqueue_one"] = rate(n, time.perf_counter() - t)
        res["drain_1"] = {"rate": parallel(redis_drain, 1), "complete": True}
        t = time.perf_counter()
        for lo in range(0, n, 1000):
            pipe = r.pipeline(transaction=False)
            for _ in range(min(1000, n - lo)):
                pipe.lpush(RKEY, PAYLOAD)
            pipe.execute()
        res["enqueue_bulk"] = rate(n, time.perf_counter() - t)
        res["drain_2"] = {"rate": parallel(redis_drain, 2), "complete": True}
        ctx = mp.get_context("fork")
        ready, out = ctx.Event(), ctx.Queue()
        proc = ctx.Process(target=redis_listener, args=(ready, out, samples))
        proc.start()
        ready.wait(30)
        for _ in range(samples):
            time.sleep(0.02)
            r.lpush(RKEY, repr(time.time()))
        lat = out.get(timeout=120)
        proc.join()
        res["latency"] = {"samples": len(lat), "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99)}
    finally:
        r.delete(RKEY)
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("storage", choices=["sqlite", "postgresql", "redis"])
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--samples", type=int, default=200)
    args = p.parse_args()
    if args.storage == "sqlite":
        res = run_sqlite(args.jobs)
    elif args.storage == "postgresql":
        res = run_postgresql(args.jobs, args.samples)
    else:
        res = run_redis(args.jobs, args.samples)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
