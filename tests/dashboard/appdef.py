"""The app the dashboard tests, screenshots and browser drills use: real jobs on a real store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from firesafe import App, Backoff, Permanent
from firesafe.clock import Clock

XSS_SCRIPT = "<script>window.__pwned = 'script'</script>"
XSS_IMG = "<img src=x onerror=\"window.__pwned = 'img'\">"


def make_app(url: str, clock: Clock | None = None, **options: Any) -> tuple[App, dict[str, bool]]:
    """An app with a payment job, a refund job that dies until ``fix["refunds"]`` is set, a job
    with steps, and one whose arguments and error carry script payloads."""
    app = App(url, clock=clock, **options)
    fix = {"refunds": False}
    fast = Backoff(base=0.0, cap=0.0, jitter="none")

    @app.job(queue="payments", max_attempts=2, backoff=fast)
    def charge(ctx: Any, order_id: str, amount: int, api_key: str) -> dict[str, Any]:
        if order_id.startswith("bad"):
            raise RuntimeError(f"card declined for {order_id} (api_key={api_key})")
        return {"order": order_id, "charged": amount}

    @app.job(queue="payments", max_attempts=3, backoff=fast)
    def refund(ctx: Any, order_id: str, amount: int) -> dict[str, Any]:
        if not fix["refunds"]:
            raise TimeoutError(f"provider timed out refunding {order_id}")
        return {"order": order_id, "refunded": amount}

    @app.job(max_attempts=1)
    def sync_orders(ctx: Any, day: str) -> int:
        ctx.step("fetch", lambda: [1, 2, 3])
        ctx.step("transform", lambda: 3)
        raise Permanent("the warehouse API rejected the upload (HTTP 422)")

    @app.job(max_attempts=1)
    def render(ctx: Any, title: str) -> str:
        raise ValueError(f"cannot render {title}")

    return app, fix


def populate(app: App, *, ok: int = 6, bad: int = 3, refunds: int = 2, xss: bool = True) -> None:
    """Enqueue a small story and run it to the end: successes, dead letters, steps, payloads."""
    jobs = app.jobs
    for i in range(ok):
        jobs["charge"].enqueue(f"o-{i}", 100 + i, "sk_live_secret", key=f"charge:o-{i}")
    for i in range(bad):
        jobs["charge"].enqueue(f"bad-{i}", 5, "sk_live_secret", key=f"charge:bad-{i}")
    for i in range(refunds):
        jobs["refund"].enqueue(f"r-{i}", 40 + i, key=f"refund:r-{i}")
    jobs["sync_orders"].enqueue("2026-11-30", key="sync:2026-11-30")
    if xss:
        jobs["render"].enqueue(f"{XSS_SCRIPT}{XSS_IMG}", key=f"render:{XSS_IMG}")
    app.work(burst=True, wait_scheduled=True, concurrency=4)


@contextmanager
def worker_thread(app: App) -> Iterator[Any]:
    """A worker polling every 50 ms on a thread, stopped at the end."""
    w = app.worker(concurrency=2, poll_interval=0.05)
    t = threading.Thread(target=w.run, name="test-worker", daemon=True)
    t.start()
    try:
        yield w
    finally:
        w.stop()
        t.join(15)
