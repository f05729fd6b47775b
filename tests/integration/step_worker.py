"""A worker process for the step-crash test: a 5-step job that SIGKILLs its own process at a chosen
boundary on its first run. The "provider" is a SQLite file that deduplicates by idempotency key.

Run: python -m tests.integration.step_worker STORE_URL PROVIDER_DB
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys

from firesafe import App, Backoff

STEPS = 5


def provider_call(db: str, idem_key: str, job: str, step: int) -> dict:
    conn = sqlite3.connect(db, timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("INSERT INTO calls (idem_key) VALUES (?)", (idem_key,))
    conn.execute("INSERT OR IGNORE INTO effects (idem_key, job, step) VALUES (?, ?, ?)", (idem_key, job, step))
    conn.close()
    return {"step": step, "receipt": idem_key}


def build(store_url: str, provider_db: str) -> App:
    app = App(store_url, lease=1.0)

    @app.job(max_attempts=10, backoff=Backoff(base=0.05, cap=0.2))
    def five_steps(ctx, crash_step: int, phase: str) -> list:
        first_run = ctx.job.run == 1
        results = []
        for i in range(1, STEPS + 1):
            crash_here = first_run and i == crash_step
            if crash_here and phase == "before":
                os.kill(os.getpid(), signal.SIGKILL)

            def effect(i: int = i, crash_here: bool = crash_here) -> dict:
                out = provider_call(provider_db, ctx.idempotency_key(f"step-{i}"), ctx.job.key, i)
                if crash_here and phase == "effect":
                    os.kill(os.getpid(), signal.SIGKILL)
                return out

            results.append(ctx.step(f"step-{i}", effect))
            if crash_here and phase == "after":
                os.kill(os.getpid(), signal.SIGKILL)
        return results

    return app


if __name__ == "__main__":
    application = build(sys.argv[1], sys.argv[2])
    # No prefetch: each job must be the one running when its own boundary kills the process (a job
    # prefetched behind it would be lost with it before its first run, and never crash itself).
    application.work(burst=True, wait_scheduled=True, concurrency=1, prefetch=0, poll_interval=0.05)
