"""A real worker and a durable signal: the job parks holding no worker and using no attempt, and
the signal, sent from elsewhere, wakes the idle worker at once (no polling: the worker's poll is a
minute). SQLite wakes the workers of the sending process; PostgreSQL wakes every listening worker
with NOTIFY, so there the signal is sent from another App (another connection, as another process
would). Both stores."""

from __future__ import annotations

import threading
import time

from firesafe import App, Job, State
from tests.processes import wait_until

POLL = 60.0  # far longer than the test waits: only a wake-up can bring the job back in time


def in_state(app: App, state: State) -> Job | None:
    job = app.get("refund:o-1")
    return job if job.state == state else None


def test_a_worker_parks_the_waiting_job_and_the_signal_wakes_it(store_url: str) -> None:
    app = App(store_url)
    parked = threading.Event()
    runs: list[str] = []

    @app.job(max_attempts=1)
    def refund(ctx, order: str, amount: int) -> dict:
        runs.append("run")
        ctx.step("quote", lambda: {"order": order, "amount": amount})
        try:
            decision = ctx.wait_for_signal("approval", timeout=86400)
        except Exception:
            parked.set()
            raise
        return {"refunded": amount if decision["approved"] else 0, "by": decision["note"]}

    refund.enqueue("o-1", 900, key="refund:o-1")
    worker = app.worker(concurrency=2, poll_interval=POLL, grace=1.0)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    sender = App(store_url) if app.store.supports_listen else app
    try:
        assert parked.wait(30), "the job never reached its wait"
        job = wait_until(lambda: in_state(app, State.SCHEDULED), 30, "the job to park")
        assert job.run_at.timestamp() > time.time() + 86000  # parked until the deadline, a day away
        assert all(r.claimed.job.key != "refund:o-1" for r in worker.running.values())  # no worker held

        started = time.monotonic()
        sent = sender.signal("refund:o-1", "approval", {"approved": True, "note": "ann"}, actor="ann")
        assert sent.woke
        done = wait_until(lambda: in_state(app, State.SUCCEEDED), 30, "the signalled job to finish")
        assert time.monotonic() - started < POLL / 2  # woken, not found by the next poll
    finally:
        worker.stop()
        thread.join(30)
        if sender is not app:
            sender.close()
        app.close()
    assert done.result == {"refunded": 900, "by": "ann"} and runs == ["run", "run"]
    assert [a.outcome for a in done.trace] == ["deferred", "succeeded"]
    assert done.attempt == 1 and done.max_attempts == 1  # the wait used no attempt of the only one
