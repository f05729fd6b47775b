"""Events ingested per second, over HTTP and from RabbitMQ, as a ratio to plain bulk enqueue.

In one run, on one SQLite store (and PostgreSQL with --postgres): bulk-enqueue N jobs (the baseline),
POST N signed webhooks to `firesafe serve`'s endpoint from a separate load-generator process (asyncio +
httpx, 32 connections), and consume N messages from RabbitMQ (127.0.0.1:5672).

    python bench/bench_inbox.py [--events 5000] [--postgres URL]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import uvicorn

from firesafe import App
from firesafe.inbox import Hmac
from firesafe.inbox.amqp import consume
from firesafe.inbox.http import create_app

SECRET = "bench-secret"
LOADGEN = r"""
import asyncio, hashlib, hmac, json, sys, time
import httpx
url, n, secret, run = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode(), sys.argv[4]
async def main():
    limits = httpx.Limits(max_connections=32)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        sem = asyncio.Semaphore(32)
        async def post(i):
            body = json.dumps({"id": f"{run}-{i}", "type": "order.paid", "n": i}).encode()
            sig = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
            async with sem:
                r = await client.post(url, content=body, headers={"X-Hub-Signature-256": sig})
                assert r.status_code == 200, r.text
        t = time.perf_counter()
        await asyncio.gather(*(post(i) for i in range(n)))
        print(time.perf_counter() - t)
asyncio.run(main())
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(url: str, n: int, amqp: str) -> dict[str, float]:
    app = App(url)

    @app.job
    def plain(ctx, n: int) -> None: ...

    @app.on_event("shop", "order.paid")
    def on_paid(ctx, event) -> None: ...

    app.event_source("shop", verify=Hmac(SECRET))
    run = uuid.uuid4().hex[:8]
    t = time.perf_counter()
    for i in range(0, n, 1000):
        plain.enqueue_many([{"args": [j], "key": f"{run}-p{j}"} for j in range(i, min(n, i + 1000))])
    bulk = n / (time.perf_counter() - t)

    port = _port()
    server = uvicorn.Server(uvicorn.Config(create_app(app), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    out = subprocess.run([sys.executable, "-c", LOADGEN, f"http://127.0.0.1:{port}/events/shop", str(n), SECRET,
                          f"{run}-h"], capture_output=True, text=True, check=True)
    http_rate = n / float(out.stdout.strip())
    server.should_exit = True
    thread.join(10)

    result = {"bulk_enqueue": bulk, "http": http_rate}
    try:
        import pika

        conn = pika.BlockingConnection(pika.URLParameters(amqp))
        ch = conn.channel()
        queue = f"bench_{run}"
        ch.queue_declare(queue=queue, durable=True)
        for i in range(n):
            ch.basic_publish("", queue, json.dumps({"n": i}).encode(),
                             pika.BasicProperties(message_id=f"{run}-m{i}", type="order.paid", delivery_mode=2))
        conn.close()
        t = time.perf_counter()
        stats = consume(app, amqp, queue, source="shop", idle_timeout=0.5)
        elapsed = time.perf_counter() - t - 0.5  # minus the idle wait that ends the run
        assert stats.stored == n, stats
        result["amqp"] = n / elapsed
        conn = pika.BlockingConnection(pika.URLParameters(amqp))
        conn.channel().queue_delete(queue)
        conn.close()
    except Exception as exc:
        print(f"rabbitmq: skipped ({type(exc).__name__}: {exc})")
    app.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--postgres", default=None, help="also run on this PostgreSQL URL")
    parser.add_argument("--amqp", default="amqp://guest:guest@127.0.0.1:5672/")
    args = parser.parse_args()
    stores = {}
    with tempfile.TemporaryDirectory(dir=".") as d:
        stores["sqlite"] = measure(f"sqlite:///{d}/inbox.db", args.events, args.amqp)
    if args.postgres:
        schema = f"bench_inbox_{uuid.uuid4().hex[:8]}"
        try:
            stores["postgres"] = measure(f"{args.postgres}?schema={schema}", args.events, args.amqp)
        finally:
            import psycopg

            with psycopg.connect(args.postgres, autocommit=True) as c:
                c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    print(f"{'store':<10}{'bulk enqueue/s':>16}{'HTTP events/s':>15}{'ratio':>7}{'AMQP events/s':>15}{'ratio':>7}")
    for name, r in stores.items():
        amqp = r.get("amqp", float("nan"))
        print(f"{name:<10}{r['bulk_enqueue']:>16,.0f}{r['http']:>15,.0f}{r['http'] / r['bulk_enqueue']:>7.2f}"
              f"{amqp:>15,.0f}{amqp / r['bulk_enqueue']:>7.2f}")
    print(f"(machine: {os.cpu_count()} cores; {args.events} events each)")


if __name__ == "__main__":
    main()
