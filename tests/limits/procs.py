"""The worker processes of the limiter tests (and of bench/bench_limits.py).

    python -m tests.limits.procs STORE_URL PROVIDER_URL [--rate R] [--burst B] [--concurrency-limit N]
        [--breaker-after N] [--cooldown S] [--max-attempts N] [--concurrency C] [--client httpx|requests]

Every process builds the same app: one limiter ``provider`` and jobs that call the provider at
``PROVIDER_URL/call?key=KEY``. It runs a worker until SIGTERM (with ``--drain``: until nothing is
left, retries and waiting jobs included) and prints its stats as JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from typing import Any

from firesafe import App, Backoff

#: Quick retries, so a failed call comes back soon (and meets the breaker).
FAST = Backoff(base=0.1, factor=2.0, cap=0.5, jitter="full")


_clients: dict[str, Any] = {}
_lock = threading.Lock()


def _client(kind: str) -> Any:
    """One client per process and kind (making one costs more than a local request)."""
    with _lock:
        if kind not in _clients:
            if kind == "requests":
                import requests

                _clients[kind] = requests.Session()
            else:
                import httpx

                _clients[kind] = httpx.Client(timeout=10)
        return _clients[kind]


def call(client: str, url: str) -> int:
    """One GET; an HTTP error status raises the client's own error (httpx or requests)."""
    if client == "requests":
        r = _client("requests").get(url, timeout=10)
        r.raise_for_status()
        return int(r.status_code)
    response = _client("httpx").get(url)
    response.raise_for_status()
    return int(response.status_code)


def build_app(store_url: str, provider: str, *, rate: float | None = None, burst: float | None = None,
              concurrency_limit: int | None = None, breaker_after: int | None = 5, cooldown: float = 30.0,
              max_attempts: int = 3, client: str = "httpx", lease: float = 10.0) -> App:
    app = App(store_url, lease=lease)
    app.limiter("provider", rate=rate, burst=burst, concurrency=concurrency_limit, breaker_after=breaker_after,
                cooldown=cooldown)

    @app.job(name="call", limiter="provider", max_attempts=max_attempts, backoff=FAST)
    def call_job(ctx: Any) -> int:
        """The whole job runs under the limiter."""
        return call(client, f"{provider}/call?key={ctx.job.key}")

    @app.job(name="call_inside", max_attempts=max_attempts, backoff=FAST)
    def call_inside(ctx: Any) -> int:
        """Only the call runs under the limiter (``with ctx.limit``)."""
        with ctx.limit("provider", wait=0.5):
            return call(client, f"{provider}/call?key={ctx.job.key}")

    @app.job(name="quick", max_attempts=max_attempts)
    def quick(ctx: Any) -> str:
        """No limiter: must not wait behind the limited jobs."""
        return ctx.job.key

    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.limits.procs")
    p.add_argument("store")
    p.add_argument("provider")
    p.add_argument("--rate", type=float)
    p.add_argument("--burst", type=float)
    p.add_argument("--concurrency-limit", type=int)
    p.add_argument("--breaker-after", type=int, default=5)
    p.add_argument("--cooldown", type=float, default=30.0)
    p.add_argument("--max-attempts", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--client", choices=["httpx", "requests"], default="httpx")
    p.add_argument("--poll", type=float, default=0.1)
    p.add_argument("--drain", action="store_true", help="exit once nothing is left (else run until SIGTERM)")
    o = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    app = build_app(o.store, o.provider, rate=o.rate, burst=o.burst, concurrency_limit=o.concurrency_limit,
                    breaker_after=o.breaker_after, cooldown=o.cooldown, max_attempts=o.max_attempts, client=o.client)
    _client(o.client)  # made before the first claim: its cost must not delay granted calls
    worker = app.worker(concurrency=o.concurrency, burst=o.drain, wait_scheduled=o.drain, poll_interval=o.poll)
    worker.install_signal_handlers()
    stats = worker.run()
    app.close()
    print(json.dumps(stats.__dict__), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
