"""A real worker and a durable signal: the job parks holding no worker and using no attempt, and
the signal, sent from elsewhere, wakes the idle worker at once (no polling: the worker's poll is a
minute). SQLite wakes the workers of the sending process; PostgreSQL wakes every listening worker
with NOTIFY, so there the signal is sent from another App (another connection, as another process
would). Both stores."""

from __future__ import annotations

import threading
import time
from typing import Any

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


def test_signals_racing_the_parks_of_many_jobs_are_never_lost(store_url: str) -> None:
    """Signals sent from another thread (on PostgreSQL from another App: another connection) while a
    real worker runs, parks and wakes 40 jobs: before they wait, while they are deciding to park (the job lingers
    there on purpose, to widen the window) and while they are parked. Every job finishes with its
    signal's data, none sits parked until its day-long deadline."""
    app = App(store_url)
    jobs = 40
    in_window = threading.Semaphore(0)

    @app.job()
    def flow(ctx, n: int) -> object:
        try:
            return ctx.wait_for_signal("go", timeout=86400)
        except Exception:
            in_window.release()
            time.sleep(0.01 * (n % 3))  # found no signal and about to park: the window a send may hit
            raise

    flow.enqueue_many([{"args": [n], "key": f"flow:{n}"} for n in range(jobs)])
    worker = app.worker(concurrency=4, poll_interval=POLL, grace=1.0)
    thread = threading.Thread(target=worker.run, daemon=True)
    sender = App(store_url) if app.store.supports_listen else app  # SQLite wakes this process's workers
    outcomes: list[tuple[bool, bool]] = []
    try:
        for n in range(0, jobs, 4):  # a tenth of them sent before any worker runs
            outcomes.append(astuple(sender.signal(f"flow:{n}", "go", n)))
        thread.start()
        for n in range(jobs):
            if n % 4 == 0:
                continue
            in_window.acquire(timeout=1)  # paced by jobs coming to their wait: in the window, or after it
            outcomes.append(astuple(sender.signal(f"flow:{n}", "go", n)))
        done = wait_until(lambda: all(app.get(f"flow:{n}").state == State.SUCCEEDED for n in range(jobs)) or None,
                          POLL / 2, "every signalled job to finish (woken, not found by the next poll)")
        assert done
    finally:
        worker.stop()
        thread.join(30)
        if sender is not app:
            sender.close()
    results = {n: app.get(f"flow:{n}") for n in range(jobs)}
    app.close()
    assert {n: j.result for n, j in results.items()} == {n: n for n in range(jobs)}
    assert all(sent for sent, _ in outcomes) and len(outcomes) == jobs
    assert all(j.attempt == 1 for j in results.values())  # the waits used no attempt


def astuple(sent: Any) -> tuple[bool, bool]:
    return sent.sent, sent.woke
